"""S3: a geo zone's data bucket (``BlobStore``)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from functions.adapters.errors import Absent, translate_errors
from functions.domain.errors import PayloadTooLarge
from functions.ports import ObjectInfo, StoredObject

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef

# DeleteObjects takes at most 1000 keys a request (Amazon S3 API reference, DeleteObjects).
DELETE_BATCH_SIZE = 1000
STORE_FAILED = "The job's data could not be stored; try again shortly."
READ_FAILED = "The job's data could not be read; try again shortly."
LIST_FAILED = "The job's data could not be listed; try again shortly."
DELETE_FAILED = "The job's data could not be deleted; try again shortly."
COPY_FAILED = "The job's data could not be copied; try again shortly."
#: CopyObject requests in flight at once (``S3BlobStore.copy``): 1000 small objects in about 2 s.
COPY_CONCURRENCY = 16


class S3BlobStore:
    """``BlobStore`` on one bucket.

    Every call raises ``DependencyFailed`` when S3 fails, throttles (``SlowDown``) or cannot be
    reached (``functions.adapters.errors.translate_errors``); a missing object (GetObject's
    ``NoSuchKey``, HeadObject's ``404``) is None, not an error.

    Parameters
    ----------
    client : S3Client
        A boto3 S3 client of the bucket's region.
    bucket : str
        The bucket's name.
    """

    def __init__(self, client: S3Client, bucket: str) -> None:
        self._s3 = client
        self.bucket = bucket

    def put(self, key: str, data: bytes, content_type: str) -> None:
        """PutObject: store ``data`` (bytes) at ``key``, encrypted at rest by the bucket's default."""
        with translate_errors("s3", "PutObject", failed=STORE_FAILED):
            self._s3.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)

    def get(self, key: str, max_bytes: int | None = None) -> bytes | None:
        """GetObject: the object's bytes or None; ``PayloadTooLarge`` when it is over ``max_bytes``
        (the body is closed unread)."""
        try:
            with translate_errors("s3", "GetObject", failed=READ_FAILED, absent_ok=True):
                response = self._s3.get_object(Bucket=self.bucket, Key=key)
        except Absent:
            return None
        if max_bytes is not None and response["ContentLength"] > max_bytes:
            response["Body"].close()
            raise PayloadTooLarge(f"{key.rsplit('/', 1)[-1]} is over {max_bytes} bytes.")
        with translate_errors("s3", "GetObject", failed=READ_FAILED):
            return response["Body"].read()

    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None."""
        info = self.describe(key)
        return None if info is None else info.size

    def describe(self, key: str) -> ObjectInfo | None:
        """HeadObject: the object's size (bytes) and Content-Type, or None when it does not exist."""
        try:
            with translate_errors("s3", "HeadObject", failed=READ_FAILED, absent_ok=True):
                response = self._s3.head_object(Bucket=self.bucket, Key=key)
        except Absent:
            return None
        return ObjectInfo(
            key=key,
            size=int(response["ContentLength"]),
            content_type=str(response.get("ContentType") or "application/octet-stream"),
        )

    def list(self, prefix: str) -> list[StoredObject]:
        """ListObjectsV2: the objects under ``prefix`` (every page)."""
        objects: list[StoredObject] = []
        with translate_errors("s3", "ListObjectsV2", failed=LIST_FAILED):
            for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
                objects += [StoredObject(o["Key"], int(o["Size"])) for o in page.get("Contents", [])]
        return objects

    def list_page(
        self, prefix: str, start_after: str | None, max_keys: int
    ) -> tuple[Sequence[StoredObject], bool]:
        """One ListObjectsV2 request: up to ``max_keys`` objects after ``start_after``, and whether
        S3 has more (``IsTruncated``)."""
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": max_keys}
        if start_after is not None:
            params["StartAfter"] = start_after
        with translate_errors("s3", "ListObjectsV2", failed=LIST_FAILED):
            page = self._s3.list_objects_v2(**params)
        objects = [StoredObject(o["Key"], int(o["Size"])) for o in page.get("Contents", [])]
        return objects, bool(page.get("IsTruncated"))

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix`` (DeleteObjects, ``DELETE_BATCH_SIZE`` keys a request,
        quiet); returns how many."""
        keys = [o.key for o in self.list(prefix)]
        with translate_errors("s3", "DeleteObjects", failed=DELETE_FAILED):
            for start in range(0, len(keys), DELETE_BATCH_SIZE):
                batch: list[ObjectIdentifierTypeDef] = [
                    {"Key": k} for k in keys[start : start + DELETE_BATCH_SIZE]
                ]
                self._s3.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        return len(keys)

    def copy(self, copies: Sequence[tuple[str, str]]) -> tuple[str, ...]:
        """CopyObject each ``(source, target)`` within the bucket, ``COPY_CONCURRENCY`` at a time: the
        bytes stay in S3 (the object's Content-Type and metadata are kept, the bucket's default
        encryption applies); a target is overwritten, so a repeat copies the same again. Each object
        is at most 5 GiB (CopyObject's limit: S3 refuses a larger one, a ``DependencyFailed``).

        Returns the sources that do not exist (``NoSuchKey``), in the order given."""

        def one(pair: tuple[str, str]) -> str | None:
            source, target = pair
            try:
                with translate_errors("s3", "CopyObject", failed=COPY_FAILED, absent_ok=True):
                    self._s3.copy_object(
                        Bucket=self.bucket, Key=target, CopySource={"Bucket": self.bucket, "Key": source}
                    )
            except Absent:
                return source
            return None

        if not copies:
            return ()
        with ThreadPoolExecutor(max_workers=min(COPY_CONCURRENCY, len(copies))) as pool:
            return tuple(missing for missing in pool.map(one, copies) if missing is not None)

    def presigned_get(self, key: str, expires_seconds: int) -> str:
        """A presigned GET URL valid ``expires_seconds`` (``X-Amz-Expires``).

        SigV4 on the region's virtual-hosted endpoint when the client is built with
        ``functions.bootstrap.S3_CONFIG``. Signing is local: no request is made, nothing can fail.
        """
        return self._s3.generate_presigned_url(
            "get_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=expires_seconds
        )

    def presigned_put(self, key: str, expires_seconds: int, content_length: int, content_type: str) -> str:
        """A presigned PUT URL valid ``expires_seconds`` for exactly ``content_length`` bytes.

        ``Content-Length`` and ``Content-Type`` are signed headers (``X-Amz-SignedHeaders``), so S3
        refuses (403 SignatureDoesNotMatch) an upload of another size or type: the size limit is
        the signature's. A single PUT takes up to 5 GiB (S3's limit for one request).
        """
        return self._s3.generate_presigned_url(
            "put_object",
            Params={
                "Bucket": self.bucket,
                "Key": key,
                "ContentLength": content_length,
                "ContentType": content_type,
            },
            ExpiresIn=expires_seconds,
        )
