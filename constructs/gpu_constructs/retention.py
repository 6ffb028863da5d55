"""CloudWatch Logs retention as days <-> ``logs.RetentionDays``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpu_constructs.errors import ValidationError

if TYPE_CHECKING:
    from aws_cdk import aws_logs as logs

#: Retention values accepted by CloudWatch Logs, in days, in the order of ``logs.RetentionDays``.
LOG_RETENTION_DAYS: tuple[int, ...] = (
    1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653,
)  # fmt: skip


def retention_days(days: int, where: str = "retention") -> logs.RetentionDays:
    """The ``RetentionDays`` member for ``days``; raise when CloudWatch Logs does not accept the value."""
    from aws_cdk import aws_logs as logs

    by_days = dict(zip(LOG_RETENTION_DAYS, [m for m in logs.RetentionDays if m.name != "INFINITE"], strict=True))
    try:
        return by_days[days]
    except KeyError:
        raise ValidationError(
            where, f"{days!r} days is not a CloudWatch Logs retention; allowed: {list(LOG_RETENTION_DAYS)}"
        ) from None
