"""``python -m remote_batch_local`` / ``remote-batch-local`` (``make dev``): run the whole service on this
machine. ``--help`` prints the options (``--home``, ``--port``, ``--version``) and starts nothing.

Variables: ``REMOTE_BATCH_HOME`` (state directory, default ``.remote-batch``), ``REMOTE_BATCH_PORT``
(default 8787), ``REMOTE_BATCH_METER_INTERVAL`` (seconds, default 60), ``REMOTE_BATCH_DUPLICATE_EVENTS=1``
(deliver every Batch event twice), ``REMOTE_BATCH_LOCAL_VCPUS`` (cap the vCPUs jobs use),
``REMOTE_BATCH_LOCAL_WARM_WORKERS`` (idle workers started ahead of jobs, default 2; 0: none).
Ctrl-C or SIGTERM stops it cleanly (running jobs are ended and settled, state is saved); a second
Ctrl-C exits at once.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import warnings
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from types import FrameType

from remote_batch_local.config import LocalConfig, LocalConfigError

logger = logging.getLogger("remote_batch_local")

FORCED_EXIT_CODE = 130


def _banner(endpoint: str, tokens: dict[str, str], credentials: Path, outbox: Path) -> str:
    return "\n".join(
        [
            "",
            f"remote-batch local stack at {endpoint}",
            f"  dev token:    {tokens['dev']}",
            f"  admin token:  {tokens['admin']}",
            f"  credentials:  {credentials}",
            f"  outbox:       {outbox}",
            "  try:",
            f"    curl -s -X POST {endpoint}/jobs -H 'Authorization: Bearer {tokens['dev']}' \\",
            "         -H 'Content-Type: application/json' -d '{\"code\": \"2 + 2\"}'",
            "  Ctrl-C stops it.",
            "",
        ]
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="remote-batch-local",
        description="Run the whole remote-batch service on this machine: the HTTP API at "
        "http://127.0.0.1:PORT on moto, with a local AWS Batch executor running the jobs. "
        "Ctrl-C or SIGTERM stops it cleanly (running jobs are ended and settled, state is saved); "
        "a second Ctrl-C exits at once.",
        epilog="Every other setting is a REMOTE_BATCH_* variable of the environment (meter and snapshot "
        "intervals, vCPUs, warm workers, log, output and process limits, rate limits, duplicate events): "
        "the README's table of them gives each one's meaning and default.",
    )
    parser.add_argument(
        "--home",
        help="state directory (REMOTE_BATCH_HOME; default .remote-batch in the working directory)",
    )
    parser.add_argument(
        "--port", help="HTTP port on 127.0.0.1, 0 for a free one (REMOTE_BATCH_PORT; default 8787)"
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    return parser


def _version() -> str:
    try:
        return metadata.version("remote-batch-local")
    except metadata.PackageNotFoundError:  # run from a checkout without the distribution installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the command line's; ``--help`` and ``--version`` exit with 0 here),
    start the stack, serve until SIGINT/SIGTERM, stop it; returns the exit code (2: bad configuration,
    1: the port is taken)."""
    arguments = _parser().parse_args(argv)
    environ = dict(os.environ)
    # An option wins over its variable; both go through LocalConfig's checks (a bad port is exit 2).
    if arguments.home is not None:
        environ["REMOTE_BATCH_HOME"] = arguments.home
    if arguments.port is not None:
        environ["REMOTE_BATCH_PORT"] = arguments.port
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    # boto3 announces every client it makes; only its problems belong on the console.
    logging.getLogger("botocore").setLevel(logging.WARNING)
    # The Lambdas' loggers take their service name when their modules are imported (below).
    os.environ.setdefault("POWERTOOLS_SERVICE_NAME", "remote-batch")
    # Metrics are off locally (no CloudWatch); Powertools still warns at each empty flush.
    warnings.filterwarnings("ignore", message="No application metrics to publish", category=UserWarning)
    try:
        config = LocalConfig.from_environment(environ, Path.cwd())
    except LocalConfigError as exc:
        logger.error("bad configuration: %s", exc)
        return 2

    stop_requested = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop_requested.is_set():
            # Second Ctrl-C: leave now. Workers die with us (PR_SET_PDEATHSIG).
            os._exit(FORCED_EXIT_CODE)
        logger.info("stop requested signal=%s", signal.Signals(signum).name)
        stop_requested.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    from remote_batch_local.stack import LocalStack, PortInUse
    from remote_batch_local.state_disk import StateDiskUnavailable

    stack = LocalStack(config)
    try:
        try:
            started = stack.start()
        except PortInUse as exc:
            logger.error("%s", exc)
            return 1
        except StateDiskUnavailable as exc:
            status = exc.status
            logger.error(
                "cannot start: the state disk is %s path=%s free_bytes=%d reserve_bytes=%d "
                "(REMOTE_BATCH_DISK_RESERVE_BYTES sets the reserve)",
                status.condition,
                status.path,
                status.free_bytes,
                status.reserve_bytes,
            )
            return 1
        print(
            _banner(started.endpoint, started.tokens, started.credentials_path, started.outbox_path),
            flush=True,
        )
        while not stop_requested.wait(1.0):
            pass
    finally:
        stack.stop()
    return 0


def exit_now(code: int) -> None:
    """End the process with ``code`` once ``main`` returned: flush the logs and the console, then
    ``os._exit``. By then ``LocalStack.stop`` wrote everything that is kept (the last snapshot, the
    journal closed); freeing a long run's heap object by object at interpreter exit would take tens
    of seconds on a busy machine (it grows with the jobs run), so it is left to the kernel."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
