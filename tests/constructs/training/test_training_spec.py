"""The typed training job spec: both renderings, botocore's service model, and every project rule."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta

import pytest

from gpu_constructs.errors import ValidationError
from gpu_constructs.training_spec import (
    CHECKPOINT_LOCAL_PATH,
    HP_NUM_WORKERS,
    HP_PROCESSES_PER_HOST,
    LAUNCHER_ENVIRONMENT,
    MAX_RUNTIME_LIMIT_S,
    MAX_WAIT_LIMIT_S,
    Dynamic,
    FsxChannel,
    S3Channel,
    ShardingJobSpec,
    ShardSplit,
    TrainingCode,
    TrainingJobSpec,
    channel_from_dict,
    check_processes_per_host,
    hyperparameter_limits,
    iter_dynamic_paths,
    service_model_problems,
    states_format,
    substitute_sfn_samples,
    validate_job_name,
)
from gpu_train.hyperparameters import HYPERPARAMETERS
from gpu_train.metrics import METRIC_DEFINITIONS

ROLE = "arn:aws:iam::123456789012:role/gpu-dev-train-execution"
IMAGE = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
KEY = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


@pytest.fixture(scope="module")
def dev() -> TrainingJobSpec:
    """Single GPU, FastFile input (the dev setup)."""
    return TrainingJobSpec(
        image_uri=IMAGE,
        role_arn=ROLE,
        instance_type="ml.g5.xlarge",
        output_s3_uri="s3://gpu-dev-artifacts/output/gpu-dev-train/",
        channels=(
            S3Channel("train", "s3://gpu-dev-datasets/imagenet/{data_version}/train/"),
            S3Channel("validation", "s3://gpu-dev-datasets/imagenet/{data_version}/validation/"),
        ),
        hyperparameters={"epochs": "10", "arch": "resnet50"},
        metric_definitions=tuple(METRIC_DEFINITIONS),
        output_kms_key=KEY,
        subnets=("subnet-0123456789abcdef0",),
        security_group_ids=("sg-0123456789abcdef0",),
        job_name_prefix="gpu-dev-train",
        tags={"project": "gpu-platform"},
    )


@pytest.fixture(scope="module")
def prod(dev: TrainingJobSpec) -> TrainingJobSpec:
    """Two p4d hosts, FSx for Lustre input, managed spot with checkpoints (the prod setup).

    The dev spec with the prod setup's changes: image, role, metric definitions and VPC stay.
    """
    return replace(
        dev,
        instance_type="ml.p4d.24xlarge",
        instance_count=2,
        output_s3_uri="s3://gpu-prod-artifacts/output/gpu-prod-train/",
        channels=(FsxChannel("train", "fs-0123456789abcdef0", "/abcdefgh/datasets/imagenet/{data_version}/train"),),
        hyperparameters={"epochs": "90"},
        output_kms_key=None,
        spot=True,
        max_runtime=timedelta(hours=48),
        max_wait=timedelta(hours=96),
        checkpoint_s3_uri="s3://gpu-prod-artifacts/checkpoints/gpu-prod-train/",
        production=True,
        max_retry_attempts=2,
        cuda_version="12.8",
        job_name_prefix="gpu-prod-train",
        tags={},
    )


# --------------------------------------------------------------------------------------------------
# The boto3 rendering
# --------------------------------------------------------------------------------------------------


def test_dev_request_validates_against_botocore_and_derives_the_distribution(dev: TrainingJobSpec) -> None:
    request = dev.to_request("gpu-dev-train-001", hyperparameter_overrides={"epochs": 3}, data_version="v2")
    assert service_model_problems("CreateTrainingJob", request) == []
    assert request["TrainingJobName"] == "gpu-dev-train-001"
    assert request["ResourceConfig"] == {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100}
    # ml.g5.xlarge: 1 GPU, 4 vCPUs -> one process, 4 // 1 - 2 = 2 loader workers; the override wins, as a string
    assert request["HyperParameters"] == {
        HP_PROCESSES_PER_HOST: "1",
        HP_NUM_WORKERS: "2",
        "epochs": "3",
        "arch": "resnet50",
    }
    channel = request["InputDataConfig"][0]
    assert channel["InputMode"] == "FastFile"
    assert channel["DataSource"]["S3DataSource"]["S3Uri"] == "s3://gpu-dev-datasets/imagenet/v2/train/"
    assert request["AlgorithmSpecification"]["MetricDefinitions"] == METRIC_DEFINITIONS
    assert request["EnableManagedSpotTraining"] is False and "CheckpointConfig" not in request
    assert request["VpcConfig"] == {
        "Subnets": ["subnet-0123456789abcdef0"],
        "SecurityGroupIds": ["sg-0123456789abcdef0"],
    }


def test_prod_request_has_spot_checkpoints_fsx_and_eight_processes_per_host(prod: TrainingJobSpec) -> None:
    request = prod.to_request("gpu-prod-train-001")
    assert service_model_problems("CreateTrainingJob", request) == []
    assert request["EnableManagedSpotTraining"] is True
    assert request["StoppingCondition"] == {"MaxRuntimeInSeconds": 172800, "MaxWaitTimeInSeconds": 345600}
    assert request["CheckpointConfig"] == {
        "S3Uri": "s3://gpu-prod-artifacts/checkpoints/gpu-prod-train/gpu-prod-train-001/",
        "LocalPath": CHECKPOINT_LOCAL_PATH,
    }
    source = request["InputDataConfig"][0]["DataSource"]["FileSystemDataSource"]
    assert source == {
        "FileSystemId": "fs-0123456789abcdef0",
        "FileSystemType": "FSxLustre",
        "DirectoryPath": "/abcdefgh/datasets/imagenet/v1/train",
        "FileSystemAccessMode": "ro",
    }
    assert request["InputDataConfig"][0]["InputMode"] == "File"
    assert request["EnableInterContainerTrafficEncryption"] is True
    # ml.p4d.24xlarge: 8 GPUs, 96 vCPUs -> 8 processes, 96 // 8 - 2 = 10 workers each
    assert request["HyperParameters"][HP_PROCESSES_PER_HOST] == "8"
    assert request["HyperParameters"][HP_NUM_WORKERS] == "10"
    assert request["RetryStrategy"] == {"MaximumRetryAttempts": 2}


def test_spot_without_max_wait_defaults_to_twice_the_runtime(prod: TrainingJobSpec) -> None:
    request = replace(prod, max_wait=None).to_request("gpu-prod-train-002")
    assert request["StoppingCondition"]["MaxWaitTimeInSeconds"] == 2 * prod.max_runtime.total_seconds()


def test_the_runtime_reads_the_derived_hyperparameters() -> None:
    assert {HP_PROCESSES_PER_HOST, HP_NUM_WORKERS} <= set(HYPERPARAMETERS)


# --------------------------------------------------------------------------------------------------
# The Step Functions rendering: the same dict
# --------------------------------------------------------------------------------------------------


def test_sfn_parameters_take_runtime_values_from_the_execution(prod: TrainingJobSpec) -> None:
    parameters = prod.to_sfn_parameters()
    dynamic = dict(iter_dynamic_paths(parameters))
    assert dynamic["TrainingJobName.$"] == "$.args.job_name"
    assert dynamic["HyperParameters.$"] == "$.hyperparameters"
    assert dynamic["InstanceType.$"] == "$.args.instance_type"
    assert dynamic["DirectoryPath.$"] == ("States.Format('/abcdefgh/datasets/imagenet/{}/train', $.args.data_version)")
    assert (
        dynamic["S3Uri.$"] == "States.Format('s3://gpu-prod-artifacts/checkpoints/gpu-prod-train/{}/', $.args.job_name)"
    )
    # everything else is static and identical to the boto3 request
    assert parameters["EnableManagedSpotTraining"] is True
    assert parameters["ResourceConfig"]["InstanceCount"] == 2


def test_sfn_parameters_with_sample_values_are_the_boto3_request(prod: TrainingJobSpec, dev: TrainingJobSpec) -> None:
    for spec in (dev, prod):
        resolved = substitute_sfn_samples(spec.to_sfn_parameters(), spec.sfn_samples())
        assert service_model_problems("CreateTrainingJob", resolved) == []
        assert resolved == spec.to_request(spec.sample_job_name())


def test_a_path_without_a_sample_is_an_error() -> None:
    with pytest.raises(KeyError, match=r"no sample value for X\.\$='\$\.nowhere'"):
        substitute_sfn_samples({"X.$": "$.nowhere"}, {})


def test_states_format_escapes_literals_but_not_cdk_tokens() -> None:
    rendered = states_format(["s3://b/it's {odd}\\/", Dynamic("$.v", "v1"), "/x"])
    assert isinstance(rendered, Dynamic)
    assert rendered.path == "States.Format('s3://b/it\\'s \\{odd\\}\\\\/{}/x', $.v)"
    assert rendered.sample == "s3://b/it's {odd}\\/v1/x"
    token = states_format(["s3://${Token[TOKEN.42]}/p/", Dynamic("$.v", "v1")])
    assert isinstance(token, Dynamic) and "${Token[TOKEN.42]}" in token.path
    assert states_format(["a", "b"]) == "ab"


# --------------------------------------------------------------------------------------------------
# botocore's service model: what ParamValidator checks, and what we add
# --------------------------------------------------------------------------------------------------


def test_service_model_catches_types_required_members_enums_patterns_and_lengths(dev: TrainingJobSpec) -> None:
    request = dev.to_request("gpu-dev-train-003")
    broken = json.loads(json.dumps(request))
    broken["ResourceConfig"]["InstanceCount"] = "two"  # type (ParamValidator)
    del broken["RoleArn"]  # required (ParamValidator)
    broken["InputDataConfig"][0]["InputMode"] = "Stream"  # enum
    broken["TrainingJobName"] = "bad_name"  # pattern
    broken["AlgorithmSpecification"]["MetricDefinitions"][0]["Name"] = "m" * 300  # max length
    broken["UnknownMember"] = True  # unknown (ParamValidator)
    problems = "\n".join(service_model_problems("CreateTrainingJob", broken))
    assert "Invalid type for parameter ResourceConfig.InstanceCount" in problems
    assert 'Missing required parameter in input: "RoleArn"' in problems
    assert "InputMode: 'Stream' is not one of the allowed values" in problems
    assert "TrainingJobName: 'bad_name' does not match the pattern" in problems
    assert "MetricDefinitions[0].Name: 300 characters, more than the maximum 255" in problems
    assert 'Unknown parameter in input: "UnknownMember"' in problems


def test_unresolved_tokens_are_not_validated() -> None:
    params = {
        "TrainingJobName": "gpu-dev-train-1",
        "RoleArn": "${Token[TOKEN.1]}",
        "OutputDataConfig": {"S3OutputPath": "s3://${Token[TOKEN.2]}/output/"},
    }
    assert service_model_problems("CreateTrainingJob", params) == []


# --------------------------------------------------------------------------------------------------
# The project's stricter rules (botocore does not check them)
# --------------------------------------------------------------------------------------------------


def _problems(spec: TrainingJobSpec, **kwargs: object) -> str:
    return "\n".join(spec.problems(**kwargs))  # type: ignore[arg-type]


def test_max_wait_must_cover_max_runtime(prod: TrainingJobSpec) -> None:
    assert "max_wait=3600 s is less than max_runtime=172800 s" in _problems(replace(prod, max_wait=timedelta(hours=1)))


def test_spot_requires_checkpoints(prod: TrainingJobSpec) -> None:
    assert "spot=True requires checkpoint_s3_uri" in _problems(replace(prod, checkpoint_s3_uri=None))


def test_max_wait_without_spot_is_an_error(dev: TrainingJobSpec) -> None:
    assert "max_wait=7200 s is not allowed without spot" in _problems(replace(dev, max_wait=timedelta(hours=2)))


@pytest.mark.parametrize("uri", ["https://example.com/data/", "/local/path", "s3:/missing-slash/x", "s3://"])
def test_uris_must_be_s3(dev: TrainingJobSpec, uri: str) -> None:
    assert f"output_s3_uri={uri!r} is not an S3 URI" in _problems(replace(dev, output_s3_uri=uri))
    bad_channel = replace(dev, channels=(S3Channel("train", uri),))
    assert "is not an S3 URI" in _problems(bad_channel)


@pytest.mark.parametrize("name", ["bad_name", "-leading", "trailing-", "x" * 64, ""])
def test_job_name_pattern_and_length(dev: TrainingJobSpec, name: str) -> None:
    with pytest.raises(ValidationError, match=r"job_name=.* is not allowed; allowed: 1 to 63 letters"):
        dev.to_request(name)


def test_job_names_must_carry_the_prefix(dev: TrainingJobSpec) -> None:
    assert validate_job_name("x" * 63) == "x" * 63
    with pytest.raises(ValidationError, match=r"allowed: a name starting with 'gpu-dev-train'"):
        dev.to_request("someone-else-001")


def test_fsx_requires_a_vpc(prod: TrainingJobSpec) -> None:
    problems = _problems(replace(prod, subnets=(), security_group_ids=()))
    assert "FSx channel(s) ['train'] require a VPC" in problems


def test_multi_host_requires_inter_container_encryption_in_production(prod: TrainingJobSpec) -> None:
    unencrypted = replace(prod, inter_container_encryption=False)
    assert "instance_count=2 with inter_container_encryption=False is not allowed in production" in _problems(
        unencrypted
    )
    assert "inter_container_encryption" not in _problems(replace(unencrypted, production=False))
    assert "inter_container_encryption" not in _problems(replace(unencrypted, instance_count=1))


def test_gpu_workload_on_a_cpu_type_names_three_gpu_types(dev: TrainingJobSpec) -> None:
    problems = _problems(dev, instance_type="ml.m5.xlarge")
    assert "'ml.m5.xlarge' has no NVIDIA GPU" in problems
    suggestions = problems.split("Fitting GPU types for training:")[1]
    assert suggestions.count("'ml.") == 3


def test_a_typo_gets_a_did_you_mean(dev: TrainingJobSpec) -> None:
    assert "did you mean 'ml.g5.xlarge'" in _problems(dev, instance_type="ml.g5.xlarg")


def test_more_processes_than_gpus_is_an_error(dev: TrainingJobSpec) -> None:
    problems = _problems(replace(dev, processes_per_host=4))
    assert "processes_per_host=4 needs 4 GPUs but 'ml.g5.xlarge' has a single GPU" in problems


def test_image_cuda_must_drive_the_gpu_architecture(dev: TrainingJobSpec) -> None:
    problems = _problems(replace(dev, cuda_version="11.7"), instance_type="ml.p5.48xlarge")
    assert "cuda_version='11.7': CUDA 11.7 cannot drive the NVIDIA H100" in problems


def test_volume_key_is_rejected_on_types_with_local_nvme(dev: TrainingJobSpec) -> None:
    problems = _problems(replace(dev, volume_kms_key=KEY))
    assert "'ml.g5.xlarge' has local NVMe storage (250 GB)" in problems
    assert _problems(replace(dev, volume_kms_key=KEY), instance_type="ml.p3.2xlarge") == ""


def test_channel_rules(dev: TrainingJobSpec) -> None:
    problems = _problems(
        replace(
            dev,
            channels=(
                S3Channel("train", "s3://b/x/", input_mode="Stream"),  # type: ignore[arg-type]
                S3Channel("train", "s3://b/y/", compression="Gzip"),
                FsxChannel("fsx", "fs-nothex", "relative/path"),
            ),
        )
    )
    assert "channel names ['train'] are repeated" in problems
    assert "input_mode='Stream' is not allowed; allowed: File, FastFile, Pipe" in problems
    assert "compression='Gzip' is not allowed with input_mode='FastFile'; allowed: Pipe" in problems
    assert "file_system_id='fs-nothex' is not allowed" in problems
    assert "directory_path='relative/path' is not allowed; allowed: an absolute path" in problems
    assert "channels=() is not allowed" in _problems(replace(dev, channels=()))


def test_data_version_becomes_part_of_a_prefix(dev: TrainingJobSpec) -> None:
    with pytest.raises(ValidationError, match=r"data_version='\.\./x' is not allowed"):
        dev.to_request("gpu-dev-train-004", data_version="../x")


def test_all_problems_are_reported_at_once(prod: TrainingJobSpec) -> None:
    broken = replace(prod, checkpoint_s3_uri=None, max_wait=timedelta(minutes=1), inter_container_encryption=False)
    with pytest.raises(ValidationError, match=r"3 problems:") as info:
        broken.validate("Training/Pipeline")
    assert str(info.value).startswith("Training/Pipeline: 3 problems:")


# --------------------------------------------------------------------------------------------------
# Serialization (what the training stack publishes for gpuctl)
# --------------------------------------------------------------------------------------------------


def test_json_round_trip(prod: TrainingJobSpec) -> None:
    again = TrainingJobSpec.from_json(json.dumps(prod.to_dict()))
    assert again == prod
    assert again.to_request("gpu-prod-train-9") == prod.to_request("gpu-prod-train-9")


def test_unknown_keys_and_channel_types_are_errors(dev: TrainingJobSpec) -> None:
    data = dev.to_dict()
    with pytest.raises(ValidationError, match=r"unknown keys \['typo'\]"):
        TrainingJobSpec.from_dict({**data, "typo": 1})
    with pytest.raises(ValidationError, match=r"channel type='efs' is not allowed"):
        channel_from_dict({"type": "efs", "name": "x"})
    with pytest.raises(ValidationError, match=r"not valid JSON"):
        TrainingJobSpec.from_json("{nope")


# --------------------------------------------------------------------------------------------------
# The prepare step: gpuctl shard in a processing job
# --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sharding() -> ShardingJobSpec:
    return ShardingJobSpec(
        image_uri=IMAGE,
        role_arn=ROLE,
        splits=(
            ShardSplit("train", "s3://gpu-ds/raw/imagenet/train/", "s3://gpu-ds/imagenet/{data_version}/train/"),
            ShardSplit(
                "validation", "s3://gpu-ds/raw/imagenet/validation/", "s3://gpu-ds/imagenet/{data_version}/validation/"
            ),
        ),
        output_kms_key=KEY,
        job_name_prefix="gpu-dev-train-shard",
    )


def test_sharding_request_runs_gpuctl_shard_per_split(sharding: ShardingJobSpec) -> None:
    request = sharding.to_request("gpu-dev-train-shard-1", data_version="v3")
    assert service_model_problems("CreateProcessingJob", request) == []
    app = request["AppSpecification"]
    assert app["ContainerEntrypoint"][:2] == ["/bin/sh", "-c"]
    assert (
        'python3 -m gpu_train shard "/opt/ml/processing/input/$split" "/opt/ml/processing/output/$split"'
        in (app["ContainerEntrypoint"][2])
    )
    assert app["ContainerArguments"] == ["train", "validation"]
    outputs = [o["S3Output"]["S3Uri"] for o in request["ProcessingOutputConfig"]["Outputs"]]
    assert outputs == ["s3://gpu-ds/imagenet/v3/train/", "s3://gpu-ds/imagenet/v3/validation/"]


def test_sharding_sfn_parameters_validate(sharding: ShardingJobSpec) -> None:
    parameters = sharding.to_sfn_parameters()
    assert parameters["ProcessingJobName.$"] == "$.args.prepare_job_name"
    samples = {"$.args.prepare_job_name": "gpu-dev-train-shard-1"}
    for _key, path in iter_dynamic_paths(parameters):
        samples.setdefault(path, "s3://gpu-ds/imagenet/v1/train/")
    assert service_model_problems("CreateProcessingJob", substitute_sfn_samples(parameters, samples)) == []


def test_sharding_rejects_a_type_processing_does_not_accept(sharding: ShardingJobSpec) -> None:
    problems = "\n".join(replace(sharding, instance_type="ml.p5e.48xlarge").problems())
    assert "'ml.p5e.48xlarge' is not accepted by SageMaker processing" in problems
    assert replace(sharding, instance_type="ml.g5.2xlarge").problems() == []  # GPU processing is fine


# --------------------------------------------------------------------------------------------------
# processes_per_host: one rule for the typed field and the hyperparameter (issue 12, item 10)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"processes_per_host": 16}, "processes_per_host=16 needs 16 GPUs but 'ml.g5.xlarge' has a single GPU"),
        (
            {"hyperparameters": {"processes_per_host": "16"}},
            "hyperparameters['processes_per_host']=16 needs 16 GPUs but 'ml.g5.xlarge' has a single GPU",
        ),
        (
            {"hyperparameters": {"processes_per_host": "two"}},
            "hyperparameters['processes_per_host']='two' is not an integer; allowed: 0 (one process per GPU) or 1..1",
        ),
        (
            {"processes_per_host": 1, "hyperparameters": {"processes_per_host": "0"}},
            "processes_per_host=1 and hyperparameters['processes_per_host']='0' disagree",
        ),
    ],
)
def test_processes_per_host_has_one_rule_for_the_field_and_the_hyperparameter(
    dev: TrainingJobSpec, changes: dict, message: str
) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        replace(dev, **changes).validate()


def test_processes_per_host_overrides_are_checked_against_the_chosen_type(dev: TrainingJobSpec) -> None:
    with pytest.raises(ValidationError, match=re.escape("processes_per_host=16 needs 16 GPUs but 'ml.g5.xlarge'")):
        dev.to_request("gpu-dev-train-001", hyperparameter_overrides={HP_PROCESSES_PER_HOST: "16"})
    with pytest.raises(ValidationError, match=re.escape("processes_per_host=8 is more than the 4 GPUs of 'ml.g5.12xl")):
        dev.to_request(
            "gpu-dev-train-001", hyperparameter_overrides={"processes_per_host": 8}, instance_type="ml.g5.12xlarge"
        )
    request = dev.to_request(
        "gpu-dev-train-001", hyperparameter_overrides={"processes_per_host": "4"}, instance_type="ml.g5.12xlarge"
    )
    assert request["HyperParameters"][HP_PROCESSES_PER_HOST] == "4"
    assert dev.to_request("gpu-dev-train-001", hyperparameter_overrides={"processes_per_host": "0"})


def test_a_valid_processes_hyperparameter_drives_the_loader_workers(dev: TrainingJobSpec) -> None:
    spec = replace(dev, instance_type="ml.g5.12xlarge", hyperparameters={"processes_per_host": "2"})
    # 48 vCPUs / 2 processes - 2 reserved: the workers follow the hyperparameter, not the 4 GPUs
    assert spec.distribution_for("ml.g5.12xlarge") == {HP_PROCESSES_PER_HOST: "2", HP_NUM_WORKERS: "22"}
    assert check_processes_per_host("ml.g5.12xlarge", "4") == 4
    assert check_processes_per_host("ml.g5.12xlarge", "0") is None
    assert check_processes_per_host("ml.g5.12xlarge", None) is None


def test_oversized_overrides_name_the_botocore_limit(dev: TrainingJobSpec) -> None:
    assert hyperparameter_limits() == (100, 256, 2500)
    with pytest.raises(ValidationError, match=r"2501-character value; allowed: names up to 256 and values up to 2500"):
        dev.to_request("gpu-dev-train-001", hyperparameter_overrides={"note": "x" * 2501})


# --------------------------------------------------------------------------------------------------
# Time limits (issue 12, item 11): defined once here, imported by the config
# --------------------------------------------------------------------------------------------------


def test_default_max_wait_never_exceeds_the_sagemaker_limit(prod: TrainingJobSpec) -> None:
    spec = replace(prod, max_runtime=timedelta(seconds=MAX_RUNTIME_LIMIT_S), max_wait=None)
    assert spec.effective_max_wait == timedelta(seconds=MAX_WAIT_LIMIT_S) == timedelta(days=28)
    assert spec.problems() == []
    with pytest.raises(ValidationError, match=r"max_wait=2419201 s is not allowed; allowed: 1..2419200 s \(SageMaker"):
        replace(prod, max_wait=timedelta(seconds=MAX_WAIT_LIMIT_S + 1)).validate()


# --------------------------------------------------------------------------------------------------
# Whose hyperparameters: the built-in trainer's defaults, your own code's, the launcher's settings
# --------------------------------------------------------------------------------------------------

_CODE = TrainingCode(
    source_s3_uri="s3://gpu-dev-artifacts/code/gpu-dev-train/builtin/sourcedir.tar.gz",
    drivers_s3_uri="s3://gpu-dev-artifacts/drivers/gpu_train_driver.pyz",
    upload_prefix="s3://gpu-dev-artifacts/code/gpu-dev-train/",
    builtin=True,
)


def test_the_built_in_trainer_keeps_its_defaults_and_your_code_gets_only_yours(dev: TrainingJobSpec) -> None:
    base = {"arch": "resnet50", "epochs": "10", "processes_per_host": "2"}
    builtin = replace(dev, instance_type="ml.g5.12xlarge", hyperparameters=base, code=_CODE)
    derived = {HP_PROCESSES_PER_HOST: "2", HP_NUM_WORKERS: "22"}
    launcher = {"GPU_TRAIN_PROCESSES_PER_HOST": "2", "GPU_TRAIN_NUM_WORKERS": "22"}
    request = builtin.to_request("gpu-dev-train-001", hyperparameter_overrides={"lr": 0.01})
    assert request["HyperParameters"] == {**derived, **base, "lr": "0.01"}
    assert request["Environment"] == launcher
    assert replace(builtin, code=None).to_request("gpu-dev-train-001")["HyperParameters"] == {**derived, **base}
    assert "Environment" not in replace(builtin, code=None).to_request("gpu-dev-train-001")  # the image's own entry

    own = replace(builtin, code=replace(_CODE, builtin=False))  # a setup configured with its own code
    request = own.to_request("gpu-dev-train-001", hyperparameter_overrides={"lr": 0.01})
    assert request["HyperParameters"] == {**base, "lr": "0.01"} and request["Environment"] == launcher

    other = builtin.with_other_code(replace(_CODE, source_s3_uri="s3://gpu-dev-artifacts/code/x.tar.gz", builtin=False))
    assert other.hyperparameters == {} and other.processes_per_host == 2  # the setup's choice of processes stays
    request = other.to_request("gpu-dev-train-001", hyperparameter_overrides={"lr": 0.01})
    assert request["HyperParameters"] == {"lr": "0.01"} and request["Environment"] == launcher
    own_env = replace(other, environment={"GPU_TRAIN_NUM_WORKERS": "0", "X": "1"})
    assert own_env.to_request("gpu-dev-train-001")["Environment"] == {
        **launcher,
        "GPU_TRAIN_NUM_WORKERS": "0",
        "X": "1",
    }


def test_the_launchers_environment_names_are_the_launchers() -> None:
    from gpu_train.launcher import LAUNCHER_SETTINGS

    assert {name: LAUNCHER_SETTINGS[name] for name in LAUNCHER_ENVIRONMENT} == LAUNCHER_ENVIRONMENT
