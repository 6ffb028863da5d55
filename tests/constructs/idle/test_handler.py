"""The idle-stop function's logic on recorded events and responses (botocore Stubber on real clients, no AWS)."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber

from gpu_constructs.idle import handler
from gpu_constructs.idle.handler import Settings, TrainingSettings

EVENTS = Path(__file__).parent / "events"
REGION = "us-east-1"
TOPIC = "arn:aws:sns:us-east-1:123456789012:gpu-dev-training-Notifications"
PREFIX = "gpu-dev-train"
JOB = "gpu-dev-train-20261128-0200"
NOW = datetime(2026, 11, 28, 4, 0, tzinfo=timezone.utc)
TIMESTAMPS = {"CreationTime", "StartTime", "EndTime", "LastModifiedTime"}


def recorded(name: str) -> dict[str, Any]:
    """A recorded event or response; the timestamps of a response as datetimes (as botocore returns them)."""

    def convert(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: datetime.fromisoformat(v.replace("Z", "+00:00")) if k in TIMESTAMPS and isinstance(v, str)
                else convert(v)
                for k, v in node.items()
            }  # fmt: skip
        if isinstance(node, list):
            return [convert(v) for v in node]
        return node

    data: dict[str, Any] = json.loads((EVENTS / f"{name}.json").read_text())
    return data if "detail-type" in data else convert(data)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret-example")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


class Stubs:
    """Real clients, each behind a Stubber; ``verify`` checks every recorded call was made."""

    def __init__(self) -> None:
        session = boto3.session.Session(region_name=REGION)
        self.clients = {name: session.client(name) for name in ("sagemaker", "cloudwatch", "autoscaling", "sns")}
        self.stubbers = {name: Stubber(client) for name, client in self.clients.items()}
        for stubber in self.stubbers.values():
            stubber.activate()

    def verify(self) -> None:
        for stubber in self.stubbers.values():
            stubber.assert_no_pending_responses()

    def list_jobs(self, *names: str) -> None:
        summaries = [
            {
                "TrainingJobName": name,
                "TrainingJobArn": f"arn:aws:sagemaker:{REGION}:123456789012:training-job/{name}",
                "CreationTime": NOW - timedelta(hours=2),
                "TrainingJobStatus": "InProgress",
            }
            for name in names
        ]
        self.stubbers["sagemaker"].add_response(
            "list_training_jobs",
            {"TrainingJobSummaries": summaries},
            {"StatusEquals": "InProgress", "NameContains": PREFIX},
        )

    def describe(self, job: dict[str, Any]) -> None:
        self.stubbers["sagemaker"].add_response(
            "describe_training_job", job, {"TrainingJobName": job["TrainingJobName"]}
        )

    def metrics(self, values: dict[str, list[float]], *, expected_ids: list[str]) -> None:
        results = [{"Id": i, "Label": i, "Values": values.get(i, []), "StatusCode": "Complete"} for i in expected_ids]
        self.stubbers["cloudwatch"].add_response(
            "get_metric_data",
            {"MetricDataResults": results},
            {
                "MetricDataQueries": ANY,
                "StartTime": NOW - timedelta(minutes=60),
                "EndTime": NOW,
                "ScanBy": "TimestampAscending",
            },
        )

    def history(self, values: list[float]) -> None:
        """The progress metric from the start of training to the start of the idle window (one bucket)."""
        self.stubbers["cloudwatch"].add_response(
            "get_metric_data",
            {"MetricDataResults": [{"Id": "history", "Label": "history", "Values": values, "StatusCode": "Complete"}]},
            {
                "MetricDataQueries": [
                    {
                        "Id": "history",
                        "MetricStat": {
                            "Metric": {
                                "Namespace": "/aws/sagemaker/TrainingJobs",
                                "MetricName": "train:samples_per_sec",
                                "Dimensions": [{"Name": "TrainingJobName", "Value": JOB}],
                            },
                            "Period": 3240,  # 02:06 (training began) to 03:00 (the window's start)
                            "Stat": "SampleCount",
                        },
                    }
                ],
                "StartTime": datetime(2026, 11, 28, 2, 6, tzinfo=timezone.utc),
                "EndTime": NOW - timedelta(minutes=60),
                "ScanBy": "TimestampAscending",
            },
        )

    def stop_job(self, name: str) -> None:
        self.stubbers["sagemaker"].add_response("stop_training_job", {}, {"TrainingJobName": name})

    def published(self, count: int = 1) -> None:
        for _ in range(count):
            self.stubbers["sns"].add_response(
                "publish", {"MessageId": "m-1"}, {"TopicArn": TOPIC, "Subject": ANY, "Message": ANY}
            )


@pytest.fixture
def stubs() -> Iterator[Stubs]:
    created = Stubs()
    yield created
    created.verify()


def training_settings(*, dry_run: bool = False, progress: str | None = "train:samples_per_sec") -> Settings:
    return Settings(
        topic_arn=TOPIC,
        dry_run=dry_run,
        training=TrainingSettings(PREFIX, idle_minutes=60, gpu_idle_percent=5, progress_metric=progress),
    )


IDS = ["gpu1", "gpu2", "progress"]
BUSY_PROGRESS = {"progress": [12.0] * 12}


def test_idle_job_is_stopped_and_the_event_published(stubs: Stubs) -> None:
    stubs.list_jobs(JOB, "other-team-train-1")
    stubs.describe(recorded("describe_training_job_idle"))
    stubs.metrics({"gpu1": [0.0] * 12, "gpu2": [1.5] * 12, **BUSY_PROGRESS}, expected_ids=IDS)
    stubs.stop_job(JOB)
    stubs.published()
    result = handler.run(recorded("scheduled"), training_settings(), stubs.clients, now=NOW)
    (action,) = result["actions"]
    assert action["kind"] == "training job" and action["name"] == JOB and action["done"]
    assert "2 host(s) stayed under 5% utilization for 60 minutes" in action["reason"]
    assert result["publish_failures"] == 0


def test_queries_read_every_host_and_the_progress_metric() -> None:
    queries = handler._queries(JOB, 2, "train:samples_per_sec")
    hosts = [q["MetricStat"]["Metric"]["Dimensions"][0]["Value"] for q in queries[:2]]
    assert hosts == [f"{JOB}/algo-1", f"{JOB}/algo-2"]
    assert {q["MetricStat"]["Metric"]["Namespace"] for q in queries} == {"/aws/sagemaker/TrainingJobs"}
    assert queries[2]["MetricStat"]["Metric"]["Dimensions"] == [{"Name": "TrainingJobName", "Value": JOB}]


def test_busy_job_is_left_alone(stubs: Stubs) -> None:
    stubs.list_jobs(JOB)
    stubs.describe(recorded("describe_training_job_idle"))
    stubs.metrics({"gpu1": [0.0] * 11 + [380.0], "gpu2": [390.0] * 12, **BUSY_PROGRESS}, expected_ids=IDS)
    result = handler.run(recorded("scheduled"), training_settings(), stubs.clients, now=NOW)
    assert result["actions"] == []


def test_stalled_step_counter_stops_a_job_whose_gpus_look_busy(stubs: Stubs) -> None:
    stubs.list_jobs(JOB)
    stubs.describe(recorded("describe_training_job_idle"))
    stubs.metrics({"gpu1": [99.0] * 12, "gpu2": [99.0] * 12}, expected_ids=IDS)
    stubs.history([40.0])  # it logged steps before the window
    stubs.stop_job(JOB)
    stubs.published()
    result = handler.run(recorded("scheduled"), training_settings(), stubs.clients, now=NOW)
    assert "step counter did not advance for 60 minutes" in result["actions"][0]["reason"]


def test_missing_gpu_data_is_not_idle(stubs: Stubs) -> None:
    """A host without a data point in every bucket (metrics not there yet) does not count as idle."""
    stubs.list_jobs(JOB)
    stubs.describe(recorded("describe_training_job_idle"))
    stubs.metrics({"gpu1": [0.0] * 12, "gpu2": [0.0] * 3, **BUSY_PROGRESS}, expected_ids=IDS)
    assert handler.run(recorded("scheduled"), training_settings(), stubs.clients, now=NOW)["actions"] == []


def test_job_that_just_started_training_is_not_measured(stubs: Stubs) -> None:
    job = recorded("describe_training_job_idle")
    job["SecondaryStatusTransitions"][-1]["StartTime"] = NOW - timedelta(minutes=20)
    stubs.list_jobs(JOB)
    stubs.describe(job)
    assert handler.run(recorded("scheduled"), training_settings(), stubs.clients, now=NOW)["actions"] == []


def test_job_still_downloading_is_not_measured(stubs: Stubs) -> None:
    job = recorded("describe_training_job_idle")
    job["SecondaryStatus"] = "Downloading"
    job["SecondaryStatusTransitions"] = job["SecondaryStatusTransitions"][:2]
    stubs.list_jobs(JOB)
    stubs.describe(job)
    assert handler.run(recorded("scheduled"), training_settings(), stubs.clients, now=NOW)["actions"] == []


def test_dry_run_publishes_and_stops_nothing(stubs: Stubs) -> None:
    stubs.list_jobs(JOB)
    stubs.describe(recorded("describe_training_job_idle"))
    stubs.metrics({"gpu1": [0.0] * 12, "gpu2": [0.0] * 12, **BUSY_PROGRESS}, expected_ids=IDS)
    stubs.published()
    result = handler.run(recorded("scheduled"), training_settings(dry_run=True), stubs.clients, now=NOW)
    assert result["dry_run"] and result["actions"][0]["done"] is False and result["actions"][0]["dry_run"]
    assert (
        handler.Action("training job", JOB, "idle", done=False, dry_run=True)
        .message()
        .startswith(f"Idle stop would stop training job {JOB}")
    )


def test_failed_stop_is_published_as_a_failure(stubs: Stubs) -> None:
    stubs.list_jobs(JOB)
    stubs.describe(recorded("describe_training_job_idle"))
    stubs.metrics({"gpu1": [0.0] * 12, "gpu2": [0.0] * 12, **BUSY_PROGRESS}, expected_ids=IDS)
    stubs.stubbers["sagemaker"].add_client_error(
        "stop_training_job", "ValidationException", "The job is not in progress", 400
    )
    stubs.published()
    action = handler.run(recorded("scheduled"), training_settings(), stubs.clients, now=NOW)["actions"][0]
    assert action["done"] is False and "not in progress" in action["error"]
    failed = handler.Action("training job", JOB, "idle", done=False, error="denied")
    assert failed.message().startswith(f"Idle stop FAILED for training job {JOB}: denied")


def test_publish_failure_is_counted_and_the_stop_stands(stubs: Stubs) -> None:
    stubs.list_jobs(JOB)
    stubs.describe(recorded("describe_training_job_idle"))
    stubs.metrics({"gpu1": [0.0] * 12, "gpu2": [0.0] * 12, **BUSY_PROGRESS}, expected_ids=IDS)
    stubs.stop_job(JOB)
    stubs.stubbers["sns"].add_client_error("publish", "KMSAccessDenied", "KMS key access denied", 400)
    result = handler.run(recorded("scheduled"), training_settings(), stubs.clients, now=NOW)
    assert result["actions"][0]["done"] and result["publish_failures"] == 1


def test_host_count_follows_the_selected_instance_preference() -> None:
    assert handler.host_count({"ResourceConfig": {"SelectedInstanceCount": 4, "InstanceCount": 2}}) == 4
    assert handler.host_count({"ResourceConfig": {"InstanceGroups": [{"InstanceCount": 2}, {"InstanceCount": 1}]}}) == 3
    assert handler.host_count({}) == 1


# -- notebooks -------------------------------------------------------------------------------------------


def notebook(name: str, started: datetime) -> dict[str, Any]:
    return {
        "NotebookInstanceName": name,
        "NotebookInstanceArn": f"arn:aws:sagemaker:{REGION}:123456789012:notebook-instance/{name}",
        "NotebookInstanceStatus": "InService",
        "InstanceType": "ml.g5.xlarge",
        "LastModifiedTime": started,
    }


def test_notebook_over_its_session_limit_is_stopped(stubs: Stubs) -> None:
    stubs.stubbers["sagemaker"].add_response(
        "list_notebook_instances",
        {
            "NotebookInstances": [
                notebook("gpu-dev-explore", NOW - timedelta(hours=9)),
                notebook("gpu-dev-fresh", NOW - timedelta(hours=1)),
                notebook("someone-elses", NOW - timedelta(days=3)),
            ]
        },
        {"StatusEquals": "InService"},
    )
    stubs.stubbers["sagemaker"].add_response("stop_notebook_instance", {}, {"NotebookInstanceName": "gpu-dev-explore"})
    stubs.published()
    settings = Settings(topic_arn=TOPIC, notebooks={"gpu-dev-explore": 480, "gpu-dev-fresh": 480})
    (action,) = handler.run(recorded("scheduled"), settings, stubs.clients, now=NOW)["actions"]
    assert action["name"] == "gpu-dev-explore" and "in service for 540 minutes" in action["reason"]


# -- fleets ----------------------------------------------------------------------------------------------


def test_fleet_group_of_an_idle_alarm_scales_to_zero(stubs: Stubs) -> None:
    stubs.stubbers["autoscaling"].add_response(
        "update_auto_scaling_group", {}, {"AutoScalingGroupName": "gpu-dev-a100", "MinSize": 0, "DesiredCapacity": 0}
    )
    stubs.published()
    settings = Settings(topic_arn=TOPIC, fleet_groups=("gpu-dev-a100",))
    (action,) = handler.run(recorded("fleet_idle_alarm"), settings, stubs.clients)["actions"]
    assert action["kind"] == "fleet group" and action["name"] == "gpu-dev-a100"
    assert "gpu-dev-fleets-A100IdleGpuAlarm-1X2Y3Z is in ALARM: Threshold Crossed" in action["reason"]
    assert handler.Action("fleet group", "g", "r").message() == "Idle stop scaled to 0 fleet group g: r"


def test_alarm_back_to_ok_does_nothing(stubs: Stubs) -> None:
    event = copy.deepcopy(recorded("fleet_idle_alarm"))
    event["detail"]["state"]["value"] = "OK"
    settings = Settings(topic_arn=TOPIC, fleet_groups=("gpu-dev-a100",))
    assert handler.run(event, settings, stubs.clients)["actions"] == []


def test_alarm_of_a_group_not_managed_here_does_nothing(stubs: Stubs) -> None:
    settings = Settings(topic_arn=TOPIC, fleet_groups=("gpu-dev-h100",))
    assert handler.run(recorded("fleet_idle_alarm"), settings, stubs.clients)["actions"] == []


def test_other_events_are_ignored(stubs: Stubs) -> None:
    assert (
        handler.run({"detail-type": "AWS API Call via CloudTrail"}, training_settings(), stubs.clients)["actions"] == []
    )


def test_entry_point_reads_its_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = {
        "topic_arn": TOPIC,
        "dry_run": True,
        "training": {"job_name_prefix": PREFIX, "idle_minutes": 30, "gpu_idle_percent": 5, "progress_metric": None},
        "notebooks": {"gpu-dev-explore": 480},
        "fleet_groups": ["gpu-dev-a100"],
    }
    monkeypatch.setenv(handler.SETTINGS_VARIABLE, json.dumps(settings))
    parsed = Settings.from_json(json.dumps(settings))
    assert parsed.training == TrainingSettings(PREFIX, 30, 5, None) and parsed.fleet_groups == ("gpu-dev-a100",)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    assert handler.handler({"detail-type": "Unknown"}, None) == {"dry_run": True, "actions": [], "publish_failures": 0}


def test_a_job_with_more_hosts_than_one_request_holds_is_read_in_several(stubs: Stubs) -> None:
    job = recorded("describe_training_job_idle")
    job["ResourceConfig"]["InstanceCount"] = 600
    stubs.list_jobs(JOB)
    stubs.describe(job)
    ids = [f"gpu{i}" for i in range(1, 601)]
    stubs.metrics({i: [0.0] * 12 for i in ids[:500]}, expected_ids=ids[:500])
    stubs.metrics({**{i: [0.0] * 12 for i in ids[500:]}, **BUSY_PROGRESS}, expected_ids=[*ids[500:], "progress"])
    stubs.stop_job(JOB)
    stubs.published()
    result = handler.run(recorded("scheduled"), training_settings(), stubs.clients, now=NOW)
    assert "its 600 host(s) stayed under 5%" in result["actions"][0]["reason"]


def test_dry_run_of_one_notebook_stops_the_others(stubs: Stubs) -> None:
    stubs.stubbers["sagemaker"].add_response(
        "list_notebook_instances",
        {
            "NotebookInstances": [
                notebook("gpu-dev-a", NOW - timedelta(hours=9)),
                notebook("gpu-dev-b", NOW - timedelta(hours=9)),
            ]
        },
        {"StatusEquals": "InService"},
    )
    stubs.stubbers["sagemaker"].add_response("stop_notebook_instance", {}, {"NotebookInstanceName": "gpu-dev-b"})
    stubs.published(2)
    settings = Settings(topic_arn=TOPIC, notebooks={"gpu-dev-a": 480, "gpu-dev-b": 480}, dry_run_names=("gpu-dev-a",))
    first, second = handler.run(recorded("scheduled"), settings, stubs.clients, now=NOW)["actions"]
    assert (first["name"], first["dry_run"], first["done"]) == ("gpu-dev-a", True, False)
    assert (second["name"], second["dry_run"], second["done"]) == ("gpu-dev-b", False, True)


def test_dry_run_of_a_fleet_group(stubs: Stubs) -> None:
    stubs.published()
    settings = Settings(topic_arn=TOPIC, fleet_groups=("gpu-dev-a100",), dry_run_names=("gpu-dev-a100",))
    (action,) = handler.run(recorded("fleet_idle_alarm"), settings, stubs.clients)["actions"]
    assert action["dry_run"] and not action["done"]


def test_the_handler_reads_in_the_buckets_the_limits_are_made_of() -> None:
    """The function is deployed alone (no import of the library): its bucket is the limits' bucket."""
    from gpu_constructs.idle.limits import BUCKET_MINUTES

    assert handler.BUCKET_SECONDS == BUCKET_MINUTES * 60


def test_a_job_that_never_logs_the_progress_metric_is_judged_by_its_gpus_alone(stubs: Stubs) -> None:
    stubs.list_jobs(JOB)
    stubs.describe(recorded("describe_training_job_idle"))
    stubs.metrics({"gpu1": [99.0] * 12, "gpu2": [99.0] * 12}, expected_ids=IDS)
    stubs.history([])
    assert handler.run(recorded("scheduled"), training_settings(), stubs.clients, now=NOW)["actions"] == []
