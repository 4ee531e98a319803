"""``remote-batch-local`` / ``python -m remote_batch_local``: its command line (the stack itself is
tested end to end in tests/e2e)."""

from __future__ import annotations

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
