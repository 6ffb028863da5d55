"""The CDK-free limits of idle stop (the config model checks with them)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_constructs.idle.limits import idle_minutes_problem, session_minutes_problem


@pytest.mark.parametrize("minutes", [10, 15, 60, 1440])
def test_idle_periods_that_are_allowed(minutes: int) -> None:
    assert idle_minutes_problem(minutes) is None


@pytest.mark.parametrize("minutes", [0, 5, 7, 12, 1445, 30.5, True])
def test_idle_periods_that_are_not(minutes: float) -> None:
    assert idle_minutes_problem(minutes) == "a multiple of 5 minutes from 10 to 1440 (1 day)"


@pytest.mark.parametrize(("minutes", "ok"), [(60, True), (480, True), (10080, True), (59, False), (10081, False)])
def test_session_limits(minutes: int, ok: bool) -> None:
    assert (session_minutes_problem(minutes) is None) is ok


def test_limits_config_and_package_load_no_cdk() -> None:
    code = (
        "import sys, gpu_constructs.idle, gpu_constructs.idle.limits, gpu_constructs.idle.handler, "
        "stacks.config.auto_stop; print('aws_cdk' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
