"""The data stack: the data KMS key and the datasets, artifacts and access-log buckets."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Duration
from constructs import Construct

from gpu_constructs.storage import PlatformStorage
from stacks.base import PlatformStack


class DataStack(PlatformStack):
    """KMS key with rotation and three secure buckets with lifecycle rules and access logging."""

    def __init__(self, scope: Construct, construct_id: str, **kwargs: Any) -> None:
        super().__init__(scope, construct_id, **kwargs)
        data = self.config.data
        self.storage = PlatformStorage(
            self,
            "Storage",
            removal_policy=self.removal,
            checkpoint_expiration=Duration.days(data.checkpoint_expiration_days),
            noncurrent_version_expiration=Duration.days(data.noncurrent_version_expiration_days),
            abort_incomplete_multipart_upload_after=Duration.days(data.abort_incomplete_multipart_upload_days),
            access_logs_expiration=Duration.days(data.access_logs_expiration_days),
        )
        CfnOutput(self, "DatasetsBucketName", value=self.storage.datasets_bucket.bucket_name)
        CfnOutput(self, "ArtifactsBucketName", value=self.storage.artifacts_bucket.bucket_name)
        CfnOutput(self, "DataKeyArn", value=self.storage.key.key_arn)
