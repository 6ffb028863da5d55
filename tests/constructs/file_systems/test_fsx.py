"""GpuLustreFileSystem, the sizing helper, the SageMaker channel, the lustre config section and the storage stack."""

from __future__ import annotations

import json
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from unit_helpers import env_template_fixtures, isolated_vpc_stack

from gpu_constructs import ValidationError
from gpu_constructs.file_systems.fsx import GpuLustreFileSystem, LustreDataRepository
from gpu_constructs.file_systems.fsx_facts import (
    LUSTRE_TYPES,
    sagemaker_channel,
    size_lustre,
    valid_storage_capacity,
)
from stacks.config import ConfigError, parse_config

# -- a small stack per module, nag off ----------------------------------------------------------------


@pytest.fixture(scope="module")
def persistent() -> tuple[GpuLustreFileSystem, assertions.Template, ec2.SecurityGroup]:
    stack, vpc = isolated_vpc_stack()
    key = kms.Key(stack, "DataKey", enable_key_rotation=True)
    bucket = s3.Bucket(stack, "Datasets", encryption_key=key, encryption=s3.BucketEncryption.KMS)
    client = ec2.SecurityGroup(stack, "Clients", vpc=vpc, allow_all_outbound=False)
    fs = GpuLustreFileSystem(
        stack,
        "Lustre",
        vpc=vpc,
        vpc_subnets=ec2.SubnetSelection(subnet_group_name="Training", availability_zones=["us-east-1b"]),
        deployment_type="PERSISTENT_2",
        storage_capacity_gib=4800,
        per_unit_storage_throughput=500,
        kms_key=key,
        data_repository=LustreDataRepository(bucket=bucket, prefix="imagenet", auto_export=True),
    )
    fs.allow_clients(client)
    return fs, assertions.Template.from_stack(stack), client


@pytest.fixture(scope="module")
def scratch() -> tuple[GpuLustreFileSystem, assertions.Template]:
    stack, vpc = isolated_vpc_stack()
    fs = GpuLustreFileSystem(stack, "Lustre", vpc=vpc)
    return fs, assertions.Template.from_stack(stack)


def test_persistent_file_system_properties(persistent) -> None:
    _, template, _ = persistent
    template.has_resource_properties(
        "AWS::FSx::FileSystem",
        {
            "FileSystemType": "LUSTRE",
            "FileSystemTypeVersion": "2.15",
            "StorageCapacity": 4800,
            "KmsKeyId": {"Ref": assertions.Match.string_like_regexp("DataKey")},
            "LustreConfiguration": {
                "DeploymentType": "PERSISTENT_2",
                "PerUnitStorageThroughput": 500,
                "DataCompressionType": "LZ4",
            },
        },
    )


def test_placed_in_the_selected_az(persistent) -> None:
    fs, _, _ = persistent
    assert fs.availability_zone == "us-east-1b"


def test_data_repository_association_imports_and_exports(persistent) -> None:
    _, template, _ = persistent
    template.has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {
            "FileSystemPath": "/datasets",
            "BatchImportMetaDataOnCreate": True,
            "DataRepositoryPath": {"Fn::Join": ["", ["s3://", {"Ref": assertions.Match.any_value()}, "/imagenet/"]]},
            "S3": {
                "AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
                "AutoExportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]},
            },
        },
    )


def test_bucket_key_admits_only_the_fsx_service_linked_roles_through_s3(persistent) -> None:
    _, template, _ = persistent
    keys = template.find_resources("AWS::KMS::Key")
    statements = [s for k in keys.values() for s in k["Properties"]["KeyPolicy"]["Statement"]]
    fsx = [s for s in statements if s.get("Sid") == "AllowFsxS3ServiceLinkedRolesThroughS3"]
    assert len(fsx) == 1
    statement = fsx[0]
    assert statement["Condition"]["StringEquals"] == {
        "kms:CallerAccount": "111122223333",
        "kms:ViaService": "s3.us-east-1.amazonaws.com",
    }
    principal_arn = json.dumps(statement["Condition"]["ArnLike"]["aws:PrincipalArn"])
    assert 's3.data-source.lustre.fsx.amazonaws.com/AWSServiceRoleForFSxS3Access_fs-*"' in principal_arn
    assert statement["Principal"] == {"AWS": "*"}
    # auto_export writes to S3, so the role may also encrypt
    assert "kms:GenerateDataKey*" in statement["Action"] and "kms:Decrypt" in statement["Action"]
    key = next(
        k
        for k in keys.values()
        if any(s.get("Sid") == statement["Sid"] for s in k["Properties"]["KeyPolicy"]["Statement"])
    )
    assert key["Metadata"]["checkov"]["skip"][0]["id"] == "CKV_AWS_33"


