"""The worker's encoding of results and messages into result.json / messages.json bytes."""

import enum
import json
import math
import sys
import warnings
from typing import Any

import cloudpickle
import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.encoding import (
    MESSAGE_LIMIT,
    REPR_LIMIT,
    TRACEBACK_LIMIT,
    NotJSONError,
    decimal_digits,
    encode_outcome,
    messages_document,
    result_document,
    safe_repr,
    to_json,
)
from worker.runner import JobError, Outcome, run_code

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_json_values_convert_to_themselves(value):
    assert to_json(value) == value


@given(json_values)
def test_result_json_round_trips_through_json_text(value):
    encoded = encode_outcome(Outcome(result=value))

    assert json.loads(encoded.result_json)["result"] == value


@given(st.lists(st.integers(), max_size=5))
def test_tuples_become_lists(items):
    assert to_json(tuple(items)) == items


@pytest.mark.parametrize(
    "value",
    [
        {1, 2},
        frozenset(),
        object(),
        math.nan,
        -math.inf,
        {1: "a"},
        [1, [2, {"x": 1j}]],
        b"bytes",
    ],
)
def test_values_without_a_faithful_json_form_are_rejected(value):
    with pytest.raises(NotJSONError):
        to_json(value)


def test_a_list_that_contains_itself_is_rejected_not_a_crash():
    cycle: list[Any] = [1]
    cycle.append(cycle)

    assert result_document(cycle)["result"] is None


def test_the_same_list_twice_is_not_a_cycle():
    shared = [1, 2]

    assert to_json([shared, shared]) == [[1, 2], [1, 2]]


def test_int_subclasses_become_plain_ints():
    class Color(enum.IntEnum):
        RED = 1

    converted = to_json(Color.RED)

    assert converted == 1
    assert type(converted) is int


def test_repr_is_truncated_to_the_limit():
    text = safe_repr("x" * 50_000)

    assert len(text) == REPR_LIMIT
    assert text.endswith("…")


def test_repr_that_raises_gives_a_placeholder():
    class Broken:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert safe_repr(Broken()) == "<Broken object; repr() failed: RuntimeError: no repr>"


def test_messages_json_has_the_error_document():
    error = JobError(type="ValueError", message="bad", traceback="Traceback ...\nValueError: bad\n")
    outcome = Outcome(messages=["<job>:1: UserWarning: w", "ValueError: bad", error.traceback], error=error)

    document = json.loads(encode_outcome(outcome).messages_json)

    assert document == {
        "messages": ["<job>:1: UserWarning: w", "ValueError: bad", error.traceback],
        "error": {"type": "ValueError", "message": "bad", "traceback": error.traceback},
    }


def test_lone_surrogates_still_give_valid_utf8_json():
    encoded = encode_outcome(Outcome(result="a\ud800b", messages=["\udcff"]))

    assert json.loads(encoded.result_json.decode("utf-8"))["result"] == "a\ud800b"
    assert json.loads(encoded.messages_json.decode("utf-8"))["messages"] == ["\udcff"]


# --- whatever the user's code returns -------------------------------------------------------------


@pytest.fixture(autouse=True)
def _interpreter_limits_restored():
    """The user's code runs in the test process: undo the limits it changes."""
    digits, recursion = sys.get_int_max_str_digits(), sys.getrecursionlimit()
    yield
    sys.set_int_max_str_digits(digits)
    sys.setrecursionlimit(recursion)


def _strict_json(body: bytes):
    """Parse as RFC 8259 JSON: UTF-8, and no NaN or Infinity (docs/http-api.md's result fields are JSON)."""

    def refuse(constant: str):
        raise AssertionError(f"{constant} is not JSON")

    digits = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)  # the user's code may have lowered it in this process
    try:
        return json.loads(body.decode("utf-8"), parse_constant=refuse)
    finally:
        sys.set_int_max_str_digits(digits)


