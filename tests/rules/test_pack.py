"""The rule pack itself: every rule is documented, cited and tested; the pack reports through cdk-nag."""

from __future__ import annotations

import re
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs

from gpu_constructs.rules import RULE_MODULES, all_rules, finding_id
from gpu_constructs.rules.__main__ import markdown

ROOT = Path(__file__).resolve().parents[2]
RULES_DIR = ROOT / "constructs" / "gpu_constructs" / "rules"
CITATION = re.compile(r"https://|botocore|AWS [A-Za-z ]+(Guide|Reference)|sagemaker-[a-z-]+ \d")


def test_every_rule_module_is_registered() -> None:
    modules = sorted(p.stem for p in RULES_DIR.glob("*.py") if not p.stem.startswith("_") and p.stem != "pack")
    assert sorted(RULE_MODULES) == modules
    assert len(all_rules()) == len(RULE_MODULES)


@pytest.mark.parametrize("module", RULE_MODULES)
def test_every_rule_cites_its_source_and_has_tests(module: str) -> None:
    rule = all_rules()[RULE_MODULES.index(module)]
    assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", rule.id), rule.id
    assert CITATION.search(rule.explanation), f"{module}: the docstring must cite the AWS doc or botocore text"
    assert len(rule.info) >= 40, f"{module}: info must say what is wrong and what to do"
    test_file = ROOT / "tests" / "rules" / f"test_{module}.py"
    assert test_file.is_file(), f"{test_file} is missing"
    text = test_file.read_text()
    assert "findings(" in text and "== []" in text, f"{test_file}: needs non-compliant and compliant examples"


def test_rule_reference_is_current() -> None:
    """docs/rules.md is generated from the rule modules: regenerate with `python -m gpu_constructs.rules --markdown`."""
    assert (ROOT / "docs" / "rules.md").read_text() == markdown()


def test_the_pack_reports_and_honours_acknowledgments(tmp_path: Path) -> None:
    from gpu_constructs.rules import GpuPlatformChecks

    app = cdk.App(outdir=str(tmp_path))
    stack = cdk.Stack(app, "S", env=cdk.Environment(region="us-east-1"))
    kept = cdk.RemovalPolicy.RETAIN
    logs.LogGroup(stack, "Bad", log_group_name="/acme/bad", removal_policy=kept)
    ok = logs.LogGroup(stack, "Acked", log_group_name="/acme/acked", removal_policy=kept)
    cdk.Validations.of(ok.node.default_child).acknowledge(  # type: ignore[arg-type]
        cdk.Acknowledgment(id=finding_id("RetainedNamedResource"), reason="Safe because this test says so")
    )
    cdk.Validations.of(app).add_plugins(GpuPlatformChecks())
    with pytest.raises(RuntimeError) as raised:
        app.synth()
    message = str(raised.value)
    assert "S/Bad/Resource" in message and "GpuPlatform::GpuPlatform-RetainedNamedResource" in message
    assert "S/Acked/Resource" not in message
