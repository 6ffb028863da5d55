"""The fleet's metrics, alarms and dashboard: GPU utilization, idle GPUs (cost), temperature, NVIDIA Xid
errors (from the kernel log) and boot failures."""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from constructs import Construct

from gpu_constructs.fleet.options import (
    BOOT_FAILED_MARKER,
    CW_AGENT_NAMESPACE,
    XID_MARKER,
    FleetAlarms,
)
from gpu_constructs.topics import alarm_action

_FIVE_MINUTES = Duration.minutes(5)
_AT_LEAST = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
#: Log metric filters: construct id prefix, metric name, marker in the fleet's logs.
_LOG_METRICS = (("XidErrors", XID_MARKER), ("BootFailures", BOOT_FAILED_MARKER))


def gpu_metric(
    fleet_name: str, name: str, *, statistic: str = "Average", period: Duration = _FIVE_MINUTES
) -> cloudwatch.Metric:
    """A CloudWatch agent ``nvidia_smi_<name>`` metric aggregated over the whole group."""
    return cloudwatch.Metric(
        namespace=CW_AGENT_NAMESPACE,
        metric_name=f"nvidia_smi_{name}",
        dimensions_map={"AutoScalingGroupName": fleet_name},
        statistic=statistic,
        period=period,
    )


@dataclass(frozen=True)
class _AlarmSpec:
    name: str
    metric: cloudwatch.Metric
    threshold: float
    comparison: cloudwatch.ComparisonOperator
    evaluation_periods: int
    description: str


def add_log_metrics(scope: Construct, log_group: logs.ILogGroup, namespace: str) -> dict[str, cloudwatch.Metric]:
    """One metric filter per marker of the fleet's logs (Xid errors, failed boots); their metrics by name."""
    metrics: dict[str, cloudwatch.Metric] = {}
    for name, marker in _LOG_METRICS:
        logs.MetricFilter(
            scope,
            f"{name}Filter",
            log_group=log_group,
            filter_pattern=logs.FilterPattern.all_terms(marker),
            metric_namespace=namespace,
            metric_name=name,
            metric_value="1",
            default_value=0,
        )
        metrics[name] = cloudwatch.Metric(namespace=namespace, metric_name=name, statistic="Sum", period=_FIVE_MINUTES)
    return metrics


def add_alarms(
    scope: Construct,
    fleet_name: str,
    settings: FleetAlarms,
    log_metrics: dict[str, cloudwatch.Metric],
    topic: sns.ITopic,
) -> dict[str, cloudwatch.Alarm]:
    """The fleet's alarms, each notifying ``topic``; no data (no instances) is not a problem.

    ``settings`` has its defaults set (its idle period is not ``None``)."""
    assert settings.idle_gpu_period is not None
    idle, minutes = settings.idle_gpu_threshold_percent, settings.idle_gpu_period.to_minutes()
    temperature = settings.max_gpu_temperature_celsius
    specs = [
        _AlarmSpec(
            "IdleGpu",
            gpu_metric(fleet_name, "utilization_gpu"),
            idle,
            cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            int(minutes // 5),
            f"GPUs of {fleet_name} averaged under {idle:g}% utilization for {minutes:g} minutes: scale the group "
            "in (cost)",
        ),
        _AlarmSpec(
            "GpuTemperature",
            gpu_metric(fleet_name, "temperature_gpu", statistic="Maximum"),
            temperature,
            _AT_LEAST,
            3,
            f"A GPU of {fleet_name} reached {temperature:g} C for 15 minutes (throttling, cooling)",
        ),
        _AlarmSpec(
            "XidErrors",
            log_metrics["XidErrors"],
            1,
            _AT_LEAST,
            1,
            f"NVIDIA Xid errors in the kernel log of {fleet_name} (see the kernel log streams)",
        ),
        _AlarmSpec(
            "BootFailures",
            log_metrics["BootFailures"],
            1,
            _AT_LEAST,
            1,
            f"An instance of {fleet_name} failed its boot check and was replaced (see the boot logs)",
        ),
    ]
    action = alarm_action(topic)
    alarms: dict[str, cloudwatch.Alarm] = {}
    for spec in specs:
        alarm = spec.metric.create_alarm(
            scope,
            f"{spec.name}Alarm",
            threshold=spec.threshold,
            comparison_operator=spec.comparison,
            evaluation_periods=spec.evaluation_periods,
            alarm_description=spec.description,
            # No instances (min 0) means no data: that is not a problem.
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarm.add_alarm_action(action)
        alarms[spec.name] = alarm
    return alarms


def add_dashboard(
    scope: Construct, fleet_name: str, title: str, idle_percent: float, alarms: list[cloudwatch.Alarm]
) -> cloudwatch.Dashboard:
    """The fleet's dashboard: GPU utilization, memory, temperature and power, instances, alarms."""
    dashboard = cloudwatch.Dashboard(scope, "Dashboard", dashboard_name=f"gpu-fleet-{fleet_name}")
    in_service = cloudwatch.Metric(
        namespace="AWS/AutoScaling",
        metric_name="GroupInServiceInstances",
        dimensions_map={"AutoScalingGroupName": fleet_name},
        statistic="Average",
        period=_FIVE_MINUTES,
    )
    dashboard.add_widgets(
        cloudwatch.TextWidget(markdown=title, width=24, height=2),
        cloudwatch.GraphWidget(
            title="GPU utilization (%)",
            left=[
                gpu_metric(fleet_name, "utilization_gpu"),
                gpu_metric(fleet_name, "utilization_gpu", statistic="Maximum"),
            ],
            left_annotations=[cloudwatch.HorizontalAnnotation(value=idle_percent, label="idle alarm")],
            width=12,
        ),
        cloudwatch.GraphWidget(
            title="GPU memory",
            left=[gpu_metric(fleet_name, "memory_used", statistic="Maximum")],
            right=[gpu_metric(fleet_name, "utilization_memory")],
            width=12,
        ),
        cloudwatch.GraphWidget(
            title="GPU temperature (C) and power (W)",
            left=[gpu_metric(fleet_name, "temperature_gpu", statistic="Maximum")],
            right=[gpu_metric(fleet_name, "power_draw")],
            width=12,
        ),
        cloudwatch.GraphWidget(title="Instances in service", left=[in_service], width=12),
        cloudwatch.AlarmStatusWidget(alarms=alarms, title="Alarms", width=24),
    )
    return dashboard
