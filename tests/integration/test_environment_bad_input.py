"""Issue 24 item 6, server side: each bad environment input is a 400 naming the field, on
``PUT /environments/{name}`` and on ``POST /jobs`` (a name, or an inline spec), and writes nothing:
no environment record, no job, no input object, no build started."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from functions import bootstrap
from tests.fakes import RecordingEnvironmentBuilder
from tests.integration.conftest import Stack

SPEC: dict[str, Any] = {"python": "3.12", "requirements": ["six==1.16.0"]}

# (what is wrong, the spec's change, the field it names in a spec)
BAD_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("unknown Python version", {"python": "3.9"}, "python"),
    ("unparsable requirement line", {"requirements": ["six==1.16.0", "numpy==>2"]}, "requirements[1]"),
    ("index URL not https", {"indexUrl": "http://pypi.example.com/simple"}, "indexUrl"),
    ("extra index URL not https", {"extraIndexUrls": ["ftp://mirror.example.com"]}, "extraIndexUrls[0]"),
    ("too many requirements", {"requirements": [f"pkg{i}==1.0" for i in range(501)]}, "requirements"),
    ("image that is not an image name", {"image": "Not An Image!"}, "image"),
    ("an unknown key", {"pythonn": "3.12"}, "pythonn"),
]


@pytest.fixture
def builder(stack: Stack) -> RecordingEnvironmentBuilder:
    fake = RecordingEnvironmentBuilder()
    stack.services = replace(stack.services, environment_builder=fake)
    bootstrap.install(stack.services)
    return fake


def _written(stack: Stack) -> tuple[int, int, int]:
    """(environment and compute items, job items, stored objects)."""
    settings = stack.settings
    return (
        stack.count_items(settings.computes_table),
        stack.count_items(settings.jobs_table),
        stack.count_objects(),
    )


def _cases() -> list[Any]:
    """Each bad spec on PUT and inline on POST /jobs; a bad name on PUT and as POST /jobs' name."""
    cases = []
    for wrong, change, field in BAD_SPECS:
        spec = {**SPEC, **change}
        cases.append(pytest.param("PUT", "/environments/ml", spec, field, id=f"put-{wrong}"))
        inline: dict[str, Any] = {"code": "1", "environment": spec}
        cases.append(pytest.param("POST", "/jobs", inline, f"environment.{field}", id=f"inline-{wrong}"))
    cases.append(pytest.param("PUT", "/environments/9lives", SPEC, "name", id="put-name over the pattern"))
    named: dict[str, Any] = {"code": "1", "environment": "9lives"}
    cases.append(pytest.param("POST", "/jobs", named, "environment", id="job-name over the pattern"))
    neither: dict[str, Any] = {"code": "1", "environment": 5}
    cases.append(pytest.param("POST", "/jobs", neither, "environment", id="job-neither name nor spec"))
    return cases


@pytest.mark.parametrize(("method", "path", "body", "field"), _cases())
def test_bad_environment_input_is_400_naming_the_field_and_writes_nothing(
    stack: Stack,
    builder: RecordingEnvironmentBuilder,
    method: str,
    path: str,
    body: dict[str, Any],
    field: str,
) -> None:
    before = _written(stack)
    status, answer = stack.api(method, path, body=body)
    assert status == 400, answer
    assert answer["error"]["field"] == field, answer
    assert answer["error"]["code"] == "ValidationError"
    assert _written(stack) == before
    assert builder.requests == []


def test_an_http_index_is_taken_where_the_deployment_allows_it(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    # The local stack allows http indexes (a local mirror); the cloud does not (above).
    stack.services = replace(stack.services, allow_http_indexes=True)
    bootstrap.install(stack.services)
    spec = {**SPEC, "indexUrl": "http://127.0.0.1:3141/simple"}
    assert stack.api("PUT", "/environments/ml", body=spec)[0] == 201
    status, job = stack.api("POST", "/jobs", body={"code": "1", "environment": {**spec, "python": "3.13"}})
    assert status == 202, job
    assert [r.name for r in builder.requests] == ["ml", None]
