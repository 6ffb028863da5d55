"""The data stack: the data KMS key and the datasets, artifacts and access-log buckets, and the environment's
AWS Budgets cost budget (the one stack every environment has)."""

from __future__ import annotations

from aws_cdk import CfnOutput, StackProps
from constructs import Construct

from gpu_constructs.budgets import CostBudget
from gpu_constructs.storage import PlatformStorage
from stacks.base import PlatformStack
from stacks.config import BudgetConfig, DataConfig
from stacks.context import StackContext


class DataStack(PlatformStack):
    """KMS key with rotation and three secure buckets with lifecycle rules and access logging.

    :param data: the ``data`` section.
    :param budget: the ``budget`` section (default: no budget): a monthly cost budget on the environment's tags
        (``context.tags``) with its own encrypted notification topic (output ``BudgetTopicArn``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        data: DataConfig,
        budget: BudgetConfig | None = None,
        props: StackProps | None = None,
    ) -> None:
        super().__init__(scope, construct_id, context=context, props=props)
        self.storage = PlatformStorage(self, "Storage", removal_policy=self.removal, **data.storage_props())
        CfnOutput(self, "DatasetsBucketName", value=self.storage.datasets_bucket.bucket_name)
        CfnOutput(self, "ArtifactsBucketName", value=self.storage.artifacts_bucket.bucket_name)
        CfnOutput(self, "DataKeyArn", value=self.storage.key.key_arn)
        #: The environment's cost budget, or None.
        self.budget: CostBudget | None = None
        if budget is not None:
            self.budget = CostBudget(
                self,
                "Budget",
                budget_name=context.resource_name("monthly-cost"),
                removal_policy=self.removal,
                **budget.budget_props(dict(context.tags)),
            )
            CfnOutput(self, "BudgetTopicArn", value=self.budget.topic.topic_arn)
