"""Shared fixtures: each environment's app is synthesized once per test process and reused."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_DEPRECATED_NODE_VERSION", "1")
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

ROOT = Path(__file__).resolve().parent.parent
ENVS = ("dev", "prod")


@dataclass
class Synthesized:
    """One synthesized environment: the built app objects and its cloud assembly on disk."""

    env: str
    outdir: Path
    platform: Any  # stacks.app_builder.PlatformApp
    templates: dict[str, dict[str, Any]]  # stack name -> template

    def template(self, suffix: str) -> dict[str, Any]:
        """The template of the stack whose name ends with ``-<suffix>`` (e.g. ``network``)."""
        matches = [t for name, t in self.templates.items() if name.endswith(f"-{suffix}")]
        assert len(matches) == 1, f"expected one stack ending in -{suffix}, got {sorted(self.templates)}"
        return matches[0]


def synthesize(env: str, outdir: Path) -> Synthesized:
    from stacks.app_builder import build_app

    platform = build_app(env, outdir=str(outdir))
    platform.app.synth()  # raises when any cdk-nag pack reports an unacknowledged finding
    # Top-level stacks only: a pipeline's stages repeat the platform stacks (same names) in nested assemblies.
    artifacts = json.loads((outdir / "manifest.json").read_text()).get("artifacts", {})
    templates = {
        art["properties"].get("stackName", art_id): json.loads((outdir / art["properties"]["templateFile"]).read_text())
        for art_id, art in sorted(artifacts.items())
        if art.get("type") == "aws:cloudformation:stack"
    }
    return Synthesized(env=env, outdir=outdir, platform=platform, templates=templates)


_CACHE: dict[str, Synthesized] = {}


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory):
    """``synth(env)`` -> :class:`Synthesized`, built once per session (per xdist worker) per env."""

    def get(env: str) -> Synthesized:
        if env not in _CACHE:
            _CACHE[env] = synthesize(env, tmp_path_factory.mktemp(f"cdk-{env}"))
        return _CACHE[env]

    return get


@pytest.fixture(scope="session")
def synthesize_fresh():
    """The uncached ``synthesize(env, outdir)`` (for determinism checks)."""
    return synthesize


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-stateful",
        action="store_true",
        default=False,
        help="rewrite tests/snapshots/stateful_resources.json (review the diff: a missing id is a replacement)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``no_gpu`` tests on a host where torch sees a CUDA device (what they assert, a clear failure when no
    GPU is there, cannot happen there) and ``gpu`` tests on a host where it sees none. Torch is imported only
    when such a test was collected."""
    no_gpu = [item for item in items if item.get_closest_marker("no_gpu")]
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if not no_gpu and not gpu:
        return
    import torch

    if torch.cuda.is_available():
        skipped, reason = (
            no_gpu,
            f"asserts the behaviour of a host without a GPU; this host has {torch.cuda.get_device_name(0)}",
        )
    else:
        skipped, reason = gpu, "needs a CUDA device (make gpu-check runs it on a GPU host)"
    for item in skipped:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(autouse=True)
def _restore_tf32_flags():
    """The built-in trainer turns TF32 matmuls on for the process (``gpu_train.train_loop``); a test that trains in
    process must not leave them on for the next test in the same worker, whose GPU results would then differ from
    the CPU by TF32 rounding (seen on an H100: 1.9e-4 in an MLP). Restored only where torch is already loaded."""
    import sys

    torch = sys.modules.get("torch")
    # torch's defaults where it is loaded by the test itself (matmul off, cuDNN convolutions on)
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) if torch else (False, True)
    yield
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