def _rules(template: assertions.Template, kind: str) -> list[dict]:
    return [r["Properties"] for r in template.find_resources(kind).values()]


def test_only_lustre_ports_are_opened_and_only_from_groups(persistent) -> None:
    _, template, _ = persistent
    ingress = _rules(template, "AWS::EC2::SecurityGroupIngress")
    ports = sorted({(r["FromPort"], r["ToPort"]) for r in ingress})
    assert ports == [(988, 988), (1018, 1023)]
    assert all("SourceSecurityGroupId" in r and "CidrIp" not in r for r in ingress)
    egress = _rules(template, "AWS::EC2::SecurityGroupEgress")
    assert sorted({(r["FromPort"], r["ToPort"]) for r in egress}) == [(988, 988), (1018, 1023)]
    # file servers among themselves (2 ports) + to and from the client (2 ports x 2 directions)
    assert len(ingress) == 2 + 4 and len(egress) == 2 + 4


def test_connections_expose_the_security_group(persistent) -> None:
    fs, _, _ = persistent
    assert fs.connections.security_groups == [fs.security_group]


def test_channel_and_attributes(persistent) -> None:
    fs, _, _ = persistent
    stack = cdk.Stack.of(fs)
    channel = fs.sagemaker_channel("train")
    resolved = stack.resolve(channel)
    source = resolved["DataSource"]["FileSystemDataSource"]
    assert resolved["ChannelName"] == "train" and resolved["InputMode"] == "File"
    assert source["FileSystemType"] == "FSxLustre" and source["FileSystemAccessMode"] == "ro"
    assert "Ref" in source["FileSystemId"]
    path = source["DirectoryPath"]["Fn::Join"][1]
    assert path[0] == "/" and path[1]["Fn::GetAtt"][1] == "LustreMountName" and path[2] == "/datasets"
    assert fs.mount_path == "/fsx"
    assert "mount -t lustre -o relatime,flock" in fs.mount_command()
    assert stack.resolve(fs.dns_name)["Fn::Join"][1][1].startswith(".fsx.us-east-1.")


def test_scratch_defaults(scratch) -> None:
    fs, template = scratch
    template.has_resource_properties(
        "AWS::FSx::FileSystem",
        {
            "StorageCapacity": 1200,
            "LustreConfiguration": {"DeploymentType": "SCRATCH_2", "DataCompressionType": "LZ4"},
        },
    )
    props = template.find_resources("AWS::FSx::FileSystem")
    (fs_props,) = [p["Properties"] for p in props.values()]
    assert "KmsKeyId" not in fs_props and "PerUnitStorageThroughput" not in fs_props["LustreConfiguration"]
    template.resource_count_is("AWS::FSx::DataRepositoryAssociation", 0)
    template.resource_count_is("AWS::KMS::Key", 0)
    assert fs.per_unit_storage_throughput is None
    assert fs.directory_path().endswith("}") or "Token" in fs.directory_path()


def test_persistent_without_key_gets_its_own_rotated_key() -> None:
    stack, vpc = isolated_vpc_stack()
    fs = GpuLustreFileSystem(stack, "Lustre", vpc=vpc, deployment_type="PERSISTENT_2")
    template = assertions.Template.from_stack(stack)
    template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})
    template.has_resource_properties("AWS::FSx::FileSystem", {"LustreConfiguration": {"PerUnitStorageThroughput": 125}})
    assert fs.kms_key is not None


# -- validation rules -----------------------------------------------------------------------------------


