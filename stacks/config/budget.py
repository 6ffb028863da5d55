"""The ``budget`` section: a monthly AWS Budgets cost budget of the environment, on its cost-allocation tags."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, model_validator

from stacks.config._base import Allowed, EmailList, StrictModel

#: A percentage of the monthly limit (AWS Budgets: a threshold > 0 and at most 1,000,000 %).
Percent = Annotated[float, Field(gt=0, le=1_000_000), Allowed(unit="% of monthly_limit_usd")]


class BudgetConfig(StrictModel):
    """A monthly cost budget (AWS Budgets) on the environment's ``tags``, with alerts to a topic and e-mails.

    The budget counts the costs of resources that carry every tag of the environment's ``tags`` section; the tag
    keys must be activated as cost allocation tags in the Billing console first (README: "Budgets").
    """

    monthly_limit_usd: Annotated[float, Field(gt=0), Allowed(unit="US dollars")] = Field(
        description="Budgeted cost per calendar month in US dollars"
    )
    alert_percentages: tuple[Percent, ...] = Field(
        (80, 100), description="Alert when the month's actual cost exceeds these percentages of the limit"
    )
    forecast_alert_percent: Percent | None = Field(
        100, description="Alert when the month's forecasted cost exceeds this percentage of the limit (null: never)"
    )
    emails: EmailList = Field(
        (), description="Addresses AWS Budgets e-mails on every alert (at most 10), besides the budget's SNS topic"
    )

    @model_validator(mode="after")
    def _aws_limits(self) -> BudgetConfig:
        from gpu_constructs.budgets.limits import check_budget

        problems = check_budget(
            monthly_limit_usd=self.monthly_limit_usd,
            alert_percentages=self.alert_percentages,
            forecast_alert_percent=self.forecast_alert_percent,
            emails=self.emails,
            cost_allocation_tags={"tags": "checked by the environment"},
        )
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def budget_props(self, tags: dict[str, str]) -> dict[str, Any]:
        """The keyword arguments of :class:`~gpu_constructs.budgets.CostBudget` this section and ``tags`` set."""
        return {
            "monthly_limit_usd": self.monthly_limit_usd,
            "cost_allocation_tags": dict(tags),
            "alert_percentages": self.alert_percentages,
            "forecast_alert_percent": self.forecast_alert_percent,
            "emails": self.emails,
        }
