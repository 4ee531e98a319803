"""The job's objects in S3: reading its input, writing its outputs. The only module that calls AWS."""

from __future__ import annotations

import io
import mimetypes
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from boto3.exceptions import Boto3Error
from botocore.exceptions import BotoCoreError, ClientError

from worker.errors import InputNotFound, StorageError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_MISSING_OBJECT_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
#: S3's errors that refuse one object for its own key or size (any other fails the whole upload).
_OBJECT_REFUSED_CODES = frozenset({"KeyTooLongError", "EntityTooLarge"})
#: S3's longest object key, in bytes of UTF-8.
MAX_KEY_BYTES = 1024
#: At most this many skipped output files are named in the job's messages; one more line counts the rest.
MAX_SKIPPED_NOTES = 100


class JobStorage:
    """Reads and writes one bucket's objects for the worker.

    Parameters
    ----------
    client : S3Client
        A boto3 S3 client (built once per process; region and endpoint come from the environment).
    bucket : str
        The bucket holding ``inputs/`` and ``outputs/``.
    """

    def __init__(self, client: S3Client, bucket: str) -> None:
        self._client = client
        self._bucket = bucket

    def read(self, key: str) -> bytes:
        """Return an object's body.

        Parameters
        ----------
        key : str
            The object key.

        Returns
        -------
        bytes

        Raises
        ------
        InputNotFound
            No such object.
        StorageError
            Any other S3 or network failure (no such bucket, access denied, ...).
        """
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=key)
            return response["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING_OBJECT_CODES:
                raise InputNotFound(f"input not found: s3://{self._bucket}/{key}") from exc
            raise StorageError(f"cannot read s3://{self._bucket}/{key}: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"cannot read s3://{self._bucket}/{key}: {exc}") from exc

    def read_range(self, key: str, first: int, last: int) -> bytes:
        """Bytes ``first..last`` (inclusive, an HTTP ``Range``) of an object.

        Raises
        ------
        InputNotFound
            No such object.
        StorageError
            Any other S3 or network failure, or fewer bytes than asked (the object is shorter).
        """
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=key, Range=f"bytes={first}-{last}")
            body = response["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING_OBJECT_CODES:
                raise InputNotFound(f"input not found: s3://{self._bucket}/{key}") from exc
            raise StorageError(f"cannot read s3://{self._bucket}/{key}: {exc}") from exc
        except BotoCoreError as exc:
            raise StorageError(f"cannot read s3://{self._bucket}/{key}: {exc}") from exc
        if len(body) != last - first + 1:
            raise StorageError(f"s3://{self._bucket}/{key} has no bytes {first}..{last}")
        return bytes(body)

    def download(self, key: str, path: Path) -> int:
        """Stream an object to ``path`` (in parts, in parallel: boto3's managed transfer), never
        holding it in memory; up to S3's 5 TiB, here uploads of up to 5 GiB.

        Parameters
        ----------
        key : str
            The object key.
        path : Path
            The file to write (replaced).

        Returns
        -------
        int
            The file's size in bytes.

        Raises
        ------
        InputNotFound
            No such object.
        StorageError
            Any other S3, network or disk failure.
        """
        try:
            self._client.download_file(self._bucket, key, str(path))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING_OBJECT_CODES:
                raise InputNotFound(f"input not found: s3://{self._bucket}/{key}") from exc
            raise StorageError(f"cannot read s3://{self._bucket}/{key}: {exc}") from exc
        except (BotoCoreError, Boto3Error, OSError) as exc:
            raise StorageError(f"cannot read s3://{self._bucket}/{key}: {exc}") from exc
        return path.stat().st_size

    def list_keys(self, prefix: str) -> list[str]:
        """The keys of every object under ``prefix`` (ListObjectsV2, every page).

        Raises
        ------
        StorageError
            Any S3 or network failure (access denied included).
        """
        keys: list[str] = []
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self._bucket, Prefix=prefix
            ):
                keys += [item["Key"] for item in page.get("Contents", [])]
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"cannot list s3://{self._bucket}/{prefix}: {exc}") from exc
        return keys

    def write(self, key: str, body: bytes, content_type: str) -> None:
        """Write an object, replacing any object at that key (in parts when large, so a body over
        PutObject's 5 GB limit is stored too).

        Parameters
        ----------
        key : str
            The object key.
        body : bytes
            The content.
        content_type : str
            Its MIME type, e.g. ``application/json``.

        Raises
        ------
        StorageError
            S3 refused the write or could not be reached.
        """
        try:
            self._client.upload_fileobj(
                io.BytesIO(body), self._bucket, key, ExtraArgs={"ContentType": content_type}
            )
        except (ClientError, BotoCoreError, Boto3Error) as exc:
            raise StorageError(f"cannot write s3://{self._bucket}/{key}: {exc}") from exc

    def write_once(self, key: str, body: bytes) -> bool:
        """Create an object unless one is at ``key`` already: S3's conditional write (PutObject with
        ``If-None-Match: *``), which exactly one of concurrent writers wins.

        Returns
        -------
        bool
            True when this call created it; False when it existed (412 PreconditionFailed), or
            another conditional write of it was in flight and won (409 ConditionalRequestConflict,
            asked again once: S3 answers the loser 412 then).

        Raises
        ------
        StorageError
            Any other S3 or network failure.
        """
        for attempt in range(2):
            try:
                self._client.put_object(Bucket=self._bucket, Key=key, Body=body, IfNoneMatch="*")
                return True
            except ClientError as exc:
                code = exc.response.get("Error", {}).get("Code")
                if code in ("PreconditionFailed", "412"):
                    return False
                if code not in ("ConditionalRequestConflict", "409") or attempt == 1:
                    raise StorageError(f"cannot create s3://{self._bucket}/{key}: {exc}") from exc
            except BotoCoreError as exc:
                raise StorageError(f"cannot create s3://{self._bucket}/{key}: {exc}") from exc
        return False

    def exists(self, key: str) -> bool:
        """Whether the object exists, by listing its key as a prefix (``s3:ListBucket`` narrowed by
        ``s3:prefix``: a role without ``s3:ListBucket`` on the whole bucket is answered 403, not 404,
        for a GetObject or HeadObject of a missing key).

        Raises
        ------
        StorageError
            S3 refused the listing or could not be reached.
        """
        try:
            listed = self._client.list_objects_v2(Bucket=self._bucket, Prefix=key, MaxKeys=1)
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"cannot list s3://{self._bucket}/{key}: {exc}") from exc
        return any(item.get("Key") == key for item in listed.get("Contents", []))

    def upload_file(self, path: Path, key: str, content_type: str) -> None:
        """Upload a file to ``key`` (in parts, in parallel: boto3's managed transfer; up to 5 TiB).

        Raises
        ------
        StorageError
            S3 refused the write, could not be reached, or the file could not be read.
        """
        try:
            self._client.upload_file(str(path), self._bucket, key, ExtraArgs={"ContentType": content_type})
        except (ClientError, BotoCoreError, Boto3Error, OSError) as exc:
            raise StorageError(f"cannot write s3://{self._bucket}/{key}: {exc}") from exc

    def upload_directory(self, directory: Path, prefix: str, notes: list[str] | None = None) -> list[str]:
        """Upload every regular file under a directory to ``<prefix><path relative to directory>``.

        Large files go up in parts. A file that cannot be stored is skipped with a line in ``notes``
        (``files/<name> not uploaded: <why>``, the name's bytes that are not UTF-8 shown as ``\\xNN``):
        it is the job's output, not a failure of the service, and nothing else is lost. Skipped: a
        name that is not UTF-8, holds a control character or makes a key over S3's ``MAX_KEY_BYTES``;
        a symbolic link (to a file or a folder: it is not followed, so nothing outside the folder is
        read); a named pipe, socket
        or device; a file or folder the worker cannot read; a file removed before its upload; a file
        S3 refuses for its own key or size. At most ``MAX_SKIPPED_NOTES`` are named, then one line
        counts the rest.

        Parameters
        ----------
        directory : Path
            The directory to walk.
        prefix : str
            Key prefix, ending with ``/``.
        notes : list of str or None
            Receives the lines of the files skipped.

        Returns
        -------
        list of str
            The keys written, in the order written.

        Raises
        ------
        StorageError
            S3 failed for another reason than the object itself (unreachable, access denied, ...).
        """
        skipped: list[str] = []
        keys = []

        def unreadable_folder(exc: OSError) -> None:
            name = Path(exc.filename).relative_to(directory).as_posix() + "/"
            skipped.append(_skip_note(name, exc.strerror or type(exc).__name__))

        for root, dirnames, filenames in os.walk(directory, onerror=unreadable_folder, followlinks=False):
            for dirname in sorted(dirnames):
                if Path(root, dirname).is_symlink():  # os.walk does not enter it: say so
                    name = Path(root, dirname).relative_to(directory).as_posix()
                    skipped.append(_skip_note(name, "a symbolic link (outputs are regular files)"))
            dirnames.sort()
            for filename in sorted(filenames):
                path = Path(root, filename)
                name = path.relative_to(directory).as_posix()
                why = self._upload_file(path, prefix + name)
                if why is None:
                    keys.append(prefix + name)
                else:
                    skipped.append(_skip_note(name, why))
        if notes is not None:
            notes.extend(skipped[:MAX_SKIPPED_NOTES])
            if len(skipped) > MAX_SKIPPED_NOTES:
                notes.append(f"{len(skipped) - MAX_SKIPPED_NOTES} more output files not uploaded")
        return keys

    def _upload_file(self, path: Path, key: str) -> str | None:
        """Upload one file to ``key``; None when stored, else why it was skipped.

        Raises ``StorageError`` for an S3 failure that is not about this object.
        """
        why = _key_problem(key)
        if why is not None:
            return why
        try:
            return self._upload_regular_file(path, key)
        except FileNotFoundError:
            return "removed before it was uploaded"
        except OSError as exc:
            return exc.strerror or type(exc).__name__
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in _OBJECT_REFUSED_CODES:
                return f"S3 refused it ({code})"
            raise StorageError(f"cannot upload {path} to s3://{self._bucket}/{key}: {exc}") from exc
        except (BotoCoreError, Boto3Error) as exc:
            raise StorageError(f"cannot upload {path} to s3://{self._bucket}/{key}: {exc}") from exc

    def _upload_regular_file(self, path: Path, key: str) -> str | None:
        kind = _special_kind(path.lstat().st_mode)
        if kind is None:
            # No following a link swapped in since lstat, no blocking on a pipe swapped in.
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as body:
                kind = _special_kind(os.fstat(body.fileno()).st_mode)
                if kind is None:
                    content_type = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
                    self._client.upload_fileobj(
                        body, self._bucket, key, ExtraArgs={"ContentType": content_type}
                    )
                    return None
        return f"{kind} (outputs are regular files)"


