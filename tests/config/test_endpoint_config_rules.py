"""The inference section of the environment config (no CDK): endpoint defaults and every config rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

BASE = """
env_name: dev
region: us-east-1
availability_zones: [us-east-1a, us-east-1b]
inference:
  enabled: true
  endpoints:
    classifier:
{body}
"""


def _parse(body: str) -> Any:
    from stacks.config import parse_config

    text = BASE.format(body="\n".join("      " + line for line in body.strip().splitlines()))
    return parse_config(text, Path("config/dev.yaml"), "dev")


def test_config_defaults() -> None:
    ep = _parse("model_data: models/a/v1/model.tar.gz").inference.endpoints["classifier"]
    assert (ep.instance_type, ep.instance_count, ep.cpu_variant, ep.network_isolation) == (
        "ml.g5.xlarge",
        1,
        False,
        True,
    )
    assert (ep.model_download_timeout_seconds, ep.startup_health_check_timeout_seconds) == (1200, 600)
    assert ep.instance_provision_timeout_seconds is None  # SageMaker's default: the template leaves it out
    assert ep.batching is None  # the image's own batching (gpu_serve: 32 rows, 5 ms; the DLC: none)
    assert ep.data_capture is None and ep.async_inference is None and ep.autoscaling is None and ep.off_hours is None
    assert (ep.deployment.traffic, ep.deployment.wait_minutes, ep.deployment.auto_rollback) == ("all_at_once", 5, True)
    assert (ep.alarms.max_5xx_percent, ep.alarms.max_model_latency_p99_ms, ep.alarms.max_gpu_memory_percent) == (
        1,
        1000,
        90,
    )
    canary = _parse("model_data: m/model.tar.gz\ninstance_count: 2\ndeployment: {traffic: canary}")
    assert canary.inference.endpoints["classifier"].deployment.step == 10
    linear = _parse("model_data: m/model.tar.gz\ninstance_count: 2\ndeployment: {traffic: linear}")
    assert linear.inference.endpoints["classifier"].deployment.step == 25
    from stacks.config import InferenceConfig

    assert InferenceConfig().enabled is False  # existing config files without the section keep working


def test_config_data_capture_json_content_types_reach_the_capture() -> None:
    """The config builds the library's DataCapture: its json_content_types become CaptureContentTypeHeader."""
    default = _parse("model_data: m/model.tar.gz\ndata_capture: {}").inference.endpoints["classifier"]
    assert default.data_capture.capture().json_content_types == ("application/json",)
    body = "model_data: m/model.tar.gz\ndata_capture: {json_content_types: [application/jsonlines, application/json]}"
    capture = _parse(body).inference.endpoints["classifier"].data_capture.capture()
    assert capture.json_content_types == ("application/jsonlines", "application/json")


M = "model_data: m/model.tar.gz\n"


def _scale(metric: str, target: float, low: int, high: int, extra: str = "") -> str:
    return f"autoscaling: {{metric: {metric}, target: {target}, min_capacity: {low}, max_capacity: {high}{extra}}}"


