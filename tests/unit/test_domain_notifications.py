"""The ``notifications`` grammar (docs/http-api.md "Notifications") and which status notifications are due."""

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.domain.errors import ValidationFailed
from functions.domain.notifications import (
    AUTOMATIC_RULES,
    EventSpec,
    NotificationRule,
    due_status_notifications,
    normalize_notifications,
    rules_from_json,
    rules_to_json,
)
from functions.domain.status import JobStatus

Q, ST, R, S, T = (
    JobStatus.QUEUED,
    JobStatus.STARTING,
    JobStatus.RUNNING,
    JobStatus.SUCCEEDED,
    JobStatus.TERMINATED,
)
API_AUTOMATIC = [{"events": ["JobStarting", "JobCompleted", {"JobCreditsUsed": 20000}], "methods": ["Email"]}]
NAMED_EVENTS = [
    "JobStarting",
    "JobStarted",
    "JobCompleted",
    "JobSucceeded",
    "JobTerminated",
    "JobStatusChanged",
    "Hourly",
    "Daily",
]


@pytest.mark.parametrize("spec", [None, "Automatic"])
def test_automatic_is_api_md_default(spec):
    rules = normalize_notifications(spec)

    assert rules == AUTOMATIC_RULES
    assert rules_to_json(rules) == API_AUTOMATIC
    # An integer in JSON, not 20000.0
    assert type(rules_to_json(rules)[0]["events"][2]["JobCreditsUsed"]) is int


@pytest.mark.parametrize("spec", ["None", []])
def test_none_is_no_rules(spec):
    assert normalize_notifications(spec) == ()


@pytest.mark.parametrize("event", NAMED_EVENTS)
def test_one_event_name_is_an_email_rule(event):
    assert rules_to_json(normalize_notifications(event)) == [{"events": [event], "methods": ["Email"]}]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        (
            [{"events": ["JobStarted", "JobCompleted"], "methods": ["Email", "SMS"]}],
            [{"events": ["JobStarted", "JobCompleted"], "methods": ["Email", "SMS"]}],
        ),
        (
            [{"events": ["JobStarted"], "methods": ["SMS"]}, {"events": ["Daily"], "methods": ["Email"]}],
            [{"events": ["JobStarted"], "methods": ["SMS"]}, {"events": ["Daily"], "methods": ["Email"]}],
        ),
        # A lone rule object is a list of one.
        (
            {"events": ["JobCompleted"], "methods": ["SMS"]},
            [{"events": ["JobCompleted"], "methods": ["SMS"]}],
        ),
        # A lone event or method where a list is expected is a list of one.
        ([{"events": "JobCompleted", "methods": "SMS"}], [{"events": ["JobCompleted"], "methods": ["SMS"]}]),
        ([{"events": {"HoursElapsed": 2}}], [{"events": [{"HoursElapsed": 2}], "methods": ["Email"]}]),
        # Methods default to Email.
        ([{"events": ["Hourly"]}], [{"events": ["Hourly"], "methods": ["Email"]}]),
        (
            [{"events": [{"HoursElapsed": 2}, {"JobCreditsUsed": 20000}], "methods": ["Email"]}],
            [{"events": [{"HoursElapsed": 2}, {"JobCreditsUsed": 20000}], "methods": ["Email"]}],
        ),
        ([{"events": [{"HoursElapsed": 1.5}]}], [{"events": [{"HoursElapsed": 1.5}], "methods": ["Email"]}]),
        ([{"events": [{"HoursElapsed": "3"}]}], [{"events": [{"HoursElapsed": 3}], "methods": ["Email"]}]),
        (
            [{"events": [{"JobCreditsUsed": 0.5}]}],
            [{"events": [{"JobCreditsUsed": 0.5}], "methods": ["Email"]}],
        ),
        # Duplicates collapse, first occurrence first.
        (
            [{"events": ["JobCompleted"], "methods": ["SMS", "Email", "SMS", "Email"]}],
            [{"events": ["JobCompleted"], "methods": ["SMS", "Email"]}],
        ),
        (
            [{"events": ["Daily", "Hourly", "Daily", {"HoursElapsed": 2}, {"HoursElapsed": 2.0}]}],
            [{"events": ["Daily", "Hourly", {"HoursElapsed": 2}], "methods": ["Email"]}],
        ),
    ],
)
def test_normalized_forms(spec, expected):
    assert rules_to_json(normalize_notifications(spec)) == expected


