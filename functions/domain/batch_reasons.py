"""AWS Batch's own reasons for how an attempt ended, read as plain sentences.

A ``Batch Job State Change`` event (AWS Batch user guide, "Job state change events"; the ``detail``
resembles DescribeJobs' ``JobDetail``) carries reasons in four places: ``container.reason``,
``attempts[-1].container.reason``, ``attempts[-1].statusReason`` and the job's ``statusReason``.
The families below are the messages AWS documents for failed jobs and stopped ECS tasks (AWS Batch
user guide "Troubleshooting AWS Batch" and "Job retries" (``Host EC2*`` is how a reclaimed Spot or a
lost host shows); Amazon ECS developer guide "Stopped task error codes",
"CannotPullContainerError", "CannotStartContainerError", "ResourceInitializationError"; container
exit codes are 128 + the signal number, POSIX ``signal(7)``).

Every sentence here is a ``statusReason``: no trailing period (docs/http-api.md's examples have none), so a
message that adds one never ends in "..".
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Sequence
from enum import StrEnum

MAX_REASON = 1000
_TRAILING = re.compile(r"[\s.]+$")
_SPACES = re.compile(r"\s+")
_INSTANCE = re.compile(r"\b(i-[0-9a-f]{8,17})\b")
_SENTENCE_END = (".", "!", "?", "…")


def normalize_reason(text: str | None, limit: int = MAX_REASON) -> str | None:
    """One line, no trailing dots or spaces, at most ``limit`` characters; None for nothing.

    ``"Host EC2 (instance i-1) terminated."`` → ``"Host EC2 (instance i-1) terminated"``;
    ``"Waiting.  . "`` → ``"Waiting"``; ``"  "`` → None.
    """
    if text is None:
        return None
    flat = _TRAILING.sub("", _SPACES.sub(" ", str(text)).strip())
    if not flat:
        return None
    return _TRAILING.sub("", flat[:limit]) or flat[:limit]


def as_sentence(text: str) -> str:
    """``text`` ending with exactly one full stop (``"a."`` and ``"a"`` both give ``"a."``; a text
    ending in ``?``, ``!`` or ``…`` is kept as it is)."""
    flat = normalize_reason(text) or ""
    return flat if flat.endswith(_SENTENCE_END) else f"{flat}."


class ReasonFamily(StrEnum):
    """Kinds of AWS Batch / ECS reasons the service recognizes."""

    OUT_OF_MEMORY = "OutOfMemory"
    TIMEOUT = "Timeout"
    HOST_TERMINATED = "HostTerminated"
    SPOT_INTERRUPTED = "SpotInterrupted"
    CANNOT_PULL_CONTAINER = "CannotPullContainer"
    CANNOT_START_CONTAINER = "CannotStartContainer"
    CANNOT_CREATE_CONTAINER = "CannotCreateContainer"
    CANNOT_INSPECT_CONTAINER = "CannotInspectContainer"
    CANNOT_STOP_CONTAINER = "CannotStopContainer"
    RESOURCE_INITIALIZATION = "ResourceInitialization"
    TASK_FAILED_TO_START = "TaskFailedToStart"
    CONTAINER_EXITED = "ContainerExited"


# Most specific first: the first family any of a job's reasons belongs to is the one reported.
_FAMILIES: tuple[tuple[ReasonFamily, re.Pattern[str]], ...] = (
    (ReasonFamily.OUT_OF_MEMORY, re.compile(r"OutOfMemory|out of memory|memory usage|\bOOM\b", re.I)),
    (ReasonFamily.CANNOT_PULL_CONTAINER, re.compile(r"CannotPullContainer|CannotPullImageManifest", re.I)),
    (ReasonFamily.CANNOT_START_CONTAINER, re.compile(r"CannotStartContainer", re.I)),
    (ReasonFamily.CANNOT_CREATE_CONTAINER, re.compile(r"CannotCreateContainer", re.I)),
    (ReasonFamily.CANNOT_INSPECT_CONTAINER, re.compile(r"CannotInspectContainer|DockerTimeoutError", re.I)),
    (ReasonFamily.CANNOT_STOP_CONTAINER, re.compile(r"CannotStopContainer", re.I)),
    (ReasonFamily.RESOURCE_INITIALIZATION, re.compile(r"ResourceInitializationError", re.I)),
    (ReasonFamily.TIMEOUT, re.compile(r"attempt duration exceeded timeout", re.I)),
    (ReasonFamily.SPOT_INTERRUPTED, re.compile(r"\bspot\b.*\b(interrupt|reclaim|terminat)", re.I)),
    (
        ReasonFamily.HOST_TERMINATED,
        re.compile(
            r"Host EC2\b|\bEC2 instance\b.*\b(terminated|stopped|retired|lost)|"
            r"\binstance\b.*\b(was|has been) (terminated|stopped|retired)|TerminationNotice|"
            r"container instance.*(drain|deregister)",
            re.I,
        ),
    ),
    (ReasonFamily.TASK_FAILED_TO_START, re.compile(r"Task failed to start|TaskFailedToStart", re.I)),
    (ReasonFamily.CONTAINER_EXITED, re.compile(r"Essential container in task exited", re.I)),
)

# Attempts lost to infrastructure are free (docs/architecture.md "Credits"): the machine went away, or the
# service's own container could not be pulled, created, started or watched (the user supplies code,
# never an image, so none of these is the user's doing).
INFRASTRUCTURE_FAMILIES = frozenset(
    {
        ReasonFamily.HOST_TERMINATED,
        ReasonFamily.SPOT_INTERRUPTED,
        ReasonFamily.CANNOT_PULL_CONTAINER,
        ReasonFamily.CANNOT_START_CONTAINER,
        ReasonFamily.CANNOT_CREATE_CONTAINER,
        ReasonFamily.CANNOT_INSPECT_CONTAINER,
        ReasonFamily.RESOURCE_INITIALIZATION,
        ReasonFamily.TASK_FAILED_TO_START,
    }
)

NOT_CHARGED = "its running time was not charged"

# The ``statusReason`` of an attempt lost to a crash of the local stack (``kill -9``, a power cut): the
# local stack's host loss, worded as AWS Batch words one (``Host EC2 ...``) so that the same retry rule
# (``batch_retries``) and the same free charge apply to it.
LOCAL_HOST_LOST_REASON = "Host EC2 (local stack) terminated: the local stack stopped while the job ran"


def classify(reason: str | None) -> ReasonFamily | None:
    """The family of one raw reason, or None when it is none the service knows."""
    if not reason:
        return None
    for family, pattern in _FAMILIES:
        if pattern.search(reason):
            return family
    return None


def family_of(reasons: Iterable[str]) -> ReasonFamily | None:
    """The most specific family among a job's reasons (order of ``_FAMILIES``), or None."""
    found = {classify(r) for r in reasons} - {None}
    for family, _ in _FAMILIES:
        if family in found:
            return family
    return None


