"""The batch_events handler's envelope model accepts and refuses exactly what powertools' parser model
(``EventBridgeModel`` with the same ``detail``) does: the handler no longer imports the parser (every
AWS event model it ships is built at its import), and its validation must not change with that."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from pydantic import ValidationError

from functions.adapters.batch_detail import BatchJobDetail
from functions.handlers.batch_events import BatchJobStateChange
from tests.events import batch_event

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


class PowertoolsBatchJobStateChange(EventBridgeModel):
    """What the handler parsed with before: powertools' envelope with the typed Batch detail."""

    detail: BatchJobDetail


def _events() -> list[dict[str, Any]]:
    events = [json.loads(path.read_text()) for path in sorted(SAMPLES.glob("*.json"))]
    events = [e for e in events if isinstance(e, dict) and e.get("detail-type") == "Batch Job State Change"]
    events.append(batch_event("job-1", "b-1", "RUNNING", started_at=1_764_000_001_000))
    events.append(
        batch_event(
            "job-2",
            "b-2",
            "FAILED",
            started_at=1_764_000_001_000,
            stopped_at=1_764_000_002_000,
            exit_code=137,
            container_reason="OutOfMemoryError: Container killed due to memory usage",
        )
    )
    return events


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(event: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        target = event
        for part in parents:
            target = target[part]
        target[last] = value

    return change


def _drop(name: str) -> Callable[[dict[str, Any]], None]:
    return lambda event: event.pop(name, None)


CHANGES: dict[str, Callable[[dict[str, Any]], None]] = {
    "unchanged": lambda event: None,
    **{f"without {name}": _drop(name) for name in ("version", "id", "source", "account", "time", "region")},
    **{f"without {name}": _drop(name) for name in ("resources", "detail-type", "detail")},
    "version a number": _set("version", 0),
    "id null": _set("id", None),
    "time not a date": _set("time", "yesterday"),
    "time as epoch seconds": _set("time", 1_764_000_000),
    "time without zone": _set("time", "2025-11-24T16:00:00"),
    "resources a string": _set("resources", "arn:aws:batch:us-east-1:123456789012:job/b-1"),
    "resources holding a number": _set("resources", [1]),
    "detail-type a list": _set("detail-type", ["Batch Job State Change"]),
    "detail a string": _set("detail", "{}"),
    "detail without jobId": lambda event: event["detail"].pop("jobId"),
    "detail status a number": _set("detail/status", 3),
    "detail createdAt a string": _set("detail/createdAt", "later"),
    "detail createdAt a numeric string": _set("detail/createdAt", "1764000000000"),
    "replay-name": _set("replay-name", "replay-1"),
    "replay-name a number": _set("replay-name", 7),
    "an unknown field": _set("unknown", {"a": 1}),
    "detail-type by field name": lambda event: event.update({"detail_type": event.pop("detail-type")}),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_envelope_validates_as_powertools_eventbridge_model(change: str) -> None:
    for original in _events():
        event = copy.deepcopy(original)
        CHANGES[change](event)
        expected, refused = _powertools_parse(event)

        if refused is not None:
            assert change != "unchanged", refused  # the events themselves are valid
            with pytest.raises(ValidationError) as raised:
                BatchJobStateChange.model_validate(copy.deepcopy(event))
            # The same fields refused for the same reasons.
            assert [(e["loc"], e["type"]) for e in raised.value.errors()] == refused
            continue
        assert expected is not None
        parsed = BatchJobStateChange.model_validate(copy.deepcopy(event))
        assert parsed.model_dump() == expected.model_dump()
        assert parsed.detail == expected.detail


def _powertools_parse(
    event: dict[str, Any],
) -> tuple[PowertoolsBatchJobStateChange | None, list[tuple[Any, str]] | None]:
    """powertools' parse of ``event``: (the model, None), or (None, each error's location and type)."""
    try:
        return parse(event=copy.deepcopy(event), model=PowertoolsBatchJobStateChange), None
    except ValidationError as exc:
        return None, [(e["loc"], e["type"]) for e in exc.errors()]
