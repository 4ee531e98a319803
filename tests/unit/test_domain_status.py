"""The status machine: AWS Batch mapping, event ordering, statuses entered (docs/architecture.md "Status
machine")."""

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.domain.status import (
    BATCH_TO_JOB_STATUS,
    METERED_STATUSES,
    JobStatus,
    event_position,
    is_known_batch_status,
    statuses_between,
)

Q, ST, R, S, T = (
    JobStatus.QUEUED,
    JobStatus.STARTING,
    JobStatus.RUNNING,
    JobStatus.SUCCEEDED,
    JobStatus.TERMINATED,
)
BATCH_ORDER = ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING"]


@pytest.mark.parametrize(
    ("batch", "status"),
    [
        ("SUBMITTED", Q),
        ("PENDING", Q),
        ("RUNNABLE", Q),
        ("STARTING", ST),
        ("RUNNING", R),
        ("SUCCEEDED", S),
        ("FAILED", T),
    ],
)
def test_batch_status_mapping(batch, status):
    assert BATCH_TO_JOB_STATUS[batch] is status
    assert is_known_batch_status(batch)


def test_mapping_has_exactly_the_seven_batch_statuses():
    assert set(BATCH_TO_JOB_STATUS) == {*BATCH_ORDER, "SUCCEEDED", "FAILED"}


@pytest.mark.parametrize("batch", ["running", "UNKNOWN", "", "CANCELLED", "Succeeded"])
def test_unknown_batch_statuses_are_not_known(batch):
    assert not is_known_batch_status(batch)
    with pytest.raises(KeyError):
        event_position(0, batch)


def test_api_status_values():
    assert [s.value for s in JobStatus] == ["Queued", "Starting", "Running", "Succeeded", "Terminated"]


def test_final_statuses():
    assert {s for s in JobStatus if s.is_final} == {S, T}
    assert Q.rank < ST.rank < R.rank < S.rank == T.rank


def test_meter_watches_starting_and_running():
    assert frozenset({ST, R}) == METERED_STATUSES


def test_event_position_orders_statuses_within_an_attempt():
    positions = [event_position(0, b) for b in [*BATCH_ORDER, "SUCCEEDED"]]

    assert positions == sorted(positions)
    assert len(set(positions)) == len(positions)
    assert event_position(1, "SUCCEEDED") == event_position(1, "FAILED")


def test_a_retrys_runnable_comes_after_the_first_attempts_running():
    assert event_position(1, "RUNNABLE") > event_position(0, "RUNNING")
    assert event_position(0, "SUCCEEDED") > event_position(0, "RUNNING")


@given(
    st.integers(min_value=0, max_value=3),
    st.sampled_from(list(BATCH_TO_JOB_STATUS)),
    st.integers(min_value=0, max_value=3),
    st.sampled_from(list(BATCH_TO_JOB_STATUS)),
)
def test_event_position_is_lexicographic_in_attempt_then_status(a1, s1, a2, s2):
    # Batch retries at most 3 attempts, so attempt counts stay 0..3.
    order = [*BATCH_ORDER, "SUCCEEDED"]
    rank = {b: order.index(b) for b in order} | {"FAILED": order.index("SUCCEEDED")}

    assert (event_position(a1, s1) < event_position(a2, s2)) == ((a1, rank[s1]) < (a2, rank[s2]))


@pytest.mark.parametrize(
    ("current", "target", "ever_ran", "entered"),
    [
        (Q, S, True, [ST, R, S]),
        (Q, T, True, [ST, R, T]),
        (Q, T, False, [T]),
        (Q, S, False, [S]),
        (Q, ST, False, [ST]),
        (Q, R, True, [ST, R]),
        (ST, R, True, [R]),
        (ST, S, True, [R, S]),
        (ST, T, False, [T]),
        (R, S, True, [S]),
        (R, Q, True, [Q]),  # a retry enters Queued again
        (R, Q, False, [Q]),
        (ST, Q, False, [Q]),
        (Q, Q, False, []),
        (R, R, True, []),
        (S, S, True, []),
    ],
)
def test_statuses_between(current, target, ever_ran, entered):
    assert statuses_between(current, target, ever_ran) == entered


@pytest.mark.parametrize(("current", "target"), list(itertools.product(JobStatus, JobStatus)))
def test_statuses_between_ends_with_target_unless_unchanged(current, target):
    for ever_ran in (False, True):
        entered = statuses_between(current, target, ever_ran)
        if current == target:
            assert entered == []
        else:
            assert entered[-1] == target
            assert all(s.rank < target.rank for s in entered[:-1])
            assert [s.rank for s in entered] == sorted({s.rank for s in entered})
