"""What AWS Budgets accepts in a cost budget, checked without the CDK (the config model uses these rules too).

From the botocore ``budgets`` service model (2016-10-20, botocore 1.44):

* ``NotificationThreshold``: a double with ``min`` 0 (and the ``Notification.Threshold`` documentation: "The
  maximum limit for your threshold is 1,000,000% above the budgeted amount"); a percentage threshold of 0 never
  means anything useful, so the platform asks for more than 0;
* ``CreateBudgetRequest.NotificationsWithSubscribers``: ``max`` 10 notifications per budget;
* ``NotificationWithSubscribers``: "A notification can have one SNS subscriber and up to 10 email subscribers,
  for a total of 11 subscribers" (``Subscribers``: ``min`` 1, ``max`` 11);
* ``Spend.Amount`` (``NumericValue``): a non-negative decimal number, pattern ``([0-9]*\\.)?[0-9]+``;
* ``BudgetName``: 1-100 characters without ``:`` or ``\\`` (and not the substring ``/action/``);
* ``ResourceTag``: a tag key of 1-128 characters, a value of at most 256.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

#: The highest percentage threshold AWS Budgets accepts (Notification.Threshold documentation).
MAX_THRESHOLD_PERCENT = 1_000_000
#: Notifications per budget (CreateBudgetRequest.NotificationsWithSubscribers, max 10).
MAX_NOTIFICATIONS = 10
#: E-mail subscribers per notification (NotificationWithSubscribers: one SNS and up to 10 e-mail subscribers).
MAX_EMAIL_SUBSCRIBERS = 10
#: BudgetName length (1-100).
MAX_BUDGET_NAME = 100
#: Cost-allocation tag key and value lengths (ResourceTag: key 1-128, value 0-256).
MAX_TAG_KEY, MAX_TAG_VALUE = 128, 256


def _percent_problem(name: str, value: float) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"{name}={value!r} is not a number; allowed: a percentage > 0 and <= {MAX_THRESHOLD_PERCENT:,}"
    if not 0 < value <= MAX_THRESHOLD_PERCENT:
        return f"{name}={value!r} is not allowed; allowed: a percentage > 0 and <= {MAX_THRESHOLD_PERCENT:,}"
    return None


def check_budget(
    *,
    monthly_limit_usd: float,
    alert_percentages: Sequence[float],
    forecast_alert_percent: float | None,
    emails: Sequence[str],
    cost_allocation_tags: Mapping[str, str],
    budget_name: str | None = None,
) -> list[str]:
    """Every problem of a cost budget's settings, each naming the setting, its value and what is allowed."""
    problems: list[str] = []
    limit = monthly_limit_usd
    if isinstance(limit, bool) or not isinstance(limit, int | float) or not math.isfinite(limit) or limit <= 0:
        problems.append(f"monthly_limit_usd={limit!r} is not allowed; allowed: a number of US dollars > 0")
    for i, percent in enumerate(alert_percentages):
        problem = _percent_problem(f"alert_percentages[{i}]", percent)
        if problem:
            problems.append(problem)
    if len(set(alert_percentages)) != len(alert_percentages):
        problems.append(f"alert_percentages={list(alert_percentages)} lists a percentage twice; list each once")
    if forecast_alert_percent is not None:
        problem = _percent_problem("forecast_alert_percent", forecast_alert_percent)
        if problem:
            problems.append(problem)
    count = len(alert_percentages) + (forecast_alert_percent is not None)
    if count == 0:
        problems.append(
            "alert_percentages=[] and forecast_alert_percent=None: a budget without a notification alerts nobody; "
            "allowed: at least one percentage"
        )
    elif count > MAX_NOTIFICATIONS:
        problems.append(
            f"{count} notifications (alert_percentages + forecast_alert_percent) is not allowed; allowed: at most "
            f"{MAX_NOTIFICATIONS} per budget (AWS Budgets)"
        )
    if len(emails) > MAX_EMAIL_SUBSCRIBERS:
        problems.append(
            f"emails: {len(emails)} addresses is not allowed; allowed: at most {MAX_EMAIL_SUBSCRIBERS} e-mail "
            "subscribers per notification (AWS Budgets); subscribe further addresses to the topic"
        )
    if not cost_allocation_tags:
        problems.append(
            "cost_allocation_tags={} is not allowed; allowed: at least one tag key and value (the budget counts "
            "only the costs of resources with these tags)"
        )
    for key, value in cost_allocation_tags.items():
        if not 1 <= len(key) <= MAX_TAG_KEY or key.startswith("aws:"):
            problems.append(
                f"cost_allocation_tags key {key!r} is not allowed; allowed: 1-{MAX_TAG_KEY} characters, a user tag "
                "(not aws:...)"
            )
        if len(value) > MAX_TAG_VALUE:
            problems.append(
                f"cost_allocation_tags[{key!r}]: a value of {len(value)} characters is not allowed; allowed: at most "
                f"{MAX_TAG_VALUE}"
            )
    if budget_name is not None and (
        not 1 <= len(budget_name) <= MAX_BUDGET_NAME
        or any(c in budget_name for c in ":\\")
        or "/action/" in budget_name
    ):
        problems.append(
            f"budget_name={budget_name!r} is not allowed; allowed: 1-{MAX_BUDGET_NAME} characters without ':', '\\' "
            "or '/action/'"
        )
    return problems


__all__ = [
    "MAX_EMAIL_SUBSCRIBERS",
    "MAX_NOTIFICATIONS",
    "MAX_THRESHOLD_PERCENT",
    "check_budget",
]
