"""The sample GitOps workflow stays consistent with the config it deploys and with .ci/run."""

from __future__ import annotations

from pathlib import Path

import yaml

from stacks.config import load_config

ROOT = Path(__file__).resolve().parents[2]
WORKFLOW = ROOT / "docs" / "gitops" / "github-actions.yml"


def _workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _runs(job: dict) -> list[str]:
    return [step["run"] for step in job["steps"] if "run" in step]


def test_tests_run_the_readme_command() -> None:
    jobs = _workflow()["jobs"]
    assert _runs(jobs["test"]) == ["make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()


def test_diff_on_pull_requests_and_deploy_on_merge() -> None:
    wf = _workflow()
    jobs = wf["jobs"]
    assert wf["permissions"]["id-token"] == "write"
    assert jobs["diff"]["if"] == "github.event_name == 'pull_request'"
    assert any("cdk diff" in r for r in _runs(jobs["diff"]))
    assert "refs/heads/main" in jobs["deploy-dev"]["if"]
    assert any("cdk deploy --all -c env=dev" in r for r in _runs(jobs["deploy-dev"]))
    assert jobs["deploy-prod"]["needs"] == "deploy-dev"
    assert any("cdk deploy --all -c env=prod" in r for r in _runs(jobs["deploy-prod"]))


def test_prod_job_environment_matches_the_trusted_subject() -> None:
    """The prod deploy role trusts only the `prod` environment; the workflow's prod job must run in it."""
    prod = load_config("prod")
    role = prod.gitops.oidc_deploy_role
    assert role is not None
    assert all(s.endswith(":environment:prod") for s in role.subjects)
    assert _workflow()["jobs"]["deploy-prod"]["environment"] == "prod"
    dev_role = load_config("dev").gitops.oidc_deploy_role
    assert dev_role is not None and all(s.endswith(":ref:refs/heads/main") for s in dev_role.subjects)


def test_regions_match_config() -> None:
    text = WORKFLOW.read_text()
    assert f"aws-region: {load_config('prod').region}" in text
    assert f"aws-region: {load_config('dev').region}" in text


def test_cost_difference_on_pull_requests_is_offline() -> None:
    """The cost job prices the base commit's synth against the change's, with no AWS credentials."""
    job = _workflow()["jobs"]["cost"]
    assert job["if"] == "github.event_name == 'pull_request'"
    runs = _runs(job)
    assert runs[0].startswith("git worktree add ../base ${{ github.event.pull_request.base.sha }}")
    assert runs[1:] == [
        "make -C ../base synth ENV=${{ matrix.env }}",
        "make synth ENV=${{ matrix.env }}",
        ".venv/bin/gpuctl cost diff ../base/cdk.out cdk.out",
    ]
    assert not [s for s in job["steps"] if "configure-aws-credentials" in str(s.get("uses", ""))]
