"""AlarmOneMetricsInsightsQuery: an alarm whose Metrics hold more than one Metrics Insights query."""

from __future__ import annotations

from typing import Any

import pytest
from rule_helpers import findings, template

from gpu_constructs.rules.alarm_one_metrics_insights_query import is_metrics_insights_query

RULE = "AlarmOneMetricsInsightsQuery"
GPU = 'SELECT AVG(GPUUtilization) FROM SCHEMA("/aws/sagemaker/TrainingJobs", Host)'
CPU = 'SELECT AVG(CPUUtilization) FROM SCHEMA("/aws/sagemaker/TrainingJobs", Host)'


def alarm(*metrics: dict[str, Any]) -> dict[str, Any]:
    """An ``AWS::CloudWatch::Alarm`` on ``metrics`` (the last one is the value it watches)."""
    items = [{"Id": f"m{i}", "ReturnData": False, **m} for i, m in enumerate(metrics)]
    items[-1]["ReturnData"] = True
    return {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {
            "ComparisonOperator": "GreaterThanOrEqualToThreshold",
            "EvaluationPeriods": 3,
            "Threshold": 1,
            "Metrics": items,
        },
    }


def query(text: Any) -> dict[str, Any]:
    return {"Expression": text, "Period": 300}


def test_two_queries_combined_by_math_are_a_finding() -> None:
    combined = alarm(query(GPU), query(CPU), {"Expression": "IF(m0 < 50 AND m1 > 80, 1, 0)"})
    lower_case = alarm(query(GPU.lower()), query("  " + CPU))
    joined = alarm(query(GPU), query({"Fn::Join": ["", ["select MAX(x) FROM ", {"Ref": "Namespace"}]]}))
    found = findings(RULE, template(Combined=combined, LowerCase=lower_case, Joined=joined))
    assert [(f.logical_id, f.id) for f in found] == [
        ("Combined", "GpuPlatform::GpuPlatform-AlarmOneMetricsInsightsQuery"),
        ("LowerCase", "GpuPlatform::GpuPlatform-AlarmOneMetricsInsightsQuery"),
        ("Joined", "GpuPlatform::GpuPlatform-AlarmOneMetricsInsightsQuery"),
    ]


def test_one_query_math_over_it_and_other_alarms_are_compliant() -> None:
    metric_stat = {
        "MetricStat": {
            "Metric": {"Namespace": "AWS/SageMaker", "MetricName": "Invocations"},
            "Period": 300,
            "Stat": "Sum",
        }
    }
    single_metric = {
        "Type": "AWS::CloudWatch::Alarm",
        "Properties": {"MetricName": "CPUUtilization", "Namespace": "AWS/EC2", "Statistic": "Average"},
    }
    tpl = template(
        OneQuery=alarm(query(GPU)),
        MathOverOne=alarm(query(GPU), {"Expression": "m0 / 4"}),
        MetricMath=alarm(metric_stat, dict(metric_stat), {"Expression": "m0 + m1"}),
        Searches=alarm(
            query("SEARCH('{AWS/EC2,InstanceId} MetricName=\"CPUUtilization\"', 'Average', 300)"),
            query("SEARCH('{AWS/EC2,InstanceId} MetricName=\"NetworkIn\"', 'Average', 300)"),
            {"Expression": "MAX(m0) + MAX(m1)"},
        ),
        SingleMetric=single_metric,
        Composite={"Type": "AWS::CloudWatch::CompositeAlarm", "Properties": {"AlarmRule": 'ALARM("a")'}},
    )
    assert findings(RULE, tpl) == []


def test_what_counts_as_a_query() -> None:
    assert is_metrics_insights_query(GPU) and is_metrics_insights_query("\n select 1")
    assert not is_metrics_insights_query("m0 / 4") and not is_metrics_insights_query(None)
    assert not is_metrics_insights_query("SEARCH('{AWS/EC2} SELECT', 'Average', 300)")


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_the_training_stack_alarms_hold_one_query_each(synth: Any, env: str) -> None:
    tpl = synth(env).template("training")
    alarms = [r for r in tpl["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    queries = [
        [m["Expression"] for m in a["Properties"].get("Metrics", []) if is_metrics_insights_query(m.get("Expression"))]
        for a in alarms
    ]
    # the input-bound alarm's three parts (GPU, CPU, disk) and the idle-GPU alarm: one query each
    assert sorted(len(q) for q in queries) == [1, 1, 1, 1]
    assert findings(RULE, tpl) == []