def _new(**kwargs) -> GpuLustreFileSystem:
    stack, vpc = isolated_vpc_stack()
    kwargs.setdefault("vpc", vpc)
    return GpuLustreFileSystem(stack, "Lustre", **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"storage_capacity_gib": 1000},
            r"T/Lustre: storage_capacity_gib=1000 is not allowed for SCRATCH_2; allowed: 1200, 2400",
        ),
        ({"storage_capacity_gib": 3600}, r"storage_capacity_gib=3600 .* multiple of 2400"),
        (
            {"deployment_type": "SCRATCH_1"},
            r"deployment_type='SCRATCH_1' is not allowed; allowed: SCRATCH_2, PERSISTENT_2",
        ),
        ({"deployment_type": "PERSISTENT_1"}, r"deployment_type='PERSISTENT_1'"),
        (
            {"deployment_type": "PERSISTENT_2", "per_unit_storage_throughput": 200},
            r"per_unit_storage_throughput=200 is not allowed for PERSISTENT_2; allowed: 125, 250, 500, 1000",
        ),
        (
            {"per_unit_storage_throughput": 125},
            r"per_unit_storage_throughput=125 is not allowed for SCRATCH_2; allowed: None",
        ),
        ({"vpc": None}, r"T/Lustre: vpc=None is not allowed; allowed: an ec2.IVpc"),
        ({"mount_path": "fsx"}, r"mount_path='fsx' is not allowed; allowed: an absolute directory"),
        ({"mount_path": "/fsx/../etc"}, r"mount_path='/fsx/../etc'"),
        ({"lustre_version": "2.10"}, r"lustre_version='2.10' is not allowed; allowed: 2.12, 2.15"),
        (
            {"automatic_backup_retention": cdk.Duration.days(7)},
            r"automatic_backup_retention='7 days' is not allowed; allowed: None for SCRATCH_2",
        ),
        (
            {"deployment_type": "PERSISTENT_2", "automatic_backup_retention": cdk.Duration.days(91)},
            r"automatic_backup_retention='91 days' is not allowed; allowed: 0 to 90 days",
        ),
    ],
)
def test_bad_input_fails_at_construction(kwargs, message) -> None:
    with pytest.raises(ValidationError, match=message):
        _new(**kwargs)


def test_scratch_rejects_a_customer_key() -> None:
    stack, vpc = isolated_vpc_stack()
    key = kms.Key(stack, "K")
    with pytest.raises(ValidationError, match=r"kms_key is not allowed for SCRATCH_2: scratch file systems .* FSx"):
        GpuLustreFileSystem(stack, "Lustre", vpc=vpc, kms_key=key)


@pytest.mark.parametrize(
    ("repo_kwargs", "message"),
    [
        ({"file_system_path": "datasets"}, r"data_repository.file_system_path='datasets' is not allowed"),
        ({"file_system_path": "/a/../b"}, r"data_repository.file_system_path='/a/../b'"),
        ({"prefix": "/abs"}, r"data_repository.prefix='/abs' is not allowed; allowed: a relative S3 key prefix"),
        ({"prefix": "a/../b"}, r"data_repository.prefix='a/../b'"),
        ({"events": ("NEW", "MOVED")}, r"data_repository.events=\['NEW', 'MOVED'\] is not allowed"),
        (
            {"imported_file_chunk_size_mib": 0},
            r"imported_file_chunk_size_mib=0 is not allowed; allowed: an integer 1..512000",
        ),
        (
            {"auto_import": False, "batch_import_metadata_on_create": False},
            r"data_repository='auto_import=False.*at least one of them True",
        ),
    ],
)
def test_bad_data_repository_fails(repo_kwargs, message) -> None:
    stack, vpc = isolated_vpc_stack()
    bucket = s3.Bucket(stack, "B")
    with pytest.raises(ValidationError, match=message):
        GpuLustreFileSystem(
            stack, "Lustre", vpc=vpc, data_repository=LustreDataRepository(bucket=bucket, **repo_kwargs)
        )


def test_allow_clients_needs_a_client(scratch) -> None:
    fs, _ = scratch
    with pytest.raises(ValidationError, match=r"clients=\[\] is not allowed"):
        fs.allow_clients()


def test_directory_path_rejects_absolute_paths(scratch) -> None:
    fs, _ = scratch
    with pytest.raises(ValidationError, match=r"path='/etc' is not allowed; allowed: a path relative"):
        fs.directory_path("/etc")


# -- facts, sizing and channel (no CDK) ----------------------------------------------------------------


def test_capacity_steps() -> None:
    assert [c for c in range(0, 10_000, 600) if valid_storage_capacity(c)] == [1200, 2400, 4800, 7200, 9600]
    assert not valid_storage_capacity(True) and not valid_storage_capacity(1200.0)  # type: ignore[arg-type]


def test_documented_throughput_tiers() -> None:
    assert LUSTRE_TYPES["PERSISTENT_2"].per_unit_throughputs == (125, 250, 500, 1000)
    assert LUSTRE_TYPES["SCRATCH_2"].per_unit_throughputs == ()
    assert LUSTRE_TYPES["PERSISTENT_2"].network_baseline_mbps_per_tib[1000] == 2600
    assert LUSTRE_TYPES["SCRATCH_2"].read_mbps_per_tib(None) == 200


