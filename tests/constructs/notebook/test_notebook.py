"""GpuNotebook: GPU type from the catalog, private and encrypted, least-privilege role, start script.

The start script (assets/notebook_on_start.sh) runs against the fake host of test_boot_script.py, with a
fake conda environment whose python has a fake torch and, once installed, a fake gpuctl. Only the GPU check
and a configured Lustre mount may fail the start; the gpuctl install and doctor (optional) never do.
"""

from __future__ import annotations

import base64
import json
import re
import stat
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from host_helpers import DNS, FakeHost, Run  # the fake instance the boot script's tests use too

from gpu_constructs import __version__
from gpu_constructs.errors import ValidationError
from gpu_constructs.fleet import render_script
from gpu_constructs.notebook import construct as notebook_module
from gpu_constructs.notebook.construct import GpuNotebook, NotebookPackage

ASSETS = Path(__file__).resolve().parents[3] / "constructs" / "gpu_constructs" / "assets"
START = ASSETS / "notebook_on_start.sh"
WHEEL = f"gpu_platform-{__version__}-py3-none-any.whl"
# Where a CDK asset lands: the object key is the asset hash, so the script gets the wheel's name apart.
PACKAGE = "s3://cdk-hnb659fds-assets-111122223333-us-east-1/0123abcd.whl"
KEY_ARN = "arn:aws:kms:us-east-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"


class StandInLustre:
    def __init__(self, security_group: ec2.ISecurityGroup) -> None:
        self.dns_name = DNS
        self.mount_name = "abcdefgh"
        self.connections = ec2.Connections(security_groups=[security_group], default_port=ec2.Port.tcp_range(988, 1023))


def _base(stack: cdk.Stack) -> dict[str, Any]:
    vpc = ec2.Vpc.from_vpc_attributes(
        stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a"], isolated_subnet_ids=["subnet-1"]
    )
    return {
        "subnet": vpc.isolated_subnets[0],
        "security_groups": [ec2.SecurityGroup(stack, "Sg", vpc=vpc, allow_all_outbound=False)],
        "volume_key": kms.Key(stack, "Key", enable_key_rotation=True),
        "vpc": vpc,
    }


@pytest.fixture(scope="module")
def wheel_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wheel") / WHEEL
    path.write_bytes(b"PK stand-in wheel")  # the asset only copies it
    return path


@pytest.fixture(scope="module")
def gpu_notebook(wheel_file: Path) -> tuple[GpuNotebook, assertions.Template, cdk.Stack]:
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(region="us-east-1"))
    base = _base(stack)
    vpc = base.pop("vpc")
    fs_sg = ec2.SecurityGroup(stack, "FsSg", vpc=vpc, allow_all_outbound=False)
    nb = GpuNotebook(
        stack, "Explore", notebook_name="gpu-dev-explore", instance_type="ml.g5.xlarge",
        package=NotebookPackage.from_wheel_file(wheel_file), file_system=StandInLustre(fs_sg), **base,
    )  # fmt: skip
    return nb, assertions.Template.from_stack(stack), stack


def _one(template: assertions.Template, kind: str) -> Any:
    found = template.find_resources(kind)
    assert len(found) == 1, sorted(found)
    return next(iter(found.values()))


# --------------------------------------------------------------------------------------------------
# Template
# --------------------------------------------------------------------------------------------------


def test_notebook_is_private_encrypted_imdsv2_and_rootless(gpu_notebook: Any) -> None:
    nb, template, stack = gpu_notebook
    resource = _one(template, "AWS::SageMaker::NotebookInstance")
    props = resource["Properties"]
    assert props["InstanceType"] == "ml.g5.xlarge" and props["NotebookInstanceName"] == "gpu-dev-explore"
    assert props["DirectInternetAccess"] == "Disabled"
    assert props["RootAccess"] == "Disabled"
    assert props["InstanceMetadataServiceConfiguration"] == {"MinimumInstanceMetadataServiceVersion": "2"}
    assert props["KmsKeyId"] == {
        "Fn::GetAtt": [stack.get_logical_id(stack.node.find_child("Key").node.default_child), "Arn"]
    }
    assert props["VolumeSizeInGB"] == 50
    assert "SubnetId" in props and len(props["SecurityGroupIds"]) == 1
    assert props["LifecycleConfigName"]["Fn::GetAtt"][1] == "NotebookInstanceLifecycleConfigName"
    assert any("DefaultPolicy" in d for d in resource["DependsOn"])  # permissions exist before the first start
    assert nb.gpu_count == 1 and stack.resolve(nb.notebook_instance_name)["Fn::GetAtt"][1] == "NotebookInstanceName"


