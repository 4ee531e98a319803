"""Shared fixtures. Unit tests reach no network (pytest-socket); integration tests run on moto."""

from __future__ import annotations

import os

import botocore.loaders
import botocore.session
import pytest
from hypothesis import settings

# Speed is measured by benchmarks, not asserted by tests (DEVELOPERS.md): hypothesis' per-example deadline
# (200 ms) is a timed assertion that fails on a loaded machine, so it is off; the example counts still
# bound each property test's run.
settings.register_profile("remote-batch", deadline=None)
settings.load_profile("remote-batch")

# One BLAS/OpenMP thread per process (numpy, scikit-learn: the worker tests and the jobs of the local
# stack, which inherits this environment). Their default, a thread per core, spins on a 2-core machine
# that pytest, moto and the jobs already share: a 1-second scikit-learn fit took 4 s, and 20 s on a loaded
# machine. The results are the same; a variable set by the caller is kept.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

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


# One botocore data loader per data path for the whole test process. botocore gives every new Session a
# new Loader, which parses the endpoint rules and each service's model JSON again (about 0.1 s a
# client); moto's ``mock_aws`` starts every test on a fresh default session, and each moto stack builds
# its own Session, so each integration test paid about 0.7 s of JSON parsing before it ran (and ~2 s on
# a loaded machine). The files are read-only data shipped with botocore: sharing their parsed form is
# what one Session already does for all of its clients. The product's own Lambdas build one Session
# per cold start, so nothing here changes what they do.
_LOADERS: dict[str | None, botocore.loaders.Loader] = {}
_create_loader = botocore.loaders.create_loader


def _shared_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
    """``botocore.loaders.create_loader``, memoized on the search path (``AWS_DATA_PATH``)."""
    loader = _LOADERS.get(search_path_string)
    if loader is None:
        loader = _LOADERS[search_path_string] = _create_loader(search_path_string)
    return loader


botocore.session.create_loader = _shared_loader


@pytest.fixture
def lambda_context():
    """A Lambda context object as powertools reads it."""
    from tests.fakes import FakeLambdaContext

    return FakeLambdaContext()