def test_parameters_are_decimals():
    (rule,) = normalize_notifications([{"events": [{"HoursElapsed": 2}, {"JobCreditsUsed": 0.5}]}])

    assert rule.events == (EventSpec("HoursElapsed", Decimal(2)), EventSpec("JobCreditsUsed", Decimal("0.5")))
    assert all(isinstance(e.parameter, Decimal) for e in rule.events)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ([{"events": ["JobStarted", "JobExploded"], "methods": ["Email"]}], "notifications[0].events[1]"),
        ([{"events": ["JobStarted"]}, {"events": ["Weekly"]}], "notifications[1].events[0]"),
        ([{"events": ["jobstarted"]}], "notifications[0].events[0]"),
        ([{"events": ["JobStarted"], "methods": ["Pigeon"]}], "notifications[0].methods[0]"),
        ([{"events": ["JobStarted"], "methods": ["Email", "email"]}], "notifications[0].methods[1]"),
        ([{"events": ["JobStarted"], "methods": [["Email"]]}], "notifications[0].methods[0]"),
        ([{"events": [{"HoursElapsed": 0}]}], "notifications[0].events[0].HoursElapsed"),
        ([{"events": [{"HoursElapsed": -1}]}], "notifications[0].events[0].HoursElapsed"),
        ([{"events": ["Daily", {"JobCreditsUsed": -5}]}], "notifications[0].events[1].JobCreditsUsed"),
        ([{"events": [{"JobCreditsUsed": 0.0}]}], "notifications[0].events[0].JobCreditsUsed"),
        ([{"events": [{"HoursElapsed": True}]}], "notifications[0].events[0].HoursElapsed"),
        ([{"events": [{"HoursElapsed": False}]}], "notifications[0].events[0].HoursElapsed"),
        ([{"events": [{"HoursElapsed": None}]}], "notifications[0].events[0].HoursElapsed"),
        ([{"events": [{"HoursElapsed": "two"}]}], "notifications[0].events[0].HoursElapsed"),
        ([{"events": [{"HoursElapsed": "NaN"}]}], "notifications[0].events[0].HoursElapsed"),
        ([{"events": [{"HoursElapsed": float("inf")}]}], "notifications[0].events[0].HoursElapsed"),
        ([{"events": [{"HoursElapsed": [2]}]}], "notifications[0].events[0].HoursElapsed"),
        ([{"events": ["HoursElapsed"]}], "notifications[0].events[0]"),
        ([{"events": ["JobCreditsUsed"]}], "notifications[0].events[0]"),
        ("HoursElapsed", "notifications"),
        ([{"events": [{"Hourly": 2}]}], "notifications[0].events[0]"),
        ([{"events": [{"HoursElapsed": 2, "JobCreditsUsed": 5}]}], "notifications[0].events[0]"),
        ([{"events": [{}]}], "notifications[0].events[0]"),
        ([{"events": [3]}], "notifications[0].events[0]"),
        (["JobCompleted"], "notifications[0]"),
        ([{"events": ["Daily"]}, 7], "notifications[1]"),
        ([{"events": ["Daily"], "method": ["Email"]}], "notifications[0].method"),
        ([{"events": ["Daily"], "methods": ["Email"], "when": "now"}], "notifications[0].when"),
        ({"HoursElapsed": 2}, "notifications[0].HoursElapsed"),
        ([{"events": []}], "notifications[0].events"),
        ([{"methods": ["Email"]}], "notifications[0].events"),
        ([{"events": ["Daily"], "methods": []}], "notifications[0].methods"),
        ("JobExploded", "notifications"),
        ("automatic", "notifications"),
        (5, "notifications"),
        (True, "notifications"),
        (2.5, "notifications"),
    ],
)
def test_invalid_specs_name_the_offending_field(spec, field):
    with pytest.raises(ValidationFailed) as caught:
        normalize_notifications(spec)

    assert caught.value.field == field
    assert caught.value.message


def test_unknown_event_message_lists_valid_events():
    with pytest.raises(ValidationFailed) as caught:
        normalize_notifications("JobExploded")

    for event in [*NAMED_EVENTS, "HoursElapsed", "JobCreditsUsed"]:
        assert event in caught.value.message


def test_field_prefix_is_the_callers_path():
    with pytest.raises(ValidationFailed) as caught:
        normalize_notifications([{"events": ["Nope"]}], field="body.notifications")

    assert caught.value.field == "body.notifications[0].events[0]"


event_json = st.sampled_from(NAMED_EVENTS) | st.builds(
    lambda name, n: {name: n},
    st.sampled_from(["HoursElapsed", "JobCreditsUsed"]),
    st.integers(min_value=1, max_value=10**9)
    # Parameters take at most 4 decimal places, like credits.
    | st.decimals(min_value=Decimal("0.0001"), max_value=10**9, places=4, allow_nan=False).map(float),
)
rule_json = st.fixed_dictionaries(
    {
        "events": st.lists(event_json, min_size=1, max_size=5),
        "methods": st.lists(st.sampled_from(["Email", "SMS"]), min_size=1, max_size=3),
    }
)


@given(st.lists(rule_json, max_size=4))
def test_rules_json_round_trip(spec):
    rules = normalize_notifications(spec)

    stored = rules_to_json(rules)

    assert rules_from_json(stored) == rules
    assert rules_to_json(rules_from_json(stored)) == stored
    assert normalize_notifications(stored) == rules


def test_rules_from_empty_json_is_no_rules():
    assert rules_from_json([]) == ()


