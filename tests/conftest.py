"""Shared fixtures. Unit tests reach no network (pytest-socket); integration tests run on moto."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

# Speed is measured by benchmarks, not asserted by tests (DEVELOPERS.md): hypothesis' per-example deadline
# (200 ms) is a timed assertion that fails on a loaded machine, so it is off; the example counts still
# bound each property test's run.
settings.register_profile("remote-batch", deadline=None)
settings.load_profile("remote-batch")

# No test may reach real AWS, whatever the machine's environment holds.
for _var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
    os.environ.pop(_var, None)
os.environ.update(
    {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
        "POWERTOOLS_SERVICE_NAME": "remote-batch",
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_METRICS_NAMESPACE": "RemoteBatch",
        "POWERTOOLS_DEV": "0",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
)


@pytest.fixture
def lambda_context():
    """A Lambda context object as powertools reads it."""
    from tests.fakes import FakeLambdaContext

    return FakeLambdaContext()
