"""The ``budget`` section: dev and prod declare one; every bad value fails with the key, value and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks.config import CONFIG_DIR, BudgetConfig, ConfigError, load_config

DEV = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())


def _load(tmp_path: Path, budget: Any, **top: Any) -> Any:
    data = yaml.safe_load(yaml.safe_dump(DEV))
    data["budget"] = budget
    data.update(top)
    (tmp_path / "dev.yaml").write_text(yaml.safe_dump(data))
    return load_config("dev", config_dir=tmp_path)


def test_dev_and_prod_declare_a_budget_on_their_tags() -> None:
    for env in ("dev", "prod"):
        config = load_config(env)
        assert isinstance(config.budget, BudgetConfig)
        assert config.budget.monthly_limit_usd > 0 and config.budget.alert_percentages == (80, 100)
        props = config.budget.budget_props(config.tags)
        assert props["cost_allocation_tags"] == {"project": "gpu-platform", "environment": env}


def test_defaults(tmp_path: Path) -> None:
    budget = _load(tmp_path, {"monthly_limit_usd": 100}).budget
    assert budget.alert_percentages == (80, 100) and budget.forecast_alert_percent == 100 and budget.emails == ()


def test_no_budget_is_allowed(tmp_path: Path) -> None:
    assert _load(tmp_path, None).budget is None


@pytest.mark.parametrize(
    ("budget", "message"),
    [
        ({}, r"budget\.monthly_limit_usd"),
        ({"monthly_limit_usd": 0}, r"budget\.monthly_limit_usd.*allowed: > 0 US dollars"),
        ({"monthly_limit_usd": 10, "alert_percentages": [0]}, r"alert_percentages.*allowed: > 0 and <= 1000000"),
        ({"monthly_limit_usd": 10, "alert_percentages": [80, 80]}, r"lists a percentage twice"),
        ({"monthly_limit_usd": 10, "forecast_alert_percent": -5}, r"forecast_alert_percent.*allowed: > 0"),
        ({"monthly_limit_usd": 10, "alert_percentages": [], "forecast_alert_percent": None}, r"alerts nobody"),
        ({"monthly_limit_usd": 10, "emails": ["not-an-address"]}, r"are not e-mail addresses"),
        ({"monthly_limit_usd": 10, "emails": [f"a{i}@example.com" for i in range(11)]}, r"at most 10 e-mail"),
        ({"monthly_limit_usd": 10, "limit": 5}, r"budget\.limit"),
    ],
)
def test_bad_budget_values(tmp_path: Path, budget: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, budget)


def test_a_budget_needs_tags(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"budget: needs the environment's `tags`"):
        _load(tmp_path, {"monthly_limit_usd": 10}, tags={})


def test_tags_aws_budgets_refuses(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"budget: cost_allocation_tags\[.*at most 256"):
        _load(tmp_path, {"monthly_limit_usd": 10}, tags={"project": "x" * 257})