def _encode(source: str):
    outcome = run_code(source)
    assert outcome.error is None, outcome.messages  # the user's code itself succeeded
    encoded = encode_outcome(outcome)
    document = _strict_json(encoded.result_json)
    messages = _strict_json(encoded.messages_json)
    assert set(document) == {"result", "resultRepr"}
    assert isinstance(document["resultRepr"], str)
    assert len(document["resultRepr"]) <= REPR_LIMIT
    assert messages["error"] is None
    return document, messages["messages"], encoded


SELF_REFERENCE = "x = [1]\nx.append(x)\nx"
CLASS_PREFIX = "class Odd:\n"


@pytest.mark.parametrize(
    ("source", "result", "result_repr"),
    [
        # Python 3.11 refuses int → str past 4300 digits: no JSON value, a short repr.
        ("10**5000", None, "<int with 5001 digits>"),
        ("-(10**5000)", None, "<negative int with 5001 digits>"),
        ("[10**5000, 1]", None, "[<int with 5001 digits>, 1]"),
        ("{'big': (10**4300, 2)}", None, "{'big': (<int with 4301 digits>, 2)}"),
        ("class Big(int):\n    pass\nBig(10**5000)", None, "<Big with 5001 digits>"),
        # The user's own int-digit limit neither breaks nor slows the encoding, either way.
        ("import sys\nsys.set_int_max_str_digits(0)\n10**5000", None, "<int with 5001 digits>"),
        ("import sys\nsys.set_int_max_str_digits(640)\n10**999", 10**999, "1" + "0" * 999),
        ("10**4299", 10**4299, "1" + "0" * 4299),
        # Cycles: no JSON, the repr Python gives.
        (SELF_REFERENCE, None, "[1, [...]]"),
        ("d = {'k': 1}\nd['self'] = d\nd", None, "{'k': 1, 'self': {...}}"),
        ("t = ([],)\nt[0].append(t)\nt", None, "([(...)],)"),
        # Not JSON: repr only.
        ("b'\\x00bytes'", None, "b'\\x00bytes'"),
        ("{3, 1}", None, "{1, 3}"),
        ("frozenset()", None, "frozenset()"),
        ("frozenset({2})", None, "frozenset({2})"),
        ("from decimal import Decimal\nDecimal('1e100000')", None, "Decimal('1E+100000')"),
        ("1e308 * 10", None, "inf"),
        ("-1e308 * 10", None, "-inf"),
        ("float('nan')", None, "nan"),
        ("import numpy as np\nnp.array([1.0, np.nan])", None, "array([ 1., nan])"),
        ("(1,)", [1], "(1,)"),
        ("()", [], "()"),
        ("'\\ud800'", "\ud800", "'\\ud800'"),
        # Objects whose own methods raise.
        (
            CLASS_PREFIX + "    def __repr__(self):\n        raise RuntimeError('no repr')\nOdd()",
            None,
            "<Odd object; repr() failed: RuntimeError: no repr>",
        ),
        (
            CLASS_PREFIX + "    def __repr__(self):\n        raise SystemExit(3)\n[Odd()]",
            None,
            "[<Odd object; repr() failed: SystemExit: 3>]",
        ),
        (
            CLASS_PREFIX + "    def __repr__(self):\n        return 5\nOdd()",
            None,
            "<Odd object; repr() failed: TypeError: __repr__ returned non-string (type int)>",
        ),
        (
            CLASS_PREFIX
            + "    def __repr__(self):\n        return 'Odd()'\n"
            + "    def __eq__(self, other):\n        raise RuntimeError('eq')\n"
            + "    __hash__ = object.__hash__\n"
            + "    def __len__(self):\n        raise RuntimeError('len')\n"
            + "    def __iter__(self):\n        raise RuntimeError('iter')\n"
            + "[Odd()]",
            None,
            "[Odd()]",
        ),
    ],
)
def test_any_result_encodes_to_valid_json_and_a_bounded_repr(source, result, result_repr):
    document, _, _ = _encode(source)

    assert document == {"result": result, "resultRepr": result_repr}


