"""Uploading a code package to S3 once per content.

The key of a package holds the SHA-256 of its bytes (``gpu_constructs.training_spec.code_package.code_s3_key``),
so an object that already has the key holds the same bytes: :func:`upload_package` asks S3 first
(``HeadObject``) and uploads only when the key is new, so launching again from an unchanged folder sends
nothing. The object is encrypted with the setup's KMS key (SSE-KMS: ``PutObject`` with
``ServerSideEncryption=aws:kms`` and ``SSEKMSKeyId``; Amazon S3 User Guide, "Using server-side encryption
with AWS KMS keys (SSE-KMS)").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuctl.aws_errors import AwsProblem, explain

__all__ = ["upload_package"]

#: HeadObject answers a missing key with HTTP 404 and no error body, so botocore's error code is ``404``
#: (``NoSuchKey`` / ``NotFound`` are what other clients and stubs report).
_MISSING_CODES = frozenset({"404", "NoSuchKey", "NotFound"})


def _size(n: int) -> str:
    return f"{n / 1024**2:.1f} MiB" if n >= 1024**2 else f"{n / 1024:.1f} KiB"


def _exists(s3_client: Any, bucket: str, key: str) -> bool:
    try:
        s3_client.head_object(Bucket=bucket, Key=key)
    except Exception as exc:
        response: dict[str, Any] = getattr(exc, "response", None) or {}
        code = str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""
        if code in _MISSING_CODES:
            return False
        if code == "403":
            # S3 answers 403 instead of 404 for a missing key when the caller may not list the bucket, and a
            # HEAD response has no body to say which (Amazon S3 API Reference, HeadObject).
            raise AwsProblem(
                f"S3 refused HeadObject on s3://{bucket}/{key} (403 Forbidden).",
                f"use a role that may read and list s3://{bucket}/code/ (s3:GetObject, s3:ListBucket) and "
                "write it (s3:PutObject, kms:GenerateDataKey on the setup's key)",
                "AccessDenied",
            ) from exc
        raise explain(exc, operation="HeadObject") from exc
    return True


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
