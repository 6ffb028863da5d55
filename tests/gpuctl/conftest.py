"""Fixtures of the unit tests that run ``gpuctl train --synth`` offline."""

from __future__ import annotations

from typing import Any

import pytest

from gpuctl import training_setup


@pytest.fixture()
def no_aws(monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS client may be made; the environment picks neither a stack, an environment nor a region."""

    def refuse(service: str, region: str | None) -> Any:
        raise AssertionError(f"--synth made an AWS client ({service}, {region})")

    monkeypatch.setattr(training_setup, "make_client", refuse)
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "GPUCTL_STACK", "GPUCTL_ENV"):
        monkeypatch.delenv(name, raising=False)