def test_the_users_interpreter_limits_are_restored_after_encoding():
    _encode("import sys\nsys.set_int_max_str_digits(0)\nsys.setrecursionlimit(5000)\n10**5000")

    assert (sys.get_int_max_str_digits(), sys.getrecursionlimit()) == (0, 5000)


def test_a_generator_result_has_a_repr_and_a_note_instead_of_a_pickle():
    document, messages, encoded = _encode("(i for i in range(3))")

    assert document["result"] is None
    assert document["resultRepr"].startswith("<generator object <genexpr> at 0x")
    assert encoded.result_pickle is None
    assert messages == [
        "result.pickle not written: the result cannot be pickled (TypeError: cannot "
        "pickle 'generator' object)"
    ]


@pytest.mark.parametrize("raised", ["RuntimeError('no pickle')", "SystemExit(4)", "KeyboardInterrupt()"])
def test_a_result_whose_reduce_raises_anything_still_has_json_and_a_note(raised):
    source = f"class Odd(list):\n    def __reduce__(self):\n        raise {raised}\nOdd([1, 2])"

    document, messages, encoded = _encode(source)

    assert document == {"result": [1, 2], "resultRepr": "[1, 2]"}
    assert encoded.result_pickle is None
    assert len(messages) == 1
    assert messages[0].startswith("result.pickle not written: the result cannot be pickled (")


def test_a_list_subclass_whose_iteration_raises_is_still_json():
    # The conversion reads the list's items, not the user's __iter__ override; pickling calls it.
    source = "class Odd(list):\n    def __iter__(self):\n        raise RuntimeError('iter')\nOdd([1])"

    document, messages, _ = _encode(source)

    assert document == {"result": [1], "resultRepr": "[1]"}
    assert messages == ["result.pickle not written: the result cannot be pickled (RuntimeError: iter)"]


def test_a_result_whose_class_attribute_raises_gets_a_note_not_a_crash():
    source = (
        "class Odd:\n    @property\n    def __class__(self):\n        raise RuntimeError('no class')\n"
        "    def __repr__(self):\n        return 'Odd()'\nOdd()"
    )

    document, messages, _ = _encode(source)

    assert document == {"result": None, "resultRepr": "Odd()"}
    assert (
        "result.json holds no JSON value: converting the result failed (RuntimeError: no class)" in messages
    )


@pytest.mark.parametrize("limit", [None, 10**6])
def test_deep_nesting_neither_crashes_nor_overflows_the_stack(limit):
    raise_limit = f"import sys\nsys.setrecursionlimit({limit})\n" if limit else ""
    source = raise_limit + "x = []\nfor _ in range(200_000):\n    x = [x]\nx"

    document, messages, encoded = _encode(source)

    assert document["result"] is None
    assert document["resultRepr"] == "[" * (REPR_LIMIT - 1) + "…"
    assert encoded.result_pickle is None
    assert messages == [
        "result.pickle not written: the result cannot be pickled "
        "(PicklingError: Could not pickle object as excessively deep recursion required.)"
    ]


def test_a_result_over_the_json_limit_is_null_with_a_note_and_kept_as_a_pickle(monkeypatch):
    monkeypatch.setattr("worker.encoding.RESULT_JSON_MAX_BYTES", 1000)
    monkeypatch.setattr("worker.encoding._TOO_BIG", "its JSON form is over 1000 bytes")

    document, messages, encoded = _encode("list(range(1000))")

    assert document["result"] is None
    assert document["resultRepr"].startswith("[0, 1, 2, ")
    assert messages == [
        "result.json holds no JSON value: its JSON form is over 1000 bytes (result.pickle has the result)"
    ]
    assert encoded.result_pickle is not None
    assert cloudpickle.loads(encoded.result_pickle) == list(range(1000))


def test_a_result_just_under_the_json_limit_keeps_its_value(monkeypatch):
    monkeypatch.setattr("worker.encoding.RESULT_JSON_MAX_BYTES", 1000)

    # result.json is {"result": [0, 0, ...], "resultRepr": "[0, 0, ...]"}: 930 bytes.
    document, messages, encoded = _encode("[0] * 150")

    assert len(encoded.result_json) == 930
    assert document["result"] == [0] * 150
    assert messages == []