def test_role_is_least_privilege(gpu_notebook: Any) -> None:
    _, template, _ = gpu_notebook
    role = _one(template, "AWS::IAM::Role")["Properties"]
    assert role["AssumeRolePolicyDocument"]["Statement"][0]["Principal"] == {"Service": "sagemaker.amazonaws.com"}
    assert "ManagedPolicyArns" not in role  # never AmazonSageMakerFullAccess
    document = _one(template, "AWS::IAM::Policy")["Properties"]["PolicyDocument"]["Statement"]
    statements = {s.get("Sid", "package"): s for s in document}
    assert set(statements) == {"NotebookLogGroup", "NotebookLogStreams", "package"}
    assert json.dumps(statements["NotebookLogStreams"]["Resource"]).endswith(
        ':log-group:/aws/sagemaker/NotebookInstances:log-stream:gpu-dev-explore/*"]]}'
    )


def test_role_reads_exactly_the_package_asset(gpu_notebook: Any) -> None:
    nb, template, stack = gpu_notebook
    document = _one(template, "AWS::IAM::Policy")["Properties"]["PolicyDocument"]["Statement"]
    (package,) = [s for s in document if "Sid" not in s]
    assert package["Action"] == "s3:GetObject" and package["Effect"] == "Allow"
    asset = nb.package_asset
    assert asset is not None
    bucket = stack.resolve(asset.s3_bucket_name)
    assert package["Resource"] == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":s3:::", bucket, f"/{asset.asset_hash}.whl"]]
    }
    # No wildcard anywhere: not the asset bucket, not its other objects.
    assert "*" not in json.dumps(package)


def test_package_is_a_file_asset_of_the_wheel(gpu_notebook: Any, wheel_file: Path) -> None:
    nb, _, stack = gpu_notebook
    asset = nb.package_asset
    assert asset is not None and asset.is_file and asset.s3_object_key.endswith(".whl")
    manifest = json.loads((Path(stack.node.root.synth().directory) / f"{stack.artifact_id}.assets.json").read_text())
    (entry,) = [f for h, f in manifest["files"].items() if h == asset.asset_hash]
    assert entry["source"] == {"path": f"asset.{asset.asset_hash}.whl", "packaging": "file"}


def test_lifecycle_config_runs_the_gpu_check_and_doctor(gpu_notebook: Any) -> None:
    nb, template, _ = gpu_notebook
    config = _one(template, "AWS::SageMaker::NotebookInstanceLifecycleConfig")["Properties"]
    assert config["NotebookInstanceLifecycleConfigName"] == "gpu-dev-explore-gpu-check"
    content = config["OnStart"][0]["Content"]["Fn::Base64"]
    parts = [content] if isinstance(content, str) else content["Fn::Join"][1]
    script = "".join(p if isinstance(p, str) else p.get("Fn::Sub", "<token>") for p in parts)
    for line in (
        "export NOTEBOOK_NAME='gpu-dev-explore'",
        "export INSTANCE_TYPE='ml.g5.xlarge'",
        "export EXPECTED_GPUS='1'",
        "export START_BUDGET_SECONDS='240'",
        # the bootstrap's asset bucket, the object named after the asset hash
        "export GPUCTL_PACKAGE_URI='s3://cdk-hnb659fds-assets-${AWS::AccountId}-us-east-1/"
        f"{nb.package_asset.asset_hash}.whl'",
        f"export GPUCTL_PACKAGE_FILE='{WHEEL}'",
        f"export LUSTRE_DNS_NAME='{DNS}'",
        "export LUSTRE_MOUNT_PATH='/home/ec2-user/SageMaker/fsx'",
    ):
        assert line in script, line
    assert '-m gpuctl doctor --expect-gpus "$EXPECTED_GPUS" --instance-type "$INSTANCE_TYPE"' in script
    assert "-m pip install --no-index --no-deps" in script
    assert len(base64.b64encode(nb.start_script.encode())) < notebook_module.LIFECYCLE_CONTENT_LIMIT


