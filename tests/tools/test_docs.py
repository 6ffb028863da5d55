"""The docs cannot drift: README links and make targets exist, the config reference is current, the diagram renders."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _links(markdown: str) -> list[str]:
    """Relative link targets of ``[text](target)`` (no URLs, no pure anchors), without their ``#anchor``."""
    targets = []
    for target in re.findall(r"\]\(([^)\s]+)\)", markdown):
        if re.match(r"^[a-z]+://|^mailto:", target) or target.startswith("#"):
            continue
        targets.append(target.split("#", 1)[0])
    return targets


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors for the headings of ``markdown``."""
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", markdown, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


def test_readme_links_point_to_existing_files() -> None:
    links = _links(_readme())
    assert "docs/architecture.png" in links and "docs/config-reference.md" in links
    missing = [t for t in links if not (ROOT / t).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_readme_anchor_links_resolve() -> None:
    text = _readme()
    anchors = _anchors(text)
    broken = [a for a in re.findall(r"\]\(#([^)\s]+)\)", text) if a not in anchors]
    assert not broken, f"README links to headings that do not exist: {broken}"


def test_every_make_target_named_in_readme_exists() -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = set(re.findall(r"^([a-zA-Z][\w-]*):", makefile, flags=re.M))
    named = set(re.findall(r"\bmake ([a-z][\w-]*)", _readme()))
    assert {"synth", "test", "diagram", "config-reference"} <= named
    assert not named - targets, f"README names make targets the Makefile lacks: {sorted(named - targets)}"


def test_readme_starts_with_the_two_commands() -> None:
    text = _readme()
    first_block = re.search(r"```bash\n(.*?)```", text, flags=re.S)
    assert first_block is not None
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines() if line.strip()]
    assert commands == ["make synth", "make test"]
    assert "constructs/gpu_constructs/" in text and "shadow" in text  # why the library lives where it does


def test_troubleshooting_covers_the_real_symptoms() -> None:
    section = _readme().split("\n## Troubleshooting\n", 1)[1].split("\n## ", 1)[0]
    headings = [h.lower() for h in re.findall(r"^### (.+)$", section, flags=re.M)]
    for symptom in (
        "torch.cuda.is_available() is False",
        "GPU utilization is low",
        "job stuck in Starting",
        "ResourceLimitExceeded",
    ):
        assert any(symptom.lower() in h for h in headings), f"no troubleshooting entry for {symptom!r}: {headings}"
    for tool in ("gpuctl doctor", "input-bound", "Service Quotas", "gpuctl status"):
        assert tool in section, tool


# Commands that need deployed stacks or AWS credentials; a block using one must say so on its first line.
_AWS_COMMAND = re.compile(r"^(aws |gpuctl (train|status|logs|stop)\b|npx cdk (deploy|bootstrap|diff|destroy)\b)")
_AWS_MARKER = "# needs an AWS account"


def test_commands_that_need_aws_are_marked() -> None:
    blocks = re.findall(r"```bash\n(.*?)```", _readme(), flags=re.S)
    assert len(blocks) > 5
    for block in blocks:
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        needs_aws = [line for line in lines if _AWS_COMMAND.match(line) or " s3://" in line]
        if needs_aws:
            assert lines[0].startswith(_AWS_MARKER), f"block needs AWS but is not marked: {needs_aws[0]}"


def test_config_reference_is_up_to_date() -> None:
    from platform_tools.config_reference import DEFAULT_OUTPUT, render

    committed = DEFAULT_OUTPUT.read_text(encoding="utf-8")
    assert committed == render(), "docs/config-reference.md is stale: run `make config-reference` and commit it"


def test_config_reference_lists_every_field_of_every_section() -> None:
    from platform_tools.config_reference import collect_sections, render
    from stacks.config import EnvConfig, FleetGroupConfig

    text = render()
    sections = collect_sections(EnvConfig)
    assert sections[0].model is EnvConfig
    for section in sections:
        heading = f"\n## {section.model.__name__}\n"
        assert heading in text, heading
        body = text.split(heading, 1)[1].split("\n## ", 1)[0]
        for name in section.model.model_fields:
            assert f"| `{name}` |" in body, f"{section.model.__name__}.{name} missing from the reference"
    groups = next(s for s in sections if s.model is FleetGroupConfig)
    assert groups.paths == ["fleets.groups[]"]
    assert "| `region` | string | **required** |" in text
    assert '| `removal_policy` | `"destroy"` \\| `"retain"` | `"retain"` |' in text


def test_config_reference_check_mode_detects_drift(tmp_path: Path) -> None:
    from platform_tools.config_reference import main

    stale = tmp_path / "config-reference.md"
    stale.write_text("# Configuration reference\n", encoding="utf-8")
    assert main(["--check", str(stale)]) == 1
    assert main([str(stale)]) == 0
    assert main(["--check", str(stale)]) == 0


@pytest.fixture(scope="module")
def dev_assembly(synth):  # type: ignore[no-untyped-def]
    return synth("dev")


def test_diagram_renders_the_synthesized_app(dev_assembly, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from platform_tools.diagram import load, render

    started = time.perf_counter()
    arch = load(dev_assembly.outdir)
    out = render(arch, tmp_path / "architecture.png")
    elapsed = time.perf_counter() - started
    assert elapsed < 15, f"diagram took {elapsed:.1f} s"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000

    names = {s.name for s in arch.stacks}
    assert names == set(dev_assembly.templates)
    assert arch.resource_count == sum(len(t.get("Resources", {})) for t in dev_assembly.templates.values())
    by_name = {s.name: s for s in arch.stacks}
    network = next(s for n, s in by_name.items() if n.endswith("-network"))
    kinds = {r.kind for g in network.groups for r in g.resources}
    assert {"ec2.Vpc", "ec2.SecurityGroup"} <= kinds

    # Every Fn::ImportValue between two stacks is one drawn reference, labelled with what crosses.
    ids = {s.artifact_id: s.name for s in arch.stacks}
    drawn = {(ids[r.producer], ids[r.consumer]) for r in arch.references if r.via == "export"}
    expected = set()
    for consumer, template in dev_assembly.templates.items():
        for producer in set(re.findall(r'"Fn::ImportValue": "([^":]+):', _json(template))):
            expected.add((producer, consumer))
    assert drawn == expected and expected
    storage_from_network = next(
        r for r in arch.references if ids[r.producer].endswith("-network") and ids[r.consumer].endswith("-storage")
    )
    assert "Vpc" in storage_from_network.items


def test_diagram_is_deterministic(dev_assembly, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from platform_tools.diagram import layout, load, render

    first, second = load(dev_assembly.outdir), load(dev_assembly.outdir)
    assert first == second
    assert layout(first) == layout(second)
    a, b = render(first, tmp_path / "a.png"), render(second, tmp_path / "b.png")
    assert a.read_bytes() == b.read_bytes()


def test_diagram_cli_names_a_missing_assembly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from platform_tools.diagram import main

    assert main([str(tmp_path / "nowhere"), str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert "manifest.json not found" in err and "make synth" in err


def _json(template: dict[str, object]) -> str:
    import json

    return json.dumps(template)
