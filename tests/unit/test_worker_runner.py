"""The worker's runner: code, pickle and command inputs run in-process, no S3."""

import base64
import json
import os
import sys
import time
import warnings
from typing import Any

import cloudpickle
import pytest

from worker.encoding import encode_outcome
from worker.errors import InvalidJobInput
from worker.runner import (
    OUTPUT_DIR_VARIABLE,
    ArrayItem,
    CodeInput,
    CommandInput,
    PickleInput,
    oom_kill_count,
    parse_job_input,
    run_code,
    run_command,
    run_job,
    run_pickle,
)


def _json_of(code: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(encode_outcome(run_code(code)).result_json)
    return document


# --- code ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("2 + 2", 4),
        ("x = 3\nx * 2", 6),
        ("x = 1", None),
        ("", None),
        ("# only a comment\n", None),
        ("def f(n):\n    return n + 1\n\nf(41)", 42),
        ("for i in range(3):\n    pass\ni", 2),
        ("if True:\n    'inside a block is not the last top-level expression'", None),
    ],
)
def test_code_result_is_the_value_of_a_final_expression(source, expected):
    outcome = run_code(source)

    assert outcome.exit_code == 0
    assert outcome.error is None
    assert outcome.result == expected


def test_code_runs_in_its_own_namespace_not_main():
    outcome = run_code("__name__")

    assert outcome.result == "__remote_batch__"


def test_code_output_goes_to_stdout(capsys):
    run_code("print('hello from the job')")

    assert "hello from the job" in capsys.readouterr().out


def test_code_that_raises_fails_with_exit_1_and_user_frames_only(capsys):
    outcome = run_code("x = 1\ny = x / 0")

    assert outcome.exit_code == 1
    assert outcome.result is None
    assert outcome.error is not None
    assert (outcome.error.type, outcome.error.message) == ("ZeroDivisionError", "division by zero")
    assert outcome.messages[0] == "ZeroDivisionError: division by zero"
    assert outcome.messages[1] == outcome.error.traceback
    assert 'File "<job>", line 2' in outcome.error.traceback
    assert "y = x / 0" in outcome.error.traceback  # the user's source line is quoted
    assert "runner.py" not in outcome.error.traceback
    assert "ZeroDivisionError: division by zero" in capsys.readouterr().err


def test_code_with_a_syntax_error_fails():
    outcome = run_code("def f(:\n    pass")

    assert outcome.exit_code == 1
    assert outcome.error is not None
    assert outcome.error.type == "SyntaxError"
    assert '"<job>", line 1' in outcome.error.traceback
    assert outcome.messages[0].startswith("SyntaxError: ")


def test_code_warnings_are_captured_as_messages():
    outcome = run_code("import warnings\nwarnings.warn('careful now')\n7")

    assert outcome.result == 7
    assert outcome.messages == ["<job>:2: UserWarning: careful now"]


def test_warning_filters_changed_by_the_code_do_not_outlive_it():
    before = list(warnings.filters)

    run_code("import warnings\nwarnings.simplefilter('error')")

    assert warnings.filters == before


@pytest.mark.parametrize(
    ("source", "exit_code", "has_error"),
    [
        ("exit(3)", 3, True),
        ("import sys\nsys.exit(0)", 0, False),
        ("raise SystemExit('bye')", 1, True),
        ("exit(-1)", 255, True),
        ("exit(256)", 1, True),  # not 0: the job failed
        ("exit(10**5000)", 1, True),
    ],
)
def test_system_exit_sets_the_exit_code(source, exit_code, has_error):
    outcome = run_code(source)

    assert outcome.exit_code == exit_code
    assert (outcome.error is not None) == has_error
    if has_error:
        assert outcome.messages[0].startswith("SystemExit")


def test_exit_3_says_so_in_messages():
    outcome = run_code("exit(3)")

    assert outcome.messages[0] == "SystemExit: 3"


def test_keyboard_interrupt_is_a_failure_not_the_end_of_the_worker():
    outcome = run_code("raise KeyboardInterrupt")

    assert outcome.exit_code == 1
    assert outcome.error is not None
    assert outcome.error.type == "KeyboardInterrupt"
    assert outcome.messages[0] == "KeyboardInterrupt"