def test_package_from_a_bucket_reads_that_object_and_its_key() -> None:
    """The override: a wheel someone uploaded; read on that object only, decrypt with the bucket's key."""
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(region="us-east-1"))
    base = _base(stack)
    base.pop("vpc")
    bucket = s3.Bucket(stack, "Artifacts", encryption_key=kms.Key(stack, "BucketKey"), bucket_name="artifacts-bucket")
    nb = GpuNotebook(
        stack, "Nb", notebook_name="nb", instance_type="ml.g5.xlarge",
        package=NotebookPackage.from_bucket(bucket, f"tools/{WHEEL}"), **base,
    )  # fmt: skip
    assert nb.package_asset is None
    parts = stack.resolve(nb.start_script)["Fn::Join"][1]
    script = "".join(p if isinstance(p, str) else json.dumps(p) for p in parts)
    bucket_ref = json.dumps({"Ref": stack.get_logical_id(bucket.node.default_child)})
    assert f"export GPUCTL_PACKAGE_URI='s3://{bucket_ref}/tools/{WHEEL}'" in script
    assert f"export GPUCTL_PACKAGE_FILE='{WHEEL}'" in nb.start_script
    template = assertions.Template.from_stack(stack)
    document = _one(template, "AWS::IAM::Policy")["Properties"]["PolicyDocument"]["Statement"]
    bucket_arn = {"Fn::GetAtt": [stack.get_logical_id(bucket.node.default_child), "Arn"]}
    key_arn = {"Fn::GetAtt": [stack.get_logical_id(stack.node.find_child("BucketKey").node.default_child), "Arn"]}
    assert {"Action": "s3:GetObject", "Effect": "Allow",
            "Resource": {"Fn::Join": ["", [bucket_arn, f"/tools/{WHEEL}"]]}} in document  # fmt: skip
    assert {"Action": "kms:Decrypt", "Effect": "Allow", "Resource": key_arn} in document


def test_asset_bucket_key_is_granted_when_given(wheel_file: Path) -> None:
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(region="us-east-1"))
    base = _base(stack)
    base.pop("vpc")
    asset_key = kms.Key.from_key_arn(stack, "AssetKey", KEY_ARN)
    GpuNotebook(
        stack, "Nb", notebook_name="nb", instance_type="ml.g5.xlarge",
        package=NotebookPackage.from_wheel_file(wheel_file, encryption_key=asset_key), **base,
    )  # fmt: skip
    document = _one(assertions.Template.from_stack(stack), "AWS::IAM::Policy")["Properties"]["PolicyDocument"]
    assert {"Action": "kms:Decrypt", "Effect": "Allow", "Resource": KEY_ARN} in document["Statement"]


def test_lustre_traffic_opened_for_the_notebook_group(gpu_notebook: Any) -> None:
    _, template, _ = gpu_notebook
    ingress = [i["Properties"] for i in template.find_resources("AWS::EC2::SecurityGroupIngress").values()]
    assert sorted(i["Description"] for i in ingress if i["FromPort"] == 988) == [
        "Lustre LNET from GPU clients", "Lustre LNET from the FSx file system"
    ]  # fmt: skip


def test_cpu_type_allowed_only_without_gpu() -> None:
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(region="us-east-1"))
    base = _base(stack)
    base.pop("vpc")
    nb = GpuNotebook(stack, "Cpu", notebook_name="cpu", instance_type="ml.t3.medium", gpu=False, **base)
    assert nb.gpu_count == 0 and "export EXPECTED_GPUS='0'" in nb.start_script


# --------------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------------


def _cheap(**overrides: Any) -> GpuNotebook:
    stack = cdk.Stack(cdk.App(), "T", env=cdk.Environment(region="us-east-1"))
    vpc = ec2.Vpc.from_vpc_attributes(stack, "Vpc", vpc_id="vpc-1", availability_zones=["us-east-1a"],
                                      isolated_subnet_ids=["subnet-1"])  # fmt: skip
    kwargs: dict[str, Any] = {
        "notebook_name": "nb", "instance_type": "ml.g5.xlarge", "subnet": vpc.isolated_subnets[0],
        "security_groups": [ec2.SecurityGroup.from_security_group_id(stack, "Sg", "sg-12345678")],
        "volume_key": kms.Key.from_key_arn(stack, "Key", KEY_ARN),
    }  # fmt: skip
    kwargs.update(overrides)
    if isinstance(kwargs.get("package"), str) and kwargs["package"].startswith("BUCKET:"):
        bucket = s3.Bucket.from_bucket_name(stack, "Artifacts", "artifacts-bucket")
        kwargs["package"] = NotebookPackage.from_bucket(bucket, kwargs["package"].removeprefix("BUCKET:"))
    if kwargs.get("file_system") == "SL":
        kwargs["file_system"] = StandInLustre(ec2.SecurityGroup.from_security_group_id(stack, "Fs", "sg-87654321"))
    return GpuNotebook(stack, "Nb", **kwargs)


