"""``python -m benchmarks`` (``make bench``): issue 14's performance table (``benchmarks.performance``),
written to ``benchmarks/results/latest.json`` and ``latest.md``, then issue 12's array benchmarks;
arguments go to the table (``--baseline REV`` measures that revision too, in the same run).
``python -m benchmarks --all`` then runs the older benchmarks with their default parameters (meter
scaling, email topics, journal latency: about 15 min)."""

from __future__ import annotations

import sys

from benchmarks import array_map, array_meter, email_topics, journal_latency, meter_scaling, performance

# Issue 12's array figures run with the performance table; the older benchmarks only with ``--all``.
ARRAY_BENCHMARKS = (array_meter, array_map)
OTHER_BENCHMARKS = (meter_scaling, email_topics, journal_latency)


def main(argv: list[str]) -> None:
    """Run the performance table and the array benchmarks, then (``--all``) every other benchmark."""
    run_all = "--all" in argv
    performance.main([a for a in argv if a != "--all"])
    for benchmark in ARRAY_BENCHMARKS:
        print(f"== {benchmark.__name__}", flush=True)
        benchmark.main([])
    if run_all:
        for benchmark in OTHER_BENCHMARKS:
            print(f"== {benchmark.__name__}", flush=True)
            benchmark.main([])


if __name__ == "__main__":
    main(sys.argv[1:])
