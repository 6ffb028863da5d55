"""GpuImage: the DLC table (checked against the SageMaker SDK when installed), the four factories, the
hardened repository, usage and CUDA compatibility checks, pull grants, the images config and stack."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam

from gpu_constructs import ValidationError
from gpu_constructs.dlc import DLC_ACCOUNTS, DLC_IMAGES, dlc_table_from_sdk, resolve_dlc
from gpu_constructs.images import GpuImage, SecureRepository, expected_build_wildcards, flatten_reference
from stacks.config import ConfigError, parse_config


def _stack(region: str = "us-east-1") -> cdk.Stack:
    return cdk.Stack(cdk.App(), "T", env=cdk.Environment(account="111122223333", region=region))


# -- DLC table ------------------------------------------------------------------------------------------

HAS_SDK = importlib.util.find_spec("sagemaker") is not None and importlib.util.find_spec("sagemaker.core") is not None


@pytest.mark.skipif(not HAS_SDK, reason="the SageMaker SDK (sagemaker-core) is not installed")
def test_table_matches_the_sagemaker_sdk() -> None:
    sdk = dlc_table_from_sdk()
    assert sdk["accounts"] == DLC_ACCOUNTS
    for (usage, version), image in DLC_IMAGES.items():
        entry = sdk["versions"][f"{usage}/{version}"]
        assert entry["repository"] == image.repository
        assert entry["py_versions"] == [image.python], (usage, version)
        assert entry["regions"] == image.regions(), (usage, version)


@pytest.mark.skipif(not HAS_SDK, reason="the SageMaker SDK (sagemaker-core) is not installed")
def test_uris_match_the_sdk_prefix() -> None:
    from sagemaker.core import image_uris

    for (usage, version), image in DLC_IMAGES.items():
        for region in ("us-west-2", "eu-central-1", "cn-north-1", "af-south-1"):
            sdk_uri = image_uris.retrieve(
                "pytorch",
                region=region,
                version=version,
                py_version=image.python,
                instance_type="ml.g5.xlarge",
                image_scope=usage,
            )
            ours = GpuImage.from_dlc(_stack(region), "I", framework_version=version, usage=usage).image_uri
            # the SDK gives the rolling tag <version>-gpu-<py>; ours pins CUDA and OS
            assert ours.startswith(sdk_uri + "-" + image.cuda + "-ubuntu22.04-sagemaker"), (sdk_uri, ours)


def test_dlc_uri_and_cuda() -> None:
    image = GpuImage.from_dlc(_stack(), "Train", framework_version="2.8", usage="training")
    assert image.image_uri == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.8.0-gpu-py312-cu129-ubuntu22.04-sagemaker"
    )
    assert (image.kind, image.usage, image.cuda_version) == ("dlc", "training", "12.9")
    china = GpuImage.from_dlc(_stack("cn-north-1"), "Serve", framework_version="2.6.0", usage="inference")
    assert china.image_uri.startswith("727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch-inference:2.6.0-")
    assert china.cuda_version == "12.4"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"framework_version": "1.13"},
            r"framework_version='1.13' is not allowed; allowed: a PyTorch training DLC version: 2.5.1",
        ),
        (
            {"framework_version": "2.8", "python": "py311"},
            r"python='py311' is not allowed; allowed: 'py312' for PyTorch 2.8.0",
        ),
        ({"framework_version": "2.8", "cuda": "cu128"}, r"cuda='cu128' is not allowed; allowed: 'cu129' \(CUDA 12.9\)"),
        ({"framework_version": "2.8", "cuda": "twelve"}, r"cuda_version='twelve' is not a CUDA version"),
        ({"framework_version": "2.8", "usage": "serving"}, r"usage='serving' is not allowed"),
        (
            {"framework_version": "2.7", "region": "me-west-1"},
            r"region='me-west-1' is not allowed; allowed: a region where PyTorch 2.7.1",
        ),
        ({"framework_version": "2.8", "region": "xx-moon-1"}, r"region='xx-moon-1'"),
    ],
)
def test_dlc_rejects_what_does_not_exist(kwargs, message) -> None:
    kwargs.setdefault("usage", "training")
    with pytest.raises(ValidationError, match=message):
        GpuImage.from_dlc(_stack(), "I", **kwargs)


def test_dlc_needs_a_concrete_region() -> None:
    stack = cdk.Stack(cdk.App(), "Agnostic")
    with pytest.raises(
        ValidationError, match=r"Agnostic/I: region='<unresolved>' is not allowed; allowed: a concrete region"
    ):
        GpuImage.from_dlc(stack, "I", framework_version="2.8", usage="training")


def test_inference_versions_are_separate() -> None:
    with pytest.raises(ValidationError, match=r"allowed: a PyTorch inference DLC version: 2.5.1, 2.6.0"):
        resolve_dlc("2.8", "inference", region="us-east-1")


# -- usage and CUDA compatibility ---------------------------------------------------------------------


def test_training_image_rejected_for_an_endpoint_and_back() -> None:
    train = GpuImage.from_dlc(_stack(), "T", framework_version="2.8", usage="training")
    serve = GpuImage.from_dlc(_stack(), "S", framework_version="2.6", usage="inference")
    train.require_usage("training", "Job")
    serve.require_usage("inference", "Endpoint")
    with pytest.raises(
        ValidationError, match=r"Endpoint: image usage='training' cannot serve as an endpoint .*'inference'"
    ):
        train.require_usage("inference", "Endpoint")
    with pytest.raises(ValidationError, match=r"Job: image usage='inference' cannot serve as a training job"):
        serve.require_usage("training", "Job")


def test_cuda_must_drive_the_gpu() -> None:
    serve = GpuImage.from_dlc(_stack(), "S", framework_version="2.6", usage="inference")  # CUDA 12.4
    serve.check_instance("ml.g5.xlarge", "Endpoint")
    with pytest.raises(
        ValidationError, match=r"Endpoint: .*CUDA 12.4 cannot drive the NVIDIA B200 .*CUDA 12.8 or newer"
    ):
        serve.check_instance("ml.p6-b200.48xlarge", "Endpoint")
    newest = GpuImage.from_dlc(_stack(), "N", framework_version="2.10", usage="training")  # CUDA 13.0
    with pytest.raises(ValidationError, match=r"CUDA 13.0 cannot drive the NVIDIA V100"):
        newest.check_instance("ml.p3.2xlarge", "Job")
    unknown = GpuImage.from_ecr_repository(
        ecr.Repository.from_repository_name(_stack(), "R", "mine"), "v1", usage="training", cuda_version=None
    )
    unknown.check_instance("ml.p3.2xlarge", "Job")  # unknown CUDA: nothing to check


# -- grants ---------------------------------------------------------------------------------------------


def _policy_statements(stack: cdk.Stack) -> list[dict]:
    template = assertions.Template.from_stack(stack)
    return [
        s
        for p in template.find_resources("AWS::IAM::Policy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_dlc_grant_names_the_aws_owned_repository() -> None:
    stack = _stack("us-west-2")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    grant = GpuImage.from_dlc(stack, "T", framework_version="2.8", usage="training").grant_pull(role)
    assert grant is not None and grant.success
    statements = _policy_statements(stack)
    assert {"Action": ["ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"], "Effect": "Allow",
            "Resource": "arn:aws:ecr:us-west-2:763104351884:repository/pytorch-training"} in statements  # fmt: skip
    assert {"Action": "ecr:GetAuthorizationToken", "Effect": "Allow", "Resource": "*"} in statements


def test_ecr_grant_uses_the_repository() -> None:
    stack = _stack()
    repo = ecr.Repository.from_repository_name(stack, "R", "team/images")
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    image = GpuImage.from_ecr_repository(repo, "v1.2", usage="inference", cuda_version="12.8")
    assert image.grant_pull(role) is not None
    pull = [s for s in _policy_statements(stack) if "ecr:BatchGetImage" in s["Action"]]
    assert pull and "team/images" in str(pull[0]["Resource"])
    digest = "sha256:" + "a" * 64
    by_digest = GpuImage.from_ecr_repository(repo, digest, usage="inference", cuda_version=None)
    assert stack.resolve(by_digest.image_uri)["Fn::Join"][1][-1].endswith(f"/team/images@{digest}")
    with pytest.raises(ValidationError, match=r"tag='-bad' is not allowed; allowed: an image tag"):
        GpuImage.from_ecr_repository(repo, "-bad", usage="inference", cuda_version=None)
    assert GpuImage(image_uri="x/y:z", usage="training", cuda_version=None, kind="ecr").grant_pull(role) is None


# -- CodeBuild, asset, repository -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def build_context(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("image")
    (path / "Dockerfile").write_text("FROM public.ecr.aws/docker/library/python:3.12-slim\nCOPY app.py /app.py\n")
    (path / "app.py").write_text("print('hi')\n")
    (path / ".dockerignore").write_text("# comment\nsecrets.txt\n")
    (path / "secrets.txt").write_text("not for the image\n")
    return path


@pytest.fixture(scope="module")
def codebuild(build_context):
    stack = _stack()
    image = GpuImage.from_codebuild(
        stack,
        "Train",
        directory=build_context,
        usage="training",
        cuda_version="12.8",
        zstd_compression=True,
        max_image_count=5,
        build_args={"BASE_IMAGE": "public.ecr.aws/x/y:1"},
    )
    role = iam.Role(stack, "Role", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    image.grant_pull(role)
    return stack, image, assertions.Template.from_stack(stack)


def test_codebuild_repository_is_hardened(codebuild) -> None:
    _, _, template = codebuild
    template.has_resource_properties(
        "AWS::ECR::Repository",
        {
            "ImageScanningConfiguration": {"ScanOnPush": True},
            "ImageTagMutability": "IMMUTABLE",
            "EncryptionConfiguration": {"EncryptionType": "KMS", "KmsKey": assertions.Match.any_value()},
            "LifecyclePolicy": {
                "LifecyclePolicyText": assertions.Match.serialized_json(
                    {
                        "rules": [
                            assertions.Match.object_like(
                                {"selection": assertions.Match.object_like({"tagStatus": "untagged", "countNumber": 7})}
                            ),
                            assertions.Match.object_like(
                                {"selection": assertions.Match.object_like({"tagStatus": "any", "countNumber": 5})}
                            ),
                        ]
                    }
                )
            },
            "RepositoryPolicyText": {
                "Statement": [assertions.Match.object_like({"Effect": "Deny", "Sid": "DenyOutsideThisAccount"})],
                "Version": "2012-10-17",
            },
        },
    )
    # no Allow statement anywhere in the repository policy: nothing is public
    repos = template.find_resources("AWS::ECR::Repository")
    assert all(
        s["Effect"] == "Deny" for r in repos.values() for s in r["Properties"]["RepositoryPolicyText"]["Statement"]
    )


def test_codebuild_build_is_zstd_and_encrypted(codebuild) -> None:
    _, image, template = codebuild
    builds = template.find_resources("Custom::CDKContainerImageBuild")
    (build,) = builds.values()
    command = build["Properties"]["buildCommand"]
    assert "compression=zstd" in command and "--build-arg BASE_IMAGE=public.ecr.aws/x/y:1" in command
    template.has_resource_properties(
        "AWS::CodeBuild::Project",
        {"EncryptionKey": {"Fn::GetAtt": [assertions.Match.string_like_regexp("Key"), "Arn"]}},
    )
    assert (image.kind, image.usage, image.cuda_version) == ("codebuild", "training", "12.8")


def test_codebuild_documents_the_library_resources(codebuild) -> None:
    stack, _, template = codebuild
    functions = template.find_resources("AWS::Lambda::Function")
    assert all({s["id"] for s in f["Metadata"]["checkov"]["skip"]} == {"CKV_AWS_115", "CKV_AWS_116", "CKV_AWS_117"}
               for f in functions.values())  # fmt: skip
    acks = [
        rule
        for node in stack.node.find_all()
        for entry in node.node.metadata
        if entry.type == cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY
        for rule in entry.data
    ]
    assert (
        "AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/AmazonElasticContainerRegistryPublicReadOnly]"
        in acks
    )
    assert "HIPAA.Security::HIPAA.Security-CodeBuildProjectSourceRepoUrl" in acks


def test_codebuild_pull_grant_includes_the_key(codebuild) -> None:
    stack, _, _ = codebuild
    actions = [s["Action"] for s in _policy_statements(stack) if s.get("Effect") == "Allow"]
    flat = {a for action in actions for a in (action if isinstance(action, list) else [action])}
    assert {"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "kms:Decrypt"} <= flat


def test_expected_build_wildcards_only() -> None:
    account = {"Ref": "AWS::AccountId"}
    assets = {"Fn::Join": ["", ["arn:aws:s3:::cdk-hnb659fds-assets-", account, "-us-east-1/*"]]}
    logs = {"Fn::Join": ["", ["arn:aws:logs:us-east-1:", account, ":log-group:/aws/codebuild/", {"Ref": "Proj"}, ":*"]]}
    document = {
        "Statement": [
            {"Effect": "Allow", "Action": ["s3:GetObject*", "s3:PutObject*"], "Resource": [assets]},
            {"Effect": "Allow", "Action": "ecr:GetAuthorizationToken", "Resource": "*"},
            {"Effect": "Allow", "Action": ["logs:PutLogEvents"], "Resource": logs},
            {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "arn:aws:s3:::other-bucket/*"},
        ]
    }
    found = expected_build_wildcards(document, "Proj")
    assert set(found) == {
        "Action::s3:GetObject*",
        "Resource::arn:aws:s3:::cdk-hnb659fds-assets-<AWS::AccountId>-us-east-1/*",
        "Resource::*",
        "Resource::arn:aws:logs:us-east-1:<AWS::AccountId>:log-group:/aws/codebuild/<Proj>:*",
    }  # s3:PutObject* and other-bucket/* stay reported
    document["Statement"].append({"Effect": "Allow", "Action": "s3:ListAllMyBuckets", "Resource": "*"})
    assert "Resource::*" not in expected_build_wildcards(document, "Proj")
    assert flatten_reference({"Fn::GetAtt": ["Key", "Arn"]}) == "<Key.Arn>"


def test_asset_image(build_context) -> None:
    stack = _stack()
    image = GpuImage.from_asset(stack, "Serve", directory=build_context, usage="inference", cuda_version="12.4")
    assert image.kind == "asset" and image.repository is not None
    assert "cdk-hnb659fds-container-assets" in str(stack.resolve(image.image_uri))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"directory": "/nonexistent/dir"},
            r"directory='/nonexistent/dir' is not allowed; allowed: an existing directory",
        ),
        ({"file": "Dockerfile.gpu"}, r"file='.*Dockerfile.gpu' is not allowed; allowed: a Dockerfile inside"),
        ({"cuda_version": "twelve"}, r"cuda_version='twelve' is not a CUDA version"),
        ({"platform": "windows/amd64"}, r"platform='windows/amd64' is not allowed; allowed: linux/amd64, linux/arm64"),
        ({"build_args": {"bad-name": "x"}}, r"build_args='bad-name' is not allowed"),
        ({"usage": "batch"}, r"usage='batch' is not allowed"),
    ],
)
def test_build_factories_reject_bad_input(build_context, kwargs, message) -> None:
    args = {"directory": build_context, "usage": "training", "cuda_version": "12.8", **kwargs}
    with pytest.raises(ValidationError, match=message):
        GpuImage.from_asset(_stack(), "I", **args)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_image_count": 0}, r"Repo: max_image_count=0 is not allowed; allowed: an integer 1..1000"),
        ({"untagged_image_expiry": cdk.Duration.days(0)}, r"untagged_image_expiry='0 days' is not allowed"),
        ({"repository_name": "Bad_Name"}, r"repository_name='Bad_Name' is not allowed"),
    ],
)
def test_repository_rejects_bad_input(kwargs, message) -> None:
    with pytest.raises(ValidationError, match=message):
        SecureRepository(_stack(), "Repo", **kwargs)


# -- config ---------------------------------------------------------------------------------------------

BASE = "env_name: t\nregion: us-east-1\navailability_zones: [us-east-1a]\n"


@pytest.mark.parametrize(
    ("images", "message"),
    [
        (
            "training:\n    kind: dlc\n    framework_version: '1.13'",
            r"images: training: framework_version='1.13' is not allowed",
        ),
        (
            "inference:\n    kind: dlc\n    framework_version: '2.8'",
            r"inference: framework_version='2.8' is not allowed",
        ),
        ("training:\n    kind: codebuild", r"images.training: kind='codebuild' needs cuda_version"),
        ("training:\n    kind: ecr\n    repository_name: x", r"kind='ecr' needs repository_name and tag"),
        (
            "training:\n    kind: dlc\n    framework_version: '2.8'\n    directory: containers/training",
            r"directory is not used by kind='dlc'",
        ),
        ("training:\n    kind: docker", r"images.training.kind: 'docker'"),
        (
            "training:\n    kind: asset\n    cuda_version: '12.8'\n    directory: ../outside",
            r"directory: '../outside' must be relative",
        ),
        ("max_image_count: 0", r"images.max_image_count: 0: allowed: 1..1000"),
    ],
)
def test_config_rejects_bad_images(images: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(BASE + f"images:\n  {images}\n", Path("config/t.yaml"), "t")


def test_config_defaults_are_dlc() -> None:
    images = parse_config(BASE, Path("config/t.yaml"), "t").images
    assert (images.training.kind, images.training.framework_version) == ("dlc", "2.8")
    assert (images.inference.kind, images.inference.framework_version) == ("dlc", "2.6")


# -- the app: dev (DLC) and prod (CodeBuild) --------------------------------------------------------------


def test_dev_publishes_dlc_uris(synth) -> None:
    template = assertions.Template.from_json(synth("dev").template("images"))
    template.resource_count_is("AWS::ECR::Repository", 0)
    template.has_resource_properties(
        "AWS::SSM::Parameter",
        {
            "Name": "/gpu-dev/images/training",
            "Value": assertions.Match.string_like_regexp(r"pytorch-training:2\.8\.0-gpu-py312-cu129"),
        },
    )
    platform = synth("dev").platform
    assert platform.images.training_image.kind == "dlc" and platform.images.inference_image.usage == "inference"


def test_prod_builds_in_codebuild(synth) -> None:
    template = assertions.Template.from_json(synth("prod").template("images"))
    template.resource_count_is("AWS::ECR::Repository", 2)
    template.resource_count_is("Custom::CDKContainerImageBuild", 2)
    template.resource_count_is("AWS::CodeBuild::Project", 1)
    platform = synth("prod").platform
    assert platform.images.training_image.kind == "codebuild" and platform.images.training_image.cuda_version == "12.8"


def test_the_inference_runtime_follows_the_image_kind() -> None:
    from stacks.config.images import IMAGE_KINDS, inference_runtime

    assert {kind: inference_runtime(kind) for kind in IMAGE_KINDS} == {
        "dlc": "torchserve",
        "codebuild": "gpu_serve",
        "asset": "gpu_serve",
        "ecr": "gpu_serve",
    }
