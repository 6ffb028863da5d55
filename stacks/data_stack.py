"""The data stack: the data KMS key and the datasets, artifacts and access-log buckets."""

from __future__ import annotations

from aws_cdk import CfnOutput, StackProps
from constructs import Construct

from gpu_constructs.storage import PlatformStorage
from stacks.base import PlatformStack
from stacks.config import DataConfig
from stacks.context import StackContext


class DataStack(PlatformStack):
    """KMS key with rotation and three secure buckets with lifecycle rules and access logging.

    :param data: the ``data`` section.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        data: DataConfig,
        props: StackProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id, context=context, props=props)
        self.storage = PlatformStorage(self, "Storage", removal_policy=self.removal, **data.storage_props())
        CfnOutput(self, "DatasetsBucketName", value=self.storage.datasets_bucket.bucket_name)
        CfnOutput(self, "ArtifactsBucketName", value=self.storage.artifacts_bucket.bucket_name)
        CfnOutput(self, "DataKeyArn", value=self.storage.key.key_arn)