CONFIG_RULES: list[tuple[str, str, str]] = [
    ("model key", "model_data: models/a/model.pt", r"model_data: 'models/a/model.pt'.*ending in .tar.gz"),
    ("model uri", "model_data: s3://Bad_Bucket/model.tar.gz", r"s3://<bucket>/<key>.tar.gz"),
    ("model ssm", "model_data: 'ssm:bad name'", r"ssm:<parameter name>"),
    ("non-gpu type", M + "instance_type: ml.m5.xlarge", r"no NVIDIA GPU"),
    ("cpu variant type", M + "instance_type: ml.t3.medium\ncpu_variant: true", r"not a SageMaker hosting type"),
    ("volume on nvme", M + "volume_size_gb: 100", r"250 GB of local NVMe"),
    ("volume range", M + "instance_type: ml.p3.2xlarge\nvolume_size_gb: 600", r"1..512"),
    ("count", M + "instance_count: 0", r"instance_count: 0: allowed: 1 or more"),
    ("timeout", M + "model_download_timeout_seconds: 10", r"60..3600"),
    (
        "provision timeout",
        M + "instance_provision_timeout_seconds: 120",
        r"instance_provision_timeout_seconds.*300..3600",
    ),
    ("env key", M + "environment: {1X: a}", r"environment keys=\['1X'\] is not allowed; allowed: names"),
    (
        "batch size",
        M + "batching: {max_batch_size: 0}",
        r"batching: max_batch_size=0 is not allowed; allowed: .*\[1, 4096\]",
    ),
    (
        "batching on the dlc",  # images.inference defaults to the stock PyTorch DLC
        M + "batching: {max_batch_size: 16}",
        r"inference.endpoints.classifier.batching.max_batch_size=16 is unsafe on the AWS PyTorch inference DLC: "
        r".*allowed: 1 \(or no batching\)\. To batch, serve with the platform's inference image .* "
        r"\(images.inference.kind is 'dlc'\)",
    ),
    (
        "capture pct",
        M + "data_capture: {sampling_percentage: 150}",
        r"sampling_percentage=150 is not allowed; allowed: an integer in \[0, 100\]",
    ),
    (
        "capture none",
        M + "data_capture: {capture_input: false, capture_output: false}",
        r"capture_input/capture_output=\(False, False\) is not allowed; allowed: at least one of them True",
    ),
    (
        "async concurrency",
        M + "async_inference: {max_concurrent_invocations_per_instance: 0}",
        r"max_concurrent_invocations_per_instance=0 is not allowed; allowed: an integer in \[1, 1000\]",
    ),
    (
        "async response",
        M + "async_inference: {notifications: false, include_response_in_notifications: true}",
        r"needs notifications",
    ),
    ("canary size", M + "instance_count: 2\ndeployment: {traffic: canary, step_percent: 60}", r"1..50"),
    ("linear step", M + "instance_count: 2\ndeployment: {traffic: linear, step_percent: 5}", r"10..50"),
    ("step all at once", M + "deployment: {step_percent: 5}", r"not used by traffic 'all_at_once'"),
    (
        "canary one instance",
        M + "deployment: {traffic: canary}",
        r"instance_count with CANARY traffic=1 is not allowed; allowed: 2 or more instances: .* "
        r"use traffic: all_at_once for a single instance",
    ),
    ("bake", M + "deployment: {wait_minutes: 90}", r"0..60 minutes"),
    ("deploy timeout", M + "deployment: {max_execution_timeout_minutes: 5}", r"10..480"),
    ("periods", M + "alarms: {evaluation_periods: 61}", r"alarms\.evaluation_periods: 61: allowed: 1\.\.60"),
    (
        "5xx",
        M + "alarms: {max_5xx_percent: 0}",
        r"max_5xx_percent=0.0 is not allowed; allowed: a percentage in \(0, 100\]",
    ),
    (
        "latency",
        M + "alarms: {max_model_latency_p99_ms: -1}",
        r"max_model_latency_p99_ms \(ms\)=-1.0 is not allowed; allowed: > 0 ms",
    ),
    (
        "datapoints",
        M + "alarms: {evaluation_periods: 1, datapoints_to_alarm: 2}",
        r"datapoints_to_alarm=2 is not allowed; allowed: 1 to evaluation_periods \(1\)",
    ),
    (
        "min > max",
        M + _scale("invocations_per_instance", 5, 3, 2),
        r"autoscaling.min_capacity=3 is not allowed; allowed: at most max_capacity \(2\)",
    ),
    ("zero real-time", M + _scale("invocations_per_instance", 5, 0, 2), r"only for async"),
    (
        "zero without backlog",
        M + "async_inference: {}\n" + _scale("gpu_utilization", 50, 0, 2),
        r"autoscaling.metric='gpu_utilization' is not allowed; allowed: .*only a backlog can wake",
    ),
    (
        "backlog real-time",
        M + _scale("backlog_per_instance", 5, 1, 2),
        r"metric='backlog_per_instance' is not allowed; allowed: .* for a real-time endpoint",
    ),
    (
        "invocations async",
        M + "async_inference: {}\n" + _scale("invocations_per_instance", 5, 1, 2),
        r"metric='invocations_per_instance' is not allowed; allowed: .* for an asynchronous endpoint",
    ),
    (
        "gpu cpu variant",
        M + "instance_type: ml.m5.xlarge\ncpu_variant: true\n" + _scale("gpu_utilization", 50, 1, 2),
        r"CPU variant",
    ),
    (
        "gpu target",
        M + _scale("gpu_utilization", 150, 1, 2),
        r"autoscaling.target \(percent per GPU\)=150.0 is not allowed; allowed: a percentage in \(0, 100\]",
    ),
    (
        "count outside",
        M + _scale("gpu_utilization", 50, 2, 3),
        r"instance_count=1 is not allowed; allowed: within the autoscaling range \[2, 3\]",
    ),
    ("cooldown", M + _scale("gpu_utilization", 50, 1, 3, ", scale_in_cooldown_seconds: -1"), r"0..3600"),
    ("zone", M + "off_hours: {time_zone: Mars/Base}", r"IANA time zone"),
    (
        "hour",
        M + "off_hours: {start_hour: 25}",
        r"off_hours.start_hour=25 is not allowed; allowed: an hour in \[0, 23\]",
    ),
    (
        "same hours",
        M + "off_hours: {start_hour: 8, end_hour: 8}",
        r"end_hour=8 .*allowed: an hour other than start_hour",
    ),
    ("days", M + "off_hours: {week_days: weekdays}", r"day-of-week"),
    (
        "off capacity",
        M + "off_hours: {capacity: 0}",
        r"off_hours.capacity=0 is not allowed; allowed: an integer in \[1, 1\]",
    ),
    ("typo key", M + "instance_typ: ml.g5.xlarge", r"unknown key"),
]


