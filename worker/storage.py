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

    def upload_directory(self, directory: Path, prefix: str, notes: list[str] | None = None) -> list[str]:
        """Upload every regular file under a directory to ``<prefix><path relative to directory>``.

        Symbolic links and other special files are skipped. Large files go up in parts. A file the
        worker cannot read (no permission, removed while the walk ran) is skipped, with a line in
        ``notes``: it is the job's output, not a failure of the service.

        Parameters
        ----------
        directory : Path
            The directory to walk.
        prefix : str
            Key prefix, ending with ``/``.
        notes : list of str or None
            Receives ``files/<path> not uploaded: <why>`` for each file skipped.

        Returns
        -------
        list of str
            The keys written, in the order written.

        Raises
        ------
        StorageError
            An upload failed.
        """
        keys = []
        for root, dirnames, filenames in os.walk(directory, followlinks=False):
            dirnames.sort()
            for filename in sorted(filenames):
                path = Path(root, filename)
                key = prefix + path.relative_to(directory).as_posix()
                content_type = mimetypes.guess_type(filename)[0] or "application/octet-stream"
                try:
                    if not stat.S_ISREG(path.lstat().st_mode):
                        continue
                    with path.open("rb") as body:
                        self._client.upload_fileobj(
                            body, self._bucket, key, ExtraArgs={"ContentType": content_type}
                        )
                except OSError as exc:
                    if notes is not None:
                        name = key.removeprefix(prefix)
                        notes.append(f"files/{name} not uploaded: {exc.strerror or type(exc).__name__}")
                    continue
                except (ClientError, BotoCoreError, Boto3Error) as exc:
                    raise StorageError(f"cannot upload {path} to s3://{self._bucket}/{key}: {exc}") from exc
                keys.append(key)
        return keys
