"""``python -m benchmarks``: run every benchmark in turn, each printing its own table."""

from __future__ import annotations

from benchmarks import email_topics, journal_latency, meter_scaling

BENCHMARKS = (meter_scaling, email_topics, journal_latency)


def main() -> None:
    """Run each benchmark with its default parameters."""
    for benchmark in BENCHMARKS:
        print(f"== {benchmark.__name__}", flush=True)
        benchmark.main([])


if __name__ == "__main__":
    main()
