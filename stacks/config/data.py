"""The ``data`` section: buckets, keys and their lifecycle."""

from __future__ import annotations

from typing import Any

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

    def storage_props(self) -> dict[str, Any]:
        """The keyword arguments of :class:`~gpu_constructs.storage.PlatformStorage` this section sets (the
        stack adds the removal policy)."""
        from aws_cdk import Duration

        return {
            "checkpoint_expiration": Duration.days(self.checkpoint_expiration_days),
            "noncurrent_version_expiration": Duration.days(self.noncurrent_version_expiration_days),
            "abort_incomplete_multipart_upload_after": Duration.days(self.abort_incomplete_multipart_upload_days),
            "access_logs_expiration": Duration.days(self.access_logs_expiration_days),
        }
