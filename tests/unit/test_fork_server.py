"""Issue 26 part 3: jobs forked from one zygote (``worker.fork_server``, ``worker.zygote``) see nothing
of each other, what they leave running dies with them, and their limits and failure reasons are those
of a job side started fresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from worker import fork_server
from worker.runner import CodeInput, memory_reason
from worker.supervisor import JobRun, run_in_job_python


@pytest.fixture
def zygote() -> Iterator[fork_server.ForkServer]:
    """The fork server on, its zygote started for this interpreter; off again afterwards."""
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    fork_server.prestart(None, environ)
    server = fork_server.server_for(sys.executable, environ, None)
    assert server is not None
    yield server
    fork_server.shut_down()


def _run(source: str, tmp_path: Path, name: str, environ: dict[str, str] | None = None) -> JobRun:
    outputs, work = tmp_path / name / "outputs", tmp_path / name / "work"
    outputs.mkdir(parents=True)
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(environ or {})
    return run_in_job_python(CodeInput(source), output_dir=outputs, memory_gib=2, environ=env, work_dir=work)


def _result(run: JobRun) -> Any:
    assert run.error is None, run.messages
    assert run.outputs is not None
    return json.loads(run.outputs.result_json)["result"]


FIRST = """
import builtins, json, os, sys, types
builtins.LEAKED = 1
json.LEAKED = 1
sys.modules["leaked_module"] = types.ModuleType("leaked_module")
os.environ["LEAKED"] = "1"
open("leaked.txt", "w").write("first job")
{"ppid": os.getppid(), "pid": os.getpid(), "cwd": os.getcwd(), "env": os.environ.get("ONLY_FIRST")}
"""
SECOND = """
import builtins, json, os, sys
{
    "ppid": os.getppid(),
    "pid": os.getpid(),
    "cwd": os.getcwd(),
    "builtin": hasattr(builtins, "LEAKED"),
    "module attribute": hasattr(json, "LEAKED"),
    "module": "leaked_module" in sys.modules,
    "environ": [k for k in ("LEAKED", "ONLY_FIRST") if k in os.environ],
    "files": os.listdir("."),
    "session leader": os.getsid(0) == os.getpid(),
}
"""


def test_a_job_sees_nothing_of_the_previous_job_forked_from_the_same_zygote(
    zygote: fork_server.ForkServer, tmp_path: Path
) -> None:
    # Given a job that leaves globals, a module, a variable and a file behind
    first = _result(_run(FIRST, tmp_path, "first", {"ONLY_FIRST": "yes"}))
    # When the next job is forked from the same zygote
    second = _result(_run(SECOND, tmp_path, "second"))

    # Then both were children of the zygote, in their own working folders and sessions
    assert first["ppid"] == second["ppid"] == zygote.process.pid
    assert first["pid"] != second["pid"]
    assert first["env"] == "yes"
    assert first["cwd"] == str(tmp_path / "first" / "work")
    assert second["cwd"] == str(tmp_path / "second" / "work")
    assert (tmp_path / "first" / "work" / "leaked.txt").read_text() == "first job"
    # And the second saw none of what the first left
    assert {k: v for k, v in second.items() if k not in ("ppid", "pid", "cwd")} == {
        "builtin": False,
        "module attribute": False,
        "module": False,
        "environ": [],
        "files": [],
        "session leader": True,
    }


ESCAPES = {
    # each starts `sleep 782` (its marker) so that it outlives the job's process, if it can
    "new session": "subprocess.Popen(['setsid', 'sleep', '782'])",
    "env -i": "subprocess.Popen(['env', '-i', 'sleep', '782'], start_new_session=True)",
    "double fork": "subprocess.Popen(['sh', '-c', '(sleep 782 &) ; exit 0']).wait()",
    "SIGTERM ignored": (
        "subprocess.Popen(['sh', '-c', 'trap \"\" TERM; sleep 782; :'], start_new_session=True)"
    ),
}


def _sleep_782() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline"]):
        if (process.info["cmdline"] or [])[-2:] == ["sleep", "782"]:
            found.append(process)
    return found


def test_what_a_forked_job_leaves_running_dies_with_it(
    zygote: fork_server.ForkServer, tmp_path: Path
) -> None:
    # Given a job that escapes in each way the sandbox tests try, then ends
    source = "import subprocess, time\n" + "\n".join(ESCAPES.values()) + "\ntime.sleep(0.5)\n'escaped'\n"
    assert _sleep_782() == []
    run = _run(source, tmp_path, "escape")

    # Then it succeeded, and none of what it started is left once the supervisor has its outcome
    assert _result(run) == "escaped"
    assert _sleep_782() == []
    # And the zygote is still there for the next job
    assert zygote.process.poll() is None
    assert _result(_run("os = __import__('os'); os.getppid()", tmp_path, "next")) == zygote.process.pid


def test_a_segfault_in_a_forked_job_reads_as_in_a_fresh_one(
    zygote: fork_server.ForkServer, tmp_path: Path
) -> None:
    source = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n"
    forked = _run(source, tmp_path, "forked")
    fork_server.shut_down()
    fresh = _run(source, tmp_path, "fresh")

    assert forked.error is not None and fresh.error is not None
    assert forked.error == fresh.error
    assert forked.messages == fresh.messages
    assert "SIGSEGV" in forked.error.message
    assert forked.exit_code == fresh.exit_code == 139


def test_a_forked_job_has_the_supervisors_limits_and_the_memory_reason(tmp_path: Path) -> None:
    # Given a supervisor whose address space is capped at 1 GiB and pinned to one CPU (as a warm
    # worker is once it has its job), with the fork server on, in a process of its own
    cpu = min(os.sched_getaffinity(0))
    program = textwrap.dedent(
        f"""
        import json, os, resource, sys
        from pathlib import Path
        from worker import fork_server
        from worker.runner import CodeInput
        from worker.supervisor import run_in_job_python
        environ = {{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}}
        fork_server.prestart(None, environ)
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        os.sched_setaffinity(0, [{cpu}])
        out = []
        probe = "import os, resource\\n"
        probe += "[resource.getrlimit(resource.RLIMIT_AS), sorted(os.sched_getaffinity(0)), os.getppid()]"
        for name, source in [
            ("limits", probe),
            ("memory", "b = bytearray(3 << 30)"),
        ]:
            folder = Path({str(tmp_path)!r}) / name
            folder.mkdir()
            run = run_in_job_python(CodeInput(source), output_dir=folder, memory_gib=1, environ=environ)
            out.append({{
                "result": json.loads(run.outputs.result_json)["result"] if run.outputs else None,
                "reason": run.error.reason if run.error else None,
                "type": run.error.type if run.error else None,
                "zygote": fork_server.server_for(sys.executable, environ, None).process.pid,
            }})
        fork_server.shut_down()
        print(json.dumps(out))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    limits, memory = json.loads(done.stdout.strip().splitlines()[-1])

    # Then the forked job had those limits, and running out of memory reads as it does today
    assert limits["result"] == [[1 << 30, 1 << 30], [cpu], limits["zygote"]]
    assert memory["type"] == "MemoryError"
    assert memory["reason"] == memory_reason(1)


def test_a_zygote_that_died_is_replaced_by_a_fresh_start(
    zygote: fork_server.ForkServer, tmp_path: Path
) -> None:
    # Given the zygote killed between two jobs
    zygote.process.kill()
    zygote.process.wait()
    # When a job runs
    run = _run("__import__('os').getppid()", tmp_path, "after")

    # Then it ran (in a new zygote: the process's fork server starts one for the job)
    assert _result(run) != zygote.process.pid
    assert _result(run) != os.getpid()