def test_cpu_type_is_rejected_when_a_gpu_is_requested_naming_fitting_gpu_types() -> None:
    with pytest.raises(ValidationError) as info:
        _cheap(instance_type="ml.t3.medium")
    text = str(info.value)
    assert text.startswith("T/Nb: instance_type='ml.t3.medium' has no NVIDIA GPU (CPU only: 2 vCPUs, 4 GiB)")
    fitting = text.split("Fitting GPU types for notebook: ")[1]
    assert fitting.count("'ml.g") >= 2  # e.g. 'ml.g4dn.xlarge' (1x NVIDIA T4 (16 GiB), 4 vCPUs, 16 GiB)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"instance_type": "g5.xlarge"},
            r"'g5.xlarge' is not how SageMaker notebook spells this type; did you mean 'ml.g5.xlarge'",
        ),
        ({"instance_type": "ml.p5e.48xlarge"}, r"'ml.p5e.48xlarge' is not accepted by SageMaker notebook"),
        ({"instance_type": "ml.inf2.xlarge"}, r"'ml.inf2.xlarge' has no NVIDIA GPU \(1x AWS Inferentia2"),
        (
            {"instance_type": "t3.medium", "gpu": False},
            r"instance_type='t3.medium' is not allowed; allowed: a SageMaker notebook type",
        ),
        ({"notebook_name": "-bad"}, r"notebook_name='-bad' is not allowed"),
        (
            {"volume_size": cdk.Size.gibibytes(2)},
            r"volume_size \(GiB\)=2 is not allowed; allowed: a number in \[5, 16384\]",
        ),
        ({"security_groups": []}, r"security_groups=0 is not allowed; allowed: 1 to 5 security groups"),
        (
            {"package": "s3://bucket/tools/gpuctl.whl"},
            r"package='s3://bucket/tools/gpuctl.whl' is not allowed; allowed: NotebookPackage.from_wheel_file",
        ),
        (
            {"package": NotebookPackage.from_wheel_file("dist/gpuctl.tar.gz")},
            r"package \(wheel file\)='dist/gpuctl.tar.gz' is not allowed; allowed: a wheel file name <name>-",
        ),
        (
            {"package": NotebookPackage.from_wheel_file(f"/nonexistent/{WHEEL}")},
            rf"package \(wheel file\)='/nonexistent/{WHEEL}' is not allowed; allowed: an existing file",
        ),
        (
            {"package": "BUCKET:tools/../gpuctl.whl"},
            r"package \(bucket key\)='tools/../gpuctl.whl' is not allowed; allowed: a relative S3 key",
        ),
        (
            {"package": "BUCKET:tools/gpuctl.whl"},
            r"package \(bucket key\)='tools/gpuctl.whl' is not allowed; allowed: a key whose last part is a wheel",
        ),
        ({"file_system": object()}, r"file_system=<object .*> is not allowed; allowed: an object with dns_name"),
        ({"file_system": "SL", "lustre_mount_path": "fsx"}, r"lustre_mount_path='fsx' is not allowed"),
        (
            {"file_system": "SL", "lustre_mount_attempts": 30},
            r"lustre_mount_attempts x lustre_retry_interval \(seconds\)=300",
        ),
    ],
)
def test_validation_rules(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _cheap(**overrides)


def test_deprecated_volume_size_gib_warns_and_still_sizes_the_volume() -> None:
    with pytest.warns(
        DeprecationWarning, match=r"GpuNotebook\(volume_size_gib=\.\.\.\) is deprecated.*use volume_size="
    ):
        notebook = _cheap(volume_size_gib=80)
    assert notebook.notebook.volume_size_in_gb == 80
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ValidationError, match=r"volume_size_gib=2 is not allowed; allowed: a number in \[5, 16384\]"),
    ):
        _cheap(volume_size_gib=2)
    with pytest.raises(ValidationError, match="'volume_size_gib' and 'volume_size' are the same setting"):
        _cheap(volume_size_gib=80, volume_size=cdk.Size.gibibytes(80))


def test_lifecycle_content_limit_is_enforced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notebook_module, "LIFECYCLE_CONTENT_LIMIT", 2048)
    with pytest.raises(ValidationError, match=r"needs about \d+ base64 characters; allowed: at most 2048"):
        _cheap()


# --------------------------------------------------------------------------------------------------
# The start script against a fake notebook host
# --------------------------------------------------------------------------------------------------

FAKE_GPUCTL_MAIN = """import os
import sys

args = sys.argv[1:]
if args == ["--help"]:
    sys.exit(0)
assert args[:1] == ["doctor"], args
print("GPU 0: NVIDIA A10G (compute capability 8.6), driver 570.86.15, torch CUDA 12.8")
if os.environ.get("FAKE_DOCTOR_FAIL") == "1":
    print("FAILED: torch sees 0 of 1 expected GPU(s)")
    sys.exit(1)
print("OK")
"""


PURELIB = sysconfig.get_paths()["purelib"]