@pytest.mark.parametrize(
    ("memory_gib", "message"), [(8, "Memory limit of 8 GiB exceeded"), (None, "cannot allocate")]
)
def test_memory_error_names_the_machine_class_memory(memory_gib, message):
    outcome = run_code("raise MemoryError('cannot allocate')", memory_gib=memory_gib)

    assert outcome.error is not None
    assert outcome.error.message == message
    assert outcome.messages[0] == f"MemoryError: {message}"


def test_code_that_replaces_stdout_does_not_break_the_worker():
    stdout = sys.stdout

    outcome = run_code("import io, sys\nsys.stdout = io.StringIO()\n'done'")

    assert outcome.result == "done"
    assert sys.stdout is stdout


def test_array_item_is_bound_to_item_for_code():
    outcome = run_code("item ** 2", array_item=ArrayItem(value=3, index=2))

    assert outcome.result == 9


def test_item_is_unbound_without_an_array_item():
    outcome = run_code("item")

    assert outcome.error is not None
    assert outcome.error.type == "NameError"


# --- results --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "result", "result_repr"),
    [
        ("{1, 2}", None, "{1, 2}"),
        ("class Point:\n    def __repr__(self):\n        return 'Point()'\nPoint()", None, "Point()"),
        ("float('nan')", None, "nan"),
        ("(1, (2, 'a'))", [1, [2, "a"]], "(1, (2, 'a'))"),
        ("{'a': [1.5, None, True]}", {"a": [1.5, None, True]}, "{'a': [1.5, None, True]}"),
        ("{1: 'int keys are not JSON'}", None, "{1: 'int keys are not JSON'}"),
    ],
)
def test_result_json_and_repr(source, result, result_repr):
    document = _json_of(source)

    assert document == {"result": result, "resultRepr": result_repr}


@pytest.mark.parametrize(
    ("source", "result"),
    [
        ("import numpy as np\nnp.float64(1.5)", 1.5),
        ("import numpy as np\nnp.int64(7)", 7),
        ("import numpy as np\nnp.bool_(True)", True),
        ("import numpy as np\nnp.arange(6).reshape(2, 3)", [[0, 1, 2], [3, 4, 5]]),
        ("import numpy as np\nnp.array([1.0, np.inf])", None),
    ],
)
def test_numpy_results_become_json(source, result):
    document = _json_of(source)

    assert document["result"] == result
    assert document["resultRepr"]


def test_result_pickle_round_trips_a_value_defined_in_the_code():
    encoded = encode_outcome(run_code("class Point:\n    x = 5\nPoint()"))

    assert encoded.result_pickle is not None
    assert cloudpickle.loads(encoded.result_pickle).x == 5


def test_unpicklable_result_skips_the_pickle_with_a_message():
    encoded = encode_outcome(run_code("(i for i in range(3))"))

    assert encoded.result_pickle is None
    assert any("cannot be pickled" in message for message in json.loads(encoded.messages_json)["messages"])


def test_figure_result_gets_a_png_preview():
    source = (
        "import matplotlib\nmatplotlib.use('Agg')\nfrom matplotlib.figure import Figure\nfig = Figure()\n"
    )
    source += "fig.add_subplot().plot([1, 2])\nfig"

    encoded = encode_outcome(run_code(source))

    assert encoded.preview_png is not None
    assert encoded.preview_png.startswith(b"\x89PNG\r\n\x1a\n")


def test_other_results_get_their_repr_as_a_text_preview():
    # docs/http-api.md: preview.png is "a matplotlib figure as drawn; anything else its repr rendered as
    # text".
    import io

    from PIL import Image

    png = encode_outcome(run_code("{'answer': 42}")).preview_png
    assert png is not None
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    image = Image.open(io.BytesIO(png))
    assert image.width > 100
    assert image.getextrema() != ((255, 255), (255, 255), (255, 255))  # something was drawn
    assert encode_outcome(run_code("x = 1")).preview_png is None  # a None result has no preview


