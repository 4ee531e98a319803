"""The local executor's per-job process limit: its setting, its reason, and how a job's tasks are counted."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote_batch_local.config import LocalConfig, LocalConfigError
from remote_batch_local.executor.process_limit import (
    PROCESS_LIMIT,
    namespace_task_counts,
    process_limit_reason,
    tree_task_count,
)
from remote_batch_local.sandbox import namespace_init, pid_namespace


def test_1024_tasks_by_default():
    assert PROCESS_LIMIT == 1024
    assert LocalConfig.from_environment({}, Path("/tmp")).process_limit == 1024


def test_the_variable_sets_the_limit():
    config = LocalConfig.from_environment({"REMOTE_BATCH_LOCAL_PROCESS_LIMIT": "64"}, Path("/tmp"))
    assert config.process_limit == 64


@pytest.mark.parametrize("text", ["0", "-1", "many"])
def test_a_bad_limit_is_refused_naming_the_variable(text):
    with pytest.raises(LocalConfigError, match="REMOTE_BATCH_LOCAL_PROCESS_LIMIT"):
        LocalConfig.from_environment({"REMOTE_BATCH_LOCAL_PROCESS_LIMIT": text}, Path("/tmp"))


def test_the_reason_names_the_limit():
    assert process_limit_reason(1024) == "Process limit of 1024 exceeded"


def test_a_process_tree_counts_its_processes_and_their_threads():
    # Given a child of this process with 4 threads of its own (its main thread and 3 sleepers)
    code = (
        "import threading, time\nfor _ in range(3): threading.Thread(target=time.sleep, args=(30,)).start()\n"
    )
    code += "print('ready', flush=True)\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        # Then its tree counts 4 tasks
        assert tree_task_count(child.pid) == 4
    finally:
        child.kill()
        child.wait()
    # and a process that is gone counts none
    assert tree_task_count(child.pid) == 0


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_a_namespace_counts_every_thread_of_its_processes():
    # Given a PID namespace of its own whose init (python) runs 3 more threads and one child process
    code = "import subprocess, sys, threading, time\n"
    code += "for _ in range(3): threading.Thread(target=time.sleep, args=(30,)).start()\n"
    code += "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
    code += "print('ready', flush=True)\ntime.sleep(30)"
    outer = subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", code], stdout=subprocess.PIPE
    )
    try:
        assert outer.stdout is not None
        if outer.stdout.readline() != b"ready\n":
            pytest.skip("no PID namespace here (unshare --pid failed)")
        init = namespace_init(outer.pid)
        assert init is not None
        namespace = pid_namespace(init.pid)
        assert namespace is not None and namespace != pid_namespace(os.getpid())
        # Then it counts 5 tasks: the init's 4 threads and its child
        assert namespace_task_counts({namespace}) == {namespace: 5}
    finally:
        outer.kill()
        outer.wait()
    # and a namespace with no process left counts none
    assert _eventually_zero(namespace)


def _eventually_zero(namespace: str) -> bool:
    deadline = time.monotonic() + 5
    while namespace_task_counts({namespace}):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True