def raw_batch_reason(reasons: Sequence[str]) -> str | None:
    """What AWS Batch said, verbatim but on one line and without repeats, for support
    (``OutOfMemoryError: Container killed due to memory usage | Essential container in task exited``)."""
    seen: list[str] = []
    for reason in reasons:
        flat = _SPACES.sub(" ", reason).strip()
        if flat and flat not in seen:
            seen.append(flat)
    return " | ".join(seen)[:MAX_REASON] if seen else None


def memory_sentence(memory_gib: int) -> str:
    """``Memory limit of 8 GiB exceeded`` (docs/http-api.md's example)."""
    return f"Memory limit of {memory_gib} GiB exceeded"


#: What the signals a job commonly dies of mean, in a few words (POSIX ``signal(7)``).
_SIGNAL_MEANINGS = {
    signal.SIGSEGV: "segmentation fault",
    signal.SIGKILL: "stopped from outside, often for using too much memory",
    signal.SIGABRT: "aborted",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "arithmetic error",
    signal.SIGILL: "illegal instruction",
    signal.SIGTERM: "asked to stop",
    signal.SIGINT: "interrupted",
    signal.SIGHUP: "hang-up",
    signal.SIGPIPE: "broken pipe",
    signal.SIGXCPU: "CPU time limit exceeded",
}