def test_automatic_rules_for_a_job_that_succeeded():
    due = due_status_notifications(AUTOMATIC_RULES, [Q, ST, R, S])

    assert [(d.key, d.event, d.method, d.status, d.occurrence) for d in due] == [
        ("JobStarting#1/Email", "JobStarting", "Email", ST, 1),
        ("JobCompleted#3/Email", "JobCompleted", "Email", S, 3),
    ]


def test_status_changed_by_email_and_sms_is_one_per_status_entered_per_method():
    rules = normalize_notifications([{"events": ["JobStatusChanged"], "methods": ["Email", "SMS"]}])

    due = due_status_notifications(rules, [Q, ST, R, T])

    assert [d.key for d in due] == [
        "JobStatusChanged#1/Email",
        "JobStatusChanged#1/SMS",
        "JobStatusChanged#2/Email",
        "JobStatusChanged#2/SMS",
        "JobStatusChanged#3/Email",
        "JobStatusChanged#3/SMS",
    ]
    assert [d.status for d in due] == [ST, ST, R, R, T, T]


def test_submission_queued_fires_nothing():
    rules = normalize_notifications([{"events": ["JobStatusChanged"], "methods": ["Email"]}])

    assert due_status_notifications(rules, [Q]) == []
    assert due_status_notifications(rules, []) == []


@pytest.mark.parametrize(
    ("event", "final", "fires"),
    [
        ("JobSucceeded", S, True),
        ("JobSucceeded", T, False),
        ("JobTerminated", T, True),
        ("JobTerminated", S, False),
        ("JobCompleted", S, True),
        ("JobCompleted", T, True),
        ("JobStarted", S, False),
        ("Hourly", S, False),
        ("Daily", T, False),
    ],
)
def test_final_status_events(event, final, fires):
    due = due_status_notifications(normalize_notifications(event), [Q, final])

    assert [d.key for d in due] == ([f"{event}#1/Email"] if fires else [])


def test_periodic_and_parameterized_events_are_not_status_notifications():
    rules = normalize_notifications(
        [{"events": ["Hourly", "Daily", {"HoursElapsed": 1}, {"JobCreditsUsed": 5}], "methods": ["SMS"]}]
    )

    assert due_status_notifications(rules, [Q, ST, R, Q, ST, R, S]) == []


def test_same_event_in_two_rules_is_owed_once_per_method():
    rules = normalize_notifications(
        [
            {"events": ["JobCompleted"], "methods": ["Email"]},
            {"events": ["JobCompleted", "JobStarted"], "methods": ["Email", "SMS"]},
        ]
    )

    due = due_status_notifications(rules, [Q, ST, R, S])

    assert [d.key for d in due] == [
        "JobStarted#2/Email",
        "JobStarted#2/SMS",
        "JobCompleted#3/Email",
        "JobCompleted#3/SMS",
    ]


def test_a_retry_gives_new_occurrences():
    rules = normalize_notifications(
        [{"events": ["JobStarting", "JobStarted", "JobStatusChanged", "JobCompleted"], "methods": ["Email"]}]
    )
    history = [Q, ST, R, Q, ST, R, T]

    due = due_status_notifications(rules, history)

    keys = [d.key for d in due]
    assert len(keys) == len(set(keys))
    assert [k for k in keys if k.startswith("JobStarting")] == ["JobStarting#1/Email", "JobStarting#4/Email"]
    assert [k for k in keys if k.startswith("JobStarted")] == ["JobStarted#2/Email", "JobStarted#5/Email"]
    assert [k for k in keys if k.startswith("JobStatusChanged")] == [
        f"JobStatusChanged#{i}/Email" for i in range(1, 7)
    ]
    assert [k for k in keys if k.startswith("JobCompleted")] == ["JobCompleted#6/Email"]
    assert [d.occurrence for d in due] == sorted(d.occurrence for d in due)


histories = st.lists(st.sampled_from(list(JobStatus)), max_size=10).map(lambda rest: [Q, *rest])


@given(st.lists(rule_json, max_size=4), histories)
def test_due_keys_are_unique_and_describe_themselves(spec, history):
    rules = normalize_notifications(spec)

    due = due_status_notifications(rules, history)

    assert len({d.key for d in due}) == len(due)
    for d in due:
        assert d.key == f"{d.event}#{d.occurrence}/{d.method}"
        assert history[d.occurrence] == d.status
        assert d.occurrence >= 1
        assert any(d.method in r.methods and EventSpec(d.event) in r.events for r in rules)


def test_rule_json_shape():
    rule = NotificationRule(events=(EventSpec("JobCreditsUsed", Decimal("12.50")),), methods=("SMS",))

    assert rule.to_json() == {"events": [{"JobCreditsUsed": 12.5}], "methods": ["SMS"]}


@pytest.mark.parametrize("value", [0.00001, 1.23456, 10**11])
def test_parameters_take_at_most_4_decimal_places_and_stay_bounded(value):
    with pytest.raises(ValidationFailed) as caught:
        normalize_notifications([{"events": [{"JobCreditsUsed": value}]}])
    assert caught.value.field == "notifications[0].events[0].JobCreditsUsed"