def test_sizing_storage_bound() -> None:
    sizing = size_lustre(1000, 100)
    assert (sizing.storage_capacity_gib, sizing.per_unit_storage_throughput, sizing.bound_by) == (1200, 125, "dataset")
    assert sizing.read_throughput_mbps == pytest.approx(1200 / 1024 * 125)


def test_sizing_picks_the_lowest_tier_that_fits_the_smallest_capacity() -> None:
    # 2 TB dataset -> 2400 GiB; 500 MB/s needs 2400 GiB at 250 MB/s/TiB (585 MB/s), not 125 (292 MB/s)
    sizing = size_lustre(2000, 500)
    assert (sizing.storage_capacity_gib, sizing.per_unit_storage_throughput) == (2400, 250)
    assert sizing.network_baseline_mbps == pytest.approx(2400 / 1024 * 640)


def test_sizing_throughput_bound_grows_capacity() -> None:
    sizing = size_lustre(100, 5000)  # 5 GB/s: at 1000 MB/s/TiB needs 5120 GiB -> 7200
    assert (sizing.storage_capacity_gib, sizing.per_unit_storage_throughput, sizing.bound_by) == (
        7200,
        1000,
        "throughput",
    )
    scratch = size_lustre(100, 5000, deployment_type="SCRATCH_2")  # 200 MB/s/TiB -> 25,600 GiB -> 26,400
    assert (scratch.storage_capacity_gib, scratch.per_unit_storage_throughput) == (26400, None)


def test_sizing_exact_boundaries() -> None:
    # 1080 GiB at fill 0.9 is exactly 1200; 1081 needs 2400
    assert size_lustre(1080, 1).storage_capacity_gib == 1200
    assert size_lustre(1081, 1).storage_capacity_gib == 2400
    # 2400 GiB at 1000 MB/s/TiB reads exactly 2343.75 MB/s
    assert size_lustre(10, 2343.75, per_unit_storage_throughputs=[1000]).storage_capacity_gib == 2400
    assert size_lustre(10, 2343.76, per_unit_storage_throughputs=[1000]).storage_capacity_gib == 4800


def test_sizing_explains_when_nothing_fits() -> None:
    with pytest.raises(
        ValidationError, match=r"no valid SCRATCH_2 configuration fits: .*reads at most 1,875 MB/s.*PERSISTENT_2"
    ):
        size_lustre(100, 4000, deployment_type="SCRATCH_2", max_storage_capacity_gib=9600)
    with pytest.raises(ValidationError, match=r"the dataset needs 12000 GiB at fill_ratio=0.9 but at most 9600 GiB"):
        size_lustre(10_000, 10, max_storage_capacity_gib=9600)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((0, 100), {}, r"dataset_size_gib=0 is not allowed; allowed: a positive, finite number"),
        ((100, -1), {}, r"target_read_mbps=-1"),
        ((100, float("inf")), {}, r"target_read_mbps=inf"),
        ((100, 100), {"fill_ratio": 1.5}, r"fill_ratio=1.5 is not allowed; allowed: a number in \[0.1, 1.0\]"),
        ((100, 100), {"deployment_type": "SCRATCH_1"}, r"deployment_type='SCRATCH_1'"),
        ((100, 100), {"max_storage_capacity_gib": 3000}, r"max_storage_capacity_gib=3000 is not allowed"),
        ((100, 100), {"per_unit_storage_throughputs": [200]}, r"per_unit_storage_throughputs=\[200\]"),
        (
            (100, 100),
            {"deployment_type": "SCRATCH_2", "per_unit_storage_throughputs": [125]},
            r"per_unit_storage_throughputs=\[125\] is not allowed; allowed: None for SCRATCH_2",
        ),
    ],
)
def test_sizing_rejects_bad_input(args, kwargs, message) -> None:
    with pytest.raises(ValidationError, match=message):
        size_lustre(*args, **kwargs)


def test_channel_dict_and_its_rules() -> None:
    channel = sagemaker_channel(
        file_system_id="fs-0123456789abcdef0", file_system_type="EFS", directory_path="/labels", access_mode="rw"
    )
    assert channel == {
        "ChannelName": "training",
        "DataSource": {
            "FileSystemDataSource": {
                "FileSystemId": "fs-0123456789abcdef0",
                "FileSystemType": "EFS",
                "FileSystemAccessMode": "rw",
                "DirectoryPath": "/labels",
            }
        },
        "InputMode": "File",
    }
    for kwargs, message in (
        ({"file_system_type": "FSxOntap"}, r"file_system_type='FSxOntap' is not allowed; allowed: FSxLustre, EFS"),
        ({"access_mode": "wo"}, r"access_mode='wo'"),
        ({"file_system_id": "12345"}, r"file_system_id='12345'"),
        ({"directory_path": "labels"}, r"directory_path='labels'"),
        ({"channel_name": "bad name"}, r"channel_name='bad name'"),
    ):
        args = {"file_system_id": "fs-0123456789abcdef0", "file_system_type": "FSxLustre", "directory_path": "/m/d"}
        args.update(kwargs)
        with pytest.raises(ValidationError, match=message):
            sagemaker_channel(**args)


