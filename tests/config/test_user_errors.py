"""Every error a user can cause reaches them as one clean message: no Python traceback, the unit they wrote."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from stacks.config import CONFIG_DIR, ConfigError, parse_config

ROOT = Path(__file__).resolve().parents[2]


def test_tab_indented_yaml_says_to_indent_with_spaces(tmp_path: Path) -> None:
    text = (CONFIG_DIR / "dev.yaml").read_text().replace("  vpc_cidr:", "\tvpc_cidr:", 1)
    path = tmp_path / "dev.yaml"
    with pytest.raises(ConfigError, match=r"dev\.yaml, line \d+: indented with a tab; .*indent with spaces"):
        parse_config(text, path, "dev")


def test_tabs_inside_values_or_comments_are_not_indentation(tmp_path: Path) -> None:
    text = (CONFIG_DIR / "dev.yaml").read_text().replace("# Development", "#\tDevelopment", 1)
    text = text.replace("  vpc_cidr:", "  # \tindented comment\n  vpc_cidr:", 1)
    assert parse_config(text, tmp_path / "dev.yaml", "dev").env_name == "dev"


def _run_app(script: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "CDK_CONTEXT_JSON": "{}"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300
    )


def test_a_construct_error_while_building_the_app_is_one_line_without_traceback() -> None:
    """A value the config accepts but a construct refuses (raised while the app is built) reaches the user cleanly."""
    proc = _run_app(
        """
        import app, stacks.app_builder
        from gpu_constructs.errors import ValidationError
        def refuse(*args, **kwargs):
            raise ValidationError(
                "gpu-dev-training/Pipeline", "instance_type='ml.m5.xlarge' is not allowed; allowed: ml.g5.xlarge"
            )
        stacks.app_builder.build_app = refuse
        raise SystemExit(app.main())
        """
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "error: gpu-dev-training/Pipeline: instance_type='ml.m5.xlarge' is not allowed; allowed: ml.g5.xlarge"
    )


def test_a_failed_validation_at_synth_is_reported_without_traceback() -> None:
    proc = _run_app(
        """
        import aws_cdk as cdk, app, stacks.app_builder
        from aws_cdk import aws_s3 as s3
        class Built:
            def __init__(self):
                self.app = cdk.App(outdir=__import__("tempfile").mkdtemp())
                s3.Bucket(cdk.Stack(self.app, "Bad"), "Plain")
                stacks.app_builder.add_nag_packs(self.app)
        stacks.app_builder.build_app = Built
        raise SystemExit(app.main())
        """
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "synth failed:" in proc.stderr and "AwsSolutions-S10" in proc.stderr


def test_gpuctl_reads_the_config_with_the_apps_typed_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file the app refuses is refused by gpuctl too, with the same message (not read as plain YAML)."""
    from gpuctl import training_setup

    config = tmp_path / "config"
    config.mkdir()
    text = (CONFIG_DIR / "dev.yaml").read_text()
    (config / "dev.yaml").write_text(text.replace("region: us-east-1", "region: us-east-9"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(training_setup.UsageError, match=r"(?s)configuration error: .*dev\.yaml.*region.*us-east-9"):
        training_setup.read_env_config("dev")
    (config / "dev.yaml").write_text(text)
    found = training_setup.read_env_config("dev")
    assert (found["resource_prefix"], found["region"]) == ("gpu-dev", "us-east-1")
