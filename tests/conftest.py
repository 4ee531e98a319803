"""Shared fixtures. Unit tests reach no network (pytest-socket); integration tests run on moto."""

from __future__ import annotations

import os

import pytest

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
