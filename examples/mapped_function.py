"""One function over many inputs: ``rb.map`` makes one array job with a child per item.

    python examples/mapped_function.py

Each child computes the Collatz stopping time of its number; ``result()`` is the list in input order.
"""

from __future__ import annotations

import remote_batch as rb


def collatz_steps(n: int) -> int:
    """Steps of the 3n + 1 map from ``n`` down to 1."""
    steps = 0
    while n != 1:
        n = 3 * n + 1 if n % 2 else n // 2
        steps += 1
    return steps


def main() -> None:
    numbers = list(range(1, 21))
    job = rb.map(collatz_steps, numbers, name="collatz")
    print(f"submitted array job {job.id} with {len(numbers)} children")
    steps = job.result()
    longest = max(zip(steps, numbers, strict=True))
    print(f"steps: {steps}")
    print(f"longest: {longest[1]} takes {longest[0]} steps (checked locally: {collatz_steps(longest[1])})")
    print(f"credits spent: {job.refresh().credits_spent}")


if __name__ == "__main__":
    main()
