"""The data stack (in every environment) owns the environment's cost budget when ``budget`` is configured."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import assertions

from stacks.config import load_config
from stacks.context import StackContext
from stacks.data_stack import DataStack


def _template(env: str, *, with_budget: bool = True) -> dict:
    config = load_config(env)
    app = cdk.App()
    stack = DataStack(
        app,
        "Data",
        context=StackContext.from_config(config),
        data=config.data,
        budget=config.budget if with_budget else None,
    )
    return assertions.Template.from_stack(stack).to_json()


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_budget_on_the_environment_tags(env: str) -> None:
    config = load_config(env)
    template = _template(env)
    budgets = [r for r in template["Resources"].values() if r["Type"] == "AWS::Budgets::Budget"]
    assert len(budgets) == 1
    data = budgets[0]["Properties"]["Budget"]
    assert data["BudgetName"] == f"{config.resource_prefix}-monthly-cost"
    assert data["BudgetLimit"] == {"Amount": config.budget.monthly_limit_usd, "Unit": "USD"}
    keys = {e["Tags"]["Key"]: e["Tags"]["Values"] for e in data["FilterExpression"]["And"]}
    assert keys == {k: [v] for k, v in config.tags.items()}
    assert "BudgetTopicArn" in template["Outputs"]


def test_no_budget_section_no_budget() -> None:
    template = _template("dev", with_budget=False)
    assert not [r for r in template["Resources"].values() if r["Type"] == "AWS::Budgets::Budget"]
    assert "BudgetTopicArn" not in template.get("Outputs", {})