def test_scikit_learn_digits_classifier_is_accurate():
    source = """
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
X, y = load_digits(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.25, random_state=0)
model = LogisticRegression(max_iter=200).fit(X_train, y_train)
model.score(X_test, y_test)
"""
    outcome = run_code(source)

    assert outcome.error is None, outcome.messages
    assert isinstance(outcome.result, float)
    assert outcome.result > 0.9


# --- pickle ---------------------------------------------------------------------------------------


def test_pickled_lambda_is_called_with_args_and_kwargs():
    payload = cloudpickle.dumps((lambda a, b, *, c: a * b + c, (2, 3), {"c": 4}))

    outcome = run_pickle(payload)

    assert outcome.exit_code == 0
    assert outcome.result == 10


def test_array_item_is_the_first_argument_of_a_pickled_function():
    payload = cloudpickle.dumps((lambda item, offset: item + offset, (100,), {}))

    outcome = run_pickle(payload, array_item=ArrayItem(value=5, index=0))

    assert outcome.result == 105


def test_pickled_function_that_raises_reports_its_own_frames():
    def explode():
        empty: dict[str, int] = {}
        return empty["missing"]

    outcome = run_pickle(cloudpickle.dumps((explode, (), {})))

    assert outcome.exit_code == 1
    assert outcome.error is not None
    assert outcome.error.type == "KeyError"
    assert "in explode" in outcome.error.traceback
    assert "runner.py" not in outcome.error.traceback


def test_a_payload_that_cannot_be_unpickled_is_a_failure_of_the_job():
    outcome = run_pickle(b"not a pickle")

    assert outcome.exit_code == 1
    assert outcome.error is not None
    assert outcome.error.type == "UnpicklingError"


# --- command --------------------------------------------------------------------------------------


def test_command_output_streams_and_its_files_land_in_the_output_dir(tmp_path, capfd):
    script = (
        "import os, pathlib\n"
        "print('hello')\n"
        "out = pathlib.Path(os.environ['REMOTE_BATCH_OUTPUT_DIR'], 'out')\n"
        "out.mkdir()\n"
        "(out / 'a.csv').write_text('x,y\\n1,2\\n')\n"
    )

    outcome = run_command([sys.executable, "-c", script], output_dir=tmp_path)

    assert outcome.exit_code == 0
    assert outcome.error is None
    assert outcome.result is None
    assert capfd.readouterr().out == "hello\n"
    assert (tmp_path / "out" / "a.csv").read_text() == "x,y\n1,2\n"


def test_failing_command_propagates_its_exit_code(tmp_path):
    outcome = run_command([sys.executable, "-c", "raise SystemExit(5)"], output_dir=tmp_path)

    assert outcome.exit_code == 5
    assert outcome.error is not None
    assert outcome.error.type == "CalledProcessError"
    assert "exit status 5" in outcome.messages[0]


def test_command_killed_by_a_signal_exits_128_plus_the_signal(tmp_path):
    outcome = run_command(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"], output_dir=tmp_path
    )

    assert outcome.exit_code == 128 + 9


def test_command_not_found_exits_127(tmp_path):
    outcome = run_command(["remote-batch-no-such-program"], output_dir=tmp_path)

    assert outcome.exit_code == 127
    assert outcome.error is not None
    assert outcome.messages == ["FileNotFoundError: command not found: remote-batch-no-such-program"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_command_child_gets_sigkill_when_the_worker_dies(tmp_path, capfd):
    # PR_GET_PDEATHSIG (2) reads back what the worker's preexec_fn set.
    script = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None)\n"
        "sig = ctypes.c_int(0)\n"
        "libc.prctl(2, ctypes.byref(sig), 0, 0, 0)\n"
        "print(sig.value, os.getpgid(0))\n"
    )

    run_command([sys.executable, "-c", script], output_dir=tmp_path)

    signal_number, process_group = capfd.readouterr().out.split()
    assert int(signal_number) == 9
    assert int(process_group) == os.getpgid(0)  # the worker's own process group


# --- input parsing and dispatch -------------------------------------------------------------------


def _raw(document: object) -> bytes:
    return json.dumps(document).encode()


