"""``python -m worker``: the job container's entrypoint.

``python -m worker build`` is an environment's build instead (``worker.build``: its variables are
there).

Reads ``REMOTE_BATCH_JOB_ID``, ``REMOTE_BATCH_BUCKET``, ``REMOTE_BATCH_INPUT_KEY``,
``REMOTE_BATCH_OUTPUT_PREFIX`` and optionally ``REMOTE_BATCH_MEMORY_GIB`` from the environment; AWS
region, credentials and endpoint come from the usual boto3 variables. Takes no arguments.
Exit codes: 0 success, 1 the code raised, N the code's ``SystemExit(N)`` or the command's own exit
code (127: command not found), 2 the worker could not run the job.
"""

import contextlib
import os
import sys

from worker.entrypoint import main


def _line_buffered() -> None:
    """Make each printed line reach the log as it is printed, even without ``PYTHONUNBUFFERED``."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)


if __name__ == "__main__":
    if sys.argv[1:] in (["-h"], ["--help"]):
        print(__doc__)
        sys.exit(0)
    _line_buffered()
    if sys.argv[1:] == ["build"]:
        from worker.build import main as build

        exit_code = build()
    else:
        exit_code = main()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError):
            stream.flush()
    # os._exit, not sys.exit: a thread the user's code left running must not keep the container
    # (and its bill) alive after the outputs are uploaded.
    os._exit(exit_code & 0xFF)
