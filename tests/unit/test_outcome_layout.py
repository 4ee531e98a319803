"""The outcome document: what the worker packs (``worker.layout``) and what the Lambdas parse
(``functions.domain.outcomes``), each against the other (issue 14, item 2)."""

from __future__ import annotations

import base64
import io
import json

import cloudpickle
import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.domain.outcomes import (
    OUTCOME_FORMAT,
    OutcomeUnreadable,
    error_summary,
    parse_outcome,
)
from worker import layout
from worker.encoding import encode_outcome
from worker.layout import (
    INLINE_PICKLE_MAX_BYTES,
    INLINE_RESULT_MAX_BYTES,
    OUTCOME_OBJECT,
    failure_outcome,
    outcome_objects,
)
from worker.runner import JobError, Outcome, run_code


def names(objects: list[layout.OutputObject]) -> list[str]:
    return [o.name for o in objects]


def test_the_two_sides_agree_on_the_format_and_names():
    assert layout.OUTCOME_FORMAT == OUTCOME_FORMAT == "remote-batch.outcome/1"
    from functions.domain import outcomes

    assert (layout.OUTCOME_OBJECT, layout.RESULT_OBJECT, layout.PICKLE_OBJECT, layout.PREVIEW_OBJECT) == (
        outcomes.OUTCOME_OBJECT,
        outcomes.RESULT_OBJECT,
        outcomes.PICKLE_OBJECT,
        outcomes.PREVIEW_OBJECT,
    )


def test_a_result_of_4_is_one_object_holding_everything():
    objects = outcome_objects(encode_outcome(run_code("import warnings\nwarnings.warn('w')\n2 + 2")))

    assert names(objects) == [OUTCOME_OBJECT]
    [outcome] = objects
    assert outcome.content_type == "application/json"
    document = json.loads(outcome.body)
    assert set(document) == {"format", "messages", "error", "result", "resultRepr", "pickle", "preview"}
    assert (document["result"], document["resultRepr"], document["error"]) == (4, "4", None)
    assert document["messages"] == ["<job>:2: UserWarning: w"]
    assert cloudpickle.loads(base64.b64decode(document["pickle"])) == 4
    parsed = parse_outcome(outcome.body)
    assert (parsed.ran, parsed.result, parsed.result_repr, parsed.result_object) == (True, 4, "4", None)
    assert parsed.pickle_base64 == document["pickle"] and parsed.pickle_object is None
    assert parsed.preview_png is not None and parsed.preview_png.startswith(b"\x89PNG\r\n\x1a\n")
    assert parsed.messages == ("<job>:2: UserWarning: w",)


def test_a_none_result_has_no_preview_and_a_failure_keeps_its_error():
    document = json.loads(outcome_objects(encode_outcome(run_code("1/0")))[-1].body)

    assert "preview" not in document and "previewObject" not in document
    assert (document["result"], document["resultRepr"]) == (None, "None")
    assert error_summary(parse_outcome(json.dumps(document).encode()).error) == (
        "ZeroDivisionError: division by zero"
    )


def test_a_result_over_the_inline_size_gets_its_own_result_json_and_pickle():
    value = "x" * (INLINE_RESULT_MAX_BYTES + 1)
    objects = outcome_objects(encode_outcome(Outcome(result=value)))

    assert names(objects) == ["result.json", "result.pickle", OUTCOME_OBJECT]
    assert json.loads(objects[0].body) == {
        "result": value,
        "resultRepr": json.loads(objects[-1].body)["resultRepr"],
    }
    assert cloudpickle.loads(objects[1].body) == value
    document = json.loads(objects[-1].body)
    assert "result" not in document and "pickle" not in document
    assert (document["resultObject"], document["pickleObject"]) == ("result.json", "result.pickle")
    assert document["resultRepr"].startswith("'xxx") and len(document["resultRepr"]) == 10_000