def _executable(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def notebook_host(tmp_path: Path, *, preinstalled: bool = False) -> tuple[FakeHost, dict[str, str]]:
    host = FakeHost(tmp_path)
    # aws s3 cp writes the downloaded file (after FAKE_S3_SLEEP seconds)
    aws = host.bin / "aws"
    aws.write_text(aws.read_text() + 'case "$1 $2" in "s3 cp") sleep "${FAKE_S3_SLEEP:-0}"; : >"${!#}" ;; esac\n')
    # id: FAKE_UID for -u, and only FAKE_USERS exist; sudo records its arguments and runs the command
    _executable(host.bin / "id", '[ "$1" = -u ] && { echo "${FAKE_UID:-1000}"; exit 0; }\n'
                'case " ${FAKE_USERS:-} " in *" $1 "*) exit 0 ;; esac\nexit 1\n')  # fmt: skip
    _executable(host.bin / "sudo", 'printf "sudo %s\\n" "$*" >>"$FAKE_CALLS"\n'
                'while [ "$1" != -- ]; do shift; done\nshift\nexec "$@"\n')  # fmt: skip
    site = tmp_path / "site"
    gpuctl_src = tmp_path / "gpuctl-src" / "gpuctl"
    gpuctl_src.mkdir(parents=True)
    (gpuctl_src / "__init__.py").write_text("")
    (gpuctl_src / "__main__.py").write_text(FAKE_GPUCTL_MAIN)
    site.mkdir()
    if preinstalled:
        (site / "gpuctl").mkdir()
        for f in gpuctl_src.iterdir():
            (site / "gpuctl" / f.name).write_text(f.read_text())
    env_bin = tmp_path / "conda" / "envs" / "pytorch_p310" / "bin"
    env_bin.mkdir(parents=True)
    _executable(
        env_bin / "python",
        'printf "python %s\\n" "$*" >>"$FAKE_CALLS"\n'
        'if [ "$1 $2" = "-m pip" ]; then\n'
        '  sleep "${FAKE_PIP_SLEEP:-0}"\n'
        '  [ "${FAKE_PIP_FAIL:-0}" = 1 ] && {\n'
        "    echo \"ERROR: Package 'gpu-platform' requires a different Python\" >&2; exit 1; }\n"
        f'  mkdir -p "{site}/gpuctl" && cp "{gpuctl_src}"/* "{site}/gpuctl/"; exit 0\n'
        "fi\n"
        # -S: no site processing, so the project's own editable install (a .pth finder) cannot provide
        # gpuctl; the interpreter's site-packages stay importable as a plain path entry.
        f'PYTHONPATH="{site}:{tmp_path / "torch"}:{PURELIB}" exec "{sys.executable}" -S "$@"\n',
    )
    env = host.env(
        EXPECTED_GPUS="1", INSTANCE_TYPE="ml.g5.xlarge", NOTEBOOK_NAME="gpu-dev-explore", AWS_REGION="us-east-1",
        GPUCTL_PACKAGE_URI=PACKAGE, GPUCTL_PACKAGE_FILE=WHEEL, CONDA_DIR=str(tmp_path / "conda"),
        WORK_DIR=str(tmp_path / "work"), LUSTRE_DNS_NAME=DNS, LUSTRE_MOUNT_NAME="abcdefgh",
        LUSTRE_MOUNT_PATH=str(tmp_path / "fsx"), LUSTRE_MOUNT_ATTEMPTS="2", LUSTRE_RETRY_SECONDS="0", TORCH_PYTHON="",
    )  # fmt: skip
    return host, env


def start(tmp_path: Path, *, preinstalled: bool = False, script: Path = START, **overrides: str) -> Run:
    host, env = notebook_host(tmp_path, preinstalled=preinstalled)
    env.update(overrides)
    return host.run(script, env)


def assert_failed(run: Run, stage: str, reason: str) -> None:
    assert run.rc == 1, run.output
    assert f"GPU notebook start FAILED at stage '{stage}' on gpu-dev-explore (ml.g5.xlarge): " in run.output
    assert reason in run.output, run.output


def assert_started(run: Run, *lines: str) -> None:
    """The start succeeds, whatever the optional step did, and the log says what it did."""
    assert run.rc == 0, run.output
    assert "GPU notebook start FAILED" not in run.output
    assert "GPU notebook start of gpu-dev-explore succeeded" in run.output
    for line in lines:
        assert line in run.output, (line, run.output)


def test_start_installs_gpuctl_runs_doctor_and_mounts_lustre(tmp_path: Path) -> None:
    run = start(tmp_path, FAKE_MOUNT_FAILURES="1")
    package = tmp_path / "work" / WHEEL  # the wheel's own name: pip refuses the asset's <hash>.whl
    python = tmp_path / "conda" / "envs" / "pytorch_p310" / "bin" / "python"
    assert_started(
        run,
        "torch 2.9.0+fake (CUDA build 12.8) sees 1 GPU(s); a test kernel ran on each",
        "gpuctl install and doctor (optional, never fail the start):",
        f"installed {WHEEL} from {PACKAGE} into {python} (pip, no index)",
        "  OK",  # doctor's report is logged
    )
    assert f"aws s3 cp --region us-east-1 --only-show-errors {PACKAGE} {package}" in run.calls
    pip = f"python -m pip install --no-index --no-deps --no-cache-dir --disable-pip-version-check --quiet {package}"
    assert pip in run.calls and not run.called("sudo")  # not root here: pip runs as is
    assert "python -m gpuctl doctor --expect-gpus 1 --instance-type ml.g5.xlarge" in run.calls
    assert run.called("mount ") == [f"mount -t lustre -o relatime,flock {DNS}@tcp:/abcdefgh {tmp_path / 'fsx'}"] * 2
    # The Lustre mount (required) comes before the optional step.
    assert run.calls.index(pip) > run.calls.index(run.called("mount ")[-1])


def test_preinstalled_gpuctl_is_not_downloaded(tmp_path: Path) -> None:
    run = start(tmp_path, preinstalled=True, LUSTRE_DNS_NAME="")
    assert_started(run, "gpuctl is already installed in")
    assert not run.called("aws ") and not run.called("mount ")
    assert "python -m gpuctl doctor --expect-gpus 1 --instance-type ml.g5.xlarge" in run.calls


def test_cpu_notebook_skips_the_gpu_check_but_runs_doctor(tmp_path: Path) -> None:
    run = start(tmp_path, preinstalled=True, EXPECTED_GPUS="0", INSTANCE_TYPE="ml.t3.medium", LUSTRE_DNS_NAME="")
    assert run.rc == 0, run.output
    assert "no GPU requested (CPU notebook type): GPU check skipped" in run.output
    assert not run.called("nvidia-smi")
    assert "python -m gpuctl doctor --expect-gpus 0 --instance-type ml.t3.medium" in run.calls


def test_rendered_lifecycle_script_runs_like_the_file(tmp_path: Path) -> None:
    settings = {"NOTEBOOK_NAME": "gpu-dev-explore", "INSTANCE_TYPE": "ml.g5.xlarge", "EXPECTED_GPUS": "1",
                "AWS_REGION": "us-east-1", "GPUCTL_PACKAGE_URI": PACKAGE, "GPUCTL_PACKAGE_FILE": WHEEL,
                "START_BUDGET_SECONDS": "240"}  # fmt: skip
    script = tmp_path / "on-start.sh"
    script.write_text(render_script("notebook_on_start.sh", settings))
    host, env = notebook_host(tmp_path)
    for key in settings:
        env.pop(key, None)
    env["LUSTRE_DNS_NAME"] = ""
    run = host.run(script, env)
    assert_started(run, f"installed {WHEEL} from {PACKAGE}")
    assert "python -m gpuctl doctor --expect-gpus 1 --instance-type ml.g5.xlarge" in run.calls


def test_driver_failure_fails_the_start(tmp_path: Path) -> None:
    run = start(tmp_path, FAKE_NVSMI_FAIL="1")
    assert_failed(run, "gpu", "nvidia-smi failed (driver not loaded or GPU unreachable)")
    assert not [c for c in run.calls if "gpuctl" in c or "pip" in c]


def test_torch_without_gpu_fails_the_start(tmp_path: Path) -> None:
    run = start(tmp_path, FAKE_TORCH_CUDA="0")
    assert_failed(run, "gpu", "torch.cuda.is_available() is False")


def test_no_torch_environment_fails_the_start(tmp_path: Path) -> None:
    run = start(tmp_path, CONDA_DIR=str(tmp_path / "empty-conda"))
    assert_failed(run, "gpu", f"no conda environment with torch under {tmp_path / 'empty-conda'}/envs")


def test_lustre_failure_fails_the_start(tmp_path: Path) -> None:
    run = start(tmp_path, preinstalled=True, FAKE_MOUNT_ALWAYS_FAIL="1")
    assert_failed(run, "lustre", f"could not mount {DNS}@tcp:/abcdefgh at {tmp_path / 'fsx'} after 2 attempts")
    assert not run.called("python -m gpuctl doctor")


# The optional step: whatever happens to it, the notebook starts, and the log says what was skipped and why.


def test_doctor_problem_is_logged_but_does_not_fail_the_start(tmp_path: Path) -> None:
    run = start(tmp_path, preinstalled=True, FAKE_DOCTOR_FAIL="1")
    assert_started(
        run,
        "  FAILED: torch sees 0 of 1 expected GPU(s)",
        "WARNING gpuctl doctor reports a problem (the start goes on): FAILED: torch sees 0 of 1 expected GPU(s)",
    )


def test_missing_gpuctl_without_package_is_skipped(tmp_path: Path) -> None:
    run = start(tmp_path, GPUCTL_PACKAGE_URI="", GPUCTL_PACKAGE_FILE="")
    python = tmp_path / "conda" / "envs" / "pytorch_p310" / "bin" / "python"
    assert_started(run, f"SKIPPED gpuctl install and doctor: gpuctl is not in {python} and no package is configured")
    assert not run.called("aws ") and not run.called("python -m gpuctl doctor")


def test_missing_package_object_is_skipped(tmp_path: Path) -> None:
    """The case that rolled the fleets stack back: the wheel is not (yet) in the bucket."""
    run = start(tmp_path, FAKE_AWS_FAIL="s3 cp")
    assert_started(
        run, f"SKIPPED gpuctl install and doctor: cannot download {PACKAGE}: An error occurred (ValidationError)"
    )
    assert not run.called("python -m pip") and not run.called("python -m gpuctl doctor")


def test_pip_refusing_the_package_is_skipped(tmp_path: Path) -> None:
    """The other case: pip refuses the wheel (e.g. Requires-Python above the notebook's 3.10)."""
    run = start(tmp_path, FAKE_PIP_FAIL="1")
    assert_started(
        run,
        f"SKIPPED gpuctl install and doctor: pip cannot install {WHEEL} into ",
        "ERROR: Package 'gpu-platform' requires a different Python",
    )
    assert not run.called("python -m gpuctl doctor")


def test_hung_download_is_bounded_and_skipped(tmp_path: Path) -> None:
    run = start(tmp_path, LUSTRE_DNS_NAME="", STEP_TIMEOUT_SECONDS="1", FAKE_S3_SLEEP="5")
    assert_started(run, f"SKIPPED gpuctl install and doctor: cannot download {PACKAGE}: timed out after 1s")


def _wait_for(path: Path, text: str, seconds: float = 15) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path} after {seconds} s: {content!r}")


