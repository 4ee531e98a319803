"""The worker's encoding of results and messages into result.json / messages.json bytes."""

import enum
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.encoding import REPR_LIMIT, NotJSONError, encode_outcome, result_document, safe_repr, to_json
from worker.runner import JobError, Outcome

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
    cycle: list = [1]
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
