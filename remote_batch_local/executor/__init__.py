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

The modules, by concern: ``batch_api`` (``LocalBatchExecutor``: construction and its public API),
``arrays`` (array jobs' submit, TerminateJob of a parent, ListJobs of its children), ``gateway`` (one
zone's ``BatchGateway``: SubmitJob, TerminateJob, DescribeJobs), ``scheduler`` (the run queue and its
thread), ``runner`` (a running job's thread, output size accounting, the process-limit thread),
``launch`` (the worker's environment and sandboxed process), ``warm`` (the warm workers), ``limits``
(process limits and signals), ``logs`` (console log shipping), ``memory`` (the host's memory ceiling),
``process_limit`` (counting a job's tasks), ``core`` (the shared state and locked steps), ``job`` (a
job's state), ``constants``. ``LocalBatchExecutor`` is a chain of mixins over ``ExecutorCore``:
``JobLauncher`` → ``WarmPool`` → ``JobRunner`` → ``Scheduler`` → ``ArrayJobs`` → ``LocalBatchExecutor``.
"""

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
    CredentialIssuer,
    EventPublisher,
)
from remote_batch_local.executor.gateway import LocalBatchGateway
from remote_batch_local.executor.memory import host_note, job_memory_ceiling_mib

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
    "CredentialIssuer",
    "EventPublisher",
    "LocalBatchExecutor",
    "LocalBatchGateway",
    "host_note",
    "job_memory_ceiling_mib",
]