def _key_problem(key: str) -> str | None:
    """Why S3 cannot take ``key`` (not UTF-8, a control character, over ``MAX_KEY_BYTES``), or None.

    Control characters (U+0000 to U+001F and U+007F) are among the characters AWS's object key naming
    guidelines say to avoid: S3's XML listings cannot return some of them as sent (XML turns a CR into
    a LF), and the local stack's S3 refuses a key with a line break; so such a name is skipped, never
    stored under a key that lists as another.
    """
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "its name is not UTF-8, which S3 keys must be"
    control = next((char for char in key if ord(char) < 0x20 or ord(char) == 0x7F), None)
    if control is not None:
        return f"its name holds the control character {control!r}, which S3 keys cannot carry safely"
    if size > MAX_KEY_BYTES:
        return f"its key would be {size} bytes of UTF-8, over S3's {MAX_KEY_BYTES}"
    return None


def _special_kind(mode: int) -> str | None:
    """What a file that is not a regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def shown_name(name: str) -> str:
    """A file name as a message shows it: bytes that are not UTF-8 (kept by ``os`` as surrogate
    escapes) as ``\\xNN`` and control characters as their escapes (``\\n``), so the text is valid
    UTF-8 on one line whatever the name held."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    return "".join(repr(char)[1:-1] if ord(char) < 0x20 or ord(char) == 0x7F else char for char in text)


def _skip_note(name: str, why: str) -> str:
    return f"files/{shown_name(name)} not uploaded: {why}"
