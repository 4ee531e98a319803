"""Environments in the cloud, the worker's side: where a build lives in a zone's bucket, and the host
cache a job's supervisor unpacks it into (issue 24; ``docs/architecture.md`` "Environments").

A build is two objects under ``environments/`` of each zone's bucket, written by the build program
(``worker.build``): ``<hash>.tar.gz``, the installed site folder (a gzip-compressed tar whose one
top-level folder is ``site/``), then ``<hash>.json``, its manifest (``{"python", "platform",
"sizeBytes", "packages"}``), written last, so its presence means the archive is complete. ``hash`` is
the build hash, SHA-256 of (python, lock, platform), the same as
``functions.domain.environments.build_hash`` (the worker imports nothing of the service's).

A job naming a build (``REMOTE_BATCH_ENVIRONMENT_HASH``, set at SubmitJob) gets its site from
:func:`environment_site`: ``<cache>/<hash>/site`` on the instance (the job definitions mount the
host folder ``REMOTE_BATCH_ENVIRONMENT_CACHE`` names), fetched and unpacked by the first job on that
host and reused by the next ones. In the worker image the supervisor unpacks as root and the job
side runs as another uid (``worker.job_user``): the builds are root's, read only to it
(:func:`read_only_member`). Concurrent first fetches on one host each unpack into a folder of
their own and rename it into place: the first rename wins, the others find the build there and drop
theirs, so no job ever sees a half-unpacked build.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import stat
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from worker.errors import InvalidJobInput, StorageError

if TYPE_CHECKING:
    from worker.storage import JobStorage

#: The job's variable naming its environment's build (``functions.domain.environments``).
ENVIRONMENT_HASH_VARIABLE = "REMOTE_BATCH_ENVIRONMENT_HASH"
#: The host folder (mounted into the job's container) where builds are unpacked, keyed by hash.
CACHE_VARIABLE = "REMOTE_BATCH_ENVIRONMENT_CACHE"
ENVIRONMENTS_PREFIX = "environments/"
#: Where the wheels run: the machine's OS and architecture (``linux-x86_64``), part of the build hash.
PLATFORM = f"{sys.platform}-{platform.machine()}"
SITE_FOLDER = "site"
#: Modes of what a build unpacks to: folders (and executables) and other files, no write but the owner's.
READ_ONLY_FOLDER = 0o755
READ_ONLY_FILE = 0o644
_HASH = re.compile(r"^[0-9a-f]{64}$")


def build_hash(python: str, lock: str, platform_name: str) -> str:
    """The hex SHA-256 of ``{"lock", "platform", "python"}`` as compact JSON with sorted keys (the
    service's ``functions.domain.environments.build_hash``, which tests hold it to)."""
    text = json.dumps(
        {"python": python, "lock": lock, "platform": platform_name}, sort_keys=True, separators=(",", ":")
    )
    return hashlib.sha256(text.encode()).hexdigest()


def archive_key(digest: str) -> str:
    """``environments/<hash>.tar.gz``."""
    return f"{ENVIRONMENTS_PREFIX}{digest}.tar.gz"


def manifest_key(digest: str) -> str:
    """``environments/<hash>.json`` (written after the archive)."""
    return f"{ENVIRONMENTS_PREFIX}{digest}.json"


def pack(site: Path, archive: Path) -> int:
    """Write ``site`` as ``archive`` (gzip tar, one top-level folder ``site/``); returns its bytes."""
    with tarfile.open(archive, "w:gz", compresslevel=6) as tar:
        tar.add(site, arcname=SITE_FOLDER)
    return archive.stat().st_size


def read_only_member(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo:
    """tarfile's ``data`` filter (no absolute paths, no links leaving the target, no device files, no
    owner taken from the archive), then modes every user may read but only the unpacker may write:
    folders 0755, files 0644 or, executable, 0755; never setuid, setgid or sticky. Unpacked by a root
    supervisor, a build is root's, and the job side (another uid: ``worker.job_user``) imports it but
    cannot change it. Raises what the ``data`` filter raises (``tarfile.FilterError``)."""
    member = tarfile.data_filter(member, dest_path)
    if member.isdir():
        return member.replace(mode=READ_ONLY_FOLDER, deep=False)
    if member.isreg():
        executable = (member.mode or 0) & stat.S_IXUSR
        return member.replace(mode=READ_ONLY_FOLDER if executable else READ_ONLY_FILE, deep=False)
    return member


def unpack(archive: Path, target: Path) -> None:
    """Extract ``archive`` into ``target`` through :func:`read_only_member`.

    Raises
    ------
    StorageError
        The archive is damaged or holds what the filter refuses.
    """
    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(target, filter=read_only_member)  # noqa: S202 - the data filter, then modes
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise StorageError(f"the environment's archive could not be unpacked: {exc}") from exc


def environment_site(storage: JobStorage, digest: str, cache: Path | None, scratch: Path) -> Path:
    """The site folder of build ``digest``, fetched from the job's bucket into ``cache`` on its first
    use on this host (or into ``scratch``, this job's own, when there is no usable cache).

    Parameters
    ----------
    storage : JobStorage
        The job's zone bucket (``environments/<hash>.tar.gz``).
    digest : str
        The build hash: 64 hex digits.
    cache : Path or None
        The host's cache folder (``REMOTE_BATCH_ENVIRONMENT_CACHE``); None, not writable or, for a root
        supervisor, not root's alone (owned by another uid, or writable by group or others, as an
        instance booted before builds were root's left it: its builds may have been changed):
        ``scratch``.
    scratch : Path
        A folder of this job's, removed with it.

    Returns
    -------
    Path
        ``<root>/<hash>/site``.

    Raises
    ------
    InvalidJobInput
        ``digest`` is not a build hash.
    InputNotFound
        The zone's bucket has no such build.
    StorageError
        It could not be read or unpacked.
    """
    if not _HASH.fullmatch(digest):
        raise InvalidJobInput(f"{ENVIRONMENT_HASH_VARIABLE} must be 64 hex digits")
    root = cache if cache is not None and _usable_cache(cache) else scratch
    final = root / digest
    if (final / SITE_FOLDER).is_dir():
        return final / SITE_FOLDER
    work = Path(tempfile.mkdtemp(prefix=f".{digest[:12]}-", dir=root))
    try:
        archive = work / "archive.tar.gz"
        storage.download(archive_key(digest), archive)
        unpacked = work / "build"
        unpacked.mkdir(mode=READ_ONLY_FOLDER)
        unpacked.chmod(READ_ONLY_FOLDER)  # whatever the umask: <hash>/ as its site folder
        unpack(archive, unpacked)
        archive.unlink()
        if not (unpacked / SITE_FOLDER).is_dir():
            raise StorageError("the environment's archive holds no site folder")
        try:
            os.rename(unpacked, final)
        except OSError as exc:  # another job on this host renamed its copy first: use that one
            if not (final / SITE_FOLDER).is_dir():
                raise StorageError(f"the environment could not be put in place: {exc}") from exc
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return final / SITE_FOLDER


def _usable_cache(folder: Path) -> bool:
    """Whether the builds in ``folder`` can be used and added to: a folder this process may write;
    for root, one that only root may write (so only root ever made what is in it)."""
    if not (folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)):
        return False
    if os.geteuid() != 0:
        return True
    status = folder.stat()
    return status.st_uid == 0 and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def cache_folder(environ: Mapping[str, str]) -> Path | None:
    """The host cache ``REMOTE_BATCH_ENVIRONMENT_CACHE`` names, or None."""
    value = environ.get(CACHE_VARIABLE)
    return Path(value) if value else None
