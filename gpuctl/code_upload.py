"""Uploading a code package to S3 once per content.

The key of a package holds the SHA-256 of its bytes (``gpu_constructs.training_spec.code_package.code_s3_key``),
so an object that already has the key holds the same bytes: :func:`upload_package` asks S3 first
(a listing of that one key) and uploads only when the key is new, so launching again from an unchanged folder sends
nothing. The object is encrypted with the setup's KMS key (SSE-KMS: ``PutObject`` with
``ServerSideEncryption=aws:kms`` and ``SSEKMSKeyId``; Amazon S3 User Guide, "Using server-side encryption
with AWS KMS keys (SSE-KMS)").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuctl.aws_errors import AwsProblem, explain

__all__ = ["upload_package"]


def _size(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB" if n >= 1024**2 else f"{n / 1024:.1f} KiB"


def _exists(s3_client: Any, bucket: str, key: str) -> bool:
    """Whether ``key`` is in the bucket, asked with a listing of exactly that key (``ListObjectsV2`` with
    ``Prefix=key``), which S3 authorizes as ``s3:ListBucket`` with ``s3:prefix`` = the key: what
    ``TrainingPipeline.grant_run_jobs`` grants. (``HeadObject`` would need a listing permission on the bucket
    that no ``s3:prefix`` condition can narrow, since HeadObject sends no prefix: without it S3 answers a missing
    key with 403 instead of 404; Amazon S3 API Reference, HeadObject, "Permissions".)"""
    try:
        listing = s3_client.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1)
    except Exception as exc:
        response: dict[str, Any] = getattr(exc, "response", None) or {}
        code = str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""
        if code in ("AccessDenied", "403"):
            raise AwsProblem(
                f"S3 refused ListObjectsV2 of s3://{bucket}/{key} (AccessDenied).",
                f"use a role that may list and read s3://{bucket}/{key.rsplit('/', 2)[0]}/ (s3:ListBucket with that "
                "s3:prefix, s3:GetObject) and write it (s3:PutObject, kms:GenerateDataKey on the setup's key): "
                "TrainingPipeline.grant_run_jobs grants exactly this",
                "AccessDenied",
            ) from exc
        raise explain(exc, operation="ListObjectsV2") from exc
    return any(item.get("Key") == key for item in listing.get("Contents") or [])


def upload_package(
    s3_client: Any,
    bucket: str,
    key: str,
    data: bytes,
    kms_key_id: str | None,
    *,
    progress: Callable[[str], object] = print,
) -> bool:
    """Put ``data`` at ``s3://bucket/key`` unless an object with that key exists; True when it uploaded.

    :param kms_key_id: the KMS key (id, ARN or alias) the object is encrypted with; ``None`` leaves the key to
        the bucket's default SSE-KMS key.
    :param progress: called with one line before an upload, or one line saying the upload was skipped.
    :raises AwsProblem: what went wrong in plain words, with the next step (:func:`gpuctl.aws_errors.explain`).
    """
    uri = f"s3://{bucket}/{key}"
    if _exists(s3_client, bucket, key):
        progress(f"code package {uri} is already there (same content); not uploaded again")
        return False
    progress(f"uploading the code package ({_size(len(data))}) to {uri}")
    request: dict[str, Any] = {
        "Bucket": bucket,
        "Key": key,
        "Body": data,
        "ContentType": "application/gzip" if key.endswith(".gz") else "application/octet-stream",
        "ServerSideEncryption": "aws:kms",
    }
    if kms_key_id:
        request["SSEKMSKeyId"] = kms_key_id
    try:
        s3_client.put_object(**request)
    except Exception as exc:
        raise explain(exc, operation="PutObject") from exc
    return True
