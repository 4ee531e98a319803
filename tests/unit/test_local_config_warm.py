"""``REMOTE_BATCH_LOCAL_WARM_WORKERS``: how many idle warm workers the local executor keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote_batch_local.config import LocalConfig, LocalConfigError


def test_two_warm_workers_by_default():
    assert LocalConfig.from_environment({}, Path("/tmp")).warm_workers == 2


@pytest.mark.parametrize(("text", "expected"), [("0", 0), ("1", 1), ("16", 16)])
def test_the_variable_sets_them(text, expected):
    config = LocalConfig.from_environment({"REMOTE_BATCH_LOCAL_WARM_WORKERS": text}, Path("/tmp"))
    assert config.warm_workers == expected


@pytest.mark.parametrize("text", ["-1", "17", "two"])
def test_a_bad_value_is_refused_naming_the_variable(text):
    with pytest.raises(LocalConfigError, match="REMOTE_BATCH_LOCAL_WARM_WORKERS"):
        LocalConfig.from_environment({"REMOTE_BATCH_LOCAL_WARM_WORKERS": text}, Path("/tmp"))
