"""Shared fixtures. Unit tests reach no network (pytest-socket); integration tests run on moto."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import botocore.loaders
import botocore.session
import pytest
from hypothesis import settings

from remote_batch_local import moto_keys, moto_transactions

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

# moto's serializer remembers, per shape, which keys of a dict it tries (remote_batch_local/moto_keys.py,
# as the local stack's moto does): finding the same keys again for every attribute value was about a
# third of a moto-bound test's time.
moto_keys.install()

# TransactWriteItems without moto's rollback copy of each whole table it touches: the local stack's own
# method (remote_batch_local/moto_transactions.py, the same results and errors as moto's, proven by
# tests/integration/test_local_moto_transactions.py, which picks either per test). A transaction cost
# time in the size of its tables: 300 held jobs were 300 copies of a growing jobs table. A test process
# that starts a local stack in-process installed it anyway, from then on; now every test runs on it.
moto_transactions.install()


@pytest.fixture
def lambda_context():
    """A Lambda context object as powertools reads it."""
    from tests.fakes import FakeLambdaContext

    return FakeLambdaContext()


# Each folder's marker (`-m unit`, `-m "not e2e"`): set here from the path, so that no file can lack it.
FOLDER_MARKERS = ("unit", "sdk", "integration", "infra", "e2e")
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its folder; check that ``MACHINE_WIDE`` names tests that exist."""
    modules: dict[str, object] = {}
    for item in items:
        path = item.path.relative_to(TESTS).as_posix()
        folder = path.split("/", 1)[0]
        if folder in FOLDER_MARKERS:
            item.add_marker(folder)
        if isinstance(item, pytest.Function):
            modules[path] = item.module
    # A renamed file or test would silently leave its group: each entry must name one that exists.
    stale = []
    for key in MACHINE_WIDE:
        path, _, function = key.partition("::")
        if not (TESTS / path).is_file() or (
            function and path in modules and not hasattr(modules[path], function)
        ):
            stale.append(key)
    if stale:
        raise pytest.UsageError(f"MACHINE_WIDE in tests/conftest.py names tests that are gone: {stale}")


# pytest-xdist (`make test`, `make check`: `-n auto --dist loadgroup`) sends the tests of one group to one
# worker, in order; any other test goes to whichever worker is free. The groups are given here, to the
# scheduler (`pytest_xdist_make_scheduler` below), rather than by `xdist_group` marks: pytest-xdist 3.8
# applies a mark by rewriting `item._nodeid`, which pytest 9.2 no longer reads (its node ids are structured),
# so marks group nothing. Three reasons make a group:
# - MACHINE: the tests that watch or load the whole machine, so that no two of them run at once (each
#   entry below says why); the other worker meanwhile runs tests that neither start nor count such
#   processes.
# - one group per other e2e file, and per file in MODULE_GROUPED: its module-scoped fixture (a local stack,
#   a built wheel) is made once; split over two workers it would be made twice. An e2e file's jobs are
#   then its own while it looks for their processes.
# - INFRA: the CDK app is synthesized once (a session fixture, ~30 s of a loaded core) for all of tests/infra.
MACHINE = "machine"
INFRA = "infra"
# Test file, or file::function, -> why it needs the machine to itself.
MACHINE_WIDE: dict[str, str] = {
    "integration/test_local_executor.py::test_escaped_processes_die_with_the_job_in_each_sandbox": (
        "counts `sleep 781` processes machine-wide; its two sandboxes' runs would count each other's"
    ),
    "integration/test_local_executor_warm.py::"
    "test_terminating_a_job_in_a_warm_worker_kills_what_it_started": "counts `sleep 785` processes",
    "integration/test_local_process_limit.py::"
    "test_a_fork_bomb_is_killed_at_the_process_limit_with_the_reason": "a fork bomb, its kill timed",
    "e2e/test_local_guards.py": "a fork bomb up to the process limit, then its leftover processes counted",
    "e2e/test_sandbox.py": "escaping processes counted as leftovers after an abort and after kill -9",
    "e2e/test_crash.py": "kill -9 of a stack's process group at random points, the restart timed",
    "e2e/test_restart.py": "kill -9 of the stack, its workers counted after the restart",
    "e2e/test_computes.py": "kill -9 of the stack's process group; an idle stop timed",
    "e2e/test_quotas.py": "a burst below the gateway's rate, jobs running two at a time under a quota",
    "e2e/test_fleet.py": "an account's request rate (429) and how many jobs run at once",
    "e2e/test_log_volume.py": "the stack's memory sampled while a job floods its log",
}
MODULE_GROUPED = {"sdk/test_client_wheel.py"}


def group_of(path: str, name: str) -> str | None:
    """The xdist group of the test ``name`` in ``path`` (relative to tests/), or None (any worker)."""
    function = name.split("[", 1)[0]
    if path in MACHINE_WIDE or f"{path}::{function}" in MACHINE_WIDE:
        return MACHINE
    if path.startswith("e2e/") or path in MODULE_GROUPED:
        return path.removesuffix(".py")
    if path.startswith("infra/"):
        return INFRA
    return None


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` with this file's groups (``group_of``) as its work units."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class Scheduling(LoadGroupScheduling):  # type: ignore[misc]  # (pytest-xdist ships no types)
        def _split_scope(self, nodeid: str) -> str:
            scope: str = super()._split_scope(nodeid)
            if scope != nodeid:  # an xdist_group mark, where pytest-xdist can still apply one
                return scope
            path, _, name = nodeid.partition("::")
            return group_of(path.removeprefix("tests/"), name) or nodeid

    return Scheduling(config, log)
