"""``python -m benchmarks``: run every benchmark in turn, each printing its own table."""

from __future__ import annotations

from benchmarks import array_map, array_meter, email_topics, journal_latency, meter_scaling

BENCHMARKS = (meter_scaling, email_topics, journal_latency, array_meter, array_map)


def main() -> None:
    """Run each benchmark with its default parameters."""
    for benchmark in BENCHMARKS:
        print(f"== {benchmark.__name__}", flush=True)
        benchmark.main([])


if __name__ == "__main__":
    main()
