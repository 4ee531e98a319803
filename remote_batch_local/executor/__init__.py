"""A stand-in for AWS Batch compute: runs each job's worker in a subprocess on this host.

``LocalBatchExecutor.gateway(region, log_group)`` gives one ``BatchGateway`` per geo zone; all share
the host's vCPUs. A job goes PENDING → RUNNABLE → (FIFO, when enough vCPUs are free) STARTING →
RUNNING → SUCCEEDED | FAILED, and each transition is published once, in order, as a real-shaped
``Batch Job State Change`` event (AWS sends none for SUBMITTED). The worker runs with the machine
class's limits, cut to the host's: CPU affinity, an address-space limit, the Batch timeout
(``attemptDurationSeconds``, counted from RUNNING). Its stdout and stderr (one pipe, so lines keep
the order they were written in) are read in 64 KiB chunks and go line by line to the zone's
CloudWatch Logs group, in the awslogs driver's stream ``{job definition name}/default/{job id}``,
flushed before the final event is published; at most ``LOG_BUFFER_BYTES`` wait between the pipe and
the store (beyond, the job's writes wait on its pipe). The job's ``stoppedAt`` is when its process
ended, whatever shipping still takes. Past its machine class's log volume (console bytes) or output
volume (bytes of files in its working directory, measured every second) the job is terminated with
``Log limit of 1 GiB exceeded`` / ``Output limit of 10 GiB exceeded``. Past 1,024 processes and
threads at once (``process_limit``: one thread counts every running job's PID namespace four times a
second) it is killed at once, ``Process limit of 1024 exceeded``.

Each job runs in its own working directory (``remote-batch-job-*`` in the system temp dir, also its
``TMPDIR``), removed once its final event is published; ``worker`` imports through ``PYTHONPATH``.
Each job runs in a sandbox (``remote_batch_local.sandbox``): with bubblewrap, a box that sees its
folder, the interpreter and the worker's code, in its own PID namespace; when the worker ends, or the
job is killed, the kernel kills every process of that namespace, whatever they did to escape. The
memory of a job is capped below the host's free memory, with headroom for the stack. A
``ProcessRegistry`` records each running job's processes and folder for the next start after a crash.

Threads: one scheduler (announces, starts queued jobs, enforces timeouts and kill deadlines), and per
running job a runner that forks the worker and waits for it (it must outlive the worker:
``PR_SET_PDEATHSIG`` fires when the forking *thread* ends), a console reader and a log shipper. With
the default worker command, a ``warm-pool`` thread keeps up to ``warm_workers`` workers started ahead
of need, each in its own sandbox with the worker imported, and a starting job takes one (``warm``).

Array jobs (``arrayProperties.size``) run as AWS Batch runs them: children ``<id>:<index>`` queued
like any job, each with ``AWS_BATCH_JOB_ARRAY_INDEX`` and its own events, and a parent that goes
PENDING, then SUCCEEDED or FAILED by its children, with ``statusSummary``
(``remote_batch_local.batch_arrays``).

How it is built: one ``ExecutorState`` (``state``: the lock and condition, the jobs, the queues, the
free vCPU slots) and one ``ExecutorSettings`` (``settings``: what never changes), and collaborators
built with them, each in its own module, composed by ``LocalBatchExecutor`` (``batch_api``). A job is
a ``BatchJob`` record (``job``); the gateways depend on the ``BatchBackend`` protocol, not on the
executor's class. The modules:

- ``batch_api``: ``LocalBatchExecutor``, the composition and the Batch API (submit, terminate,
  describe, list, stop).
- ``gateway``: ``LocalBatchGateway``, one zone's ``BatchGateway`` and ``FleetControl``, over ``BatchBackend``.
- ``state``, ``settings``, ``job``: the shared state, the fixed settings, the job record.
- ``intake``: a job made from a submission, kept on disk (``accepted``) and queued; ``arrays``: array
  jobs' submit and ListJobs; ``readmission``: accepted jobs taken back after a crash.
- ``scheduler``: the ``batch-scheduler`` thread (announce, start by fair share, deadlines).
- ``fair_share``: each share's decayed vCPU usage.
- ``pools``: dedicated computes' vCPU reservations; ``computes``: their Batch API and the restore.
- ``fleet``: the zones' job queues and compute environments (``maxvCpus``, DISABLED queues).
- ``runner``: a started job's thread to its final event; ``launch``: the worker's environment and
  sandboxed process; ``warm``: the warm workers.
- ``publisher``: the events; ``ending``: releasing, failing and terminating jobs (one home).
- ``volumes``: the output limit's watcher; ``logs``: console shipping; ``process_limit``: the task
  count and its watchdog; ``limits``: a process's limits and signals; ``memory``: the host's memory
  ceiling; ``rate_limit``: SubmitJob's rate.
- ``constants``, ``clock``, ``wording``, ``ports`` (``EventPublisher``, ``CredentialIssuer``).
"""

from remote_batch_local.executor.accepted import AcceptedJob, AcceptedJobs
from remote_batch_local.executor.batch_api import LocalBatchExecutor
from remote_batch_local.executor.constants import (
    AWS_MIN_TIMEOUT_SECONDS,
    DEFAULT_LOG_LIMIT_BYTES,
    DEFAULT_OUTPUT_LIMIT_BYTES,
    FINAL_STATUSES,
    KILL_GRACE_SECONDS,
    LOG_BUFFER_BYTES,
    QUEUED_STATUSES,
    REASON_CONTAINER_EXITED,
    REASON_EXECUTOR_ERROR,
    REASON_TIMEOUT,
    SHUTDOWN_REASON,
    SHUTDOWN_UNSTARTED_REASON,
)
from remote_batch_local.executor.gateway import BatchBackend, LocalBatchGateway
from remote_batch_local.executor.job import BatchJob
from remote_batch_local.executor.memory import host_note, job_memory_ceiling_mib
from remote_batch_local.executor.ports import CredentialIssuer, EventPublisher
from remote_batch_local.executor.readmission import PriorRun

__all__ = [
    "AWS_MIN_TIMEOUT_SECONDS",
    "DEFAULT_LOG_LIMIT_BYTES",
    "DEFAULT_OUTPUT_LIMIT_BYTES",
    "FINAL_STATUSES",
    "KILL_GRACE_SECONDS",
    "LOG_BUFFER_BYTES",
    "QUEUED_STATUSES",
    "REASON_CONTAINER_EXITED",
    "REASON_EXECUTOR_ERROR",
    "REASON_TIMEOUT",
    "SHUTDOWN_REASON",
    "SHUTDOWN_UNSTARTED_REASON",
    "AcceptedJob",
    "AcceptedJobs",
    "BatchBackend",
    "BatchJob",
    "CredentialIssuer",
    "EventPublisher",
    "LocalBatchExecutor",
    "LocalBatchGateway",
    "PriorRun",
    "host_note",
    "job_memory_ceiling_mib",
]