def test_parse_each_kind():
    payload = cloudpickle.dumps((len, ("abc",), {}))

    assert parse_job_input(_raw({"kind": "code", "code": "1"})) == CodeInput(source="1")
    assert parse_job_input(_raw({"kind": "command", "command": ["ls", "-l"]})) == CommandInput(("ls", "-l"))
    assert parse_job_input(
        _raw({"kind": "pickle", "pickle": base64.b64encode(payload).decode()})
    ) == PickleInput(payload=payload)


def test_parse_array_item_including_null():
    parsed = parse_job_input(_raw({"kind": "code", "code": "item", "arrayItem": None, "arrayIndex": 4}))

    assert parsed.array_item == ArrayItem(value=None, index=4)


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff not utf-8",
        b"{not json",
        _raw(["kind", "code"]),
        _raw({"kind": "shell", "code": "1"}),
        _raw({"kind": "code"}),
        _raw({"kind": "code", "code": 5}),
        _raw({"kind": "command", "command": []}),
        _raw({"kind": "command", "command": "ls -l"}),
        _raw({"kind": "command", "command": ["ls", 1]}),
        _raw({"kind": "pickle", "pickle": "not base64!"}),
        _raw({"kind": "code", "code": "item", "arrayItem": 1}),
        _raw({"kind": "code", "code": "item", "arrayItem": 1, "arrayIndex": -1}),
        _raw({"kind": "code", "code": "item", "arrayItem": 1, "arrayIndex": True}),
    ],
)
def test_parse_rejects_malformed_input(raw):
    with pytest.raises(InvalidJobInput):
        parse_job_input(raw)


def test_run_job_exports_the_output_dir_to_code_and_restores_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(OUTPUT_DIR_VARIABLE, raising=False)
    source = (
        "import os, pathlib\npathlib.Path(os.environ['REMOTE_BATCH_OUTPUT_DIR'], 'r.txt').write_text('1')"
    )

    outcome = run_job(CodeInput(source=source), output_dir=tmp_path)

    assert outcome.exit_code == 0
    assert (tmp_path / "r.txt").read_text() == "1"
    assert OUTPUT_DIR_VARIABLE not in os.environ


def test_run_job_dispatches_a_pickle(tmp_path):
    payload = cloudpickle.dumps((sum, ([1, 2, 3],), {}))

    assert run_job(PickleInput(payload=payload), output_dir=tmp_path).result == 6


# --- commands: memory, signals, arguments ------------------------------------------------------------

LIMIT_ADDRESS_SPACE = "import resource\nresource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))\n"


@pytest.mark.parametrize(
    "script",
    [
        # RLIMIT_AS (the local stack's limit): Python raises MemoryError, prints it last and exits 1.
        LIMIT_ADDRESS_SPACE + "x = bytearray(20 * 2**30)",
        LIMIT_ADDRESS_SPACE + "import numpy\nnumpy.ones(20 * 2**30, dtype='uint8')",
        # Other runtimes: a C++ std::bad_alloc ends in abort() (SIGABRT), Java prints its error first.
        'import os, sys\nsys.stderr.write("terminate called after throwing an instance of '
        "'std::bad_alloc'\\n"
        '  what():  std::bad_alloc\\n")\nsys.stderr.flush()\nos.abort()',
        "import sys\nprint('Exception in thread \"main\" java.lang.OutOfMemoryError: Java heap space', "
        "file=sys.stderr)\nprint('\\tat Main.main(Main.java:3)', file=sys.stderr)\nsys.exit(1)",
    ],
    ids=["python-memoryerror", "numpy-arraymemoryerror", "cpp-bad-alloc", "java-oom"],
)
def test_a_command_that_runs_out_of_memory_says_so_as_code_does(tmp_path, script, capfd):
    outcome = run_command([sys.executable, "-c", script], output_dir=tmp_path, memory_gib=8)
    code_outcome = run_code("raise MemoryError", memory_gib=8)

    assert outcome.exit_code != 0
    assert outcome.error is not None
    assert outcome.error.reason == "Memory limit of 8 GiB exceeded"
    assert (outcome.error.type, outcome.error.message) == ("MemoryError", "Memory limit of 8 GiB exceeded")
    assert outcome.messages == ["MemoryError: Memory limit of 8 GiB exceeded"]
    assert code_outcome.error is not None
    assert code_outcome.error.reason == outcome.error.reason  # one sentence for both kinds of job
    assert "MemoryError: Memory limit of 8 GiB exceeded" in capfd.readouterr().err


