"""A command job whose files become outputs: everything written under ``$REMOTE_BATCH_OUTPUT_DIR``.

    python examples/command_outputs.py [DOWNLOAD_DIR]

The job runs a shell pipeline (no Python needed in it), writes a CSV and a report, and the files are
downloaded into DOWNLOAD_DIR (default ``./outputs``), keeping their folders.
"""

from __future__ import annotations

import sys
from pathlib import Path

import remote_batch as rb

SCRIPT = r"""
set -eu
out="$REMOTE_BATCH_OUTPUT_DIR"
mkdir -p "$out/report"
echo "n,square" > "$out/squares.csv"
for n in $(seq 1 10); do echo "$n,$((n * n))" >> "$out/squares.csv"; done
echo "rows: $(($(wc -l < "$out/squares.csv") - 1))" > "$out/report/summary.txt"
echo "wrote $(ls -R "$out" | wc -l) entries"
"""


def main() -> None:
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "outputs")
    job = rb.submit(["sh", "-c", SCRIPT], name="squares-table")
    print(f"submitted {job.id}")
    job.wait()
    if job.status != "Succeeded":
        raise SystemExit(f"job {job.id} ended {job.status}: {job.status_reason}")
    print(job.log, end="")
    for output in job.outputs:
        print(f"output {output.name} ({output.size} bytes)")
    for path in job.download(target):
        print(f"downloaded {path}")
    print((target / "report" / "summary.txt").read_text(), end="")


if __name__ == "__main__":
    main()
