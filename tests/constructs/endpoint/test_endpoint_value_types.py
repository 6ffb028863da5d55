"""The endpoint's value types: model data sources as subclasses, the image's runtime, durations resolved once,
and the deprecated spellings they replace (each warns and still works)."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_s3 as s3

from gpu_constructs.endpoint import (
    AsyncInference,
    BlueGreenDeployment,
    BucketModelData,
    EndpointAlarms,
    EndpointAutoscaling,
    ModelData,
    SsmParameterModelData,
    UriModelData,
)
from gpu_constructs.endpoint.autoscaling import cooldowns
from gpu_constructs.endpoint.protocols import image_runtime
from gpu_constructs.errors import ValidationError
from gpu_constructs.images import GpuImage
from stacks.config.inference import EndpointConfig

KEY = "models/classifier/v3/model.tar.gz"


@pytest.fixture
def bucket() -> s3.IBucket:
    return s3.Bucket(cdk.Stack(cdk.App(), "Models"), "Bucket")


def test_each_factory_returns_its_source(bucket: s3.IBucket) -> None:
    sources = (
        ModelData.from_bucket(bucket, KEY),
        ModelData.from_uri("s3://elsewhere/model.tar.gz"),
        ModelData.from_ssm_parameter("/gpu/models/latest", bucket=bucket),
    )
    assert [type(s) for s in sources] == [BucketModelData, UriModelData, SsmParameterModelData]
    assert [s.kind for s in sources] == ["bucket", "uri", "ssm"]
    assert all(isinstance(s, ModelData) for s in sources)
    for source in sources:
        source.validate("Endpoint")


def test_each_source_has_its_own_rule(bucket: s3.IBucket) -> None:
    with pytest.raises(ValidationError, match=r"model_data key='model.pt'"):
        BucketModelData(bucket=bucket, key="model.pt").validate("Endpoint")
    with pytest.raises(ValidationError, match=r"model_data uri='https://x/model.tar.gz'"):
        UriModelData(uri="https://x/model.tar.gz").validate("Endpoint")
    with pytest.raises(ValidationError, match=r"model_data prefix='/abs/'"):
        SsmParameterModelData(parameter_name="/gpu/latest", bucket=bucket, prefix="/abs/").validate("Endpoint")


def test_the_former_model_data_constructor_warns_and_builds_the_source(bucket: s3.IBucket) -> None:
    with pytest.warns(DeprecationWarning, match=r"ModelData\(kind=\.\.\.\) is deprecated.*ModelData.from_bucket"):
        data = ModelData(kind="ssm", parameter_name="bad name!", bucket=bucket)
    assert isinstance(data, SsmParameterModelData) and data.kind == "ssm"
    with pytest.raises(ValidationError, match=r"model_data parameter_name='bad name!'"):
        data.validate("Endpoint")


def test_async_inference_validates_its_topics() -> None:
    lonely = AsyncInference(include_response_in_notifications=True)
    with pytest.raises(ValidationError, match=r"include_response_in_notifications=True"):
        lonely.validate("Endpoint")


def test_validate_topics_is_deprecated_and_still_checks() -> None:
    lonely = AsyncInference(include_response_in_notifications=True)
    with (
        pytest.warns(DeprecationWarning, match=r"AsyncInference.validate_topics is deprecated.*validate"),
        pytest.raises(ValidationError, match=r"include_response_in_notifications=True"),
    ):
        lonely.validate_topics("Endpoint")


def _image(kind: str, usage: str = "inference") -> GpuImage:
    return GpuImage(
        image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1", usage=usage, cuda_version=None, kind=kind
    )  # type: ignore[arg-type]


def test_the_image_says_which_server_it_runs() -> None:
    assert {kind: _image(kind).runtime for kind in ("dlc", "codebuild", "asset", "ecr")} == {
        "dlc": "torchserve",
        "codebuild": "gpu_serve",
        "asset": "gpu_serve",
        "ecr": "gpu_serve",
    }
    assert _image("dlc", usage="training").runtime is None
    assert image_runtime(_image("dlc")) == "torchserve"


def test_an_image_without_runtime_is_read_by_its_kind_with_a_warning() -> None:
    class FormerImage:
        kind = "dlc"

    with pytest.warns(DeprecationWarning, match=r"without a 'runtime' member is deprecated"):
        assert image_runtime(FormerImage()) == "torchserve"  # type: ignore[arg-type]


def test_durations_left_out_resolve_to_one_default() -> None:
    alarms = EndpointAlarms()
    assert (alarms.max_model_latency_p99, alarms.period) == (None, None)
    assert (alarms.model_latency_p99().to_milliseconds(), alarms.metric_period().to_seconds()) == (1000, 60)
    deployment = BlueGreenDeployment()
    assert (deployment.wait_seconds, deployment.termination_wait_seconds) == (300, 0)
    assert BlueGreenDeployment.canary().wait_seconds == 600
    assert BlueGreenDeployment.linear().wait_seconds == 300
    scaling = EndpointAutoscaling.on_invocations(100, min_capacity=1, max_capacity=2)
    assert [c.to_seconds() for c in cooldowns(scaling)] == [300, 60]


def test_the_config_defaults_are_the_library_defaults() -> None:
    config = EndpointConfig(model_data=KEY)
    deployment = config.deployment.blue_green()
    assert (deployment.wait_seconds, deployment.termination_wait_seconds) == (
        BlueGreenDeployment().wait_seconds,
        BlueGreenDeployment().termination_wait_seconds,
    )
    assert config.alarms.thresholds().model_latency_p99().to_milliseconds() == 1000
    assert (config.model_download_timeout_seconds, config.startup_health_check_timeout_seconds) == (1200, 600)


def test_the_deprecated_volume_size_gib_warns_and_sizes_the_same_volume() -> None:
    """``volume_size_gib`` (an int) still sizes the ML storage volume for one release; ``volume_size`` is a ``Size``,
    as in aws-cdk, and must be whole GiB; giving both is an error."""
    import aws_cdk as cdk
    from aws_cdk import aws_kms as kms
    from endpoint_helpers import MODEL_KEY, dlc_image, kms_bucket, new_stack

    from gpu_constructs.endpoint import GpuEndpoint, ModelData
    from gpu_constructs.errors import ValidationError

    def build(**size: object) -> dict[str, object]:
        stack = new_stack()
        key = kms.Key(stack, "Key")
        bucket = kms_bucket(stack, key)
        ep = GpuEndpoint(
            stack, "Ep", image=dlc_image(stack), model_data=ModelData.from_bucket(bucket, MODEL_KEY),
            instance_type="ml.p3.2xlarge", encryption_key=key, **size,  # type: ignore[arg-type]
        )  # fmt: skip
        (variant,) = cdk.Stack.of(ep).resolve(ep.endpoint_config.production_variants)
        return variant  # type: ignore[no-any-return]

    with pytest.warns(DeprecationWarning, match=r"GpuEndpoint\(volume_size_gib=\.\.\.\) is deprecated.*volume_size="):
        old = build(volume_size_gib=64)
    assert old["volumeSizeInGb"] == build(volume_size=cdk.Size.gibibytes(64))["volumeSizeInGb"] == 64
    with pytest.raises(ValidationError, match=r"volume_size='.*' is not allowed; allowed: a whole number of GiB"):
        build(volume_size=cdk.Size.mebibytes(1536))
    with pytest.raises(ValidationError, match=r"volume_size_gib=64 is not allowed; allowed: no value when volume_size"):
        build(volume_size_gib=64, volume_size=cdk.Size.gibibytes(64))
