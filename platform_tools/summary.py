"""Print every stack of a cloud assembly with its resource count: ``python -m platform_tools.summary cdk.out``."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path


def stack_templates(outdir: Path) -> dict[str, Path]:
    """Stack name -> template path, for every CloudFormation stack in the assembly (nested stages too)."""
    found: dict[str, Path] = {}
    manifest = json.loads((outdir / "manifest.json").read_text())
    for artifact_id, artifact in sorted(manifest.get("artifacts", {}).items()):
        kind = artifact.get("type")
        props = artifact.get("properties", {})
        if kind == "aws:cloudformation:stack":
            name = props.get("stackName", artifact_id)
            found[name] = outdir / props["templateFile"]
        elif kind == "cdk:cloud-assembly":
            found.update(stack_templates(outdir / props["directoryName"]))
    return found


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    outdir = Path(args[0] if args else "cdk.out")
    templates = stack_templates(outdir)
    if not templates:
        print(f"no stacks in {outdir}", file=sys.stderr)
        return 1
    width = max(len(n) for n in templates)
    total = 0
    for name, path in templates.items():
        resources = json.loads(path.read_text()).get("Resources", {})
        kinds = Counter(r["Type"] for r in resources.values())
        total += len(resources)
        top = ", ".join(f"{k.split('::', 1)[1]} x{v}" for k, v in kinds.most_common(4))
        print(f"{name:<{width}}  {len(resources):>4} resources  ({top})")
    print(f"{len(templates)} stacks, {total} resources in {outdir}")
    violations = validation_violations(outdir)
    for line in violations:
        print(f"UNACKNOWLEDGED: {line}", file=sys.stderr)
    if violations:
        print(f"{len(violations)} unacknowledged validation finding(s)", file=sys.stderr)
        return 1
    print(
        "cdk-nag (AwsSolutions, HIPAA Security, NIST 800-53 R5, PCI DSS 3.2.1, GpuPlatform): 0 unacknowledged findings"
    )
    return 0


def validation_violations(outdir: Path) -> list[str]:
    """Every violation (errors and warnings) in the assembly's policy validation report."""
    report_path = outdir / "policy-validation-report.json"
    if not report_path.exists():
        return [f"{report_path} missing: set @aws-cdk/core:validationReportJson in cdk.json"]
    report = json.loads(report_path.read_text())
    found = []
    for plugin in report.get("pluginReports", []):
        for violation in plugin.get("violations", []):
            paths = [c.get("constructPath", "?") for c in violation.get("violatingConstructs", [])]
            found.append(f"{plugin.get('pluginName', '?')} {violation.get('ruleName', '?')}: {', '.join(paths)}")
    return found


if __name__ == "__main__":
    raise SystemExit(main())