@pytest.mark.parametrize(("body", "message"), [r[1:] for r in CONFIG_RULES], ids=[r[0] for r in CONFIG_RULES])
def test_config_rules(body: str, message: str) -> None:
    from stacks.config import ConfigError

    with pytest.raises(ConfigError, match=message) as info:
        _parse(body)
    assert "config/dev.yaml" in str(info.value) and "inference.endpoints.classifier" in str(info.value)


GPU_SERVE_IMAGE = "images:\n  inference: {kind: codebuild, cuda_version: '12.4'}\n"


@pytest.mark.parametrize(
    ("environment", "message"),
    [
        (
            "{GPU_SERVE_MODEL_PROCESSES: many}",
            r"inference.endpoints.classifier.environment: GPU_SERVE_MODEL_PROCESSES='many' is not allowed; "
            r"allowed: auto or an integer from 0 to 64 \(images.inference.kind is 'codebuild': the image runs "
            r"gpu_serve, which would refuse to start\)",
        ),
        ("{GPU_SERVE_DEVICE: tpu}", r"GPU_SERVE_DEVICE='tpu' is not allowed; allowed: auto, cpu, cuda, cuda:N"),
        ("{GPU_SERVE_NUM_THREADS: '0'}", r"GPU_SERVE_NUM_THREADS"),
        (
            "{GPU_SERVE_MODEL_PROCESS: '2'}",  # a typo: the server would ignore it and start one process per GPU
            r"\['GPU_SERVE_MODEL_PROCESS'\] are not gpu_serve variables; allowed: .*GPU_SERVE_MODEL_PROCESSES",
        ),
    ],
)
def test_config_refuses_a_gpu_serve_variable_the_server_would_refuse(environment: str, message: str) -> None:
    from stacks.config import ConfigError, parse_config

    text = GPU_SERVE_IMAGE + BASE.format(body=f"      model_data: m/model.tar.gz\n      environment: {environment}")
    with pytest.raises(ConfigError, match=message):
        parse_config(text, Path("config/dev.yaml"), "dev")


def test_config_passes_gpu_serve_variables_the_server_accepts_and_leaves_other_images_alone() -> None:
    from stacks.config import parse_config

    good = "{GPU_SERVE_MODEL_PROCESSES: auto, GPU_SERVE_DEVICE: 'cuda:0', MY_APP_SETTING: x}"
    text = GPU_SERVE_IMAGE + BASE.format(body=f"      model_data: m/model.tar.gz\n      environment: {good}")
    env = parse_config(text, Path("config/dev.yaml"), "dev").inference.endpoints["classifier"].environment
    assert env["GPU_SERVE_MODEL_PROCESSES"] == "auto"
    # the stock DLC does not run gpu_serve: its variables mean nothing there and are not read
    dlc = BASE.format(body="      model_data: m/model.tar.gz\n      environment: {GPU_SERVE_MODEL_PROCESSES: many}")
    assert parse_config(dlc, Path("config/dev.yaml"), "dev").images.inference.kind == "dlc"


def test_config_endpoint_keys_and_enabled() -> None:
    from stacks.config import ConfigError, parse_config

    bad_key = BASE.replace("classifier:", "Classifier_1:").format(body="      model_data: m/model.tar.gz")
    with pytest.raises(ConfigError, match=r"endpoint keys \['Classifier_1'\] are not allowed"):
        parse_config(bad_key, Path("config/dev.yaml"), "dev")
    empty = "env_name: dev\nregion: us-east-1\navailability_zones: [us-east-1a]\ninference: {enabled: true}\n"
    with pytest.raises(ConfigError, match=r"needs at least one entry under endpoints"):
        parse_config(empty, Path("config/dev.yaml"), "dev")
    emails = empty.replace("{enabled: true}", "{alarm_emails: [not-an-email]}")
    with pytest.raises(ConfigError, match=r"not e-mail addresses"):
        parse_config(emails, Path("config/dev.yaml"), "dev")


def test_the_provision_timeout_reaches_the_construct_as_a_duration() -> None:
    """A setting of the config model becomes the construct's prop in the model's own mapping (``endpoint_props``):
    the stack passes it on without naming it."""
    import aws_cdk as cdk
    from aws_cdk import aws_s3 as s3

    from gpu_constructs.endpoint import GPU_SERVE_BATCHING_ENV

    ep = _parse("model_data: models/a/v1/model.tar.gz\ninstance_provision_timeout_seconds: 900").inference.endpoints[
        "classifier"
    ]
    bucket = s3.Bucket(cdk.Stack(cdk.App(), "S"), "Artifacts")
    props = ep.endpoint_props(artifacts_bucket=bucket, batching_env=GPU_SERVE_BATCHING_ENV)
    assert props["instance_provision_timeout"].to_seconds() == 900
    unset = _parse("model_data: models/a/v1/model.tar.gz").inference.endpoints["classifier"]
    assert (
        unset.endpoint_props(artifacts_bucket=bucket, batching_env=GPU_SERVE_BATCHING_ENV)["instance_provision_timeout"]
        is None
    )
