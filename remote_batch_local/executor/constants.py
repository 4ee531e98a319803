"""The constants every part of the local executor shares, and its logger."""

from __future__ import annotations

import logging
from pathlib import Path

from functions.domain.log_lines import AWSLOGS_PART_BYTES
from functions.domain.machine_classes import GIB

# One logger for the whole package, by its public name (operators and tests filter on it).
logger = logging.getLogger("remote_batch_local.executor")

MIB = 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parents[2]  # remote_batch_local/executor/ -> the repository

# AWS Batch's statusReason texts for these endings.
REASON_CONTAINER_EXITED = "Essential container in task exited"
REASON_TIMEOUT = "Job attempt duration exceeded timeout"
SHUTDOWN_REASON = "Local stack stopped while the job ran"
SHUTDOWN_UNSTARTED_REASON = "Local stack stopped before the job ran"
# The statusReason of a job whose handling raised an unexpected error (followed by the error).
REASON_EXECUTOR_ERROR = "Local Batch executor error"

# AWS Batch's smallest attemptDurationSeconds (SubmitJob API reference, JobTimeout).
AWS_MIN_TIMEOUT_SECONDS = 60
# Seconds between SIGTERM and SIGKILL when a running job is terminated or times out.
KILL_GRACE_SECONDS = 2.0

# Log shipping: flush at least this often (s) or when a batch is full. PutLogEvents takes at most
# 10,000 events and 1,048,576 bytes per call counting 26 bytes per event, and 256 KiB per event
# (CloudWatch Logs API reference, PutLogEvents).
LOG_FLUSH_SECONDS = 0.2
LOG_BATCH_EVENTS = 10_000
LOG_BATCH_BYTES = 1_048_576
# The most console output held per job between its pipe and the log store (bytes, events' costs), and
# the size of one read from the pipe: the job's writes wait on its pipe beyond that.
LOG_BUFFER_BYTES = 4 * MIB
LOG_READ_BYTES = 64 * 1024
LOG_EVENT_OVERHEAD_BYTES = 26
# A longer line is shipped as several events of this many bytes, as Docker's awslogs driver does.
LOG_LINE_MAX_BYTES = AWSLOGS_PART_BYTES
LOG_PUT_ATTEMPTS = 3
# While CloudWatch Logs answers ServiceUnavailableException (the local stack's state disk is full) a
# job's batch is kept and tried again every LOG_UNAVAILABLE_RETRY_SECONDS; once the job exited, for at
# most LOG_CLOSE_WAIT_SECONDS more (its billed time already stopped) before what is left is dropped.
LOG_UNAVAILABLE_RETRY_SECONDS = 1.0
LOG_CLOSE_WAIT_SECONDS = 30.0
# How long to wait for the pipes to close after the worker exits (a daemonized grandchild may hold them).
READER_JOIN_SECONDS = 2.0
# The longest the scheduler sleeps at once: far-off deadlines are re-checked rather than waited for
# (Condition.wait overflows beyond threading.TIMEOUT_MAX), and a scheduler error is retried after 1 s.
MAX_WAIT_SECONDS = 3600.0
SCHEDULER_RETRY_SECONDS = 1.0
# How often (s) the scheduler, and a STARTING job's runner, look again at a state disk refusing writes
# (the disk's own probes are rate-limited to about as often: ``state_disk.PROBE_INTERVAL_SECONDS``).
DISK_RECHECK_SECONDS = 1.0
# Memory kept for the local stack itself: a job's address space is capped at the host's available
# memory at start less this share of its total (at least MEMORY_HEADROOM_MIN_MIB).
MEMORY_HEADROOM_FRACTION = 0.125
MEMORY_HEADROOM_MIN_MIB = 1024
MEMORY_FLOOR_MIB = 256
# The file (in the job's directory) the worker appends the details of its own errors to, named by this
# variable: they go to this process's log for the operator, never to the job's log.
OPERATOR_LOG_VARIABLE = "REMOTE_BATCH_OPERATOR_LOG"
OPERATOR_LOG_NAME = "worker-operator.log"
OPERATOR_LOG_MAX_BYTES = 64 * 1024

# How often (s) the files in a running job's working directory are measured against its output limit.
OUTPUT_CHECK_SECONDS = 1.0
# The limits of a job whose resources match no machine class (the Basic classes').
DEFAULT_LOG_LIMIT_BYTES = GIB
DEFAULT_OUTPUT_LIMIT_BYTES = 10 * GIB

QUEUED_STATUSES = frozenset({"SUBMITTED", "PENDING", "RUNNABLE"})
FINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED"})