def test_optional_step_past_the_start_budget_goes_on_in_the_background(tmp_path: Path) -> None:
    """SageMaker fails a start that runs past 5 minutes: the script stops waiting at the budget."""
    started = time.monotonic()
    run = start(tmp_path, LUSTRE_DNS_NAME="", START_BUDGET_SECONDS="0", FAKE_PIP_SLEEP="2")
    assert time.monotonic() - started < 2  # did not wait for pip
    setup_log = tmp_path / "work" / "gpuctl-setup.log"
    assert_started(
        run, "gpuctl install and doctor go on in the background (pid ", f"start budget of 0s; log: {setup_log}"
    )
    assert "installed" not in run.output
    log = _wait_for(setup_log, "gpuctl doctor:")
    assert f"installed {WHEEL} from {PACKAGE}" in log and "  OK" in log


def test_pip_runs_as_the_notebook_user_when_the_script_runs_as_root(tmp_path: Path) -> None:
    run = start(tmp_path, LUSTRE_DNS_NAME="", FAKE_UID="0", FAKE_USERS="ec2-user")
    python = tmp_path / "conda" / "envs" / "pytorch_p310" / "bin" / "python"
    assert_started(run, f"installed {WHEEL}")
    (sudo,) = run.called("sudo ")
    assert sudo.startswith(f"sudo -u ec2-user -H -- {python} -m pip install --no-index --no-deps ")


