"""Issue 10 (Build 2, 5): a verbose job keeps the stack's memory and snapshot bounded, and the log and
output volume limits end a job with a clear reason.

The limits are scaled down by ``REMOTE_BATCH_LOG_LIMIT_BYTES`` / ``REMOTE_BATCH_OUTPUT_LIMIT_BYTES``
so the suite stays fast; ``python -m benchmarks.log_volume`` runs the same job at 1 GB against the
default 1 GiB limit.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest

from tests.e2e.conftest import Client, LocalStackProcess, _free_port
from tests.local_stack import StackSampler

MIB = 1024 * 1024
LOG_LIMIT = 48 * MIB
OUTPUT_LIMIT = 16 * MIB
# The stack may grow by at most this over its resting size while the job prints ~4× the log limit;
# before the log store, moto's copy alone took 3-5× the volume printed.
RSS_GROWTH_BOUND = 100 * MIB
SNAPSHOT_LAG_BOUND_SECONDS = 5.0

# ~200 MB of 100-byte lines, written 1 MB at a time.
PRINTER = """
import sys
block = ("x" * 99 + "\\n") * 10_000
for i in range(200):
    sys.stdout.write(block)
print("done")
"""

FILLER = """
import os, time
path = os.path.join(os.environ["REMOTE_BATCH_OUTPUT_DIR"], "big.bin")
with open(path, "wb") as out:
    for _ in range(32):
        out.write(b"\\0" * (1024 * 1024))
time.sleep(60)
"""


@pytest.fixture(scope="module")
def limited_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackProcess]:
    root = tmp_path_factory.mktemp("limited-stack")
    process = LocalStackProcess(
        root / "home",
        _free_port(),
        {
            "REMOTE_BATCH_LOG_LIMIT_BYTES": str(LOG_LIMIT),
            "REMOTE_BATCH_OUTPUT_LIMIT_BYTES": str(OUTPUT_LIMIT),
        },
    )
    process.start()
    # A first job loads the Lambdas and clients: the memory baseline is taken after it.
    warm = process.client("dev")
    warm_job = warm.submit({"code": "print('warm')"})
    assert warm.wait_status(warm_job["jobId"], timeout=30)["status"] == "Succeeded"
    yield process
    assert process.stop() == 0


@pytest.mark.slow
def test_a_job_printing_four_times_its_log_limit_is_ended_and_the_stack_stays_bounded(
    limited_stack: LocalStackProcess,
) -> None:
    dev: Client = limited_stack.client("dev")
    before = dev.balance()
    sampler = StackSampler(limited_stack)

    # When a Basic1x8 job prints ~200 MB against a 48 MiB log limit
    job = dev.submit({"code": PRINTER})
    done = dev.wait_status(job["jobId"], timeout=45)
    sampler.stop()

    # Then it is ended for its log volume, charged the 60 s minimum (1 credit) once
    assert done["status"] == "Terminated", done
    assert done["statusReason"] == "Log limit of 48 MiB exceeded"
    assert Decimal(str(done["creditsSpent"])) == Decimal("1")
    assert dev.balance() == before - Decimal("1")
    # and its log holds the lines printed up to the limit, in order
    page = dev.get(f"/jobs/{job['jobId']}/log").json()
    assert page["events"], page
    assert {event["message"] for event in page["events"]} == {"x" * 99}
    # and the stack's memory and snapshot stayed bounded while it printed
    growth = sampler.peak - sampler.baseline
    assert growth < RSS_GROWTH_BOUND, f"stack grew by {growth / MIB:.0f} MiB"
    assert sampler.max_lag < SNAPSHOT_LAG_BOUND_SECONDS, f"snapshot lag {sampler.max_lag:.1f} s"
    # and the log store holds exactly the limit's worth of lines: 48 MiB of 100-byte lines
    stored = sum(path.stat().st_size for path in (limited_stack.home / "logs").glob("*.log"))
    lines = LOG_LIMIT // 100
    assert stored >= lines * (99 + 20)


def test_a_job_filling_its_folder_past_the_output_limit_is_ended(limited_stack: LocalStackProcess) -> None:
    dev: Client = limited_stack.client("dev")

    # When a job writes 32 MiB of output files against a 16 MiB output limit, then waits
    job = dev.submit({"code": FILLER})
    done = dev.wait_status(job["jobId"], timeout=30)

    # Then it is ended within seconds with the output reason, charged the 60 s minimum
    assert done["status"] == "Terminated", done
    assert done["statusReason"] == "Output limit of 16 MiB exceeded"
    assert Decimal(str(done["creditsSpent"])) == Decimal("1")
