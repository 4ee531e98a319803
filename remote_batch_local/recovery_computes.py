"""Settling the dedicated computes a stopped local stack left started.

A dedicated compute of the local stack is a share of this host's vCPUs (``executor.computes``),
held in the stack's memory only: when the stack stops (a clean stop or a crash), that capacity is
gone, and so are the jobs on it (``recovery`` fails them). So at the next start, before the
executor's environments are remade, each compute that was Starting, Running or Stopping is:

- billed up to the moment the stack was last known alive (its clean-stop time, else its last
  "alive" stamp, rewritten every second: the same instant ``recovery`` ends the jobs at), never
  through the outage, in the settlement that ends its run;
- then ``Stopped``, with ``Stopped: the local stack stopped while it ran``: its capacity is gone,
  and starting it again is the user's choice (a compute does not come back billed by itself).

A compute being created or deleted is left to the meter, which finishes either.
"""

from __future__ import annotations

import logging
from datetime import datetime

from functions.domain.charged_time import clamp_moment
from functions.domain.computes import ComputeEvent, ComputeRequest, ComputeStatus, apply_event, apply_request
from functions.domain.errors import ConditionFailed
from functions.logic.computes import store_step
from functions.ports import Services

logger = logging.getLogger(__name__)

STACK_STOPPED = "Stopped: the local stack stopped while it ran"
_LOST = (ComputeStatus.STARTING, ComputeStatus.RUNNING, ComputeStatus.STOPPING)


def recover_dedicated_computes(services: Services, last_alive: datetime | None) -> int:
    """Bill every compute the last run left Starting, Running or Stopping up to ``last_alive`` (the
    stack's last sign of life; None: nothing to recover) and stop it. Returns how many were stopped.

    Raises ``DependencyFailed`` when the store cannot be read or written (the start fails, as for
    the jobs' recovery).
    """
    store = services.compute_store
    if store is None or last_alive is None:
        return 0
    stopped = 0
    for compute in store.list_all_computes():
        if compute.status not in _LOST:
            continue
        # A stamp that cannot be true (before the run began, after now) is clamped into the run.
        until = clamp_moment(last_alive, compute.running_since or last_alive, services.clock())
        try:
            stop = apply_request(compute, ComputeRequest.STOP, until, STACK_STOPPED)
            after = store_step(services, stop, until) if stop.changed else compute
            if after is not None:
                store_step(services, apply_event(after, ComputeEvent.CAPACITY_DOWN, until), until)
        except ConditionFailed:
            # Nothing else writes computes before the stack is up: a lost race is a bug worth a trace.
            logger.exception("dedicated compute not recovered name=%s", compute.name)
            continue
        stopped += 1
    if stopped:
        logger.info("dedicated computes stopped with the last run count=%d until=%s", stopped, last_alive)
    return stopped
