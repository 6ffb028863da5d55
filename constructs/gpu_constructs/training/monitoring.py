"""Monitoring of :class:`~gpu_constructs.training.TrainingPipeline`: failure notifications (EventBridge -> the
KMS-encrypted topic), the input-bound and idle-GPU alarms (Metrics Insights over every training host) and the
dashboard."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events

from gpu_constructs.topics import alarm_action, rule_target
from gpu_constructs.training.roles import TRAINING_NAMESPACE

if TYPE_CHECKING:
    from gpu_constructs.training.options import AlarmThresholds
    from gpu_constructs.training.pipeline import TrainingPipeline

__all__ = ["add_alarms", "add_dashboard", "add_failure_rules"]


def add_failure_rules(pipeline: TrainingPipeline) -> tuple[events.Rule, events.Rule]:
    """Notify the topic of failed training jobs with the prefix and of executions that do not succeed."""
    prefix = pipeline.job_name_prefix
    field = events.EventField.from_path
    failure_rule = _notify(
        pipeline,
        "JobFailedRule",
        f"SageMaker training jobs {prefix}-* that fail",
        events.EventPattern(
            source=["aws.sagemaker"],
            detail_type=["SageMaker Training Job State Change"],
            detail={"TrainingJobStatus": ["Failed"], "TrainingJobName": events.Match.prefix(f"{prefix}-")},
        ),
        f"Training job {field('$.detail.TrainingJobName')} failed: {field('$.detail.FailureReason')}",
    )
    execution_failed_rule = _notify(
        pipeline,
        "ExecutionFailedRule",
        f"Executions of the {prefix} training state machine that do not succeed",
        events.EventPattern(
            source=["aws.states"],
            detail_type=["Step Functions Execution Status Change"],
            detail={
                "status": ["FAILED", "TIMED_OUT", "ABORTED"],
                "stateMachineArn": [pipeline.state_machine.state_machine_arn],
            },
        ),
        f"Training pipeline execution {field('$.detail.name')} ended {field('$.detail.status')}: "
        f"{field('$.detail.cause')}",
    )
    return failure_rule, execution_failed_rule


def _notify(
    pipeline: TrainingPipeline, rule_id: str, description: str, pattern: events.EventPattern, message: str
) -> events.Rule:
    """An EventBridge rule that sends ``message`` to the setup's topic."""
    rule = events.Rule(pipeline, rule_id, description=description, event_pattern=pattern)
    rule.add_target(rule_target(pipeline.topic, message=events.RuleTargetInput.from_text(message)))
    return rule


def _insights(function: str, metric: str, period: Duration, label: str) -> cloudwatch.MathExpression:
    return cloudwatch.MathExpression(
        expression=f'SELECT {function}({metric}) FROM SCHEMA("{TRAINING_NAMESPACE}", Host)',
        using_metrics={},
        period=period,
        label=label,
    )


