"""The cloud build's pure parts: the request and outcome documents, the build job's tags and name, and
the outcome of a build job that wrote none."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.environment_builds import (
    BUILD_TAG_KEYS,
    MalformedOutcome,
    build_job_name,
    build_tag_values,
    build_tags,
    outcome_from_document,
    outcome_without_document,
    request_document,
)
from functions.domain.environments import EnvironmentSpec, Package

DIGEST = "0123456789abcdef" * 4


def _outcome(**fields: Any) -> dict[str, Any]:
    return {
        "format": "remote-batch.build-outcome/1",
        "hash": DIGEST,
        "packages": [],
        "sizeBytes": 0,
        "error": None,
        **fields,
    }


def test_a_built_outcome_reads_its_lock_and_size() -> None:
    outcome = outcome_from_document(_outcome(packages=[{"name": "six", "version": "1.16.0"}], sizeBytes=7))

    assert (outcome.hash, outcome.packages, outcome.size_bytes, outcome.error) == (
        DIGEST,
        (Package("six", "1.16.0"),),
        7,
        None,
    )


def test_a_failed_outcome_keeps_one_line_of_its_error() -> None:
    outcome = outcome_from_document(_outcome(hash=None, error="No solution\n  found " + "x" * 2000))

    assert outcome.hash is None and outcome.error is not None
    assert outcome.error.startswith("No solution found x") and len(outcome.error) == 1000


@pytest.mark.parametrize(
    "document",
    [
        None,
        [],
        {"format": "other"},
        _outcome(hash="ABC"),
        _outcome(sizeBytes=-1),
        _outcome(sizeBytes=True),
        _outcome(packages=[{"name": "six"}]),
        _outcome(packages="six"),
        _outcome(error=""),
        _outcome(error=3),
    ],
    ids=repr,
)
def test_anything_else_is_malformed(document: Any) -> None:
    with pytest.raises(MalformedOutcome):
        outcome_from_document(document)


def test_a_build_without_outcome_names_the_time_limit_or_batchs_reason() -> None:
    assert outcome_without_document("Job attempt duration exceeded timeout").error == (
        "the build took longer than its time limit of 30 minutes"
    )
    assert outcome_without_document("Host EC2 (instance i-1) terminated.").error == (
        "the build job failed: Host EC2 (instance i-1) terminated."
    )
    assert outcome_without_document(None).error == "the build job failed: no reason given by AWS Batch"


def test_tags_name_a_build_only_when_all_are_there() -> None:
    tags = build_tag_values("alice", "ml", "f" * 64, "b" * 32, "environments/alice/ml/x")

    assert tuple(tags) == BUILD_TAG_KEYS
    parsed = build_tags(tags)
    assert parsed is not None
    assert (parsed.account_id, parsed.name, parsed.spec_hash, parsed.build_id, parsed.log_stream_name) == (
        "alice",
        "ml",
        "f" * 64,
        "b" * 32,
        "environments/alice/ml/x",
    )
    assert build_tags({**tags, "remote-batch:buildId": ""}) is None
    assert build_tags({"remote-batch:jobId": "job-1", "remote-batch:accountId": "alice"}) is None
    # An unnamed environment's build: an empty name.
    unnamed = build_tags(build_tag_values("alice", None, "f" * 64, "b" * 32, "environments/alice/s/x"))
    assert unnamed is not None and unnamed.name is None


def test_the_job_name_fits_batchs_name_rules_whatever_the_environments_name() -> None:
    name = build_job_name("c" * 64)

    assert name == "environment-build-" + "c" * 32 and len(name) <= 128


def test_the_request_carries_the_spec_as_checked() -> None:
    spec = EnvironmentSpec(
        python="3.12",
        requirements=("six==1.16.0",),
        index_url="https://i.example",
        extra_index_urls=("https://x.example",),
    )

    assert request_document(spec) == {
        "format": "remote-batch.build-request/1",
        "python": "3.12",
        "requirements": ["six==1.16.0"],
        "indexUrl": "https://i.example",
        "extraIndexUrls": ["https://x.example"],
    }
