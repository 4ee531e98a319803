"""The job side's own user (``worker.job_user``, issue 24) as far as it is decided without root: the
setting, who switches (a root supervisor with ``REMOTE_BATCH_JOB_UID`` only), the read-only unpack of a
build whatever the umask, and the supervisor reading the job's files without following links. The
switch itself runs for real in ``tests/integration/test_worker_job_user.py`` (as root)."""

from __future__ import annotations

import json
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker import job_container, job_side, job_user
from worker.environments import pack, unpack
from worker.errors import ConfigError
from worker.job_user import JobUser
from worker.runner import CodeInput, Outcome
from worker.settings import JOB_UID, WorkerSettings
from worker.supervisor import job_side_environment

REQUIRED = {
    "REMOTE_BATCH_JOB_ID": "job-1",
    "REMOTE_BATCH_BUCKET": "b",
    "REMOTE_BATCH_INPUT_KEY": "inputs/job-1/input.json",
    "REMOTE_BATCH_OUTPUT_PREFIX": "outputs/job-1/",
}


@pytest.mark.parametrize(("value", "uid"), [(None, None), ("", None), ("10001", 10001), ("65534", 65534)])
def test_the_job_uid_setting_is_read(value: str | None, uid: int | None) -> None:
    environ = REQUIRED if value is None else {**REQUIRED, JOB_UID: value}

    assert WorkerSettings.from_environ(environ).job_uid == uid


@pytest.mark.parametrize("value", ["0", "-1", "worker", "1.5", "١٠"])
def test_a_job_uid_that_is_root_or_no_uid_is_refused_naming_it(value: str) -> None:
    with pytest.raises(ConfigError) as caught:
        WorkerSettings.from_environ({**REQUIRED, JOB_UID: value})

    assert str(caught.value) == (
        f"REMOTE_BATCH_JOB_UID must be a uid >= 1 (the job's user, not root), got {value!r}"
    )


def test_only_a_root_supervisor_with_a_job_uid_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the local stack's worker or a test (not root): no switch, whatever the setting
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert job_user.job_user(10001) is None
    # Given root without the setting: no switch either (the supervisor's own uid, as before)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert job_user.job_user(None) is None


def test_the_job_user_has_its_passwd_group_and_home(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = pwd.struct_passwd(("worker", "x", 10001, 10002, "", "/home/worker", "/bin/sh"))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    real = pwd.getpwuid
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: entry if uid == 10001 else real(uid))

    user = job_user.job_user(10001)

    assert user == JobUser(uid=10001, gid=10002, home="/home/worker")
    assert user.process_options() == {"user": 10001, "group": 10002, "extra_groups": []}


def test_a_uid_without_a_passwd_entry_gets_its_own_number_as_group_and_the_working_folder_as_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def missing(uid: int) -> pwd.struct_passwd:
        raise KeyError(uid)

    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(pwd, "getpwuid", missing)
    monkeypatch.chdir(tmp_path)

    assert job_user.job_user(4242) == JobUser(uid=4242, gid=4242, home=str(tmp_path))


def test_the_job_sides_environment_has_its_home_and_not_the_supervisors_settings(tmp_path: Path) -> None:
    environ = {"HOME": "/root", JOB_UID: "10001", "PYTHONPATH": "/opt/remote-batch", "X": "1"}

    as_itself = job_side_environment(environ, tmp_path)
    as_worker = job_side_environment(environ, tmp_path, JobUser(10001, 10001, "/home/worker"))

    assert as_itself == {"HOME": "/root", "X": "1", "REMOTE_BATCH_OUTPUT_DIR": str(tmp_path)}
    assert as_worker == {"HOME": "/home/worker", "X": "1", "REMOTE_BATCH_OUTPUT_DIR": str(tmp_path)}


def test_an_image_jobs_container_does_not_get_the_job_uid_setting(tmp_path: Path) -> None:
    job_container.prepare(
        tmp_path,
        CodeInput(source="1"),
        memory_gib=None,
        environ={"REMOTE_BATCH_JOB_ID": "job-1", JOB_UID: "10001"},
    )

    args = json.loads((tmp_path / job_side.ARGS_FILE).read_text())
    assert args["environment"] == {
        "REMOTE_BATCH_JOB_ID": "job-1",
        "REMOTE_BATCH_OUTPUT_DIR": str(tmp_path / "outputs"),
    }


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """A umask that lets the group write what is made (0002), restored after."""
    previous = os.umask(0o002)
    yield
    os.umask(previous)


def test_a_build_unpacks_readable_by_all_and_writable_by_its_unpacker_alone(
    tmp_path: Path, loose_umask: None
) -> None:
    # Given a build whose archive has a folder and a file writable by all, a setuid executable and a
    # file its owner's alone
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    for name, mode in (("pkg/mod.py", 0o666), ("tool", 0o4775), ("secret.txt", 0o600)):
        (site / name).write_text("x")
        (site / name).chmod(mode)
    (site / "pkg").chmod(0o777)
    pack(site, tmp_path / "build.tar.gz")

    # When it is unpacked (under a umask that would leave folders group-writable)
    unpack(tmp_path / "build.tar.gz", tmp_path / "out")

    # Then folders are 0755, files 0644 or, executable, 0755: nothing setuid, nothing writable but
    # by the owner, everything readable
    modes = {
        str(p.relative_to(tmp_path / "out")): stat.S_IMODE(p.stat().st_mode)
        for p in sorted((tmp_path / "out").rglob("*"))
    }
    assert modes == {
        "site": 0o755,
        "site/pkg": 0o755,
        "site/pkg/mod.py": 0o644,
        "site/secret.txt": 0o644,
        "site/tool": 0o755,
    }


def _outcome_folder(tmp_path: Path) -> Path:
    job_side.write_outcome(tmp_path, Outcome(messages=["done"], result=4))
    return tmp_path / job_side.OUTCOME_DIR


def test_the_supervisor_reads_the_outcome_the_job_side_wrote(tmp_path: Path) -> None:
    _outcome_folder(tmp_path)

    recorded = job_side.read_outcome(tmp_path)

    assert recorded is not None and recorded.messages == ["done"] and recorded.exit_code == 0


@pytest.mark.parametrize("name", [job_side.OUTCOME_DOCUMENT, job_side.RESULT_JSON, job_side.RESULT_PICKLE])
def test_an_outcome_file_that_is_a_link_is_not_followed(tmp_path: Path, name: str) -> None:
    # Given the job side replaced a file of its outcome by a link to a file it may not read itself
    outcome = _outcome_folder(tmp_path)
    (outcome / name).unlink(missing_ok=True)
    elsewhere = tmp_path / "supervisors-own"
    elsewhere.write_text('{"messages": []}')
    (outcome / name).symlink_to(elsewhere)

    # When the supervisor reads the outcome, then it refuses it rather than read through the link
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        job_side.read_outcome(tmp_path)


def test_an_outcome_file_that_is_a_pipe_is_refused_without_waiting(tmp_path: Path) -> None:
    outcome = _outcome_folder(tmp_path)
    (outcome / job_side.RESULT_JSON).unlink()
    os.mkfifo(outcome / job_side.RESULT_JSON)

    with pytest.raises(OSError, match="not a regular file"):
        job_side.read_outcome(tmp_path)


def test_an_image_jobs_exit_file_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_text('{"returncode": 0}')
    (tmp_path / job_side.EXIT_FILE).symlink_to(tmp_path / "elsewhere.json")

    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        job_side.read_exit(tmp_path)
