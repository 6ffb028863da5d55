"""Security gate: cdk-nag packs (0 unacknowledged findings), acknowledgment hygiene, checkov, cfn-lint."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import aws_cdk as cdk
import pytest
from constructs import IConstruct

from gpu_constructs.nag import REASON_MARKERS, REASON_MIN_LENGTH
from platform_tools.summary import validation_violations

ROOT = Path(__file__).resolve().parents[2]
ENVS = ("dev", "prod")
PACKS = ("AwsSolutions", "HIPAA.Security", "NIST.800.53.R5", "PCI.DSS.321", "GpuPlatform")
FINDING_ID = re.compile(r"(?P<pack>[A-Za-z0-9.]+)::(?P<pack2>[A-Za-z0-9.]+)-[A-Za-z0-9]+(\[[^\[\],]+\])?")


@pytest.mark.parametrize("env", ENVS)
def test_all_nag_packs_registered_and_clean(synth, env: str) -> None:
    result = synth(env)
    report = json.loads((result.outdir / "policy-validation-report.json").read_text())
    assert report["title"] == "Validation Report"
    assert validation_violations(result.outdir) == []
    # The packs really ran: the app carries the four standard plugins and the platform's own.
    from stacks.app_builder import NAG_PACKS

    assert {p.__name__ for p in NAG_PACKS} == {
        "AwsSolutionsChecks", "HIPAASecurityChecks", "NIST80053R5Checks", "PCIDSS321Checks", "GpuPlatformChecks"
    }  # fmt: skip


def test_nag_catches_a_real_finding(tmp_path: Path) -> None:
    """The gate can fail: an unencrypted, unlogged bucket is reported and synth stops."""
    from aws_cdk import aws_s3 as s3

    from stacks.app_builder import add_nag_packs, cdk_json_context

    app = cdk.App(outdir=str(tmp_path), context=cdk_json_context(), analytics_reporting=False)
    stack = cdk.Stack(app, "Bad", env=cdk.Environment(region="us-east-1"))
    s3.Bucket(stack, "Plain")
    add_nag_packs(app)
    with pytest.raises(RuntimeError, match=r"ValidationFailed(.|\n)*AwsSolutions::AwsSolutions-S10"):
        app.synth()


def _acknowledgments(root: IConstruct) -> list[tuple[IConstruct, object]]:
    key = cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    found = []
    for node in root.node.find_all():
        for entry in node.node.metadata:
            if entry.type == key:
                found.append((node, entry.data))
    return found


@pytest.mark.parametrize("env", ENVS)
def test_every_acknowledgment_is_scoped_and_explained(synth, env: str) -> None:
    app = synth(env).platform.app
    acks = _acknowledgments(app)
    assert acks, "expected the platform's documented acknowledgments"
    ours = 0
    for node, data in acks:
        assert isinstance(data, dict), data  # {rule id: reason}
        for rule, reason in data.items():
            if rule.startswith("CloudFormation-Validate::"):
                # aws-cdk-lib's own acknowledgments of its template-spec checks (not cdk-nag findings).
                continue
            ours += 1
            where = f"{node.node.path} {rule}"
            # one finding id, of a known pack: PACK::PACK-Rule, optionally with cdk-nag's one granular finding
            # suffix such as AwsSolutions-IAM5[Resource::arn:...:log-group:/aws/sagemaker/*] (exact, not a pattern)
            match = FINDING_ID.fullmatch(rule)
            assert match is not None, f"{where}: not a single finding id"
            assert match["pack"] in PACKS and match["pack2"] == match["pack"], where
            # on one L1 resource, not a subtree
            assert isinstance(node, cdk.CfnResource), f"{where}: acknowledgment on a non-L1 construct"
            # a real reason
            assert len(reason.strip()) >= REASON_MIN_LENGTH, f"{where}: reason too short: {reason!r}"
            assert any(m in reason.lower() for m in REASON_MARKERS), f"{where}: reason does not say why: {reason!r}"
    assert ours > 0


def test_reason_rule_rejects_weak_reasons() -> None:
    from gpu_constructs import ValidationError
    from gpu_constructs.nag import check_reason

    for weak in ("ok", "suppressed for now, not needed", "false positive in this template here"):
        with pytest.raises(ValidationError, match="is not allowed; allowed: at least 20 characters"):
            check_reason(weak)
    check_reason("Safe because the source is the group itself")


def _templates(synth) -> list[Path]:
    paths = []
    for env in ENVS:
        paths += sorted(synth(env).outdir.glob("*.template.json"))
    return paths


def test_cfn_lint_reports_nothing(synth) -> None:
    templates = _templates(synth)
    assert len(templates) >= 4
    cfn_lint = shutil.which("cfn-lint", path=str(Path(sys.executable).parent)) or "cfn-lint"
    proc = subprocess.run(
        [cfn_lint, "--config-file", str(ROOT / ".cfnlintrc.yaml"), "--", *map(str, templates)],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""


def test_checkov_reports_no_failed_checks(synth, tmp_path: Path) -> None:
    scan = tmp_path / "templates"
    scan.mkdir()
    for index, path in enumerate(_templates(synth)):
        shutil.copy(path, scan / f"{index}-{path.name}")
    checkov = shutil.which("checkov", path=str(Path(sys.executable).parent)) or "checkov"
    env = {**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}
    proc = subprocess.run(
        [checkov, "-d", str(scan), "--framework", "cloudformation", "-o", "json", "--quiet"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    out = json.loads(proc.stdout) if proc.stdout.strip() else {}
    results = out if isinstance(out, dict) else out[0]
    summary = results.get("summary", {})
    failed = [
        f"{c['check_id']} {c['resource']} ({c['file_path']})"
        for c in results.get("results", {}).get("failed_checks", [])
    ]
    assert failed == [], "\n".join(failed)
    assert summary.get("passed", 0) > 50, summary  # it really scanned the templates


def test_checkov_skips_carry_a_reason(synth) -> None:
    for path in _templates(synth):
        template = json.loads(path.read_text())
        for logical_id, resource in template.get("Resources", {}).items():
            for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
                comment = skip.get("comment", "")
                assert len(comment) >= REASON_MIN_LENGTH and "because" in comment.lower(), (logical_id, skip)
