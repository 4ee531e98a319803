"""``python -m benchmarks`` (``make bench``): issue 14's performance table (``benchmarks.performance``),
written to ``benchmarks/results/latest.json`` and ``latest.md``; arguments go to it (``--baseline REV``
measures that revision too, in the same run); then issue 26's table (``benchmarks.maps``: the 1,000-item
map against a round trip, its credits, DynamoDB requests per item, the 200-job burst), written to
``maps.json`` and ``maps.md``, with its 10,000-item map under ``--all``. ``python -m benchmarks --all``
then runs the older benchmarks with their default parameters (meter scaling, email topics, journal
latency, the array meter tick and the 2,000-item array map: about an hour on a busy 2-core machine)."""

from __future__ import annotations

import sys

from benchmarks import (
    array_map,
    array_meter,
    email_topics,
    journal_latency,
    maps,
    meter_scaling,
    performance,
)

OTHER_BENCHMARKS = (meter_scaling, email_topics, journal_latency, array_meter, array_map)


def main(argv: list[str]) -> None:
    """Run the performance table and issue 26's, then (``--all``) every other benchmark."""
    run_all = "--all" in argv
    performance.main([a for a in argv if a != "--all"])
    print("== benchmarks.maps (issue 26)", flush=True)
    maps.main(["--all"] if run_all else [])
    if run_all:
        for benchmark in OTHER_BENCHMARKS:
            print(f"== {benchmark.__name__}", flush=True)
            benchmark.main([])


if __name__ == "__main__":
    main(sys.argv[1:])