def test_a_huge_string_result_has_a_cut_repr():
    document, _, _ = _encode("'é' * 1_000_000")

    assert document["result"] == "é" * 1_000_000
    assert document["resultRepr"] == "'" + "é" * (REPR_LIMIT - 2) + "…"


def test_a_class_defined_in_the_job_round_trips_through_the_pickle():
    _, _, encoded = _encode("class Point:\n    def __init__(self):\n        self.x = 5\nPoint()")

    assert encoded.result_pickle is not None
    assert cloudpickle.loads(encoded.result_pickle).x == 5


@pytest.mark.parametrize(
    ("number", "digits"),
    [(0, 1), (9, 1), (10, 2), (-(10**5000), 5001), (10**5000 - 1, 5000), (2**64, 20), (10**30000 + 1, 30001)],
    ids=["0", "9", "10", "-10**5000", "10**5000-1", "2**64", "10**30000+1"],
)
def test_decimal_digits_are_exact(number, digits):
    assert decimal_digits(number) == (digits, True)


def test_safe_repr_cuts_at_the_limit():
    assert safe_repr(list(range(10_000)), limit=20) == "[0, 1, 2, 3, 4, 5, …"


# --- messages.json --------------------------------------------------------------------------------


def test_messages_json_is_bounded_whatever_the_error_and_messages_are():
    error = JobError(type="ValueError", message="m" * 10**6, traceback="t" * 10**6, reason="Out\nof memory")

    body = messages_document(["w" * 10**6, "short"], error)

    document = _strict_json(body)
    assert len(body) < 200_000  # the service reads the error from the first 1 MiB
    assert len(document["messages"][0]) == MESSAGE_LIMIT
    assert document["messages"][1] == "short"
    assert len(document["error"]["message"]) == MESSAGE_LIMIT
    assert len(document["error"]["traceback"]) == TRACEBACK_LIMIT
    assert document["error"]["traceback"].endswith("t" * 100)  # the end of a traceback is kept
    assert document["error"]["reason"] == "Out of memory"  # one line


def test_many_warnings_are_counted_not_all_kept():
    source = "import warnings\nfor i in range(1000):\n    warnings.warn(f'w{i}')\n1"

    # In a job they are shown on its stderr, the job log; here they are recorded (not left to pytest's
    # summary, where they would fill 4,000 lines)
    with warnings.catch_warnings(record=True) as shown:
        outcome = run_code(source)
    document = _strict_json(encode_outcome(outcome).messages_json)

    assert len(shown) == 1000  # every one is still shown
    assert outcome.result == 1
    assert len(document["messages"]) == 101
    assert document["messages"][:2] == ["<job>:3: UserWarning: w0", "<job>:3: UserWarning: w1"]
    assert document["messages"][-1] == "900 more warnings not kept here (the job log shows them all)"


def test_an_exception_whose_str_raises_is_still_reported():
    outcome = run_code(
        "class Odd(Exception):\n    def __str__(self):\n        raise RuntimeError('no str')\nraise Odd()"
    )

    assert outcome.exit_code == 1
    assert outcome.error is not None
    assert (outcome.error.type, outcome.error.message) == ("Odd", "<exception str() failed>")
    _strict_json(encode_outcome(outcome).messages_json)


def test_an_outcome_with_a_reason_writes_it():
    error = JobError(
        type="MemoryError",
        message="Memory limit of 8 GiB exceeded",
        traceback="",
        reason="Memory limit of 8 GiB exceeded",
    )

    document = _strict_json(encode_outcome(Outcome(error=error, exit_code=1)).messages_json)

    assert document["error"] == {
        "type": "MemoryError",
        "message": "Memory limit of 8 GiB exceeded",
        "traceback": "",
        "reason": "Memory limit of 8 GiB exceeded",
    }
