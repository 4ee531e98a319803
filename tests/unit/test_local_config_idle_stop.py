"""``REMOTE_BATCH_IDLE_STOP_MINUTE_SECONDS``: how long one minute of an idle stop lasts on the local stack."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_batch_local.config import LocalConfig, LocalConfigError


def test_a_real_minute_by_default() -> None:
    assert LocalConfig.from_environment({}, Path("/tmp")).idle_stop_minute == 60.0


def test_the_variable_shortens_it() -> None:
    config = LocalConfig.from_environment({"REMOTE_BATCH_IDLE_STOP_MINUTE_SECONDS": "4"}, Path("/tmp"))
    assert config.idle_stop_minute == 4.0


@pytest.mark.parametrize("text", ["0", "-1", "soon", "nan"])
def test_a_bad_value_is_refused_naming_the_variable(text: str) -> None:
    with pytest.raises(LocalConfigError, match="REMOTE_BATCH_IDLE_STOP_MINUTE_SECONDS"):
        LocalConfig.from_environment({"REMOTE_BATCH_IDLE_STOP_MINUTE_SECONDS": text}, Path("/tmp"))
