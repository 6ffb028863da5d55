"""Monitoring of :class:`~gpu_constructs.training.TrainingPipeline`: failure notifications (EventBridge -> the
KMS-encrypted topic), the input-bound (a composite of single-query alarms) and idle-GPU alarms (Metrics Insights
over every training host) and the dashboard.

Each helper takes what it reads (the job-name prefix, the state machine, the topic, the catalog entry of the
instance type) and creates its constructs under ``scope``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_sns as sns
from aws_cdk import aws_stepfunctions as sfn
from constructs import Construct

from gpu_constructs import nag
from gpu_constructs.catalog import InstanceType
from gpu_constructs.topics import alarm_action, rule_target
from gpu_constructs.training.options import ALARM_PERIOD, TrainingAlarms
from gpu_constructs.training.roles import TRAINING_NAMESPACE

__all__ = ["add_alarms", "add_dashboard", "add_failure_rules"]


def add_failure_rules(
    scope: Construct, job_name_prefix: str, state_machine: sfn.IStateMachine, topic: sns.ITopic
) -> tuple[events.Rule, events.Rule]:
    """Notify ``topic`` of failed training jobs ``<job_name_prefix>-*`` and of executions of ``state_machine`` that
    do not succeed."""
    prefix = job_name_prefix
    field = events.EventField.from_path
    failure_rule = _notify(
        scope,
        topic,
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
        scope,
        topic,
        "ExecutionFailedRule",
        f"Executions of the {prefix} training state machine that do not succeed",
        events.EventPattern(
            source=["aws.states"],
            detail_type=["Step Functions Execution Status Change"],
            detail={
                "status": ["FAILED", "TIMED_OUT", "ABORTED"],
                "stateMachineArn": [state_machine.state_machine_arn],
            },
        ),
        f"Training pipeline execution {field('$.detail.name')} ended {field('$.detail.status')}: "
        f"{field('$.detail.cause')}",
    )
    return failure_rule, execution_failed_rule


def _notify(
    scope: Construct,
    topic: sns.ITopic,
    rule_id: str,
    description: str,
    pattern: events.EventPattern,
    message: str,
) -> events.Rule:
    """An EventBridge rule that sends ``message`` to ``topic``."""
    rule = events.Rule(scope, rule_id, description=description, event_pattern=pattern)
    rule.add_target(rule_target(topic, message=events.RuleTargetInput.from_text(message)))
    return rule


def _insights(function: str, metric: str, period: Duration, label: str) -> cloudwatch.MathExpression:
    """One Metrics Insights query over every training host: the only query an alarm built on it may hold."""
    return cloudwatch.MathExpression(
        expression=f'SELECT {function}({metric}) FROM SCHEMA("{TRAINING_NAMESPACE}", Host)',
        using_metrics={},
        period=period,
        label=label,
    )


def _per_unit(query: cloudwatch.MathExpression, count: int, period: Duration, label: str) -> cloudwatch.MathExpression:
    """``query`` (summed over the GPUs / vCPUs of a host) divided by ``count``: math over one query, no second."""
    return cloudwatch.MathExpression(expression=f"q / {count}", using_metrics={"q": query}, period=period, label=label)


def add_alarms(
    scope: Construct, ref: InstanceType, t: TrainingAlarms, topic: sns.ITopic
) -> tuple[cloudwatch.CompositeAlarm, cloudwatch.Alarm]:
    """The input-bound composite alarm and the idle-GPU alarm, each notifying ``topic`` (alarm and OK); ``ref`` is
    the catalog entry of the setup's instance type (its GPUs and vCPUs scale the per-host sums); ``t.period``
    ``None`` is ``ALARM_PERIOD``.

    Every metric alarm holds exactly one Metrics Insights query (plus, at most, math over it), because CloudWatch
    evaluates an alarm with one ``GetMetricData`` request and "Each GetMetricData operation can have only one
    query" (Amazon CloudWatch User Guide, "Metrics Insights quotas",
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-metrics-insights-limits.html);
    the API reference says the same: "If you include a Metrics Insights query, each GetMetricData operation can
    include only one query. But the same GetMetricData operation can also retrieve other metrics."
    (https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_GetMetricData.html). Math over one
    query is allowed: "You can use a Metrics Insights query as an input to a metric math function. [...] A
    Metrics Insights query that does not include a GROUP BY clause returns a single time series. Therefore, its
    returned results can be used with any metric math function that takes a single time series as input."
    (User Guide, "Use Metrics Insights queries with metric math",
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch-metrics-insights-math.html).

    So the input-bound condition (GPU low AND (CPU busy OR disk busy)) is three single-query alarms joined by an
    ``AWS::CloudWatch::CompositeAlarm`` (``InputBoundCompositeAlarm``); only the composite notifies. The rule pack
    checks any template for alarms with more than one query (``GpuPlatform-AlarmOneMetricsInsightsQuery``).

    The composite's construct id is not the former metric alarm's ``InputBoundAlarm``: the same id gives the same
    logical id, and CloudFormation refuses to change the type of an existing logical id ("Update of resource
    type is not permitted"), so a deployed training stack could not be updated.
    """
    gpus = max(1, ref.nvidia_gpu_count)
    vcpus = max(1, ref.vcpus)
    period, periods = t.period or ALARM_PERIOD, t.input_bound_periods
    gpu = _insights("AVG", "GPUUtilization", period, "GPU utilization (sum over GPUs)")
    cpu = _insights("AVG", "CPUUtilization", period, "CPU utilization (sum over vCPUs)")
    disk = _insights("AVG", "DiskUtilization", period, "Disk utilization")
    part = "Part of the input-bound alarm (the composite alarm notifies; this one does not): "
    gpu_low = _per_unit(gpu, gpus, period, "GPU utilization per GPU").create_alarm(
        scope,
        "InputBoundGpuLowAlarm",
        alarm_description=(
            f"{part}average GPU utilization below {t.gpu_low_percent:g}% per GPU of {ref.sagemaker_name}."
        ),
        threshold=t.gpu_low_percent,
        comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluation_periods=periods,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    cpu_busy = _per_unit(cpu, vcpus, period, "CPU utilization per vCPU").create_alarm(
        scope,
        "InputBoundCpuBusyAlarm",
        alarm_description=f"{part}average CPU utilization above {t.busy_percent:g}% per vCPU of {ref.sagemaker_name}.",
        threshold=t.busy_percent,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=periods,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    disk_busy = disk.create_alarm(
        scope,
        "InputBoundDiskBusyAlarm",
        alarm_description=f"{part}average disk utilization above {t.busy_percent:g}%.",
        threshold=t.busy_percent,
        comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluation_periods=periods,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    for part_alarm in (gpu_low, cpu_busy, disk_busy):
        nag.acknowledge_compliance(
            part_alarm,
            "CloudWatchAlarmAction",
            "Safe because this alarm is one condition of the composite InputBoundCompositeAlarm, which notifies the "
            "setup's topic on ALARM and OK, since an action here would report one part of the condition alone",
        )
    state = cloudwatch.AlarmState.ALARM
    alarm = cloudwatch.CompositeAlarm(
        scope,
        "InputBoundCompositeAlarm",
        alarm_rule=cloudwatch.AlarmRule.all_of(
            cloudwatch.AlarmRule.from_alarm(gpu_low, state),
            cloudwatch.AlarmRule.any_of(
                cloudwatch.AlarmRule.from_alarm(cpu_busy, state), cloudwatch.AlarmRule.from_alarm(disk_busy, state)
            ),
        ),
        alarm_description=(
            f"Training looks input-bound: average GPU utilization below {t.gpu_low_percent:g}% per GPU while CPU "
            f"(per vCPU of {ref.sagemaker_name}) or disk is above {t.busy_percent:g}%. Data loading or preprocessing "
            "is the bottleneck: pre-shard the data (gpuctl shard), raise num_workers, or use FSx / FastFile. "
            "Covers every SageMaker training host in this account and region (Metrics Insights)."
        ),
    )
    idle_expr = cloudwatch.MathExpression(
        expression=f"gpumin / {gpus}",
        using_metrics={"gpumin": _insights("MIN", "GPUUtilization", period, "least-used host")},
        period=period,
        label="GPU utilization per GPU of the least-used host",
    )
    idle = idle_expr.create_alarm(
        scope,
        "IdleGpuAlarm",
        alarm_description=(
            f"A training host's GPUs are idle: utilization below {t.idle_gpu_percent:g}% per GPU for "
            f"{t.idle_periods} periods. The job may be stuck (data download, a hang in NCCL) or not using the "
            "GPU at all (CPU-only torch build). Covers every SageMaker training host in this account and region."
        ),
        threshold=t.idle_gpu_percent,
        comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluation_periods=t.idle_periods,
        treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
    )
    action = alarm_action(topic)
    for notifying in (alarm, idle):
        notifying.add_alarm_action(action)
        notifying.add_ok_action(action)
    return alarm, idle


def _search(prefix: str, dimension: str, metric: str, period: Duration) -> cloudwatch.MathExpression:
    query = f'{{{TRAINING_NAMESPACE},{dimension}}} MetricName="{metric}" "{prefix}"'
    return cloudwatch.MathExpression(
        expression=f"SEARCH('{query}', 'Average', {int(period.to_seconds())})",
        using_metrics={},
        period=period,
        label="",
    )


def add_dashboard(
    scope: Construct,
    job_name_prefix: str,
    *,
    metric_definitions: Sequence[Mapping[str, str]],
    state_machine: sfn.StateMachine,
    alarms: Sequence[cloudwatch.IAlarm],
) -> cloudwatch.Dashboard:
    """The dashboard of the jobs ``<job_name_prefix>-*``: host utilization, the jobs' throughput, data-wait and loss
    metrics (those of ``metric_definitions``), the executions of ``state_machine`` and the states of ``alarms``."""
    period = Duration.minutes(1)
    dashboard = cloudwatch.Dashboard(
        scope,
        "Dashboard",
        dashboard_name=f"{job_name_prefix}-training",
        default_interval=Duration.hours(6),
    )
    dashboard.add_widgets(
        cloudwatch.TextWidget(
            markdown=(
                f"## Training jobs `{job_name_prefix}-*`\n"
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
                title=title, left=[_search(job_name_prefix, "Host", metric, period)], width=12, height=6
            )
            for metric, title in host
        ]
    )
    job_metrics = [m["Name"] for m in metric_definitions]
    wanted = [name for name in job_metrics if name.endswith(("samples_per_sec", "data_wait_pct", "loss"))]
    if wanted:
        dashboard.add_widgets(
            *[
                cloudwatch.GraphWidget(
                    title=f"{name} (from the job's logs)",
                    left=[_search(job_name_prefix, "TrainingJobName", name, period)],
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
                state_machine.metric_succeeded(statistic="Sum", period=Duration.hours(1)),
                state_machine.metric_failed(statistic="Sum", period=Duration.hours(1)),
            ],
            width=12,
            height=6,
        ),
        cloudwatch.AlarmStatusWidget(alarms=list(alarms), title="Alarms", width=12, height=6),
    )
    return dashboard
