"""``make gpu-check`` (benchmarks.gpu_check): the parts that run without a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from benchmarks import gpu_check
from benchmarks.gpu_check import Check, CheckError, Step, junit_counts, summary

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="5">
<testcase classname="tests.containers.inference.test_serve_gpu" name="test_cuda_answers[cuda]" time="3.1"/>
<testcase classname="tests.containers.inference.test_serve_http" name="test_ping" time="0.4"/>
<testcase classname="tests.containers.training.test_launcher" name="test_cpu_only" time="0.1">
  <skipped type="pytest.skip" message="asserts the behaviour of a host without a GPU; this host has NVIDIA H100"/>
</testcase>
<testcase classname="tests.containers.training.test_launcher" name="test_cpu_only_2" time="0.1">
  <skipped type="pytest.skip" message="asserts the behaviour of a host without a GPU; this host has NVIDIA H100"/>
</testcase>
<testcase classname="tests.containers.inference.test_serve_http" name="test_flood" time="9.0">
  <failure message="assert 504 == 200">...</failure>
</testcase>
</testsuite></testsuites>
"""


def test_junit_counts_outcomes_gpu_tests_skip_reasons_and_failures(tmp_path: Path) -> None:
    report = tmp_path / "tests.xml"
    report.write_text(JUNIT)
    counts, reasons, failed = junit_counts(report)
    assert (counts["passed"], counts["failed"], counts["skipped"], counts["gpu passed"]) == (2, 1, 2, 1)
    assert reasons == {"asserts the behaviour of a host without a GPU; this host has NVIDIA H100": 2}
    assert failed == ["tests.containers.inference.test_serve_http::test_flood"]


@pytest.mark.no_gpu
def test_without_a_gpu_the_check_stops_at_once_with_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_check.main(["--no-write"]) == 2
    err = capsys.readouterr().err
    assert "sees no NVIDIA GPU" in err and "make gpu-check" in err and "Traceback" not in err


def test_missing_wheels_name_the_command_that_fetches_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_check, "WHEELS", tmp_path / ".gpu-wheels")
    monkeypatch.setattr(gpu_check, "ROOT", tmp_path)
    with pytest.raises(CheckError, match=r"\.gpu-wheels/ holds no wheels: run `make gpu-wheels`"):
        gpu_check.install(Check(60), {})
    (tmp_path / ".gpu-wheels").mkdir()
    (tmp_path / ".gpu-wheels" / "boto3-1.44.8-py3-none-any.whl").write_bytes(b"")
    with pytest.raises(CheckError, match=r"lacks .*litserve.*pydantic_core.*sagemaker_training"):
        gpu_check.install(Check(60), {})


def test_every_pin_maps_to_the_file_name_pip_saves(tmp_path: Path) -> None:
    """The sdist of a pinned package is found by its normalised name and exact version, not a prefix."""
    (tmp_path / "sagemaker_training-5.1.4.tar.gz").write_bytes(b"")
    (tmp_path / "sagemaker_training-5.1.40.tar.gz").write_bytes(b"")
    assert gpu_check._sdist(tmp_path, "sagemaker-training", "5.1.4").name == "sagemaker_training-5.1.4.tar.gz"
    with pytest.raises(CheckError, match=r"no sdist of retrying==1\.4\.2"):
        gpu_check._sdist(tmp_path, "retrying", "1.4.2")


def test_a_step_is_stopped_at_its_limit_and_the_budget_bounds_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_check, "WORK", tmp_path)
    monkeypatch.setattr(gpu_check, "MIN_STEP_S", 1.0)
    check = Check(budget_s=2.8)
    sleeper = [sys.executable, "-c", "print('started', flush=True); import time; time.sleep(60)"]
    step, code = check.run("sleeper", sleeper, {}, limit_s=2)
    assert code == 124 and 2 <= step.seconds < 3
    assert "started" in (tmp_path / "sleeper.log").read_text()
    late, code = check.run("late", [sys.executable, "-c", "pass"], {}, limit_s=100)
    assert code == -1 and late.status == "not run" and "budget left" in late.detail


def test_summary_is_one_table_of_the_steps() -> None:
    check = Check(480)
    check.steps += [Step("install", "passed", 12.0, "28 packages"), Step("tests", "failed", 200.0, "1 failed | x")]
    facts = {"gpu": "1 x NVIDIA H100 80GB HBM3 (79 GiB)", "driver": "580.159", "vcpus": "16", "python": "3.12.3",
             "torch": "2.11.0+cu130", "cuda": "13.0"}  # fmt: skip
    text = summary(check, facts, "make gpu-check")
    assert "on 1 x NVIDIA H100 80GB HBM3 (79 GiB), driver 580.159, 16 vCPUs" in text
    assert "| install | passed | 12 | 28 packages |" in text
    assert "| tests | failed | 200 | 1 failed / x |" in text  # a pipe in a detail does not break the table


def test_missed_targets_are_read_from_the_benchmarks_own_lines() -> None:
    """Lines as ``training_gpu`` and ``inference_batching`` printed them on an H100: a step that exits 0 can still
    miss a target, and the summary says which."""
    lines = [
        "| raw shards | 3,892 | 100.3% | >= 98%: met | 149.0 KiB | 4.75 GB/s (38.0 Gbit/s) |",
        "| JPEG shards (nvJPEG decode) | 3,421 | 88.2% | >= 95%: NOT met | 8.8 KiB | 0.25 GB/s (2.0 Gbit/s) |",
        "Target at N=32: throughput >= 2x and p99 no worse than per-request. Measured: **1.69x** throughput, "
        "p99 14.8 ms vs 27.5 ms: **NOT met**.",
        "![dynamic batching vs per-request](img/inference_batching_gpu.png)",
    ]
    assert gpu_check.missed_targets(lines) == [
        "JPEG shards (nvJPEG decode), 3,421, 88.2%, >= 95%: NOT met",
        "Target at N=32: throughput >= 2x and p99 no worse than per-request. Measured: 1.69x throughput, "
        "p99 14.8 ms vs 27.5 ms: NOT met.",
    ]
    assert gpu_check.missed_targets(lines[:1]) == []
