"""The one S3 key rule (``gpu_constructs.s3_keys``), the hosting rules the config shares with ``GpuEndpoint``
(``gpu_constructs.endpoint.checks``), and the deprecated names they replace."""

from __future__ import annotations

import subprocess
import sys

import aws_cdk as cdk
import pytest
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from gpu_constructs import ValidationError, catalog
from gpu_constructs.endpoint.base import SettingError
from gpu_constructs.endpoint.checks import (
    check_hosting_instance_type,
    is_model_archive_key,
    is_model_archive_uri,
    is_ssm_parameter_name,
    volume_size_problem,
)
from gpu_constructs.s3_keys import (
    KEY_PREFIX_ALLOWED,
    as_key_prefix,
    check_key_prefix,
    has_key_characters,
    is_key_prefix,
    is_relative_key,
    join_key_prefix,
    split_s3_uri,
)

# --------------------------------------------------------------------------------------------------
# Keys and prefixes
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "data/", "data", "a/b/c/", "date=2024-01-01/", "x!_.*'()-/"])
def test_a_relative_prefix_of_safe_characters_is_a_key_prefix(prefix: str) -> None:
    assert is_key_prefix(prefix)


@pytest.mark.parametrize(
    "prefix",
    ["/abs/", "../up/", "a/../b/", "a..b/", "a b/", "tab\t/", "data/\n", "emoji-\u00e9/", "a+b/", "a&b/", "a@b/"],
)
def test_an_absolute_climbing_or_unsafe_prefix_is_refused(prefix: str) -> None:
    assert not is_key_prefix(prefix)


def test_empty_and_trailing_slash_are_the_callers_choice() -> None:
    assert not is_key_prefix("", allow_empty=False)
    assert is_key_prefix("", require_trailing_slash=True)  # '' is the whole bucket
    assert not is_key_prefix("corpora", require_trailing_slash=True)
    assert is_key_prefix("corpora/", allow_empty=False, require_trailing_slash=True)


def test_relative_and_characters_are_separate_rules() -> None:
    assert is_relative_key("a b/c") and not has_key_characters("a b/c")
    assert has_key_characters("/abs") and not is_relative_key("/abs")
    assert not has_key_characters("pkg-1.0+cu124.whl") and has_key_characters("pkg-1.0+cu124.whl", "+.-")


def test_check_key_prefix_names_the_setting_the_value_and_what_is_allowed() -> None:
    check_key_prefix("Stack/Fsx", "data_repository.prefix", "datasets/")
    with pytest.raises(ValidationError) as info:
        check_key_prefix("Stack/Fsx", "data_repository.prefix", "../x/")
    assert str(info.value) == f"Stack/Fsx: data_repository.prefix='../x/' is not allowed; allowed: {KEY_PREFIX_ALLOWED}"


def test_a_construct_as_where_gives_its_path() -> None:
    stack = cdk.Stack(cdk.App(), "S")
    with pytest.raises(ValidationError, match=r"^S/Thing: prefix='/x' is not allowed"):
        check_key_prefix(cdk.Stack(stack, "Thing"), "prefix", "/x")


@pytest.mark.parametrize(("prefix", "expected"), [("", ""), ("a", "a/"), ("a/", "a/"), ("a/b", "a/b/")])
def test_as_key_prefix_adds_the_delimiter_once(prefix: str, expected: str) -> None:
    assert as_key_prefix(prefix) == expected


def test_join_key_prefix() -> None:
    assert join_key_prefix("async", "ep") == "async/ep/"
    assert join_key_prefix("async/", "ep") == "async/ep/"
    assert join_key_prefix("", "ep") == "ep/"


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3://my-bucket/models/model.tar.gz", ("my-bucket", "models/model.tar.gz")),
        ("s3://a.b-c/k", ("a.b-c", "k")),
        ("s3://bucket/a b", ("bucket", "a b")),  # any key S3 stores; callers apply their own rules
    ],
)
def test_split_s3_uri(uri: str, expected: tuple[str, str]) -> None:
    assert split_s3_uri(uri) == expected


@pytest.mark.parametrize(
    "uri",
    [
        "s3://bucket/",  # no key
        "s3://bucket",
        "s3://Bad_Bucket/k",  # bucket naming rules
        "s3://ab/k",  # too short
        "s3://-bucket/k",
        "https://bucket/k",
        "bucket/k",
        "s3://bucket/a\nb",
        "s3://bucket/k\n",
    ],
)
def test_split_s3_uri_refuses_what_is_not_an_object_uri(uri: str) -> None:
    assert split_s3_uri(uri) is None


def test_the_rule_modules_load_no_cdk() -> None:
    code = "import sys, gpu_constructs.s3_keys, gpu_constructs.endpoint.checks; print('aws_cdk' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