def signal_sentence(number: int) -> str | None:
    """``Killed by signal SIGSEGV (segmentation fault)``, ``Killed by signal SIGUSR1``: what a
    process killed by signal ``number`` ended with; None for a number that is no signal here. The
    one wording of a death by signal, whether the worker saw it (the outcome's ``error.signal``) or
    only the container's exit code says it (128 + N)."""
    try:
        name = signal.Signals(number)
    except ValueError:
        return None
    meaning = _SIGNAL_MEANINGS.get(name)
    return f"Killed by signal {name.name} ({meaning})" if meaning else f"Killed by signal {name.name}"


def exit_code_sentence(exit_code: int) -> str:
    """What a container's exit code says: 128 + n → killed by the signal n (``signal_sentence``:
    137 SIGKILL, 139 SIGSEGV); otherwise the program's own ``Exited with code N``."""
    if 128 < exit_code < 128 + 65:
        sentence = signal_sentence(exit_code - 128)
        if sentence is not None:
            return sentence
    return f"Exited with code {exit_code}"


_RATE_LIMITED = re.compile(r"rate exceeded|throttl|toomanyrequests", re.I)
_FIXED_SENTENCES = {
    ReasonFamily.CANNOT_INSPECT_CONTAINER: (
        f"The machine running the job stopped answering (its container runtime timed out); {NOT_CHARGED}"
    ),
    ReasonFamily.CANNOT_STOP_CONTAINER: "AWS Batch could not stop the job's container cleanly",
    ReasonFamily.RESOURCE_INITIALIZATION: (
        f"AWS Batch could not prepare the job's resources (network, log or secret set-up); {NOT_CHARGED}"
    ),
    ReasonFamily.TASK_FAILED_TO_START: f"AWS Batch could not start the job; {NOT_CHARGED}",
}


def family_sentence(family: ReasonFamily, reasons: Sequence[str], memory_gib: int) -> str | None:
    """The plain sentence for a family (the timeout and a plain container exit are the caller's:
    they depend on the job's caps and exit code), or None."""
    text = " ".join(reasons)
    throttled = " (an AWS rate limit)" if _RATE_LIMITED.search(text) else ""
    if family is ReasonFamily.OUT_OF_MEMORY:
        return memory_sentence(memory_gib)
    if family is ReasonFamily.HOST_TERMINATED and LOCAL_HOST_LOST_REASON in text:
        return f"The local stack stopped while the job ran (its host was lost); {NOT_CHARGED}"
    if family in (ReasonFamily.HOST_TERMINATED, ReasonFamily.SPOT_INTERRUPTED):
        instance = _INSTANCE.search(text)
        what = "a Spot reclaim" if family is ReasonFamily.SPOT_INTERRUPTED else "the machine was shut down"
        on = f" (EC2 instance {instance.group(1)})" if instance else ""
        return f"AWS took away the machine running the job{on}: {what}; {NOT_CHARGED}"
    if family is ReasonFamily.CANNOT_PULL_CONTAINER:
        return f"The job's container image could not be downloaded{throttled}; {NOT_CHARGED}"
    if family in (ReasonFamily.CANNOT_START_CONTAINER, ReasonFamily.CANNOT_CREATE_CONTAINER):
        return f"AWS Batch could not start the job's container{throttled}; {NOT_CHARGED}"
    return _FIXED_SENTENCES.get(family)
