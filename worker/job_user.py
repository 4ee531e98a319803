"""The job side's own user in the cloud: the supervisor runs as root, the user's code does not.

In the worker images (``worker/Dockerfile``, ``worker/Dockerfile.gpu``) the supervisor, ``python -m
worker``, runs as root (the images' default user) and starts the job side as the images' ``worker``
user (``REMOTE_BATCH_JOB_UID``: 10001, its own group 10001, no supplementary groups, ``HOME`` its home
``/home/worker``), so the user's code reads and imports the host's cache of environments but can never
change a build that a later job of another account on that instance imports (``worker.environments``),
nor kill, trace or read the memory of the supervisor that writes it. Only a root supervisor with that
setting switches (:func:`job_user`): the local stack's worker (the invoking user, in its sandbox) and
tests calling the supervisor in their own process run the job side as themselves.

Who owns what while a job runs, when the supervisor switches:

- the host cache (``REMOTE_BATCH_ENVIRONMENT_CACHE``) and each build in it: root's, folders 0755,
  files 0644 (0755 when executable), never setuid or setgid (``worker.environments.unpack``): the job
  reads them, cannot add, rename or change anything;
- a build unpacked into the job's own folder (no usable cache): the same, in a folder of root's,
  0755 (:func:`share_read_only`), removed with the job; no other job ever sees it;
- the job side's folder (``worker.supervisor``): root's, 0755, its ``lib/`` (the job side's modules)
  and ``input/`` root's, folders 0755, files 0644 (read only); its ``outcome/`` the job's user's,
  0700: the job side writes its outcome there, and the supervisor reads only regular files from it,
  following no link (``worker.job_side.read_outcome``);
- the output folder (``$REMOTE_BATCH_OUTPUT_DIR``): the job's user's, 0700 (the supervisor uploads
  regular files only, following no link: ``worker.storage.JobStorage.upload_directory``);
- the working folder (the images' ``/home/worker``, the job user's home): the job's user's; the
  inputs fetched there from its parents (``inputs/``) are given to it before its code starts;
- the supervisor's own files (``/opt/remote-batch``, its venv, ``/tmp``'s folders of its own): root's,
  not writable by the job's user.

An image environment's job side (``worker.job_container``) is another container, running as its
image's user; it shares only the job's own exchange folder with the supervisor, no host folder.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Mode of a folder of root's the job's user reads (and enters) but does not write.
READ_ONLY_FOLDER = 0o755
#: Mode of a file of root's the job's user reads but does not write.
READ_ONLY_FILE = 0o644
#: Mode of a folder that is the job's user's alone.
OWN_FOLDER = 0o700


@dataclass(frozen=True)
class JobUser:
    """The user the job side runs as: ``uid``, its primary group ``gid``, its ``home`` (``HOME``)."""

    uid: int
    gid: int
    home: str

    def process_options(self) -> dict[str, Any]:
        """``subprocess.Popen`` options starting a process as this user: its uid and group, and no
        supplementary group (root's would stay otherwise)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def give(self, path: Path) -> None:
        """Make ``path`` and, for a folder, everything under it this user's (a link itself, never
        what it points to). Nothing when ``path`` does not exist. Raises ``OSError``."""
        if not path.exists() and not path.is_symlink():
            return
        os.lchown(path, self.uid, self.gid)
        if not path.is_dir() or path.is_symlink():
            return
        for root, dirnames, filenames in os.walk(path, followlinks=False):
            for name in (*dirnames, *filenames):
                os.lchown(os.path.join(root, name), self.uid, self.gid)

    def own_folder(self, folder: Path) -> Path:
        """Make ``folder`` (created when missing) this user's alone (0700); returns it."""
        folder.mkdir(parents=True, exist_ok=True)
        os.chown(folder, self.uid, self.gid)
        folder.chmod(OWN_FOLDER)
        return folder


def job_user(uid: int | None) -> JobUser | None:
    """The user the job side runs as: ``uid`` (``WorkerSettings.job_uid``) when this process is root,
    with the group and home of its ``/etc/passwd`` entry (without one: group ``uid`` and the working
    folder as home); None when ``uid`` is None or this process is not root (no switch: the job side
    runs as the supervisor)."""
    if uid is None or os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwuid(uid)
    except KeyError:
        return JobUser(uid=uid, gid=uid, home=os.getcwd())
    return JobUser(uid=uid, gid=entry.pw_gid, home=entry.pw_dir)


def share_read_only(path: Path) -> None:
    """Make ``path`` (a folder of root's) and everything under it readable, not writable, by other
    users: folders 0755, files 0644 (links untouched). Raises ``OSError``."""
    path.chmod(READ_ONLY_FOLDER)
    for root, dirnames, filenames in os.walk(path, followlinks=False):
        for name in dirnames:
            folder = Path(root, name)
            if not folder.is_symlink():
                folder.chmod(READ_ONLY_FOLDER)
        for name in filenames:
            file = Path(root, name)
            if not file.is_symlink():
                file.chmod(READ_ONLY_FILE)
