"""Issue 24's tenant isolation in the cloud: a root supervisor (as in the worker image) runs the job side
as another uid (``REMOTE_BATCH_JOB_UID``; here ``nobody``, 65534, in place of the image's 10001), which
reads and imports the host cache's builds but cannot change them, writes its outputs and its working
folder, and whose inputs from parents are its own. In-process on moto's S3, the job side for real.

They need root (the user switch, ``chown``): skipped otherwise (CI runs as root).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_worker import BUCKET, Job, s3  # noqa: F401 - the fixture
from worker import fork_server
from worker.entrypoint import main
from worker.environments import archive_key, environment_site, pack
from worker.inputs import COPIES_FOLDER, MANIFEST_FORMAT, MANIFEST_OBJECT
from worker.storage import JobStorage

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching the job side's user needs root")

#: The job side's uid in these tests (the image's is 10001, which this machine may not have).
NOBODY = 65534
DIGEST = "a" * 64
PARENT = "job-01JAAAAAAAAAAAAAAAAAAAAAAC"
#: What the job reports: who it runs as, and what it could do to its environment's build.
PROBE = """\
import ctypes, os, pathlib, six
site = pathlib.Path(six.__file__).parent

def attempt(action):
    try:
        action()
    except PermissionError:
        return 'PermissionError'
    return 'done'

