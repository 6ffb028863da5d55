"""Reuse as a construct library: the package on its own, and a foreign CDK app importing only it.

The package: every name of ``__all__`` imports, every public construct documents each keyword parameter,
``__version__`` matches its ``pyproject.toml``, and a wheel built from it carries every module, ``py.typed``,
the boot-script assets and (built in a checkout) the training runtime of ``containers/training``.

The app lives in someone else's stack, on their existing VPC (isolated subnets), their datasets and
artifacts buckets, their KMS key and their ECR repository, all imported through ``from_*_attributes``.
On them it builds a training setup, a GPU endpoint and a GPU fleet, registers all four cdk-nag packs and
synthesizes. The gates: zero nag findings (errors and warnings), cfn-lint and checkov clean.

The app is synthesized in a fresh interpreter whose ``sys.path`` holds the library's source root but not
the repository root, so the project's own ``stacks`` package cannot even be imported; the child reports
which modules it loaded. Run it by hand with ``python tests/e2e/test_foreign_app.py <outdir>``.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import gpu_constructs

ROOT = Path(__file__).resolve().parents[2]
ACCOUNT = "111122223333"
REGION = "us-east-1"
AZS = ("us-east-1a", "us-east-1b")
SUBNETS = ("subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002")
ROUTE_TABLES = ("rtb-0a1b2c3d4e5f60001", "rtb-0a1b2c3d4e5f60002")
VPC_ID = "vpc-0a1b2c3d4e5f60718"
KEY_ARN = f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
DATASETS = "acme-ml-datasets"
ARTIFACTS = "acme-ml-artifacts"
REPOSITORY = "acme/pytorch-gpu"
JOB_ROLE = "acme-sagemaker-training"
INSTANCE_ROLE = "acme-gpu-workbench"
ENDPOINT_GROUP = "sg-0a1b2c3d4e5f60718"
LUSTRE_ID = "fs-0a1b2c3d4e5f60718"
LUSTRE_GROUP = "sg-0f1e2d3c4b5a69788"
STACK = "AcmeMl"
NAG_PACKS = {"AwsSolutions", "HIPAA.Security", "NIST.800.53.R5", "PCI.DSS.321", "GpuPlatform"}
#: The VPC endpoints of the foreign VPC that a GPU fleet's boot script and agents call.
FLEET_ENDPOINTS = ("autoscaling", "monitoring", "logs", "ssm", "ssm_messages", "ec2_messages", "s3")


def build_and_synth(outdir: str) -> dict[str, Any]:
    """Build the foreign app with gpu_constructs only, synthesize it into ``outdir``; report what loaded."""
    import aws_cdk as cdk
    from aws_cdk import aws_ec2 as ec2
    from aws_cdk import aws_ecr as ecr
    from aws_cdk import aws_iam as iam
    from aws_cdk import aws_kms as kms
    from aws_cdk import aws_s3 as s3
    from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, PCIDSS321Checks

    from gpu_constructs import (
        DlamiImage,
        GpuEndpoint,
        GpuFleet,
        GpuImage,
        ImportedLustreFileSystem,
        ModelData,
        NetworkReachability,
        PlatformStorage,
        S3Channel,
        TrainingPipeline,
    )
    from gpu_constructs.rules import GpuPlatformChecks

    app = cdk.App(outdir=outdir, context={"@aws-cdk/core:validationReportJson": True}, analytics_reporting=False)
    stack = cdk.Stack(app, STACK, env=cdk.Environment(account=ACCOUNT, region=REGION))
    vpc = ec2.Vpc.from_vpc_attributes(
        stack,
        "Vpc",
        vpc_id=VPC_ID,
        availability_zones=list(AZS),
        isolated_subnet_ids=list(SUBNETS),
        isolated_subnet_route_table_ids=list(ROUTE_TABLES),
    )
    key = kms.Key.from_key_arn(stack, "DataKey", KEY_ARN)
    datasets = s3.Bucket.from_bucket_attributes(stack, "Datasets", bucket_name=DATASETS, encryption_key=key)
    artifacts = s3.Bucket.from_bucket_attributes(stack, "Artifacts", bucket_name=ARTIFACTS, encryption_key=key)
    repository = ecr.Repository.from_repository_attributes(
        stack,
        "Repository",
        repository_name=REPOSITORY,
        repository_arn=f"arn:aws:ecr:{REGION}:{ACCOUNT}:repository/{REPOSITORY}",
    )
    storage = PlatformStorage(stack, "Storage", key=key, datasets_bucket=datasets, artifacts_bucket=artifacts)
    TrainingPipeline(
        stack,
        "Training",
        image=GpuImage.from_ecr_repository(
            repository, "train-v1", usage="training", cuda_version="12.8", encryption_key=key
        ),
        storage=storage,
        job_name_prefix="acme-resnet",
        instance_type="ml.g5.xlarge",
        channels=[S3Channel("train", f"s3://{DATASETS}/imagenet/{{data_version}}/train/")],
        dataset_prefix="imagenet/",
        vpc=vpc,
        encryption_key=key,
        role=iam.Role.from_role_arn(stack, "JobRole", f"arn:aws:iam::{ACCOUNT}:role/{JOB_ROLE}"),
    )
    GpuEndpoint(
        stack,
        "Endpoint",
        image=GpuImage.from_ecr_repository(
            repository, "serve-v1", usage="inference", cuda_version="12.8", encryption_key=key
        ),
        model_data=ModelData.from_bucket(artifacts, "models/resnet/v1/model.tar.gz"),
        instance_type="ml.g5.xlarge",
        vpc=vpc,
        security_groups=[ec2.SecurityGroup.from_security_group_id(stack, "EndpointGroup", ENDPOINT_GROUP)],
        encryption_key=key,
    )
    GpuFleet(
        stack,
        "Fleet",
        vpc=vpc,
        fleet_name="acme-workbench",
        instance_type="g5.xlarge",
        # The PyTorch 2.12 DLAMI on Ubuntu 24.04 ships the Lustre client: nothing to install from the internet.
        image=DlamiImage.from_ssm("pytorch", "ubuntu-24.04", pytorch_version="2.12"),
        # Their isolated subnets have no NAT; these endpoints exist in their VPC (declared: nothing is looked up).
        reachability=NetworkReachability.of(*FLEET_ENDPOINTS, internet=False),
        volume_key=key,
        role=iam.Role.from_role_arn(stack, "InstanceRole", f"arn:aws:iam::{ACCOUNT}:role/{INSTANCE_ROLE}"),
        file_system=ImportedLustreFileSystem(
            stack,
            "Lustre",
            file_system_id=LUSTRE_ID,
            dns_name=f"{LUSTRE_ID}.fsx.{REGION}.amazonaws.com",
            mount_name="abcdefgh",
            security_groups=[ec2.SecurityGroup.from_security_group_id(stack, "LustreGroup", LUSTRE_GROUP)],
        ),
    )
    packs = [
        AwsSolutionsChecks(app), HIPAASecurityChecks(app), NIST80053R5Checks(app), PCIDSS321Checks(app),
        GpuPlatformChecks(app),
    ]  # fmt: skip
    cdk.Validations.of(app).add_plugins(*packs)
    app.synth()
    return {
        "nag_packs": sorted(pack.name for pack in packs),
        "stacks_modules": sorted(m for m in sys.modules if m == "stacks" or m.startswith("stacks.")),
        "gpu_constructs_modules": sorted(m for m in sys.modules if m.startswith("gpu_constructs")),
        "gpu_constructs_file": sys.modules["gpu_constructs"].__file__,
    }


@dataclass(frozen=True)
class Foreign:
    outdir: Path
    loaded: dict[str, Any]
    cfn_lint: subprocess.CompletedProcess[str]
    checkov: subprocess.CompletedProcess[str]

    @property
    def template(self) -> Path:
        return self.outdir / f"{STACK}.template.json"


def _finish(proc: subprocess.Popen[str], timeout: int = 120) -> subprocess.CompletedProcess[str]:
    out, err = proc.communicate(timeout=timeout)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Foreign:
    outdir = tmp_path_factory.mktemp("foreign") / "cdk.out"
    # The library's source root only (and -P: not the script's folder): the repository root, and with it
    # the project's `stacks` package, is not importable in the child.
    env = {**os.environ, "PYTHONPATH": str(ROOT / "constructs")}
    proc = subprocess.run(
        [sys.executable, "-P", str(Path(__file__)), str(outdir)],
        capture_output=True, text=True, timeout=120, cwd=outdir.parent, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    loaded = json.loads(proc.stdout.strip().splitlines()[-1])
    # Both scanners at once over the one template (checkov scans a folder: give it a copy alone).
    scan = outdir.parent / "scan"
    scan.mkdir()
    shutil.copy(outdir / f"{STACK}.template.json", scan / f"{STACK}.template.json")
    bin_dir = str(Path(sys.executable).parent)
    cfn_lint = subprocess.Popen(
        [shutil.which("cfn-lint", path=bin_dir) or "cfn-lint", "--config-file", str(ROOT / ".cfnlintrc.yaml"),
         "--", str(outdir / f"{STACK}.template.json")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    checkov = subprocess.Popen(
        [shutil.which("checkov", path=bin_dir) or "checkov", "-d", str(scan), "--framework", "cloudformation",
         "-o", "json", "--quiet"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"},
    )  # fmt: skip
    return Foreign(outdir, loaded, _finish(cfn_lint), _finish(checkov))


def test_only_gpu_constructs_was_imported(foreign: Foreign) -> None:
    assert foreign.loaded["stacks_modules"] == []
    assert Path(foreign.loaded["gpu_constructs_file"]) == ROOT / "constructs" / "gpu_constructs" / "__init__.py"
    assert {"gpu_constructs.training", "gpu_constructs.endpoint", "gpu_constructs.fleet"} <= set(
        foreign.loaded["gpu_constructs_modules"]
    )


def test_the_existing_resources_are_used_not_recreated(foreign: Foreign) -> None:
    text = foreign.template.read_text()
    resources = json.loads(text)["Resources"]
    kinds = {r["Type"] for r in resources.values()}
    built = {"AWS::SageMaker::Endpoint", "AWS::StepFunctions::StateMachine", "AWS::AutoScaling::AutoScalingGroup"}
    assert built <= kinds
    for created in ("AWS::EC2::VPC", "AWS::EC2::Subnet", "AWS::S3::Bucket", "AWS::ECR::Repository"):
        assert created not in kinds, created
    for existing in (*SUBNETS, VPC_ID, KEY_ARN, f":s3:::{DATASETS}/", f":s3:::{ARTIFACTS}/", REPOSITORY):
        assert existing in text, existing
    # the imported roles receive the grants; only the prepare-free setup's other roles are new
    roles = {r["Properties"].get("Description", "") for r in resources.values() if r["Type"] == "AWS::IAM::Role"}
    assert not any("SageMaker training jobs" in d or "GPU fleet" in d for d in roles), roles
    attached = [
        role for r in resources.values() if r["Type"] == "AWS::IAM::Policy" for role in r["Properties"].get("Roles", [])
    ]
    assert JOB_ROLE in attached and INSTANCE_ROLE in attached, attached
    assert ENDPOINT_GROUP in text
    # the fleet mounts the existing Lustre file system: its group admits TCP 988 from the fleet's new group
    lustre_in = [
        r["Properties"]
        for r in resources.values()
        if r["Type"] == "AWS::EC2::SecurityGroupIngress" and r["Properties"].get("GroupId") == LUSTRE_GROUP
    ]
    assert {(p["FromPort"], p["ToPort"]) for p in lustre_in} == {(988, 988), (1018, 1023)}
    assert f"{LUSTRE_ID}.fsx.{REGION}.amazonaws.com" in text


def test_all_nag_packs_ran_with_zero_findings(foreign: Foreign) -> None:
    assert foreign.loaded["nag_packs"] == sorted(NAG_PACKS)
    report = json.loads((foreign.outdir / "policy-validation-report.json").read_text())
    assert report["title"] == "Validation Report"
    findings = [
        f"{p['summary']['pluginName']} {v['ruleName']}: {[c.get('constructPath') for c in v['violatingConstructs']]}"
        for p in report["pluginReports"]
        for v in p["violations"]
    ]
    assert findings == []


def test_cfn_lint_reports_nothing(foreign: Foreign) -> None:
    assert foreign.cfn_lint.returncode == 0, foreign.cfn_lint.stdout + foreign.cfn_lint.stderr
    assert foreign.cfn_lint.stdout.strip() == ""


def test_checkov_reports_no_failed_checks(foreign: Foreign) -> None:
    out = json.loads(foreign.checkov.stdout) if foreign.checkov.stdout.strip() else {}
    results = out if isinstance(out, dict) else out[0]
    failed = [f"{c['check_id']} {c['resource']}" for c in results.get("results", {}).get("failed_checks", [])]
    assert failed == [], "\n".join(failed)
    assert results.get("summary", {}).get("passed", 0) > 50, results.get("summary")


# -- the package on its own: public API, docstrings, version, wheel ---------------------------------------

LIBRARY = Path(gpu_constructs.__file__).resolve().parent
PYPROJECT = LIBRARY.parent / "pyproject.toml"
PARAM = re.compile(r":param ([A-Za-z_][A-Za-z0-9_]*(?:\s*/\s*[A-Za-z_][A-Za-z0-9_]*)*):")
PUBLIC_CONSTRUCTS = (
    "GpuNetwork", "PlatformStorage", "SecureBucket", "GpuLustreFileSystem", "ImportedLustreFileSystem",
    "GpuEfsFileSystem", "SecureRepository", "TrainingPipeline", "GpuEndpoint", "GpuFleet", "GpuNotebook",
    "GitOpsDeployRole",
)  # fmt: skip


def _documented_params(doc: str) -> set[str]:
    names: set[str] = set()
    for match in PARAM.finditer(doc):
        names.update(part.strip() for part in match.group(1).split("/"))
    return names


def test_every_exported_name_imports() -> None:
    assert gpu_constructs.__all__ == sorted(set(gpu_constructs.__all__))
    for name in gpu_constructs.__all__:
        assert getattr(gpu_constructs, name) is not None, name
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        _ = gpu_constructs.Nope


@pytest.mark.parametrize("name", PUBLIC_CONSTRUCTS)
def test_construct_documents_every_keyword_parameter(name: str) -> None:
    from constructs import Construct

    cls = getattr(gpu_constructs, name)
    assert name in gpu_constructs.__all__
    assert issubclass(cls, Construct)
    doc = inspect.getdoc(cls) or ""
    assert len(doc) > 40, f"{name} has no class docstring"
    keywords = [
        p.name for p in inspect.signature(cls.__init__).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
    ]
    assert keywords, name
    documented = _documented_params(doc) | _documented_params(inspect.getdoc(cls.__init__) or "")
    missing = [k for k in keywords if k not in documented]
    assert missing == [], f"{name}: keyword parameters without ':param <name>:' in the docstring: {missing}"


def _undocumented_fields(cls: type) -> list[str]:
    """Fields of a props dataclass documented neither by ``:param name:`` nor by a ``#:`` comment above it."""
    doc = inspect.getdoc(cls) or ""
    source = inspect.getsource(cls).splitlines()
    missing = []
    for field in dataclasses.fields(cls):
        if field.name.startswith("_") or not field.init or field.name in _documented_params(doc):
            continue
        lines = [i for i, line in enumerate(source) if re.match(rf"\s+{field.name}\s*:", line)]
        if not (lines and source[lines[0] - 1].strip().startswith("#:")):
            missing.append(field.name)
    return missing


