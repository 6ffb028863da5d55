"""An alarm may hold only one CloudWatch Metrics Insights query.

CloudWatch evaluates a metric alarm by fetching its ``Metrics`` the way ``GetMetricData`` does, and a
``GetMetricData`` request may carry one Metrics Insights query at most. AWS: Amazon CloudWatch User Guide,
"Metrics Insights quotas"
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-metrics-insights-limits.html): "Each
GetMetricData operation can have only one query"; Amazon CloudWatch API Reference, "GetMetricData"
(https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_GetMetricData.html): "If you include a
Metrics Insights query, each GetMetricData operation can include only one query. But the same GetMetricData
operation can also retrieve other metrics." An alarm that combines two or more queries with metric math (GPU
low AND CPU busy, say) cannot be evaluated. Math over one query is fine: "You can use a Metrics Insights query
as an input to a metric math function" (User Guide, "Use Metrics Insights queries with metric math",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-metrics-insights-math.html). To
combine conditions on several queries, give each query its own alarm and join them with an
``AWS::CloudWatch::CompositeAlarm`` (``AlarmRule``: ``ALARM(a) AND (ALARM(b) OR ALARM(c))``); the User Guide
suggests the same for math alarms that outgrow their limits: "Split your logic across multiple alarms and
combine them using a composite alarm." ("Limits",
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-limits.html).

Non-compliant: an ``AWS::CloudWatch::Alarm`` whose ``Metrics`` hold two or more items with an ``Expression`` that
is a Metrics Insights query (starts with ``SELECT``, in any case; literal parts of an ``Fn::Join``/``Fn::Sub``
are read). Compliant: one query (with or without math over it), metric math over ``MetricStat`` metrics or
``SEARCH`` expressions, or a single-metric alarm (no ``Metrics``: not applicable).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_constructs.rules._rule import (
    COMPLIANT,
    NON_COMPLIANT,
    NOT_APPLICABLE,
    Resource,
    Result,
    as_list,
    flatten,
    rule,
)

MAX_QUERIES = 1


def is_metrics_insights_query(expression: object) -> bool:
    """Whether a ``MetricDataQuery.Expression`` is a Metrics Insights query (``SELECT ...``, any case)."""
    return flatten(expression).lstrip().upper().startswith("SELECT")


@rule(
    id="AlarmOneMetricsInsightsQuery",
    resource_types=("AWS::CloudWatch::Alarm",),
    info="A CloudWatch alarm holds more than one Metrics Insights query (SELECT ...): an alarm is evaluated "
    "with one GetMetricData request, which can have only one query. Give each query its own alarm and join "
    "them with an AWS::CloudWatch::CompositeAlarm.",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    metrics = resource.properties.get("Metrics")
    if not isinstance(metrics, list):
        return NOT_APPLICABLE
    queries = [m for m in as_list(metrics) if isinstance(m, Mapping) and is_metrics_insights_query(m.get("Expression"))]
    return NON_COMPLIANT if len(queries) > MAX_QUERIES else COMPLIANT