libc = ctypes.CDLL(None)
signal = ctypes.c_int(0)
libc.prctl(2, ctypes.byref(signal), 0, 0, 0)  # PR_GET_PDEATHSIG
out = pathlib.Path(os.environ['REMOTE_BATCH_OUTPUT_DIR'])
(out / 'report.txt').write_text('written by the job')
pathlib.Path('made-in-the-working-folder.txt').write_text('mine')
with open(f'inputs/{PARENT}/data.txt', 'a') as parents:
    parents.write(' and changed')
{
    'ids': [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), sorted(os.getgroups())],
    'home': os.environ['HOME'],
    'uid setting': os.environ.get('REMOTE_BATCH_JOB_UID'),
    'six': six.VERSION,
    'tool runs': os.access(site / 'tool.sh', os.X_OK),
    'private': (site / 'private.txt').read_text(),
    'change six.py': attempt(lambda: (site / 'six.py').write_text('VERSION = "forged"')),
    'add a module': attempt(lambda: (site / 'extra.py').write_text('')),
    'remove six.py': attempt(lambda: (site / 'six.py').unlink()),
    'rename the build': attempt(lambda: site.parent.rename(site.parent.with_name('moved'))),
    'add a build': attempt(lambda: (site.parent.parent / ('b' * 64)).mkdir()),
    'parent death signal': signal.value,
    'parent uid': os.stat(f'/proc/{os.getppid()}').st_uid,
}
""".replace("{PARENT}", PARENT)


def _python_for(uid: int) -> str | None:
    """An interpreter ``uid`` may run (this one may live in root's home), or None."""
    for candidate in (sys.executable, "/usr/local/bin/python3", "/usr/bin/python3"):
        if not Path(candidate).is_file():
            continue
        try:
            done = subprocess.run(
                [candidate, "-I", "-c", "import sys; sys.exit(sys.version_info < (3, 9))"],
                user=uid,
                group=uid,
                extra_groups=[],
                cwd="/",
                capture_output=True,
                check=False,
            )
        except OSError:  # not this uid's to run
            continue
        if done.returncode == 0:
            return candidate
    return None


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder of root's others may enter (pytest's own temporary folders are root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="remote-batch-job-user-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _store_build(s3: Any, tmp: Path) -> None:  # noqa: F811 - the fixture's client
    """Build ``DIGEST``: ``six.py`` (in the archive writable by all), a setuid ``tool.sh``, a folder
    writable by all and a file its owner's alone, to be unpacked readable by all, writable by none."""
    site = tmp / "site"
    (site / "data").mkdir(parents=True)
    (site / "six.py").write_text('VERSION = "1.16.0"\n')
    (site / "six.py").chmod(0o666)
    (site / "tool.sh").write_text("#!/bin/sh\n")
    (site / "tool.sh").chmod(0o4777)
    (site / "data").chmod(0o777)
    (site / "private.txt").write_text("only the owner's in the archive")
    (site / "private.txt").chmod(0o600)
    archive = tmp / "build.tar.gz"
    pack(site, archive)
    s3.put_object(Bucket=BUCKET, Key=archive_key(DIGEST), Body=archive.read_bytes())


def _parent_output(s3: Any, job: Job) -> dict[str, Any]:  # noqa: F811
    """A parent's output ``data.txt``, as the service copied it for ``job`` (``worker.inputs``)."""
    copies = f"{job.input_key.rpartition('/')[0]}/{COPIES_FOLDER}/{PARENT}/"
    manifest = {"format": MANIFEST_FORMAT, "objects": ["files/data.txt"]}
    s3.put_object(Bucket=BUCKET, Key=f"{copies}files/data.txt", Body=b"from the parent")
    s3.put_object(Bucket=BUCKET, Key=copies + MANIFEST_OBJECT, Body=json.dumps(manifest).encode())
    return {"jobId": PARENT, "files": []}


@pytest.fixture(params=[False, True], ids=["fresh job side", "forked from a zygote"])
def forked(request: pytest.FixtureRequest) -> Iterator[bool]:
    """Whether the job side is forked from a zygote (``worker.fork_server``), which then runs as the
    job's user, or started fresh."""
    if request.param:
        fork_server.enable()
    yield bool(request.param)
    fork_server.shut_down()


def test_the_job_runs_as_its_own_user_and_reads_but_cannot_change_the_hosts_builds(
    s3: Any,  # noqa: F811
    base: Path,
    monkeypatch: pytest.MonkeyPatch,
    forked: bool,
) -> None:
    # Given a root supervisor told to run the job side as nobody (a fresh one, or forked from a
    # zygote of nobody's), a host cache of root's (0755), a
    # working folder of nobody's, a build in the bucket and a parent's output to start with
    python = _python_for(NOBODY)
    if python is None:
        pytest.skip("no Python interpreter here that uid 65534 may run")
    cache = base / "cache"
    cache.mkdir(mode=0o755)
    workdir = base / "work"
    workdir.mkdir()
    os.chown(workdir, NOBODY, NOBODY)
    monkeypatch.chdir(workdir)
    _store_build(s3, base)
    job = Job(
        s3,
        REMOTE_BATCH_ENVIRONMENT_HASH=DIGEST,
        REMOTE_BATCH_ENVIRONMENT_CACHE=str(cache),
        REMOTE_BATCH_JOB_UID=str(NOBODY),
        REMOTE_BATCH_JOB_PYTHON=python,
    )
    job.put_input({"kind": "code", "code": PROBE, "inputsFrom": [_parent_output(s3, job)]})

    # When the worker runs it
    assert main(job.env, s3) == 0, job.messages_document()

    # Then the user's code ran as nobody, no other group, with its home, and never saw the setting
    report = job.result_document()["result"]
    entry = pwd.getpwuid(NOBODY)
    assert report["ids"] == [NOBODY, NOBODY, entry.pw_gid, entry.pw_gid, []]
    assert report["home"] == entry.pw_dir
    assert report["uid setting"] is None
    # It imported its build, and could change nothing of it nor add to the cache
    assert report["six"] == "1.16.0" and report["tool runs"] is True
    assert report["private"] == "only the owner's in the archive"
    assert {k: report[k] for k in ("change six.py", "add a module", "remove six.py")} == {
        "change six.py": "PermissionError",
        "add a module": "PermissionError",
        "remove six.py": "PermissionError",
    }
    assert report["rename the build"] == report["add a build"] == "PermissionError"
    # It still dies with the supervisor (the hook runs after the switch, which would clear it)
    assert report["parent death signal"] == 9
    # Forked, its parent is the zygote, which runs as nobody too; fresh, the root supervisor
    assert report["parent uid"] == (NOBODY if forked else 0)
    # The build is root's: folders 0755, files without group or other write, no setuid
    site = cache / DIGEST / "site"
    assert (site / "six.py").read_text() == 'VERSION = "1.16.0"\n'
    assert sorted(p.name for p in cache.iterdir()) == [DIGEST]
    modes = {
        str(p.relative_to(cache)): (p.stat().st_uid, stat.S_IMODE(p.stat().st_mode))
        for p in [cache / DIGEST, *sorted((cache / DIGEST).rglob("*"))]
    }
    assert modes == {
        DIGEST: (0, 0o755),
        f"{DIGEST}/site": (0, 0o755),
        f"{DIGEST}/site/data": (0, 0o755),
        f"{DIGEST}/site/private.txt": (0, 0o644),
        f"{DIGEST}/site/six.py": (0, 0o644),
        f"{DIGEST}/site/tool.sh": (0, 0o755),
    }
    # Its output was collected; its working folder and its parent's inputs were its own to write
    assert job.output("files/report.txt") == b"written by the job"
    assert (workdir / "made-in-the-working-folder.txt").stat().st_uid == NOBODY
    assert (workdir / "inputs" / PARENT / "data.txt").read_text() == "from the parent and changed"
    assert {p.stat().st_uid for p in (workdir / "inputs").rglob("*")} == {NOBODY}


def test_a_job_that_fails_as_its_own_user_still_reports_its_error_and_outputs(
    s3: Any,  # noqa: F811
    base: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a root supervisor running the job side as nobody, no environment, a job that writes an
    # output, then raises
    python = _python_for(NOBODY)
    if python is None:
        pytest.skip("no Python interpreter here that uid 65534 may run")
    monkeypatch.chdir(base)  # root's: the job writes only its output folder
    job = Job(s3, REMOTE_BATCH_JOB_UID=str(NOBODY), REMOTE_BATCH_JOB_PYTHON=python)
    code = (
        "import os\n"
        "open(os.path.join(os.environ['REMOTE_BATCH_OUTPUT_DIR'], 'partial.txt'), 'w').write('half')\n"
        "raise ValueError(f'failed as {os.getuid()}')\n"
    )
    job.put_input({"kind": "code", "code": code})

    # When the worker runs it
    assert main(job.env, s3) == 1

    # Then its error and its output are stored, as for any job
    assert job.messages_document()["error"]["message"] == f"failed as {NOBODY}"
    assert job.output("files/partial.txt") == b"half"


def test_a_root_supervisor_does_not_use_a_cache_another_uid_could_have_changed(
    s3: Any,  # noqa: F811
    base: Path,
) -> None:
    # Given host caches as an instance booted before builds were root's left them: one owned by the
    # job's uid (holding a planted build), one of root's that its group may write
    _store_build(s3, base)
    storage = JobStorage(s3, BUCKET)
    owned = base / "owned"
    (owned / DIGEST / "site").mkdir(parents=True)
    os.chown(owned, NOBODY, NOBODY)
    group_writable = base / "group-writable"
    group_writable.mkdir()
    group_writable.chmod(0o775)

    for index, cache in enumerate((owned, group_writable)):
        scratch = base / f"scratch-{index}"
        scratch.mkdir()

        # When a job of this build looks for it there
        site = environment_site(storage, DIGEST, cache, scratch)

        # Then it unpacks its own copy instead, and leaves that cache as it was
        assert site == scratch / DIGEST / "site"
        assert (site / "six.py").read_text() == 'VERSION = "1.16.0"\n'
    assert list((owned / DIGEST / "site").iterdir()) == []
    assert list(group_writable.iterdir()) == []
