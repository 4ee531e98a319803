"""The local stack's notifier: SNS (moto) as deployed, plus a console line and ``outbox.jsonl``.

moto keeps what is published but delivers nothing, so a person running ``make dev`` would never
see a notification; the outbox is their mailbox. Each line of ``<home>/outbox.jsonl`` is one
delivered message: ``{"jobId", "event", "method", "to", "subject", "message", "at"}``.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from contextlib import nullcontext
from datetime import UTC
from pathlib import Path

from functions.domain.errors import DependencyFailed
from functions.ports import Notifier, OutgoingNotification
from remote_batch_local.files import append_line
from remote_batch_local.state_disk import StateDisk, StateDiskUnavailable

logger = logging.getLogger(__name__)


def mask_address(address: str) -> str:
    """``dev@example.com`` → ``d***@example.com``; ``+15555550100`` → ``+1*******00``."""
    if "@" in address:
        local, _, domain = address.partition("@")
        return f"{local[:1]}***@{domain}"
    if len(address) <= 4:
        return "*" * len(address)
    return address[:2] + "*" * (len(address) - 4) + address[-2:]


class OutboxNotifier:
    """``Notifier`` that publishes through ``inner`` (SNS on moto), then shows the message locally.

    Only a message SNS accepted reaches the console and the outbox; when ``inner`` raises, so does
    ``send`` (the caller releases its claim and may retry). Appends are serialized, one line each.

    Parameters
    ----------
    inner : Notifier
        The deployed notifier (``SnsNotifier``).
    path : Path
        The outbox file (created 0600 on first use).
    echo : Callable[[str], None]
        Where the one-line console notice goes (default ``print``).
    disk : StateDisk | None
        The home's filesystem. While it refuses writes nothing is published (``send`` raises
        ``DependencyFailed``: the caller releases its claim and retries later, none is lost); a line
        it refuses after SNS accepted the message is logged (SNS has the message; only the local copy
        is missing).
    """

    def __init__(
        self,
        inner: Notifier,
        path: Path,
        echo: Callable[[str], None] | None = None,
        disk: StateDisk | None = None,
    ) -> None:
        self._inner = inner
        self._path = path
        self._echo = echo or _print
        self._disk = disk
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        """The outbox file."""
        return self._path

    def send(self, notification: OutgoingNotification) -> None:
        """Publish, then print and append one outbox line. Raises what ``inner.send`` raises, and
        ``DependencyFailed`` before publishing while the disk refuses writes."""
        if self._disk is not None:
            try:
                self._disk.check()
            except StateDiskUnavailable as refused:
                raise DependencyFailed(str(refused)) from refused
        self._inner.send(notification)
        line = json.dumps(
            {
                "jobId": notification.job_id,
                "event": notification.event,
                "method": notification.method,
                "to": notification.to,
                "subject": notification.subject,
                "message": notification.message,
                "at": notification.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
            ensure_ascii=False,
        )
        with self._lock:
            try:
                with self._disk.writing() if self._disk is not None else nullcontext():
                    append_line(self._path, (line + "\n").encode("utf-8"))
            except StateDiskUnavailable as refused:
                logger.error(
                    "outbox line not written job_id=%s event=%s error=%s",
                    notification.job_id,
                    notification.event,
                    refused,
                )
            self._echo(
                f"notify {notification.method} to {mask_address(notification.to)}: {notification.subject}"
            )


def _print(text: str) -> None:
    print(text, flush=True)
