"""The training and fleets stacks deploy the idle-stop function from config: on in dev by default, explicit in prod."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import assertions

from gpu_constructs.idle.handler import SETTINGS_VARIABLE
from unit_helpers import env_template_fixtures

dev_training, prod_training = env_template_fixtures("training", "dev_training", "prod_training")
dev_fleets, prod_fleets = env_template_fixtures("fleets", "dev_fleets", "prod_fleets")


def _settings(template: assertions.Template) -> dict[str, Any]:
    functions = [
        f["Properties"]
        for f in template.find_resources("AWS::Lambda::Function").values()
        if SETTINGS_VARIABLE in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    assert len(functions) == 1
    text = json.dumps(functions[0]["Environment"]["Variables"][SETTINGS_VARIABLE])
    return {"raw": text}


def test_dev_training_stops_idle_jobs_after_30_minutes(dev_training: assertions.Template) -> None:
    raw = _settings(dev_training)["raw"]
    assert '\\"job_name_prefix\\": \\"gpu-dev-train\\"' in raw and '\\"idle_minutes\\": 30' in raw
    assert '\\"progress_metric\\": \\"train:loss\\"' in raw
    dev_training.has_resource_properties("AWS::Events::Rule", {"ScheduleExpression": "rate(5 minutes)"})


def test_prod_training_stops_idle_jobs_after_an_hour(prod_training: assertions.Template) -> None:
    raw = _settings(prod_training)["raw"]
    assert '\\"idle_minutes\\": 60' in raw and '\\"dry_run\\": false' in raw


def test_dev_fleets_scale_the_group_in_and_stop_the_notebook(dev_fleets: assertions.Template) -> None:
    raw = _settings(dev_fleets)["raw"]
    assert '\\"fleet_groups\\": [\\"gpu-dev-workbench\\"]' in raw
    assert '\\"notebooks\\": {\\"gpu-dev-explore\\": 480}' in raw
    dev_fleets.has_resource_properties(
        "AWS::Events::Rule",
        {"EventPattern": {"source": ["aws.cloudwatch"], "detail": {"state": {"value": ["ALARM"]}}}},
    )


def test_prod_p5_group_scales_in_on_its_30_minute_idle_alarm(prod_fleets: assertions.Template) -> None:
    raw = _settings(prod_fleets)["raw"]
    assert '\\"fleet_groups\\": [\\"gpu-prod-p5\\"]' in raw and "notebooks" not in raw
