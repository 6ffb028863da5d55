"""The training and fleets stacks deploy the idle-stop function from config: on in dev by default, explicit in prod."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import assertions
from unit_helpers import env_template_fixtures

from gpu_constructs.idle.handler import SETTINGS_VARIABLE
from gpu_constructs.templates import flatten

dev_training, prod_training = env_template_fixtures("training", "dev_training", "prod_training")
dev_fleets, prod_fleets = env_template_fixtures("fleets", "dev_fleets", "prod_fleets")


def _settings(template: assertions.Template) -> dict[str, Any]:
    """The function's settings, with references (the topic's ARN) as ``${LogicalId}``."""
    functions = [
        f["Properties"]
        for f in template.find_resources("AWS::Lambda::Function").values()
        if SETTINGS_VARIABLE in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    assert len(functions) == 1
    settings: dict[str, Any] = json.loads(flatten(functions[0]["Environment"]["Variables"][SETTINGS_VARIABLE]))
    return settings


def test_dev_training_stops_idle_jobs_after_30_minutes(dev_training: assertions.Template) -> None:
    settings = _settings(dev_training)
    assert settings["training"] == {
        "job_name_prefix": "gpu-dev-train", "idle_minutes": 30, "gpu_idle_percent": 5, "progress_metric": "train:loss"
    }  # fmt: skip
    assert settings["dry_run"] is False and settings["topic_arn"].startswith("${")
    dev_training.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(5 minutes)"})


def test_prod_training_stops_idle_jobs_after_an_hour(prod_training: assertions.Template) -> None:
    assert _settings(prod_training)["training"]["idle_minutes"] == 60


def test_dev_fleets_scale_the_group_in_and_stop_the_notebook(dev_fleets: assertions.Template) -> None:
    settings = _settings(dev_fleets)
    assert settings["fleet_groups"] == ["gpu-dev-workbench"] and settings["notebooks"] == {"gpu-dev-explore": 480}
    dev_fleets.has_resource_properties(
        "AWS::Events::Rule",
        {"EventPattern": {"source": ["aws.cloudwatch"], "detail": {"state": {"value": ["ALARM"]}}}},
    )


def test_prod_p5_group_scales_in_on_its_30_minute_idle_alarm(prod_fleets: assertions.Template) -> None:
    settings = _settings(prod_fleets)
    assert settings["fleet_groups"] == ["gpu-prod-p5"] and "notebooks" not in settings
