"""``remote-batch-local`` / ``python -m remote_batch_local``: its command line (the stack itself is
tested end to end in tests/e2e)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from remote_batch_local import __main__ as local_main
from remote_batch_local.config import LocalConfig


def test_help_prints_the_options_and_starts_nothing(capsys, monkeypatch):
    monkeypatch.setattr(LocalConfig, "from_environment", _must_not_start)

    with pytest.raises(SystemExit) as exited:
        local_main.main(["--help"])

    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: remote-batch-local [-h] [--home HOME] [--port PORT] [--version]")
    assert "REMOTE_BATCH_" in out


def test_version_names_the_distribution(capsys):
    with pytest.raises(SystemExit) as exited:
        local_main.main(["--version"])

    assert exited.value.code == 0
    assert capsys.readouterr().out == "remote-batch-local 0.2.0\n"


def test_an_unknown_option_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        local_main.main(["--prot", "9000"])

    assert exited.value.code == 2
    assert "unrecognized arguments: --prot 9000" in capsys.readouterr().err


def test_a_bad_port_option_is_checked_as_its_variable_is(monkeypatch, caplog):
    monkeypatch.delenv("REMOTE_BATCH_PORT", raising=False)

    assert local_main.main(["--port", "70000"]) == 2
    assert "bad configuration: REMOTE_BATCH_PORT" in caplog.text


def _must_not_start(*args: object) -> None:
    raise AssertionError("the stack's configuration was read: it was about to start")


def test_a_second_stack_on_a_home_in_use_is_refused_naming_the_holder(tmp_path):
    # Given a home whose lock a running stack holds (here: this process)
    from remote_batch_local.stack import HomeInUse, _lock_home

    held = _lock_home(tmp_path)
    try:
        # When another stack takes the same home, it is refused before anything is touched
        with pytest.raises(HomeInUse) as refused:
            _lock_home(tmp_path)
        assert f"is in use by another local stack (pid {os.getpid()})" in str(refused.value)
        assert "REMOTE_BATCH_HOME" in str(refused.value)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["stack.lock"]
    finally:
        os.close(held)

    # Then, once the holder is gone, the home can be taken again
    os.close(_lock_home(tmp_path))


def test_the_command_line_exits_1_on_a_home_another_stack_holds(tmp_path):
    from remote_batch_local.stack import _lock_home

    held = _lock_home(tmp_path)
    try:
        started = subprocess.run(
            [sys.executable, "-m", "remote_batch_local", "--home", str(tmp_path), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(held)
    assert started.returncode == 1
    assert f"is in use by another local stack (pid {os.getpid()})" in started.stderr + started.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stack.lock"]