def add_alarms(pipeline: TrainingPipeline, ref: Any, t: AlarmThresholds) -> tuple[cloudwatch.Alarm, cloudwatch.Alarm]:
    gpus = max(1, ref.nvidia_gpu_count)
    vcpus = max(1, ref.vcpus)
    gpu = _insights("AVG", "GPUUtilization", t.period, "GPU utilization (sum over GPUs)")
    cpu = _insights("AVG", "CPUUtilization", t.period, "CPU utilization (sum over vCPUs)")
    disk = _insights("AVG", "DiskUtilization", t.period, "Disk utilization")
    input_bound = cloudwatch.MathExpression(
        expression=(
            f"IF(gpu / {gpus} < {t.gpu_low_pct:g} AND (cpu / {vcpus} > {t.busy_pct:g} OR disk > {t.busy_pct:g}), 1, 0)"
        ),
        using_metrics={"gpu": gpu, "cpu": cpu, "disk": disk},
        period=t.period,
        label="input-bound (1 = GPU starved while CPU or disk is busy)",
    )
    action = alarm_action(pipeline.topic)
    alarm = input_bound.create_alarm(
        pipeline,
        "InputBoundAlarm",
        alarm_description=(
            f"Training looks input-bound: average GPU utilization below {t.gpu_low_pct:g}% per GPU while CPU "
            f"(per vCPU of {ref.sagemaker_name}) or disk is above {t.busy_pct:g}%. Data loading or preprocessing "
            "is the bottleneck: pre-shard the data (gpuctl shard), raise num_workers, or use FSx / FastFile. "
            "Covers every SageMaker training host in this account and region (Metrics Insights)."
        ),
        threshold=1,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluation_periods=t.input_bound_periods,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    idle_expr = cloudwatch.MathExpression(
        expression=f"gpumin / {gpus}",
        using_metrics={"gpumin": _insights("MIN", "GPUUtilization", t.period, "least-used host")},
        period=t.period,
        label="GPU utilization per GPU of the least-used host",
    )
    idle = idle_expr.create_alarm(
        pipeline,
        "IdleGpuAlarm",
        alarm_description=(
            f"A training host's GPUs are idle: utilization below {t.idle_gpu_pct:g}% per GPU for "
            f"{t.idle_periods} periods. The job may be stuck (data download, a hang in NCCL) or not using the "
            "GPU at all (CPU-only torch build). Covers every SageMaker training host in this account and region."
        ),
        threshold=t.idle_gpu_pct,
        comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluation_periods=t.idle_periods,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    for a in (alarm, idle):
        a.add_alarm_action(action)
        a.add_ok_action(action)
    return alarm, idle


def _search(prefix: str, dimension: str, metric: str, period: Duration) -> cloudwatch.MathExpression:
    query = f'{{{TRAINING_NAMESPACE},{dimension}}} MetricName="{metric}" "{prefix}"'
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{query}', 'Average', {int(period.to_seconds())})",
        using_metrics={},
        period=period,
        label="",
    )


def add_dashboard(pipeline: TrainingPipeline, t: AlarmThresholds) -> cloudwatch.Dashboard:
    period = Duration.minutes(1)
    dashboard = cloudwatch.Dashboard(
        pipeline,
        "Dashboard",
        dashboard_name=f"{pipeline.job_name_prefix}-training",
        default_interval=Duration.hours(6),
    )
    dashboard.add_widgets(
        cloudwatch.TextWidget(
            markdown=(
                f"## Training jobs `{pipeline.job_name_prefix}-*`\n"
                "GPU and CPU utilization are summed over the GPUs / vCPUs of a host (4 GPUs: 0-400 %). "
                "**Low GPU with busy CPU or disk** means the input pipeline is the bottleneck; **low GPU with "
                "low CPU and disk** means the loader is under-parallelized (raise `num_workers`)."
            ),
            width=24,
            height=3,
        )
    )
    host = [
        ("GPUUtilization", "GPU utilization %"),
        ("GPUMemoryUtilization", "GPU memory utilization %"),
        ("CPUUtilization", "CPU utilization %"),
        ("DiskUtilization", "Disk utilization %"),
    ]
    dashboard.add_widgets(
        *[
            cloudwatch.GraphWidget(
                title=title, left=[_search(pipeline.job_name_prefix, "Host", metric, period)], width=12, height=6
            )
            for metric, title in host
        ]
    )
    job_metrics = [m["Name"] for m in pipeline.spec.metric_definitions]
    wanted = [name for name in job_metrics if name.endswith(("samples_per_sec", "data_wait_pct", "loss"))]
    if wanted:
        dashboard.add_widgets(
            *[
                cloudwatch.GraphWidget(
                    title=f"{name} (from the job's logs)",
                    left=[_search(pipeline.job_name_prefix, "TrainingJobName", name, period)],
                    width=8,
                    height=6,
                )
                for name in wanted
            ]
        )
    dashboard.add_widgets(
        cloudwatch.GraphWidget(
            title="Pipeline executions",
            left=[
                pipeline.state_machine.metric_succeeded(statistic="Sum", period=Duration.hours(1)),
                pipeline.state_machine.metric_failed(statistic="Sum", period=Duration.hours(1)),
            ],
            width=12,
            height=6,
        ),
        cloudwatch.AlarmStatusWidget(
            alarms=[pipeline.input_bound_alarm, pipeline.idle_gpu_alarm], title="Alarms", width=12, height=6
        ),
    )
    return dashboard