# --------------------------------------------------------------------------------------------------
# Config (fleets.notebooks)
# --------------------------------------------------------------------------------------------------


def _config(notebook: dict[str, Any]) -> Any:
    import yaml

    from stacks.config import parse_config

    doc = {
        "env_name": "dev", "region": "us-east-1", "availability_zones": ["us-east-1a"],
        "fleets": {"notebooks": [notebook]},
    }  # fmt: skip
    return parse_config(yaml.safe_dump(doc), Path("config/dev.yaml"))


def test_config_defaults() -> None:
    (nb,) = _config({"name": "explore"}).fleets.notebooks
    assert (nb.instance_type, nb.gpu, nb.volume_gib, nb.gpuctl_package_key) == ("ml.g5.xlarge", True, 50, None)
    (cpu,) = _config({"name": "cpu", "instance_type": "ml.t3.medium", "gpu": False}).fleets.notebooks
    assert cpu.instance_type == "ml.t3.medium"


@pytest.mark.parametrize(
    ("notebook", "message"),
    [
        ({"name": "explore", "instance_type": "ml.t3.medium"}, r"'ml.t3.medium' has no NVIDIA GPU .*'ml.g"),
        ({"name": "explore", "instance_type": "g5.xlarge"}, r"did you mean 'ml.g5.xlarge'"),
        ({"name": "explore", "instance_type": "t3.medium", "gpu": False}, r"allowed: an ml.\* SageMaker notebook type"),
        ({"name": "Explore"}, r"fleets.notebooks.0.name: 'Explore': must match"),
        ({"name": "explore", "volume_gib": 2}, r"volume_gib=2 is not allowed; allowed: a number in \[5, 16384\]"),
        (
            {"name": "explore", "gpuctl_package_key": "tools/gpuctl.tar"},
            r"gpuctl_package_key='tools/gpuctl.tar' is not allowed; allowed: a key whose last part is a wheel",
        ),
        ({"name": "explore", "artifacts_prefix": ""}, r"artifacts_prefix: ''; allowed: a non-empty prefix"),
        ({"name": "explore", "datasets_prefix": "a/../b"}, r"datasets_prefix: 'a/../b': must be a relative S3 key"),
    ],
)
def test_config_rules(notebook: dict[str, Any], message: str) -> None:
    from stacks.config import ConfigError

    with pytest.raises(ConfigError, match=message):
        _config(notebook)


