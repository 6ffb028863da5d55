"""The endpoint's monitoring: its metrics, the monitoring key, rollback alarms, log metric filters, dashboard."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from gpu_constructs.endpoint.alarms import EndpointAlarms
from gpu_constructs.endpoint.base import INSTANCE_METRICS_NAMESPACE, INVOCATION_METRICS_NAMESPACE, UNIT_NAMES
from gpu_constructs.endpoint.protocols import LogMetricFilterSpec
from gpu_constructs.errors import fail
from gpu_constructs.keys import allow_cloudwatch_logs, new_key
from gpu_constructs.topics import alarm_action

_UNITS: dict[str, cloudwatch.Unit] = {name: getattr(cloudwatch.Unit, name.upper()) for name in UNIT_NAMES}
_WIDTH = 8


def monitoring_key(
    scope: Construct, construct_id: str, *, removal_policy: RemovalPolicy = RemovalPolicy.RETAIN
) -> kms.Key:
    """A KMS key (rotation on) for endpoint log groups and alarm/notification topics.

    Its policy lets CloudWatch Logs use it for ``/aws/sagemaker/Endpoints/*`` log groups of this
    account and region. CloudWatch alarms are admitted (with source conditions) when a topic it encrypts
    becomes an alarm action (:func:`gpu_constructs.topics.alarm_action`).
    """
    key = new_key(
        scope,
        construct_id,
        description=f"Encrypts SageMaker endpoint logs and alarm topics ({scope.node.path})",
        removal_policy=removal_policy,
    )
    stack = Stack.of(scope)
    allow_cloudwatch_logs(
        key, stack, sid="AllowCloudWatchLogsForEndpointLogGroups", log_group="/aws/sagemaker/Endpoints/*"
    )
    return key


@dataclass(frozen=True)
class EndpointMetrics:
    """CloudWatch metrics of one endpoint variant (dimensions EndpointName and, by default, VariantName)."""

    endpoint_name: str
    variant_name: str
    period: Duration

    def metric(
        self,
        metric_name: str,
        *,
        namespace: str = INVOCATION_METRICS_NAMESPACE,
        statistic: str = "Sum",
        period: Duration | None = None,
        variant_dimension: bool = True,
        label: str | None = None,
    ) -> cloudwatch.Metric:
        dims = {"EndpointName": self.endpoint_name}
        if variant_dimension:
            dims["VariantName"] = self.variant_name
        return cloudwatch.Metric(
            namespace=namespace,
            metric_name=metric_name,
            dimensions_map=dims,
            statistic=statistic,
            period=period or self.period,
            label=label,
        )

    def instance(self, metric_name: str, *, statistic: str = "Average") -> cloudwatch.Metric:
        """A per-instance utilization metric (GPUUtilization, GPUMemoryUtilization, CPUUtilization, ...)."""
        return self.metric(metric_name, namespace=INSTANCE_METRICS_NAMESPACE, statistic=statistic)

    def endpoint(self, metric_name: str, statistic: str) -> cloudwatch.Metric:
        """A metric of the whole endpoint (no VariantName dimension), such as the asynchronous backlog."""
        return self.metric(metric_name, statistic=statistic, variant_dimension=False)


def create_alarms(
    scope: Construct, metrics: EndpointMetrics, thresholds: EndpointAlarms, topic: sns.ITopic, gpu_count: int
) -> list[cloudwatch.Alarm]:
    """The rollback alarms (5xx rate, ModelLatency p99 and, with GPUs, GPU memory), notifying ``topic``."""
    th = thresholds
    name = metrics.endpoint_name
    action = alarm_action(topic)
    common: dict[str, Any] = {
        "evaluation_periods": th.evaluation_periods,
        "datapoints_to_alarm": th.datapoints_to_alarm,
        "treat_missing_data": cloudwatch.TreatMissingData.NOT_BREACHING,
        "comparison_operator": cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    }
    # Invocation5XXErrors is 1 per 5xx response and 0 otherwise, so its Average is the 5xx rate.
    errors = cloudwatch.MathExpression(
        expression="100 * e",
        using_metrics={"e": metrics.metric("Invocation5XXErrors", statistic="Average")},
        label="5xx responses (%)",
        period=th.metric_period(),
    )
    latency_ms = th.model_latency_p99().to_milliseconds()
    five_xx = f"more than {th.max_5xx_percent:g}% of invocations answered 5xx"
    specs: list[tuple[str, cloudwatch.IMetric, float, str]] = [
        ("Http5xxRateAlarm", errors, th.max_5xx_percent, five_xx),
        # ModelLatency is reported in microseconds.
        (
            "ModelLatencyP99Alarm",
            metrics.metric("ModelLatency", statistic="p99"),
            latency_ms * 1000,
            f"ModelLatency p99 above {latency_ms:g} ms",
        ),
    ]
    if gpu_count:
        # GPUMemoryUtilization sums the GPUs of an instance (0-100 per GPU).
        gpu_memory = metrics.instance("GPUMemoryUtilization", statistic="Maximum")
        what = f"GPU memory above {th.max_gpu_memory_percent:g}% per GPU ({gpu_count} GPU(s) per instance)"
        specs.append(("GpuMemoryAlarm", gpu_memory, th.max_gpu_memory_percent * gpu_count, what))
    alarms = []
    for alarm_id, metric, threshold, what in specs:
        alarm = cloudwatch.Alarm(
            scope,
            alarm_id,
            metric=metric,
            threshold=threshold,
            alarm_description=f"{name}: {what}; rolls a deployment back",
            **common,
        )
        alarm.add_alarm_action(action)
        alarms.append(alarm)
    return alarms


def check_log_metric_filters(where: str, filters: Sequence[LogMetricFilterSpec]) -> None:
    """Each metric name once, and units CloudWatch knows."""
    names = [f.metric_name for f in filters]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise fail(where, "log_metric_filters (metric names)", dupes, "each metric name once")
    unknown = sorted({f.unit for f in filters if f.unit not in _UNITS})
    if unknown:
        raise fail(where, "log_metric_filters (units)", unknown, ", ".join(_UNITS))


def create_metric_filters(
    scope: Construct, log_group: logs.ILogGroup, filters: Sequence[LogMetricFilterSpec], namespace: str
) -> dict[str, cloudwatch.Metric]:
    """Metric filters over the server's JSON log lines, in ``<namespace>/<endpoint>``; their metrics by name."""
    metrics: dict[str, cloudwatch.Metric] = {}
    for spec in filters:
        mf = logs.MetricFilter(
            scope,
            f"{spec.metric_name}MetricFilter",
            log_group=log_group,
            filter_pattern=logs.FilterPattern.literal(spec.filter_pattern),
            metric_namespace=namespace,
            metric_name=spec.metric_name,
            metric_value=spec.metric_value,
            unit=_UNITS[spec.unit],
        )
        metrics[spec.metric_name] = mf.metric(statistic="Average", period=Duration.minutes(1))
    return metrics


def create_dashboard(
    scope: Construct,
    metrics: EndpointMetrics,
    *,
    is_async: bool,
    gpu_count: int,
    log_metrics: Mapping[str, cloudwatch.Metric],
    alarms: Sequence[cloudwatch.Alarm],
) -> cloudwatch.Dashboard:
    """A dashboard: traffic, errors, latency; utilization and server metrics; the backlog; alarm states."""
    board = cloudwatch.Dashboard(
        scope,
        "Dashboard",
        dashboard_name=metrics.endpoint_name,
        period_override=cloudwatch.PeriodOverride.AUTO,
    )
    board.add_widgets(*_traffic_row(metrics, is_async))
    board.add_widgets(*_utilization_row(metrics, gpu_count, log_metrics))
    if is_async:
        board.add_widgets(
            cloudwatch.GraphWidget(
                title="Asynchronous backlog",
                left=[
                    metrics.endpoint("ApproximateBacklogSize", "Average"),
                    metrics.endpoint("ApproximateBacklogSizePerInstance", "Average"),
                ],
                right=[metrics.endpoint("HasBacklogWithoutCapacity", "Maximum")],
                width=_WIDTH * 2,
            )
        )
    board.add_widgets(cloudwatch.AlarmStatusWidget(title="Rollback alarms", alarms=list(alarms), width=_WIDTH * 3))
    return board


def _traffic_row(metrics: EndpointMetrics, is_async: bool) -> list[cloudwatch.IWidget]:
    traffic = (
        [metrics.metric("InvocationsProcessed", variant_dimension=False, label="processed")]
        if is_async
        else [metrics.metric("Invocations", label="invocations")]
    )
    errors = [
        metrics.metric("Invocation4XXErrors", label="4xx"),
        metrics.metric("Invocation5XXErrors", label="5xx"),
    ]
    latency = [
        cloudwatch.MathExpression(
            expression=f"m{p} / 1000",
            using_metrics={f"m{p}": metrics.metric("ModelLatency", statistic=f"p{p}")},
            label=f"ModelLatency p{p} (ms)",
            period=Duration.minutes(1),
        )
        for p in (50, 99)
    ]
    return [
        cloudwatch.GraphWidget(title="Invocations", left=traffic, width=_WIDTH),
        cloudwatch.GraphWidget(title="4xx and 5xx responses", left=errors, width=_WIDTH),
        cloudwatch.GraphWidget(title="Model latency (ms)", left=latency, width=_WIDTH),
    ]


def _utilization_row(
    metrics: EndpointMetrics, gpu_count: int, log_metrics: Mapping[str, cloudwatch.Metric]
) -> list[cloudwatch.IWidget]:
    row: list[cloudwatch.IWidget] = []
    if gpu_count:
        row.append(
            cloudwatch.GraphWidget(
                title=f"GPU and GPU memory (% summed over {gpu_count} GPU(s))",
                left=[metrics.instance("GPUUtilization"), metrics.instance("GPUMemoryUtilization")],
                width=_WIDTH,
            )
        )
    utilization = [metrics.instance(n) for n in ("CPUUtilization", "MemoryUtilization", "DiskUtilization")]
    row.append(cloudwatch.GraphWidget(title="CPU, memory, disk (%)", left=utilization, width=_WIDTH))
    if log_metrics:
        row.append(
            cloudwatch.GraphWidget(
                title="Inference server (from logs)",
                left=[m.with_(label=name) for name, m in log_metrics.items() if name == "BatchSize"]
                or list(log_metrics.values())[:1],
                right=[m.with_(label=name) for name, m in log_metrics.items() if name != "BatchSize"],
                width=_WIDTH,
            )
        )
    return row