def test_every_exported_props_dataclass_documents_its_fields() -> None:
    exported = [getattr(gpu_constructs, n) for n in gpu_constructs.__all__]
    props = [v for v in exported if inspect.isclass(v) and dataclasses.is_dataclass(v)]
    assert len(props) >= 15
    missing = {cls.__name__: m for cls in props if (m := _undocumented_fields(cls))}
    assert missing == {}


def test_public_classes_and_functions_have_docstrings() -> None:
    for name in gpu_constructs.__all__:
        value = getattr(gpu_constructs, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            doc = (inspect.getdoc(value) or "").strip()
            # a dataclass without a docstring gets its signature as __doc__: that is not documentation
            assert doc and not doc.startswith(f"{name}("), f"{name} has no docstring"


def test_readme_documents_every_construct_prop() -> None:
    """constructs/README.md: each construct section names every keyword parameter, and its props tables name
    only real ones."""
    text = (LIBRARY.parent / "README.md").read_text()
    sections = {head: body for head, body in re.findall(r"^### (.+)\n((?:(?!^### ).*\n?)*)", text, re.M)}
    checked = set()
    for head, body in sections.items():
        for name in re.findall(r"`(\w+)`", head):
            cls = getattr(gpu_constructs, name, None)
            # SecureBucket's props are listed as one signature line in the PlatformStorage section
            if name in PUBLIC_CONSTRUCTS and name != "SecureBucket" and cls is not None:
                params = {
                    p.name
                    for p in inspect.signature(cls.__init__).parameters.values()
                    if p.kind is inspect.Parameter.KEYWORD_ONLY
                }
                missing = sorted(p for p in params if f"`{p}`" not in body and f"`{p}=" not in body)
                assert missing == [], f"README section {head!r}: {name} props not documented: {missing}"
                rows = [line.split("|")[1] for line in body.splitlines() if line.startswith("| `")]
                named = {n for row in rows for n in re.findall(r"`([a-z_][a-z0-9_]*)`", row)}
                if name == "SecureRepository" or "GpuImage" in head:
                    named = {n for n in named if n in params}  # the section's other table is for images
                assert named <= params, f"README section {head!r}: not props of {name}: {sorted(named - params)}"
                checked.add(name)
    assert checked == set(PUBLIC_CONSTRUCTS) - {"SecureBucket"}, sorted(set(PUBLIC_CONSTRUCTS) - checked)


def test_version_matches_pyproject() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    assert project["name"] == "gpu-constructs"
    assert re.fullmatch(r"\d+\.\d+\.\d+", gpu_constructs.__version__)
    # One version source: pyproject.toml reads gpu_constructs/_version.py (tests/constructs/test_api_surface.py).
    assert project["dynamic"] == ["version"] and "version" not in project
    assert tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "gpu_constructs._version.__version__"
    }
    assert {d.split(">")[0].split("<")[0] for d in project["dependencies"]} == {
        "aws-cdk-lib",
        "constructs",
        "jsii",
        "botocore",
    }