def test_a_command_killed_by_the_kernel_for_memory_says_so(tmp_path, monkeypatch):
    counts = iter([3, 4])  # the cgroup's oom_kill counter before and after the command
    monkeypatch.setattr("worker.runner.oom_kill_count", lambda: next(counts))

    outcome = run_command(
        [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
        output_dir=tmp_path,
        memory_gib=64,
    )

    assert outcome.exit_code == 137
    assert outcome.error is not None
    assert outcome.error.reason == "Memory limit of 64 GiB exceeded"


@pytest.mark.parametrize(("signal_name", "number"), [("SIGKILL", 9), ("SIGSEGV", 11)])
def test_a_command_killed_by_a_signal_names_it(tmp_path, signal_name, number):
    script = f"import os, signal; os.kill(os.getpid(), signal.{signal_name})"

    outcome = run_command([sys.executable, "-c", script], output_dir=tmp_path, memory_gib=8)

    assert outcome.error is not None
    assert outcome.exit_code == 128 + number
    # the signal, for the service to word the statusReason; the message names it for the log
    assert (outcome.error.signal, outcome.error.reason) == (number, None)
    assert outcome.error.message == (
        f"Command {sys.executable!r} was killed by signal {signal_name} ({number})."
    )


def test_a_failing_command_reason_is_its_exit_code_even_if_it_mentioned_memory_earlier(tmp_path):
    script = "print('MemoryError: recovered from it')\nprint('something else failed')\nraise SystemExit(3)"

    outcome = run_command([sys.executable, "-c", script], output_dir=tmp_path, memory_gib=8)

    assert outcome.error is not None
    assert outcome.error.reason == "Exited with code 3"
    assert outcome.error.message == f"Command {sys.executable!r} returned non-zero exit status 3."


def test_command_stdout_and_stderr_reach_the_log_in_the_order_written(tmp_path, capfd):
    script = (
        "import sys\nfor i in range(50):\n"
        "    stream = sys.stdout if i % 2 else sys.stderr\n"
        "    stream.write(f'{i}\\n')\n    stream.flush()\n"
    )

    outcome = run_command([sys.executable, "-c", script], output_dir=tmp_path)

    assert outcome.exit_code == 0
    assert capfd.readouterr().out == "".join(f"{i}\n" for i in range(50))


def test_a_command_whose_background_child_keeps_the_pipe_open_still_ends(tmp_path):
    script = "import subprocess\nsubprocess.Popen(['sleep', '5'])\nprint('parent done')"
    started = time.monotonic()

    outcome = run_command([sys.executable, "-c", script], output_dir=tmp_path)

    assert outcome.exit_code == 0
    assert time.monotonic() - started < 15


def test_a_command_that_is_not_executable_exits_126_with_a_clear_reason(tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)

    outcome = run_command([str(script)], output_dir=tmp_path)

    assert outcome.exit_code == 126
    assert outcome.error is not None
    assert outcome.error.reason == f"Command cannot be executed: {script} (Permission denied)"
    assert "Traceback" not in "".join(outcome.messages)


@pytest.mark.parametrize("argument", ["a\x00b", "\ud800"])
def test_an_argument_no_process_can_receive_never_crashes_the_worker(tmp_path, argument):
    outcome = run_command(["echo", argument], output_dir=tmp_path)

    assert outcome.exit_code == 126
    assert outcome.error is not None
    assert outcome.error.reason is not None
    assert outcome.error.reason.startswith("Command cannot be executed: echo (")
    assert outcome.error.type in {"ValueError", "UnicodeEncodeError"}


@pytest.mark.parametrize(
    ("argument", "message"),
    [
        ("a\x00b", "command[1] contains a NUL character, which no program can receive"),
        ("\ud800", "command[1] contains a lone surrogate, which no program can receive"),
    ],
)
def test_parse_refuses_command_arguments_no_process_can_receive(argument, message):
    raw = json.dumps({"kind": "command", "command": ["echo", argument]}).encode()

    with pytest.raises(InvalidJobInput) as raised:
        parse_job_input(raw)

    assert str(raised.value) == message


def test_an_oom_kill_during_a_job_that_succeeded_is_a_message(tmp_path, monkeypatch):
    counts = iter([0, 1])
    monkeypatch.setattr("worker.runner.oom_kill_count", lambda: next(counts))

    outcome = run_job(CodeInput(source="1"), output_dir=tmp_path, memory_gib=8)

    assert outcome.error is None
    assert outcome.result == 1
    assert outcome.messages == ["1 process of this job killed for exceeding the memory limit of 8 GiB"]


def test_oom_kill_count_reads_the_cgroup_counter(tmp_path, monkeypatch):
    (tmp_path / "proc-cgroup").write_text("0::/job\n")
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 2\noom_kill 2\n")
    monkeypatch.setattr("worker.runner.PROC_SELF_CGROUP", tmp_path / "proc-cgroup")
    monkeypatch.setattr("worker.runner.CGROUP_ROOT", tmp_path)

    assert oom_kill_count() == 2


def test_oom_kill_count_is_none_without_a_cgroup(tmp_path, monkeypatch):
    monkeypatch.setattr("worker.runner.PROC_SELF_CGROUP", tmp_path / "absent")
    monkeypatch.setattr("worker.runner.CGROUP_ROOT", tmp_path)

    assert oom_kill_count() is None


# --- pickles that do not load ---------------------------------------------------------------------


class _BreaksInsideCloudpickle:
    """Unpickles through a cloudpickle function that raises: what a pickle from another version does."""

    def __reduce__(self):
        from cloudpickle.cloudpickle import _make_function

        return (_make_function, (1, {}, "f", None, None))


@pytest.mark.parametrize(
    ("payload", "error_type", "detail"),
    [
        (b"not a pickle", "UnpicklingError", "UnpicklingError: invalid load key, 'n'."),
        (b"cno_such_module_here\nthing\n.", "ModuleNotFoundError", "No module named 'no_such_module_here'"),
        (cloudpickle.dumps((_BreaksInsideCloudpickle(), (), {})), "TypeError", "TypeError: "),
        (
            cloudpickle.dumps([1, 2, 3]),
            "PickleNotLoaded",
            "it holds list, not a (function, args, kwargs) tuple",
        ),
        (
            cloudpickle.dumps((1, (), {})),
            "PickleNotLoaded",
            "it must hold (function, args tuple, kwargs dict)",
        ),
        (b"", "EOFError", "EOFError: Ran out of input"),
    ],
    ids=["garbage", "missing-module", "other-version", "not-a-call", "not-callable", "empty"],
)
def test_a_pickle_that_does_not_load_is_one_line_without_the_loaders_frames(
    payload, error_type, detail, capfd
):
    outcome = run_pickle(payload)

    assert outcome.exit_code == 1
    assert outcome.error is not None
    assert outcome.error.type == error_type
    assert outcome.error.message.startswith("the job's pickle cannot be loaded (")
    assert outcome.error.reason == "T" + outcome.error.message[1:]  # the statusReason: one sentence
    assert detail in outcome.error.message
    assert outcome.error.traceback == ""
    assert outcome.messages == [outcome.error.as_message()]
    log = capfd.readouterr().err
    assert log.strip() == outcome.error.as_message()
    assert "Traceback" not in log
    assert "site-packages" not in log


@pytest.mark.parametrize(
    ("source", "error_type"),
    [("'\ud800'", "UnicodeEncodeError"), ("1\x00", "SyntaxError"), ("(" * 100_000, "SyntaxError")],
    ids=["lone-surrogate", "nul-byte", "nested-too-deeply"],
)
def test_code_that_cannot_be_compiled_fails_in_one_line_without_worker_frames(source, error_type, capsys):
    outcome = run_code(source)

    assert outcome.exit_code == 1
    assert outcome.error is not None
    assert outcome.error.type == error_type
    assert "runner.py" not in outcome.error.traceback
    assert "Traceback" not in capsys.readouterr().err
