"""A monthly AWS Budgets cost budget on cost-allocation tags, with notifications to an encrypted SNS topic.

What AWS documents and this construct relies on:

* **Tag filter.** ``FilterExpression`` is the Budgets ``Expression`` (CloudFormation ``AWS::Budgets::Budget``
  ``BudgetData.FilterExpression``, https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/
  aws-properties-budgets-budget-expression.html); its ``Tags`` (``TagValues``: ``Key``, ``Values``,
  ``MatchOptions``) is "a filter that acts on Cost Allocation Tags", values of one key combine with OR, and
  ``And`` combines expressions (AWS Billing and Cost Management API Reference, "Expression",
  https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/API_Expression.html, example
  ``{"Tags": {"Key": "TagName", "Values": ["Value1"]}}``: the tag's own key, not ``user:<key>``, which is the
  spelling of the older ``CostFilters`` map, ``"TagKeyValue": ["user:<key>$<value>"]``). One tag is one ``Tags``
  expression; several are their ``And``.
* **Cost allocation tags must be activated.** A user-defined tag filters costs only once its key is an
  active cost allocation tag (Billing console, "Cost allocation tags", or Cost Explorer
  ``UpdateCostAllocationTagsStatus``, https://docs.aws.amazon.com/aws-cost-management/latest/APIReference/
  API_CostAllocationTagStatusEntry.html, ``Status`` ``Active``; in an organization the management account does
  it). After the tags are first applied "it can take up to 24 hours for the tag keys to appear" for activation,
  so this stays a documented step of the first deploy rather than a resource of the template.
* **Notifications.** ``ACTUAL`` and ``FORECASTED`` notifications, ``GREATER_THAN`` a ``PERCENTAGE`` of the limit;
  each has "one SNS subscriber and up to 10 email subscribers" (botocore ``budgets`` model,
  ``NotificationWithSubscribers``); limits in :mod:`gpu_constructs.budgets.limits`.
* **The topic.** "Your budget must have permissions to send a notification to your topic", and "Amazon SNS topics
  must be in the same account as the Budgets you're configuring" (AWS Cost Management User Guide, "Creating an
  Amazon SNS topic for budget notifications",
  https://docs.aws.amazon.com/cost-management/latest/userguide/budgets-sns-policy.html). On an encrypted topic
  the key policy must also allow the service ``kms:GenerateDataKey*`` and ``kms:Decrypt`` (SNS Developer Guide,
  "Enable compatibility between event sources from AWS services and encrypted topics",
  https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services). Both
  statements come from :meth:`gpu_constructs.topics.Publisher.budgets` (``aws:SourceAccount`` and
  ``aws:SourceArn`` ``arn:<partition>:budgets::<account>:*``); the rule pack checks them on any template
  (``GpuPlatform-TopicAdmitsPublishers``, ``GpuPlatform-ServicePrincipalWithoutSourceCondition``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import RemovalPolicy
from aws_cdk import aws_budgets as budgets
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from gpu_constructs.budgets.limits import check_budget
from gpu_constructs.errors import ValidationError, path_of
from gpu_constructs.keys import new_key
from gpu_constructs.topics import Publisher, admit_publishers, notification_topic


def tag_filter(tags: Mapping[str, str]) -> budgets.CfnBudget.ExpressionProperty:
    """The ``FilterExpression`` that keeps the costs of resources carrying every tag of ``tags`` (key = value)."""
    exprs = [
        budgets.CfnBudget.ExpressionProperty(
            tags=budgets.CfnBudget.TagValuesProperty(key=key, values=[value], match_options=["EQUALS"])
        )
        for key, value in sorted(tags.items())
    ]
    return exprs[0] if len(exprs) == 1 else budgets.CfnBudget.ExpressionProperty(and_=exprs)


class CostBudget(Construct):
    """A monthly cost budget (``AWS::Budgets::Budget``, ``COST``, ``MONTHLY``, USD) on cost-allocation tags.

    :param monthly_limit_usd: the budgeted amount per calendar month, in US dollars.
    :param cost_allocation_tags: tag key -> value; only costs of resources with all of them count. Activate the
        keys as cost allocation tags in the Billing console (see the module documentation).
    :param alert_percentages: one ``ACTUAL`` notification per percentage of the limit (default: 80 and 100).
    :param forecast_alert_percent: a ``FORECASTED`` notification at this percentage (default: 100; None: none).
    :param emails: addresses AWS Budgets e-mails directly on every notification (at most 10; default: none).
    :param topic: the SNS topic notified on every notification (default: a new topic encrypted with a new
        customer managed key, ``Key``/``Topic`` under this construct); Budgets is admitted on the topic and on
        its key either way.
    :param budget_name: the budget's name (default: generated by CloudFormation); changing it replaces the budget.
    :param removal_policy: of the key created for the default topic (default: RETAIN).
    :raises ValidationError: a setting AWS Budgets refuses (:func:`gpu_constructs.budgets.limits.check_budget`).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        monthly_limit_usd: float,
        cost_allocation_tags: Mapping[str, str],
        alert_percentages: Sequence[float] = (80, 100),
        forecast_alert_percent: float | None = 100,
        emails: Sequence[str] = (),
        topic: sns.ITopic | None = None,
        budget_name: str | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        problems = check_budget(
            monthly_limit_usd=monthly_limit_usd,
            alert_percentages=alert_percentages,
            forecast_alert_percent=forecast_alert_percent,
            emails=emails,
            cost_allocation_tags=cost_allocation_tags,
            budget_name=budget_name,
        )
        if problems:
            raise ValidationError(path_of(self), "; ".join(problems))
        #: The key of the topic this construct created (None when a topic was passed).
        self.key: kms.IKey | None = None
        if topic is None:
            self.key = new_key(self, "Key", description=f"Encrypts the budget notifications of {self.node.path}",
                               removal_policy=removal_policy)  # fmt: skip
            topic = notification_topic(
                self, "Topic", display_name="AWS Budgets", master_key=self.key, publishers=[Publisher.budgets(self)]
            )
        else:
            admit_publishers(topic, Publisher.budgets(self))
        #: The topic every notification publishes to.
        self.topic: sns.ITopic = topic
        subscribers = [budgets.CfnBudget.SubscriberProperty(subscription_type="SNS", address=topic.topic_arn)]
        subscribers += [budgets.CfnBudget.SubscriberProperty(subscription_type="EMAIL", address=a) for a in emails]
        notifications = [("ACTUAL", p) for p in alert_percentages]
        if forecast_alert_percent is not None:
            notifications.append(("FORECASTED", forecast_alert_percent))
        #: The ``AWS::Budgets::Budget``.
        self.budget = budgets.CfnBudget(
            self,
            "Resource",
            budget=budgets.CfnBudget.BudgetDataProperty(
                budget_type="COST",
                time_unit="MONTHLY",
                budget_name=budget_name,
                budget_limit=budgets.CfnBudget.SpendProperty(amount=monthly_limit_usd, unit="USD"),
                filter_expression=tag_filter(cost_allocation_tags),
            ),
            notifications_with_subscribers=[
                budgets.CfnBudget.NotificationWithSubscribersProperty(
                    notification=budgets.CfnBudget.NotificationProperty(
                        notification_type=kind,
                        comparison_operator="GREATER_THAN",
                        threshold=percent,
                        threshold_type="PERCENTAGE",
                    ),
                    subscribers=subscribers,
                )
                for kind, percent in notifications
            ],
        )
        # The topic policy must exist before Budgets validates its SNS subscriber (a topic of this stack: an
        # imported one has no policy child here).
        policy = topic.node.try_find_child("Policy")
        if policy is not None:
            self.budget.node.add_dependency(policy)


__all__ = ["CostBudget", "tag_filter"]
