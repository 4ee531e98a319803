"""A running job's output volume: the bytes of the files in its working directory, measured every
``OUTPUT_CHECK_SECONDS`` against its machine class's output limit (its log volume is counted by its
console reader, ``logs.read_lines``)."""

from __future__ import annotations

import os
from pathlib import Path

from remote_batch_local.executor.constants import OUTPUT_CHECK_SECONDS
from remote_batch_local.executor.ending import JobEnding
from remote_batch_local.executor.job import BatchJob
from remote_batch_local.executor.state import ExecutorState


def tree_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root`` (``st_size``, what an upload would read), not
    following links; files and folders that vanish while it walks are skipped."""
    total = 0
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return total


class OutputWatch:
    """Ends a running job whose working directory holds more than its output limit."""

    def __init__(self, state: ExecutorState, ending: JobEnding) -> None:
        self._state = state
        self._ending = ending

    def watch(self, job: BatchJob) -> None:
        """A job's ``files-…`` thread: while the job runs, measure the files in its working directory
        every ``OUTPUT_CHECK_SECONDS``; past ``output_limit_bytes``, terminate it
        (``Output limit of 10 GiB exceeded``). Returns once the job exited or the executor stopped."""
        limit = job.output_limit_bytes
        workdir = job.workdir
        if limit is None or workdir is None:
            return
        state = self._state
        while True:
            with state.cond:
                if job.exited or state.stopped:
                    return
                state.cond.wait(OUTPUT_CHECK_SECONDS)
                if job.exited:
                    return
            if tree_bytes(workdir) > limit:
                self._ending.over_volume_limit(job, "Output", limit)
                return