# --------------------------------------------------------------------------------------------------
# Hosting rules shared by the config and GpuEndpoint
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["models/a/v1/model.tar.gz", "model.tar.gz", "a b/model.tar.gz"])
def test_model_archive_key(key: str) -> None:
    assert is_model_archive_key(key)


@pytest.mark.parametrize("key", ["", "models/a/model.pt", "/models/model.tar.gz", "../model.tar.gz", "m.tar"])
def test_model_archive_key_refused(key: str) -> None:
    assert not is_model_archive_key(key)


def test_model_archive_uri() -> None:
    assert is_model_archive_uri("s3://models-elsewhere/team/model.tar.gz")
    for uri in ("s3://Bad_Bucket/model.tar.gz", "https://x/model.tar.gz", "s3://bucket/model.pt", "s3://bucket/"):
        assert not is_model_archive_uri(uri), uri


def test_ssm_parameter_name() -> None:
    assert is_ssm_parameter_name("/gpu-prod/models/classifier/latest")
    assert is_ssm_parameter_name("plain_name.v1")
    for name in ("", "bad name!", "a" * 2049, "/x\n"):
        assert not is_ssm_parameter_name(name), name


def test_hosting_type_of_a_gpu_variant_needs_an_nvidia_gpu() -> None:
    assert check_hosting_instance_type("Ep", "ml.g5.xlarge", False).sagemaker_name == "ml.g5.xlarge"
    with pytest.raises(ValidationError, match="no NVIDIA GPU"):
        check_hosting_instance_type("Ep", "ml.m5.xlarge", False)


def test_hosting_type_of_a_cpu_variant() -> None:
    assert check_hosting_instance_type("Ep", "ml.m5.xlarge", True).name == "m5.xlarge"
    with pytest.raises(SettingError, match=r"^Ep: instance_type='m5.xlarge' .* the SageMaker spelling 'ml.m5.xlarge'"):
        check_hosting_instance_type("Ep", "m5.xlarge", True)
    with pytest.raises(SettingError, match=r"not a SageMaker hosting type; allowed: a type SageMaker hosting accepts"):
        check_hosting_instance_type("Ep", "ml.t3.medium", True)


def test_hosting_type_refuses_a_token() -> None:
    with pytest.raises(SettingError, match="a literal instance type name"):
        check_hosting_instance_type("Ep", cdk.Token.as_string(cdk.Fn.ref("T")), False)


def test_volume_size_problem() -> None:
    nvme, ebs = catalog.lookup("ml.g5.xlarge"), catalog.lookup("ml.p3.2xlarge")
    assert nvme.has_local_nvme and not ebs.has_local_nvme
    assert volume_size_problem(100, nvme) == "local_nvme"
    assert volume_size_problem(600, ebs) == "out_of_range"
    assert volume_size_problem(0, ebs) == "out_of_range"
    assert volume_size_problem(1, ebs) is None and volume_size_problem(512, ebs) is None


# --------------------------------------------------------------------------------------------------
# Deprecated names keep working
# --------------------------------------------------------------------------------------------------


def _policy(grantee: iam.Role) -> list[dict[str, object]]:
    stack = cdk.Stack.of(grantee)
    return stack.resolve(grantee.node.find_child("DefaultPolicy").node.default_child.policy_document)["Statement"]


@pytest.mark.parametrize("write", [False, True])
def test_endpoint_grant_objects_is_a_deprecated_alias_that_grants_the_same(write: bool) -> None:
    from gpu_constructs.endpoint.model_data import grant_objects as old
    from gpu_constructs.storage import grant_objects

    statements = []
    for use_old in (True, False):
        stack = cdk.Stack(cdk.App(), "S")
        bucket = s3.Bucket(stack, "B", encryption_key=kms.Key(stack, "K"))
        role = iam.Role(stack, "R", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
        if use_old:
            with pytest.warns(DeprecationWarning, match="gpu_constructs.storage.grant_objects"):
                old(role, bucket, "x/*", write=write)
        else:
            grant_objects(role, bucket, "x/*", read=not write, write=write)
        statements.append(_policy(role))
    assert statements[0] == statements[1]
    assert statements[0][0]["Action"] == ("s3:GetObject" if not write else ["s3:PutObject", "s3:AbortMultipartUpload"])


def test_deprecated_prefix_names() -> None:
    from gpu_constructs.endpoint import base

    with pytest.warns(DeprecationWarning, match="s3_keys.is_key_prefix"):
        pattern = base.PREFIX_RE
    assert pattern.match("data/") and not pattern.match("a b/")
    with pytest.warns(DeprecationWarning, match="s3_keys.join_key_prefix"):
        assert base.join_prefix("async", "ep") == "async/ep/"
    with pytest.raises(AttributeError):
        base.NO_SUCH_NAME  # noqa: B018

    from stacks.config import training

    with pytest.warns(DeprecationWarning, match="s3_keys.is_key_prefix"):
        assert training.S3_PREFIX_RE.match("corpora/")
