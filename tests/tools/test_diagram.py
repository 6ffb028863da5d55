"""`make diagram ENV=prod`: the pipeline's stages are drawn as stages (clusters) holding their own stacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from platform_tools.diagram import Box, layout, load, main, render
from stacks.config import load_config
from stacks.stage import stage_id


@pytest.fixture(scope="module")
def prod(synth):
    return synth("prod")


def _inside(inner: Box, outer: Box) -> bool:
    return (
        outer.x <= inner.x
        and inner.x + inner.w <= outer.x + outer.w
        and outer.y <= inner.y
        and inner.y + inner.h <= outer.y + outer.h
    )


def test_prod_stages_are_clusters_of_their_own_stacks(prod) -> None:  # type: ignore[no-untyped-def]
    arch = load(prod.outdir)
    pipeline = load_config("prod").pipeline
    assert pipeline is not None
    deployer = next(s.artifact_id for s in arch.app_stacks if s.name == "gpu-prod-pipeline")

    # In the pipeline's order, each deployed by the pipeline stack, the approval where config asks for one.
    assert [st.path for st in arch.stages] == [f"gpu-prod-pipeline/{stage_id(e)}" for e in pipeline.stages]
    assert [st.approval for st in arch.stages] == [e in pipeline.approve_before for e in pipeline.stages]
    assert {st.deployer for st in arch.stages} == {deployer}

    # Every stack of the assembly, once: the app's own and each stage's (nested assemblies read too).
    nested = {
        art["properties"]["displayName"]: prod.outdir / art["properties"]["directoryName"]
        for art in json.loads((prod.outdir / "manifest.json").read_text())["artifacts"].values()
        if art["type"] == "cdk:cloud-assembly"
    }
    for stage in arch.stages:
        artifacts = json.loads((nested[stage.path] / "manifest.json").read_text())["artifacts"].values()
        expected = sorted(a["properties"]["stackName"] for a in artifacts if a["type"] == "aws:cloudformation:stack")
        by_id = {s.artifact_id: s for s in arch.stacks}
        assert sorted(by_id[sid].name for sid in stage.stacks) == expected
        assert all(by_id[sid].stage == stage.path for sid in stage.stacks)
        assert all(n.startswith(load_config(stage.name.lower()).resource_prefix + "-") for n in expected)
    assert sorted(s.name for s in arch.app_stacks) == sorted(prod.templates)
    assert len(arch.stacks) == len(prod.templates) + sum(len(st.stacks) for st in arch.stages)

    # References stay within their stage: the Prod stage's stacks export the same names as the app's prod stacks.
    stage_of = {s.artifact_id: s.stage for s in arch.stacks}
    assert all(stage_of[r.producer] == stage_of[r.consumer] for r in arch.references)
    names = {s.artifact_id: s.name for s in arch.stacks}
    app_pairs = {(names[r.producer], names[r.consumer], r.via) for r in arch.references if stage_of[r.consumer] is None}
    prod_stage = next(st for st in arch.stages if st.name == "Prod")  # the same stacks as the app's, deployed
    prod_pairs = {
        (names[r.producer], names[r.consumer], r.via)
        for r in arch.references
        if stage_of[r.consumer] == prod_stage.path
    }
    assert prod_pairs == app_pairs and app_pairs
    # The pipeline stack's own resources do not include its stages (no VPC of a stage drawn inside the pipeline).
    pipeline_kinds = {
        r.kind for s in arch.app_stacks if s.artifact_id == deployer for g in s.groups for r in g.resources
    }
    assert "codepipeline.Pipeline" in pipeline_kinds and "ec2.Vpc" not in pipeline_kinds


def test_prod_layout_puts_stages_below_the_app(prod, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    arch = load(prod.outdir)
    placed = layout(arch)
    assert set(placed.clusters) == {st.path for st in arch.stages}
    lowest_app = min(placed.boxes[s.artifact_id].y for s in arch.app_stacks)
    for stage in arch.stages:
        cluster = placed.clusters[stage.path]
        assert cluster.y + cluster.h < lowest_app  # the stages sit below every stack of the app
        assert all(_inside(placed.boxes[sid], cluster) for sid in stage.stacks)
    first, second = (placed.clusters[st.path] for st in arch.stages)
    assert first.x + first.w <= second.x  # side by side, in pipeline order, not overlapping
    assert placed == layout(load(prod.outdir))  # deterministic

    out = render(arch, tmp_path / "architecture-prod.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 50_000


def test_cli_counts_the_stages(prod, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[no-untyped-def]
    assert main([str(prod.outdir), str(tmp_path / "d.svg"), "--title", "t"]) == 0
    out = capsys.readouterr().out
    staged = len(load(prod.outdir).stacks) - len(prod.templates)
    assert out.startswith(f"wrote {tmp_path / 'd.svg'}: {len(prod.templates) + staged} stacks ({staged} in pipeline ")
    assert "stages Dev, Prod)" in out and (tmp_path / "d.svg").stat().st_size > 0
