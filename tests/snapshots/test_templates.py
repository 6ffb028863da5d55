"""One reviewed JSON snapshot per stack and environment; synth is deterministic.

Update after a deliberate change with ``make snapshot-update`` and review the diff before committing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

ENVS = ("dev", "prod")
STACKS = ("network", "data", "storage", "images", "gitops", "training", "inference", "fleets")
#: Stacks that only some environments have (the rest exist in every env).
ENV_STACKS: dict[str, tuple[str, ...]] = {"pipeline": ("prod",)}
ASSET_HASH = re.compile(r"\b[0-9a-f]{64}\b")


def normalize(template: dict[str, Any]) -> Any:
    """Replace asset hashes (they change with any byte of bundled code) by a marker, then order IAM ``Resource``
    lists (the CDK sorts them by text, asset hashes included, so any code edit could swap two asset ARNs; IAM
    gives the order no meaning)."""
    return _sort_resources(json.loads(ASSET_HASH.sub("<asset-hash>", json.dumps(template, sort_keys=True))))


def _sort_resources(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            key: sorted((_sort_resources(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
            if key == "Resource" and isinstance(value, list)
            else _sort_resources(value)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_sort_resources(v) for v in node]
    return node


@pytest.fixture()
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("env", ENVS)
@pytest.mark.parametrize("stack", (*STACKS, *ENV_STACKS))
def test_stack_snapshot(synth, snapshot_json, env: str, stack: str) -> None:
    if env not in ENV_STACKS.get(stack, ENVS):
        pytest.skip(f"{env} has no {stack} stack")
    assert normalize(synth(env).template(stack)) == snapshot_json


def test_two_synths_are_byte_identical(synth, synthesize_fresh, tmp_path: Path) -> None:
    first = synth("dev")
    second = synthesize_fresh("dev", tmp_path / "again")
    names = sorted(p.name for p in first.outdir.glob("*.template.json"))
    assert names == sorted(p.name for p in second.outdir.glob("*.template.json")) and names
    for name in names:
        assert (first.outdir / name).read_bytes() == (second.outdir / name).read_bytes(), name
