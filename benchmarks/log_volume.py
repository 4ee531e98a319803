"""Does the local stack stay bounded while one job prints a gigabyte? (issue 10, "Done when")

Starts ``python -m remote_batch_local`` in a temporary home, runs a warm-up job (so the Lambdas and
clients are loaded before the baseline is taken), then a Basic1x8 ``code`` job writing ``--megabytes``
MB of 100-byte lines to stdout, 1 MB at a time. While it runs, every 0.1 s it samples the stack
process's RSS (psutil; the job's own processes are not the stack's) and the age of
``state/snapshot.json`` (the snapshot lag). At the end it prints the stack's peak RSS over its
baseline, the largest snapshot lag, the job's status, ``statusReason``, ``creditsSpent`` and
running time, and the bytes in the log store.

With the default 1 GiB log limit of the Basic classes, a 1,100 MB job is ended at the limit with
``Log limit of 1 GiB exceeded``; ``--megabytes 1000`` stays just under it and succeeds.

Run by hand: ``python -m benchmarks.log_volume [--megabytes 1100] [--log-limit BYTES]``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from tests.local_stack import LocalStackProcess, StackSampler, free_port

MIB = 1024 * 1024

PRINTER = """
import sys
block = ("x" * 99 + "\\n") * 10_000
for i in range({blocks}):
    sys.stdout.write(block)
print("done")
"""


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=1100, help="MB the job prints (default 1100)")
    parser.add_argument("--log-limit", type=int, default=None, help="REMOTE_BATCH_LOG_LIMIT_BYTES")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the job")
    args = parser.parse_args(argv)
    extra = {} if args.log_limit is None else {"REMOTE_BATCH_LOG_LIMIT_BYTES": str(args.log_limit)}
    # The stack's own meter interval (60 s) and a 5-second snapshot, as a user runs it.
    extra = {"REMOTE_BATCH_METER_INTERVAL": "60", "REMOTE_BATCH_SNAPSHOT_INTERVAL": "5", **extra}
    with tempfile.TemporaryDirectory(prefix="log-volume-") as tmp:
        stack = LocalStackProcess(Path(tmp) / "home", free_port(), extra)
        stack.start()
        try:
            dev = stack.client("dev")
            dev.wait_status(dev.submit({"code": "print('warm')"})["jobId"], timeout=60)
            sampler = StackSampler(stack)
            started = time.monotonic()
            job_id = dev.submit({"code": PRINTER.format(blocks=args.megabytes)})["jobId"]
            job = dev.wait_status(job_id, timeout=args.timeout)
            wall = time.monotonic() - started
            sampler.stop()
            stored = sum(p.stat().st_size for p in (stack.home / "logs").glob("*.log"))
            print(f"job printed (asked)   {args.megabytes} MB in 100-byte lines")
            print(f"status                {job['status']}")
            print(f"statusReason          {job['statusReason']}")
            print(f"creditsSpent          {job['creditsSpent']}")
            print(f"startedAt..completed  {job['startedAt']} .. {job['completedAt']}")
            print(f"wall time to final    {wall:.1f} s")
            print(f"stack RSS baseline    {sampler.baseline / MIB:.0f} MiB")
            print(
                f"stack RSS peak        {sampler.peak / MIB:.0f} MiB "
                f"(+{(sampler.peak - sampler.baseline) / MIB:.0f})"
            )
            print(f"max snapshot lag      {sampler.max_lag:.1f} s (interval 5 s)")
            print(f"log store on disk     {stored / MIB:.0f} MiB")
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