def test_the_inline_limits_are_inclusive():
    # A pickle of exactly the limit stays inline; one byte more is its own object.
    for size, inline in ((INLINE_PICKLE_MAX_BYTES, True), (INLINE_PICKLE_MAX_BYTES + 1, False)):
        encoded = encode_outcome(Outcome(result=None))
        encoded = type(encoded)(**{**encoded.__dict__, "result_pickle": b"p" * size})
        document = json.loads(outcome_objects(encoded)[-1].body)
        assert ("pickle" in document) is inline and ("pickleObject" in document) is not inline


def test_an_unpicklable_result_has_neither_pickle_field():
    document = json.loads(outcome_objects(encode_outcome(run_code("(i for i in range(3))")))[-1].body)
    assert "pickle" not in document and "pickleObject" not in document
    assert not parse_outcome(json.dumps(document).encode()).has_pickle


def test_a_picture_of_the_result_is_its_own_object_and_a_text_one_inline():
    from PIL import Image

    image = Image.new("RGB", (3, 2), "red")
    objects = outcome_objects(encode_outcome(Outcome(result=image)))

    assert names(objects) == ["preview.png", OUTCOME_OBJECT]
    assert objects[0].content_type == "image/png"
    drawn = Image.open(io.BytesIO(objects[0].body))
    assert (drawn.size, drawn.getpixel((0, 0))) == ((3, 2), (255, 0, 0))
    assert json.loads(objects[1].body)["previewObject"] == "preview.png"
    text = json.loads(outcome_objects(encode_outcome(Outcome(result=[1, 2])))[-1].body)
    assert "previewObject" not in text
    assert Image.open(io.BytesIO(base64.b64decode(text["preview"]))).format == "PNG"


def test_a_pil_image_png_cannot_hold_is_converted():
    from PIL import Image

    objects = outcome_objects(encode_outcome(Outcome(result=Image.new("CMYK", (2, 2)))))
    assert Image.open(io.BytesIO(objects[0].body)).mode == "RGBA"


def test_the_failure_outcome_says_why_and_has_no_result():
    body = failure_outcome(
        ["InvalidJobInput: bad"], JobError("InvalidJobInput", "bad", "", reason="The input is bad")
    )

    assert body.name == OUTCOME_OBJECT
    assert json.loads(body.body) == {
        "format": OUTCOME_FORMAT,
        "messages": ["InvalidJobInput: bad"],
        "error": {"type": "InvalidJobInput", "message": "bad", "traceback": "", "reason": "The input is bad"},
    }
    parsed = parse_outcome(body.body)
    assert not parsed.ran and not parsed.has_pickle and parsed.preview_png is None
    assert error_summary(parsed.error) == "The input is bad"


def test_lone_surrogates_survive_the_packing():
    outcome = Outcome(result="a\ud800b", messages=["\udcff"])
    body = outcome_objects(encode_outcome(outcome))[-1].body
    body.decode("utf-8")  # always valid UTF-8
    parsed = parse_outcome(body)
    assert (parsed.result, parsed.messages) == ("a\ud800b", ("\udcff",))


@given(st.recursive(st.none() | st.integers(-(10**6), 10**6) | st.text(max_size=5), st.lists, max_leaves=8))
def test_any_json_result_round_trips_through_the_document(value):
    parsed = parse_outcome(outcome_objects(encode_outcome(Outcome(result=value)))[-1].body)
    assert parsed.result == value
    assert cloudpickle.loads(base64.b64decode(parsed.pickle_base64 or "")) == value


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[]",
        b'{"messages": []}',  # no format: not this layout
        b'{"format": "remote-batch.outcome/2"}',
        json.dumps({"format": OUTCOME_FORMAT, "messages": "x"}).encode(),
        json.dumps({"format": OUTCOME_FORMAT, "error": "x"}).encode(),
        json.dumps({"format": OUTCOME_FORMAT, "resultObject": "../other/result.json"}).encode(),
        json.dumps({"format": OUTCOME_FORMAT, "pickleObject": "inputs/x"}).encode(),
        json.dumps({"format": OUTCOME_FORMAT, "resultRepr": 4}).encode(),
        json.dumps({"format": OUTCOME_FORMAT, "preview": "not base64!"}).encode(),
    ],
)
def test_a_document_not_of_the_format_is_refused(body):
    with pytest.raises(OutcomeUnreadable):
        parse_outcome(body)
