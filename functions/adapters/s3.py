"""S3: a geo zone's data bucket (``BlobStore``)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from functions.domain.errors import DependencyFailed, PayloadTooLarge
from functions.ports import ObjectInfo, StoredObject

_MISSING = {"NoSuchKey", "404", "NotFound"}


class S3BlobStore:
    """``BlobStore`` on one bucket.

    Parameters
    ----------
    client :
        A boto3 S3 client of the bucket's region.
    bucket : str
        The bucket's name.
    """

    def __init__(self, client: Any, bucket: str) -> None:
        self._s3 = client
        self.bucket = bucket

    def put(self, key: str, data: bytes, content_type: str) -> None:
        """Store ``data`` (bytes) at ``key``, encrypted at rest by the bucket's default."""
        try:
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        except ClientError as exc:
            raise DependencyFailed("The job's data could not be stored; try again shortly.") from exc

    def get(self, key: str, max_bytes: int | None = None) -> bytes | None:
        """The object's bytes or None; ``PayloadTooLarge`` when it is over ``max_bytes``."""
        try:
            response = self._s3.get_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                return None
            raise DependencyFailed("The job's data could not be read; try again shortly.") from exc
        if max_bytes is not None and response["ContentLength"] > max_bytes:
            response["Body"].close()
            raise PayloadTooLarge(f"{key.rsplit('/', 1)[-1]} is over {max_bytes} bytes.")
        data: bytes = response["Body"].read()
        return data

    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None."""
        info = self.describe(key)
        return None if info is None else info.size

    def describe(self, key: str) -> ObjectInfo | None:
        """HeadObject: the object's size (bytes) and Content-Type, or None when it does not exist."""
        try:
            response = self._s3.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in _MISSING:
                return None
            raise DependencyFailed("The job's data could not be read; try again shortly.") from exc
        return ObjectInfo(
            key=key,
            size=int(response["ContentLength"]),
            content_type=str(response.get("ContentType") or "application/octet-stream"),
        )

    def list(self, prefix: str) -> list[StoredObject]:
        """Objects under ``prefix`` (every page)."""
        objects: list[StoredObject] = []
        try:
            for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                objects += [StoredObject(o["Key"], int(o["Size"])) for o in page.get("Contents", [])]
        except ClientError as exc:
            raise DependencyFailed("The job's data could not be listed; try again shortly.") from exc
        return objects

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (1000 a request); returns how many."""
        keys = [o.key for o in self.list(prefix)]
        try:
            for start in range(0, len(keys), 1000):
                batch = [{"Key": k} for k in keys[start : start + 1000]]
                self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        except ClientError as exc:
            raise DependencyFailed("The job's data could not be deleted; try again shortly.") from exc
        return len(keys)

    def presigned_get(self, key: str, expires_seconds: int) -> str:
        """A presigned GET URL valid ``expires_seconds`` (``X-Amz-Expires``).

        SigV4 on the region's virtual-hosted endpoint when the client is built with
        ``functions.bootstrap.S3_CONFIG``. Signing is local: no request is made, nothing can fail.
        """
        url: str = self._s3.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_seconds
        )
        return url

    def presigned_put(self, key: str, expires_seconds: int, content_length: int, content_type: str) -> str:
        """A presigned PUT URL valid ``expires_seconds`` for exactly ``content_length`` bytes.

        ``Content-Length`` and ``Content-Type`` are signed headers (``X-Amz-SignedHeaders``), so S3
        refuses (403 SignatureDoesNotMatch) an upload of another size or type: the size limit is
        the signature's. A single PUT takes up to 5 GiB (S3's limit for one request).
        """
        url: str = self._s3.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": self.bucket,
                "Key": key,
                "ContentLength": content_length,
                "ContentType": content_type,
            },
            ExpiresIn=expires_seconds,
        )
        return url