def test_package_data_covers_every_non_python_file() -> None:
    """Everything the package reads at run time is declared package data (so the wheel carries it)."""
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["setuptools"]
    assert config["packages"]["find"]["include"] == ["gpu_constructs", "gpu_constructs.*"]
    patterns = config["package-data"]["gpu_constructs"]
    data = sorted(
        p.relative_to(LIBRARY).as_posix()
        for p in LIBRARY.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    )
    assert "py.typed" in data and any(d.startswith("assets/") for d in data)
    uncovered = [d for d in data if not any(Path(d).match(pattern) for pattern in patterns)]
    assert uncovered == []


#: The training runtime's folder in the checkout, and where the wheel carries its copy (constructs/setup.py).
RUNTIME = ROOT / "containers" / "training"
PACKAGED_RUNTIME = "gpu_constructs/_runtime/training"


def _runtime_files() -> dict[str, bytes]:
    """What the wheel must carry of containers/training: every file of gpu_train/, default_code/ and vendor/ but
    caches and dot files, by its path in the wheel."""
    files = {}
    for part in ("gpu_train", "default_code", "vendor"):
        for path in (RUNTIME / part).rglob("*"):
            relative = path.relative_to(RUNTIME)
            skipped = "__pycache__" in relative.parts or any(name.startswith(".") for name in relative.parts)
            if path.is_file() and not skipped and path.suffix not in (".pyc", ".pyo"):
                files[f"{PACKAGED_RUNTIME}/{relative.as_posix()}"] = path.read_bytes()
    return files


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two wheels of the library, built at once from copies (so the checkout gets no build/ or egg-info folders):
    ``"checkout"`` from ``constructs/`` beside ``containers/training`` as in the repository, ``"alone"`` from
    ``constructs/`` alone."""
    base = tmp_path_factory.mktemp("wheels")
    ignore = shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    builds = {}
    for layout in ("checkout", "alone"):
        source = base / layout / "constructs"
        shutil.copytree(LIBRARY.parent, source, ignore=ignore)
        if layout == "checkout":
            shutil.copytree(RUNTIME, base / layout / "containers" / "training", ignore=ignore)
        dist = base / layout / "dist"
        builds[layout] = (dist, subprocess.Popen(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
             str(source)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ))  # fmt: skip
    found = {}
    for layout, (dist, proc) in builds.items():
        done = _finish(proc)
        assert done.returncode == 0, f"{layout}: {done.stderr}"
        (found[layout],) = dist.glob("gpu_constructs-*.whl")
    return found


@pytest.mark.slow
def test_wheel_contains_every_module_data_file_and_the_runtime(wheels: dict[str, Path]) -> None:
    wheel = wheels["checkout"]
    assert wheel.name.startswith(f"gpu_constructs-{gpu_constructs.__version__}-py3-none-any")
    archive = zipfile.ZipFile(wheel)
    names = set(archive.namelist())
    expected = {
        f"gpu_constructs/{p.relative_to(LIBRARY).as_posix()}"
        for p in LIBRARY.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert expected - names == set()
    assert "gpu_constructs/py.typed" in names
    # The runtime: exactly the checkout's files, byte for byte (the launcher and the built-in code come from it).
    runtime = _runtime_files()
    assert {f"{PACKAGED_RUNTIME}/gpu_train/bootstrap.py", f"{PACKAGED_RUNTIME}/default_code/train.py"} <= set(runtime)
    assert any(name.endswith(".whl") for name in runtime)
    assert {n for n in names if n.startswith(f"{PACKAGED_RUNTIME}/")} == set(runtime)
    assert {name: archive.read(name) for name in runtime} == runtime


@pytest.mark.slow
def test_wheel_built_from_the_library_folder_alone_has_no_runtime(wheels: dict[str, Path]) -> None:
    """Without ../containers/training the build succeeds and the wheel has every module but no runtime: where it
    is installed, TrainingPipeline fails with an error naming both places
    (tests/constructs/training/test_code_package.py)."""
    names = set(zipfile.ZipFile(wheels["alone"]).namelist())
    assert not [n for n in names if n.startswith("gpu_constructs/_runtime/")]
    assert {n for n in names if n.endswith(".py")} == {
        n for n in zipfile.ZipFile(wheels["checkout"]).namelist() if n.endswith(".py") and "/_runtime/" not in n
    }


if __name__ == "__main__":
    print(json.dumps(build_and_synth(sys.argv[1])))