# -- config section -------------------------------------------------------------------------------------

BASE = "env_name: t\nregion: us-east-1\navailability_zones: [us-east-1a]\n"


@pytest.mark.parametrize(
    ("lustre", "message"),
    [
        ("storage_capacity_gib: 1000", r"file_systems.lustre.storage_capacity_gib: 1000: allowed: 1200, 2400"),
        ("deployment_type: SCRATCH_1", r"file_systems.lustre.deployment_type: 'SCRATCH_1'"),
        ("per_unit_storage_throughput: 250", r"per_unit_storage_throughput: 250 is not allowed for SCRATCH_2"),
        (
            "deployment_type: PERSISTENT_2\n    per_unit_storage_throughput: 300",
            r"per_unit_storage_throughput: 300 is not allowed for PERSISTENT_2; allowed: 125, 250, 500, 1000",
        ),
        ("import_prefix: /x", r"file_systems.lustre.import_prefix: '/x': must be a relative S3 key prefix"),
        ("mount_path: fsx", r"file_systems.lustre.mount_path: 'fsx': must be an absolute path"),
        ("automatic_backup_retention_days: 7", r"automatic_backup_retention_days: 7 is not allowed; allowed: null"),
        ("capacity: 1200", r"file_systems.lustre.capacity: 1200: unknown key"),
    ],
)
def test_config_rejects_bad_lustre_values(lustre: str, message: str) -> None:
    text = BASE + f"file_systems:\n  lustre:\n    {lustre}\n"
    with pytest.raises(ConfigError, match=message):
        parse_config(text, Path("config/t.yaml"), "t")


def test_config_defaults_keep_existing_files_working() -> None:
    config = parse_config(BASE, Path("config/t.yaml"), "t")
    assert config.file_systems.lustre.enabled is False and config.file_systems.efs.enabled is False


# -- the app: dev (scratch) and prod (persistent + DRA) --------------------------------------------------


dev_storage, prod_storage = env_template_fixtures("storage", "dev_storage", "prod_storage")


def test_dev_is_scratch_linked_to_the_datasets_bucket(dev_storage) -> None:
    dev_storage.has_resource_properties(
        "AWS::FSx::FileSystem",
        {"StorageCapacity": 1200, "LustreConfiguration": {"DeploymentType": "SCRATCH_2", "DataCompressionType": "LZ4"}},
    )
    dev_storage.has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {"FileSystemPath": "/datasets", "S3": {"AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}}},
    )
    outputs = dev_storage.to_json()["Outputs"]
    for name in ("LustreFileSystemId", "LustreDnsName", "LustreMountName", "LustreMountPath", "LustreDirectoryPath"):
        assert name in outputs


def test_prod_is_persistent_with_the_data_key(prod_storage) -> None:
    prod_storage.has_resource_properties(
        "AWS::FSx::FileSystem",
        {
            "StorageCapacity": 4800,
            "KmsKeyId": {"Fn::ImportValue": assertions.Match.string_like_regexp("DataKey")},
            "LustreConfiguration": {"DeploymentType": "PERSISTENT_2", "PerUnitStorageThroughput": 250},
        },
    )
    prod_storage.has_resource_properties(
        "AWS::FSx::DataRepositoryAssociation",
        {"DataRepositoryPath": {"Fn::Join": ["", ["s3://", assertions.Match.any_value(), "/datasets/"]]}},
    )


def test_app_opens_lustre_ports_to_training_and_fleet_groups(prod_storage) -> None:
    ingress = _rules(prod_storage, "AWS::EC2::SecurityGroupIngress")
    sources = {str(r.get("SourceSecurityGroupId")) for r in ingress}
    assert any("TrainingSecurityGroup" in s for s in sources) and any("FleetSecurityGroup" in s for s in sources)
    assert sorted({(r["FromPort"], r["ToPort"]) for r in ingress}) == [(988, 988), (1018, 1023)]
