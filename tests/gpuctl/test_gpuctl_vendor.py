"""gpuctl vendor: the pip command it runs, what it reports, and its usage errors (no network: pip is replaced)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpuctl.cli import build_parser
from gpuctl.cli import main as gpuctl
from gpuctl.commands import vendor


@pytest.fixture
def code(tmp_path: Path) -> Path:
    root = tmp_path / "my code"
    root.mkdir()
    (root / "train.py").write_text("")
    (root / "requirements.txt").write_text("transformers==4.57.1\n")
    return root


class FakePip:
    """Stands in for ``subprocess.run``: records the command and writes the wheels pip would have written."""

    def __init__(self, writes: dict[str, int], returncode: int = 0) -> None:
        self.writes = writes
        self.returncode = returncode
        self.commands: list[list[str]] = []

    def __call__(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[bytes]:
        assert kwargs == {"check": False}  # pip's own output goes to the terminal: its progress shows
        self.commands.append(command)
        target = Path(command[command.index("-d") + 1])
        target.mkdir(parents=True, exist_ok=True)
        for name, size in self.writes.items():
            (target / name).write_bytes(b"\0" * size)
        return subprocess.CompletedProcess(command, self.returncode)


def expected_command(
    root: Path, python: str = "3.12", platforms: tuple[str, ...] = ("manylinux2014_x86_64",)
) -> list[str]:
    command = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--implementation", "cp"]
    for platform in platforms:
        command += ["--platform", platform]
    return [*command, "--python-version", python, "-r", str(root / "requirements.txt"), "-d", str(root / "wheels")]


def test_vendor_is_a_gpuctl_command() -> None:
    args = build_parser().parse_args(["vendor", "code"])
    assert args.func is vendor.run
    assert (args.python_version, args.platform, args.dry_run) == ("3.12", None, False)


def test_dry_run_prints_the_pip_command_and_runs_nothing(
    code: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakePip({})
    monkeypatch.setattr(vendor.subprocess, "run", fake)
    assert gpuctl(["vendor", str(code), "--dry-run"]) == 0
    assert capsys.readouterr().out == shlex.join(expected_command(code)) + "\n"
    assert fake.commands == []


def test_vendor_runs_pip_download_with_dependencies_and_reports_the_new_wheels(
    code: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (code / "wheels").mkdir()
    (code / "wheels" / "tokenizers-0.22.1-cp39-abi3-manylinux_2_17_x86_64.whl").write_bytes(b"\0" * 2048)
    fake = FakePip({"transformers-4.57.1-py3-none-any.whl": 3 * 1024 * 1024})
    monkeypatch.setattr(vendor.subprocess, "run", fake)
    argv = ["vendor", str(code), "--python-version", "3.11", "--platform", "manylinux_2_28_x86_64"]
    assert gpuctl([*argv, "--platform", "manylinux2014_x86_64"]) == 0
    command = expected_command(code, "3.11", ("manylinux_2_28_x86_64", "manylinux2014_x86_64"))
    assert fake.commands == [command]
    assert "--no-deps" not in command
    out = capsys.readouterr().out
    assert out == (
        f"$ {shlex.join(command)}\n"
        f"{code / 'wheels'}: 2 wheel(s), 3.0 MiB; 1 new\n"
        "    tokenizers-0.22.1-cp39-abi3-manylinux_2_17_x86_64.whl (2.0 KiB)\n"
        "  + transformers-4.57.1-py3-none-any.whl (3.0 MiB)\n"
    )


def test_wheels_over_the_package_limit_are_warned_about(
    code: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(vendor.subprocess, "run", FakePip({"torch-2.8.0-cp312-cp312-manylinux_2_28_x86_64.whl": 0}))
    monkeypatch.setattr(vendor, "_wheels", lambda folder: {"torch-2.8.0-cp312-cp312-any.whl": 900 * 1024**2})
    assert gpuctl(["vendor", str(code)]) == 0
    err = capsys.readouterr().err
    assert "warning: the wheels alone (900.0 MiB) exceed the code package's limit of 100.0 MiB" in err
    assert "largest: torch-2.8.0-cp312-cp312-any.whl (900.0 MiB)" in err


def test_a_failed_pip_exits_1_and_says_what_to_do(
    code: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(vendor.subprocess, "run", FakePip({}, returncode=1))
    assert gpuctl(["vendor", str(code)]) == 1
    err = capsys.readouterr().err
    assert "pip download exited with status 1" in err
    assert "without a binary wheel for CPython 3.12 on manylinux2014_x86_64" in err


def test_a_folder_without_requirements_is_a_usage_error(
    code: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (code / "requirements.txt").unlink()
    fake = FakePip({})
    monkeypatch.setattr(vendor.subprocess, "run", fake)
    assert gpuctl(["vendor", str(code)]) == 2
    assert capsys.readouterr().err == (
        f"gpuctl vendor: {code / 'requirements.txt'} does not exist; write the packages the job needs there, one "
        "per line (e.g. transformers==4.57.1), then run gpuctl vendor again\n"
    )
    assert fake.commands == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--python-version", "312"], "--python-version '312' is not allowed; allowed: MAJOR.MINOR of CPython 3"),
        (["--platform", "linux x86"], "--platform 'linux x86' is not a wheel platform tag"),
    ],
)
def test_bad_options_are_usage_errors(
    code: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gpuctl(["vendor", str(code), "--dry-run", *extra]) == 2
    assert capsys.readouterr().err.startswith(f"gpuctl vendor: {message}")


def test_a_missing_folder_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpuctl(["vendor", str(tmp_path / "nope")]) == 2
    assert f"SOURCE_DIR {str(tmp_path / 'nope')!r} is not a folder" in capsys.readouterr().err
