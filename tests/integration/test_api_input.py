"""Input the api must refuse with 400 naming the field (or answer sensibly), on every route: Unicode
digits, full-width forms, trailing newlines and control characters in every validated field; empty
bodies with any Content-Type; repeated query parameters; huge numbers; argv no process can take;
405 for unknown methods; idempotency on the normalized request."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.domain.machine_classes import GeoZone
from tests.events import api_event
from tests.fakes import FakeLambdaContext

JOB_ID = "job-01M8QHWTTNJ243SKQ4SRSXXQFN"


def _call(event: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, Any]]:
    from functions.handlers import api

    response = api.handler(event, FakeLambdaContext())
    headers = {**(response.get("headers") or {})}
    headers.update({k: v[-1] for k, v in (response.get("multiValueHeaders") or {}).items()})
    body = json.loads(response["body"]) if response.get("body") else {}
    return response["statusCode"], body, headers


# How a valid value is spoiled: a Unicode digit for an ASCII one, a full-width form, a trailing
# newline, a control character inside.
def _spoil(value: str, how: str) -> str:
    if how == "arabic-indic digit":
        return value.translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    if how == "full-width":
        return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in value)
    if how == "trailing newline":
        return value + "\n"
    return value[:1] + "\x07" + value[1:]


SPOILS = ["arabic-indic digit", "full-width", "trailing newline", "control character"]

# (method, path, where, field, a valid value, spoils that apply): body fields, query parameters and
# headers of every route that validates text.
FIELDS: list[tuple[str, str, str, str, str, list[str]]] = [
    ("PUT", "/account/contacts", "body", "phone", "+15555550100", SPOILS),
    ("PUT", "/account/contacts", "body", "email", "a1@example.com", SPOILS),
    ("PUT", "/account/contacts", "body", "webhookUrl", "https://93.184.215.14/hook1", SPOILS),
    ("POST", "/jobs", "body", "machineClass", "Basic1x8", SPOILS),
    ("POST", "/jobs", "body", "geoZone", "UnitedStates", SPOILS[1:]),
    ("POST", "/jobs", "body", "pickle", "AAAA", SPOILS[1:]),
    # A label may hold any script's digits and letters; line breaks and controls never.
    ("POST", "/jobs", "body", "name", "run 1", ["trailing newline", "control character"]),
    (
        "POST",
        "/admin/accounts/dev/credits",
        "body",
        "reason",
        "refund 1",
        ["trailing newline", "control character"],
    ),
    ("GET", "/jobs", "query", "limit", "20", SPOILS),
    ("GET", "/jobs", "query", "status", "Queued", SPOILS[1:]),
    ("GET", "/account/usage", "query", "from", "2026-11-29T17:20:00Z", SPOILS),
    ("GET", "/account/usage", "query", "to", "2026-11-29T17:20:00Z", SPOILS),
    ("POST", "/jobs", "header", "Idempotency-Key", "key-1", SPOILS[1:]),
]


def _event(method: str, path: str, where: str, field: str, value: str) -> dict[str, Any]:
    body: dict[str, Any] | None = None
    if path == "/jobs" and method == "POST":
        body = {} if field == "pickle" else {"code": "1"}
    elif path.startswith("/admin"):
        body = {"credits": 1, "reason": "r"}
    elif method == "PUT":
        body = {}
    if where == "body":
        assert body is not None
        body[field] = value
    return api_event(
        method,
        path,
        body=body,
        query={field: value} if where == "query" else None,
        headers={field: value} if where == "header" else None,
        groups="admin",
    )


@pytest.mark.parametrize(("method", "path", "where", "field", "valid", "spoils"), FIELDS)
def test_every_validated_field_takes_its_valid_value(stack, method, path, where, field, valid, spoils):
    status, body, _ = _call(_event(method, path, where, field, valid))
    assert status in (200, 202), body


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=st.sampled_from(FIELDS), how=st.sampled_from(SPOILS), data=st.data())
def test_spoiled_values_are_400_naming_the_field(stack, case, how, data):
    method, path, where, field, valid, spoils = case
    if how not in spoils:
        how = data.draw(st.sampled_from(spoils))
    spoiled = _spoil(valid, how)
    status, body, _ = _call(_event(method, path, where, field, spoiled))
    assert status == 400, (field, how, body)
    assert body["error"]["code"] == "ValidationError"
    assert body["error"]["field"] == field, (how, body)
    assert stack.count_items("test-jobs") == 0


def test_the_phone_of_the_issue_is_refused_and_not_stored(stack):
    status, body, _ = _call(api_event("PUT", "/account/contacts", body={"phone": "+1٥٥٥٥٥٥٠١٠٠"}))
    assert (status, body["error"]["field"]) == (400, "phone")
    account = stack.services.store.get_account("dev")
    assert account is not None and account.phone is None


def test_a_job_id_of_another_form_is_not_found(stack):
    _, job, _ = _call(api_event("POST", "/jobs", body={"code": "1"}))
    for variant in (job["jobId"] + "\n", job["jobId"].replace("0", "٠"), job["jobId"].lower()):
        status, body, _ = _call(api_event("GET", f"/jobs/{variant}"))
        assert (status, body["error"]["code"]) == (404, "NotFound"), variant


@pytest.mark.parametrize(
    ("values", "status", "count"),
    [(["500", "2"], 200, 2), (["2", "500"], 400, None), (["1", "3"], 200, 3)],
)
def test_a_repeated_query_parameter_takes_its_last_value(stack, values, status, count):
    for _ in range(3):
        _call(api_event("POST", "/jobs", body={"code": "1"}))
    event = api_event("GET", "/jobs", query={"limit": values[-1]})
    event["multiValueQueryStringParameters"] = {"limit": values}
    answered, body, _ = _call(event)
    assert answered == status, body
    if count is not None:
        assert len(body["jobs"]) == count
    else:
        assert body["error"]["field"] == "limit"


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/jobs"), ("PUT", "/account/contacts"), ("POST", "/admin/accounts/dev/credits")],
)
@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "application/json"]
)
@pytest.mark.parametrize("raw", ["", None])
def test_an_empty_body_is_400_whatever_the_content_type(stack, method, path, content_type, raw):
    event = api_event(method, path, raw_body=raw, headers={"Content-Type": content_type}, groups="admin")
    status, body, _ = _call(event)
    assert status == 400, body
    assert set(body) == {"error"} and body["error"]["code"] == "ValidationError"
    assert body["error"]["message"] == "A JSON body is required."


@pytest.mark.parametrize("number", [1e24, 1e300, 10**30, 1e23])
@pytest.mark.parametrize("event_name", ["JobCreditsUsed", "HoursElapsed"])
def test_huge_notification_parameters_are_400_naming_the_path(stack, number, event_name):
    body = {"code": "1", "notifications": [{"events": [{event_name: number}]}]}
    status, error, _ = _call(api_event("POST", "/jobs", body=body))
    assert status == 400, error
    assert error["error"]["field"] == f"notifications[0].events[0].{event_name}"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"code": "1", "creditConstraint": 1e24}, "creditConstraint"),
        ({"code": "1", "timeConstraint": 1e24}, "timeConstraint"),
        ({"code": "1", "timeConstraint": 10.5}, "timeConstraint"),
        (
            {"code": "1", "notifications": {"events": {"JobCreditsUsed": "1e24"}}},
            "notifications[0].events[0].JobCreditsUsed",
        ),
        (
            {"code": "1", "notifications": {"events": {"HoursElapsed": "٥"}}},
            "notifications[0].events[0].HoursElapsed",
        ),
    ],
)
def test_other_huge_or_odd_numbers_are_400(stack, body, field):
    status, error, _ = _call(api_event("POST", "/jobs", body=body))
    assert (status, error["error"]["field"]) == (400, field), error
    status, error, _ = _call(
        api_event(
            "POST", "/admin/accounts/dev/credits", body={"credits": 1e24, "reason": "r"}, groups="admin"
        )
    )
    assert (status, error["error"]["field"]) == (400, "credits")
    status, error, _ = _call(api_event("GET", "/jobs", query={"limit": "1" + "0" * 40}))
    assert (status, error["error"]["field"]) == (400, "limit")


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"command": ["echo", "a\\u0000b"]}', "command[1]"),
        ('{"command": ["echo", "a\\ud800b"]}', "command[1]"),
        ('{"command": [""]}', "command[0]"),
        ('{"command": []}', "command"),
        ('{"code": "1", "name": "x\\udfff"}', "name"),
        ('{"code": "x = \\"\\ud800\\""}', "code"),
    ],
)
def test_argv_and_text_no_process_or_store_can_take_are_400_at_submit(stack, raw, field):
    status, error, _ = _call(api_event("POST", "/jobs", raw_body=raw))
    assert (status, error["error"]["field"]) == (400, field), error
    assert stack.count_items("test-jobs") == 0
    assert stack.batch[GeoZone.UNITED_STATES].submissions == []


def test_a_lone_surrogate_in_the_grant_reason_is_400(stack):
    event = api_event(
        "POST", "/admin/accounts/dev/credits", raw_body='{"credits": 1, "reason": "\\ud800"}', groups="admin"
    )
    status, error, _ = _call(event)
    assert (status, error["error"]["field"]) == (400, "reason")
    assert stack.balance("dev") == 10000


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PATCH", "/jobs", "GET, POST"),
        ("PUT", f"/jobs/{JOB_ID}", "DELETE, GET"),
        ("GET", "/account/contacts", "PUT"),
    ],
)
def test_an_unknown_method_is_405_with_allow(stack, method, path, allow):
    status, body, headers = _call(api_event(method, path))
    assert status == 405
    assert body["error"]["code"] == "MethodNotAllowed" and body["error"]["field"] is None
    assert headers["Allow"] == allow
    assert _call(api_event("GET", "/nothing-here"))[0] == 404


def test_idempotency_compares_the_normalized_request(stack):
    key = {"Idempotency-Key": "same-run"}
    first = _call(api_event("POST", "/jobs", body={"code": "1", "creditConstraint": 1}, headers=key))
    assert first[0] == 202
    for raw in [
        '{"creditConstraint": 1.0, "code": "1"}',
        '{ "code" : "1" , "creditConstraint" : 1.0000, "machineClass": "Basic1x8", "geoZone": "Automatic" }',
        '{"code": "1", "creditConstraint": 1, "geoZone": "UnitedStates", "notifications": "Automatic",'
        ' "name": null}',
        '{"code": "1", "creditConstraint": 1, "notifications": [{"events": ["JobStarting", "JobCompleted",'
        ' {"JobCreditsUsed": 20000.0}], "methods": "Email"}]}',
    ]:
        status, job, _ = _call(api_event("POST", "/jobs", raw_body=raw, headers=key))
        assert status == 202, (raw, job)
        assert job["jobId"] == first[1]["jobId"]
    assert len(stack.batch[GeoZone.UNITED_STATES].submissions) == 1
    for different in [{"code": "1", "creditConstraint": 2}, {"code": "1 ", "creditConstraint": 1}]:
        status, error, _ = _call(api_event("POST", "/jobs", body=different, headers=key))
        assert (status, error["error"]["code"], error["error"]["field"]) == (
            409,
            "Conflict",
            "Idempotency-Key",
        )


def test_the_local_gateway_builds_repeated_parameters_as_api_gateway_rest(stack):
    from datetime import UTC, datetime

    from werkzeug.test import EnvironBuilder

    from remote_batch_local.gateway import proxy_event
    from remote_batch_local.tokens import Principal

    request = EnvironBuilder(
        path="/jobs", query_string="limit=500&limit=2&status=Queued&empty="
    ).get_request()
    event = proxy_event(request, b"", Principal("dev", ("user",)), datetime(2026, 11, 29, tzinfo=UTC))
    assert event["queryStringParameters"] == {"limit": "2", "status": "Queued", "empty": ""}
    assert event["multiValueQueryStringParameters"] == {
        "limit": ["500", "2"],
        "status": ["Queued"],
        "empty": [""],
    }
    for _ in range(3):
        _call(api_event("POST", "/jobs", body={"code": "1"}))
    status, body, _ = _call({**event, "requestContext": {**event["requestContext"], "path": "/jobs"}})
    assert status == 200 and len(body["jobs"]) == 2


BIG_INT = "1" + "0" * 5000  # past Python's 4300-digit int conversion limit


@pytest.mark.parametrize(
    ("method", "path", "raw", "message"),
    [
        ("POST", "/jobs", '{"code": "1", "creditConstraint": ' + BIG_INT + "}", "more than 4300 digits"),
        ("POST", "/jobs", '{"code": "item", "arrayItems": [' + BIG_INT + ", 1]}", "more than 4300 digits"),
        ("POST", "/estimate", '{"machineClass": "Basic1x8", "seconds": ' + BIG_INT + "}", "more than 4300"),
        ("PUT", "/account/contacts", '{"email": null, "phone": ' + BIG_INT + "}", "more than 4300 digits"),
        ("POST", "/jobs", '{"code": "item", "arrayItems": [1, NaN]}', "holds NaN, which is not JSON"),
        ("POST", "/jobs", '{"code": "1", "creditConstraint": Infinity}', "holds Infinity, which is not JSON"),
        ("POST", "/estimate", '{"machineClass": "Basic1x8", "seconds": -Infinity}', "holds -Infinity"),
    ],
)
def test_numbers_json_does_not_have_or_python_cannot_read_are_400_and_write_nothing(
    stack, method, path, raw, message
):
    """A 5000-digit integer made json.loads raise ValueError, which escaped as a 500; NaN/Infinity
    (Python's extensions to JSON) were taken inside arrayItems."""
    status, error, _ = _call(api_event(method, path, raw_body=raw))
    assert status == 400, error
    assert error["error"]["code"] == "ValidationError"
    assert message in error["error"]["message"], error
    assert stack.count_items("test-jobs") == 0
    assert stack.batch[GeoZone.UNITED_STATES].submissions == []


@pytest.mark.parametrize("version", ["bogus", "2.7", "", "3.11.7"])
def test_a_malformed_python_version_names_the_rule(stack, version):
    body = {"code": "1", "pythonVersion": version}
    status, error, _ = _call(api_event("POST", "/jobs", body=body))
    assert (status, error["error"]["field"]) == (400, "pythonVersion"), error
    assert "must be a Python 3 major.minor version such as 3.12" in error["error"]["message"], error


def test_array_items_given_twice_names_the_key(stack):
    body = {"code": "item", "arrayItems": [1, 2], "arrayItemsKey": "uploads/dev/x.jsonl"}
    status, error, _ = _call(api_event("POST", "/jobs", body=body))
    assert (status, error["error"]["field"]) == (400, "arrayItemsKey"), error
    assert error["error"]["message"] == "arrayItemsKey: Give arrayItems or arrayItemsKey, not both."
    assert stack.count_items("test-jobs") == 0


@pytest.mark.parametrize(
    ("multi", "field"),
    [
        ({"Authorization": ["Bearer a", "Bearer b"]}, "Authorization"),
        ({"Authorization": ["Bearer a"], "authorization": ["Bearer b"]}, "Authorization"),
        ({"Idempotency-Key": ["k1", "k2"]}, "Idempotency-Key"),
    ],
)
def test_a_header_that_must_come_once_sent_twice_is_refused_naming_it(stack, multi, field) -> None:
    from functions.handlers import api

    event = api_event("POST", "/jobs", body={"code": "1"})
    event["multiValueHeaders"] = {**event["multiValueHeaders"], **multi}
    event["headers"] = {**event["headers"], **{name: values[-1] for name, values in multi.items()}}

    response = api.handler(event, FakeLambdaContext())

    assert response["statusCode"] == 400
    assert json.loads(response["body"])["error"] == {
        "code": "ValidationError",
        "message": f"The {field} header is sent 2 times; send it once.",
        "field": field,
    }
    assert stack.count_items(stack.settings.jobs_table) == 0
