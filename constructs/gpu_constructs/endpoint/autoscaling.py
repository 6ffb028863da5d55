"""The endpoint's autoscaling: a scalable target, target tracking, scale-out from zero, off-hours schedule."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration, Stack, TimeZone
from aws_cdk import aws_applicationautoscaling as appscaling
from aws_cdk import aws_iam as iam
from constructs import Construct, IConstruct

from gpu_constructs.endpoint.capacity import DEFAULT_SCALE_IN_COOLDOWN_S, DEFAULT_SCALE_OUT_COOLDOWN_S
from gpu_constructs.endpoint.monitoring import EndpointMetrics
from gpu_constructs.endpoint.scaling import EndpointAutoscaling, OffHoursSchedule

_SERVICE_ROLE = (
    "sagemaker.application-autoscaling.amazonaws.com/AWSServiceRoleForApplicationAutoScaling_SageMakerEndpoint"
)


def add_autoscaling(
    scope: Construct,
    metrics: EndpointMetrics,
    endpoint: IConstruct,
    *,
    scaling: EndpointAutoscaling | None,
    schedule: OffHoursSchedule | None,
    count: int,
    gpu_count: int,
) -> appscaling.ScalableTarget | None:
    """The variant's scalable target with its policies and schedule (None without either).

    ``endpoint`` is the ``AWS::SageMaker::Endpoint``: the target depends on it (the variant must exist).
    Without autoscaling, the schedule returns to ``count`` instances at the start of working hours.
    """
    if scaling is None and schedule is None:
        return None
    stack = Stack.of(scope)
    # Application Auto Scaling acts through its service-linked role for SageMaker variants.
    role = iam.Role.from_role_arn(
        scope,
        "AutoScalingServiceRole",
        f"arn:{stack.partition}:iam::{stack.account}:role/aws-service-role/{_SERVICE_ROLE}",
        mutable=False,
    )
    low, high = (scaling.min_capacity, scaling.max_capacity) if scaling else (count, count)
    target = appscaling.ScalableTarget(
        scope,
        "ScalableTarget",
        service_namespace=appscaling.ServiceNamespace.SAGEMAKER,
        resource_id=f"endpoint/{metrics.endpoint_name}/variant/{metrics.variant_name}",
        scalable_dimension="sagemaker:variant:DesiredInstanceCount",
        min_capacity=low,
        max_capacity=high,
        role=role,
    )
    target.node.add_dependency(endpoint)
    if scaling is not None:
        _track(target, metrics, scaling, gpu_count)
    if schedule is not None:
        _schedule(target, schedule, low, high)
    return target


def cooldowns(scaling: EndpointAutoscaling) -> tuple[Duration, Duration]:
    """The scale-in and scale-out cooldowns of ``scaling``: each one given, else its default from
    :mod:`~gpu_constructs.endpoint.capacity` (the config takes its defaults from there too)."""
    scale_in, scale_out = scaling.scale_in_cooldown, scaling.scale_out_cooldown
    return (
        Duration.seconds(DEFAULT_SCALE_IN_COOLDOWN_S) if scale_in is None else scale_in,
        Duration.seconds(DEFAULT_SCALE_OUT_COOLDOWN_S) if scale_out is None else scale_out,
    )


def _track(
    target: appscaling.ScalableTarget, metrics: EndpointMetrics, scaling: EndpointAutoscaling, gpu_count: int
) -> None:
    scale_in, scale_out = cooldowns(scaling)
    common: dict[str, Any] = {"scale_in_cooldown": scale_in, "scale_out_cooldown": scale_out}
    if scaling.metric == "invocations_per_instance":
        target.scale_to_track_metric(
            "InvocationsPerInstanceTracking",
            target_value=scaling.target,
            predefined_metric=appscaling.PredefinedMetric.SAGEMAKER_VARIANT_INVOCATIONS_PER_INSTANCE,
            **common,
        )
        return
    if scaling.metric == "gpu_utilization":
        target.scale_to_track_metric(
            "GpuUtilizationTracking",
            target_value=scaling.target * gpu_count,
            custom_metric=metrics.instance("GPUUtilization"),
            **common,
        )
        return
    target.scale_to_track_metric(
        "BacklogTracking",
        target_value=scaling.target,
        custom_metric=metrics.endpoint("ApproximateBacklogSizePerInstance", "Average"),
        **common,
    )
    if scaling.min_capacity == 0:
        # Target tracking cannot leave zero instances (backlog per instance is undefined there); a step
        # policy adds the first instance when requests wait without capacity.
        target.scale_on_metric(
            "ScaleOutFromZero",
            metric=metrics.endpoint("HasBacklogWithoutCapacity", "Maximum"),
            scaling_steps=[
                appscaling.ScalingInterval(upper=0.5, change=0),
                appscaling.ScalingInterval(lower=0.5, change=1),
            ],
            adjustment_type=appscaling.AdjustmentType.CHANGE_IN_CAPACITY,
            cooldown=scale_out,
            evaluation_periods=1,
        )


def _schedule(target: appscaling.ScalableTarget, schedule: OffHoursSchedule, low: int, high: int) -> None:
    """At ``end_hour`` down to the off-hours capacity; at ``start_hour`` back to ``[low, high]``."""
    zone = TimeZone.of(schedule.time_zone)
    for action_id, hour, capacity in (
        ("ScaleDownOffHours", schedule.end_hour, (schedule.off_hours_capacity, schedule.off_hours_capacity)),
        ("ScaleUpWorkingHours", schedule.start_hour, (low, high)),
    ):
        target.scale_on_schedule(
            action_id,
            schedule=appscaling.Schedule.cron(minute="0", hour=str(hour), week_day=schedule.week_days),
            min_capacity=capacity[0],
            max_capacity=capacity[1],
            time_zone=zone,
        )
