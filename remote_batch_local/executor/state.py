"""The executor's mutable state: its lock and condition, its jobs, its queues and its free vCPU slots.

Every collaborator (``scheduler``, ``runner``, ``warm``, ``pools``, ``ending``...) is built with the
one ``ExecutorState`` and reads and writes it only while holding ``cond``; a method whose name ends in
``_locked`` expects the caller to hold it.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from functions.domain.fair_share import SHARE_DECAY_SECONDS
from remote_batch_local.batch_arrays import ArrayParent
from remote_batch_local.executor.fair_share import ShareUsage
from remote_batch_local.executor.job import BatchJob


@dataclass(eq=False)
class ExecutorState:
    """The state the executor's parts share (guarded by ``cond``).

    Attributes
    ----------
    cond : threading.Condition
        The one lock of the executor, and the condition every thread waits on (notified on any change
        a waiter may care about: a job queued or ended, slots freed, a stop).
    free_slots : set[int]
        The shared pool's vCPU slots no job holds and no dedicated compute reserves.
    jobs : dict[str, BatchJob]
        Every job and array child by Batch job id, final ones included (DescribeJobs answers them).
    arrays : dict[str, ArrayParent[BatchJob]]
        Every array parent by Batch job id.
    submitted : deque[BatchJob]
        Jobs accepted and not yet announced (PENDING, RUNNABLE), in submission order.
    runnable : deque[BatchJob]
        The shared queue: announced jobs waiting for vCPUs, in submission order.
    live : set[BatchJob]
        Jobs whose worker was spawned and has not exited (the scheduler's deadlines are theirs).
    shares : ShareUsage
        Each (job queue, share identifier)'s recent vCPU usage on the shared pool: the fair-share order.
    closed : bool
        Set by the stop: no job is accepted or started from then on.
    stopped : bool
        Set once the stop ended every job: the executor's threads return.
    """

    free_slots: set[int]
    cond: threading.Condition = field(default_factory=threading.Condition)
    jobs: dict[str, BatchJob] = field(default_factory=dict)
    arrays: dict[str, ArrayParent[BatchJob]] = field(default_factory=dict)
    submitted: deque[BatchJob] = field(default_factory=deque)
    runnable: deque[BatchJob] = field(default_factory=deque)
    live: set[BatchJob] = field(default_factory=set)
    shares: ShareUsage = field(default_factory=lambda: ShareUsage(SHARE_DECAY_SECONDS))
    closed: bool = False
    stopped: bool = False
