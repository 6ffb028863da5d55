"""AWS Budgets for the platform: a monthly cost budget on the cost-allocation tags of one environment.

:class:`CostBudget` (``gpu_constructs.budgets.construct``) loads the CDK on first use; the limits it checks
(``gpu_constructs.budgets.limits``) do not, so the config model checks the same values with the same rules.
"""

from __future__ import annotations

from gpu_constructs.lazy import lazy_exports

__all__ = ["CostBudget", "check_budget"]

_EXPORTS = {
    "CostBudget": "gpu_constructs.budgets.construct",
    "check_budget": "gpu_constructs.budgets.limits",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