# --------------------------------------------------------------------------------------------------
# The fleets stack: the platform's wheel as an asset (nothing to upload), or the configured override
# --------------------------------------------------------------------------------------------------


def _lifecycle_exports(template: dict[str, Any]) -> dict[str, str]:
    """The settings the start script exports; a token value as its JSON."""
    kind = "AWS::SageMaker::NotebookInstanceLifecycleConfig"
    (config,) = [r for r in template["Resources"].values() if r["Type"] == kind]
    parts = config["Properties"]["OnStart"][0]["Content"]["Fn::Base64"]["Fn::Join"][1]
    script = "".join(p if isinstance(p, str) else json.dumps(p) for p in parts)
    return dict(re.findall(r"^export ([A-Z0-9_]+)='(.*)'$", script, re.M))


def test_dev_fleets_stack_ships_the_platform_wheel(synth: Any) -> None:
    from gpu_constructs.packaging.wheel import ensure_wheel

    result = synth("dev")
    exports = _lifecycle_exports(result.templates["gpu-dev-fleets"])
    wheel = ensure_wheel(Path(__file__).resolve().parents[3])
    assert exports["GPUCTL_PACKAGE_FILE"] == wheel.name == WHEEL
    uri = json.loads(exports["GPUCTL_PACKAGE_URI"])["Fn::Sub"]
    assert uri.startswith("s3://cdk-hnb659fds-assets-${AWS::AccountId}-") and uri.endswith(".whl")
    asset_hash = uri.rsplit("/", 1)[1].removesuffix(".whl")
    # cdk deploy publishes exactly the wheel that `make wheel` builds
    assert (result.outdir / f"asset.{asset_hash}.whl").read_bytes() == wheel.read_bytes()


def test_configured_package_key_overrides_the_asset() -> None:
    import yaml

    from stacks.app_builder import build_platform_stacks
    from stacks.config import parse_config

    path = Path(__file__).resolve().parents[3] / "config" / "dev.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["fleets"]["notebooks"][0]["gpuctl_package_key"] = f"tools/team/{WHEEL}"
    config = parse_config(yaml.safe_dump(doc), path)
    stacks = build_platform_stacks(cdk.App(), config)
    notebook = stacks.fleets.notebooks["explore"]
    assert notebook.package_asset is None
    template = assertions.Template.from_stack(stacks.fleets).to_json()
    exports = _lifecycle_exports(template)
    assert exports["GPUCTL_PACKAGE_FILE"] == WHEEL
    assert exports["GPUCTL_PACKAGE_URI"].endswith(f"/tools/team/{WHEEL}")
    statements = [s for r in template["Resources"].values() if r["Type"] == "AWS::IAM::Policy"
                  for s in r["Properties"]["PolicyDocument"]["Statement"]]  # fmt: skip
    reads = [r for s in statements if s["Action"] == "s3:GetObject" for r in _as_list(s["Resource"])]
    assert [r for r in reads if json.dumps(r).endswith(f'/tools/team/{WHEEL}"]]}}')]


def _as_list(value: object) -> list:
    return value if isinstance(value, list) else [value]
