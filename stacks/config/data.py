"""The ``data`` section: buckets, keys and their lifecycle."""

from __future__ import annotations

from pydantic import Field

from stacks.config._base import Days, Retention, StrictModel


class DataConfig(StrictModel):
    """Buckets, keys and their lifecycle."""

    log_retention_days: Retention = Field(
        90, description="Retention of the platform's CloudWatch log groups (jobs, state machines)"
    )
    access_logs_expiration_days: Days = Field(365, description="Days S3 server access logs are kept")
    checkpoint_expiration_days: Days = Field(
        30, description="Days training checkpoints (artifacts bucket, checkpoints/ prefix) are kept"
    )
    noncurrent_version_expiration_days: Days = Field(
        30, description="Days a non-current object version is kept in versioned buckets"
    )
    abort_incomplete_multipart_upload_days: Days = Field(
        7, description="Days after which incomplete multipart uploads are aborted"
    )
