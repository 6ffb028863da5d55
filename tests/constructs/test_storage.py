"""PlatformStorage / SecureBucket: encryption, TLS, public access, versioning, lifecycle, logging, grants."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import assertions
from aws_cdk import aws_iam as iam
from unit_helpers import env_template_fixtures

from gpu_constructs import PlatformStorage, ValidationError
from gpu_constructs.storage import grant_objects

dev, prod = env_template_fixtures("data")


def test_three_buckets_all_kms_encrypted_private_versioned(dev: assertions.Template) -> None:
    buckets = dev.find_resources("AWS::S3::Bucket")
    assert len(buckets) == 3
    for bucket in buckets.values():
        props = bucket["Properties"]
        sse = props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
        assert sse["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
        assert "KMSMasterKeyID" in sse["ServerSideEncryptionByDefault"] and sse["BucketKeyEnabled"] is True
        assert props["PublicAccessBlockConfiguration"] == {
            "BlockPublicAcls": True, "BlockPublicPolicy": True, "IgnorePublicAcls": True, "RestrictPublicBuckets": True
        }  # fmt: skip
        assert props["VersioningConfiguration"] == {"Status": "Enabled"}
        rules = {r["Id"]: r for r in props["LifecycleConfiguration"]["Rules"]}
        assert rules["AbortIncompleteMultipartUploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 3}
        assert rules["ExpireNoncurrentVersions"]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7}


def test_ssl_enforced_by_bucket_policy(dev: assertions.Template) -> None:
    policies = dev.find_resources("AWS::S3::BucketPolicy")
    assert len(policies) == 3
    for policy in policies.values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        deny = [s for s in statements if s["Effect"] == "Deny"]
        assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in deny)
        assert any(s["Condition"] == {"NumericLessThan": {"s3:TlsVersion": 1.2}} for s in deny)


def test_checkpoints_expire_and_access_logs_expire(dev: assertions.Template, prod: assertions.Template) -> None:
    dev.has_resource_properties(
        "AWS::S3::Bucket",
        {"LifecycleConfiguration": {"Rules": assertions.Match.array_with([
            {"Id": "ExpireCheckpoints", "Prefix": "checkpoints/", "ExpirationInDays": 7, "Status": "Enabled"}
        ])}},
    )  # fmt: skip
    prod.has_resource_properties(
        "AWS::S3::Bucket",
        {"LifecycleConfiguration": {"Rules": assertions.Match.array_with([
            {"Id": "ExpireAccessLogs", "ExpirationInDays": 2557, "Status": "Enabled"}
        ])}},
    )  # fmt: skip


def test_datasets_and_artifacts_log_to_access_log_bucket(dev: assertions.Template) -> None:
    buckets = dev.find_resources("AWS::S3::Bucket")
    logs_id = next(k for k in buckets if "AccessLogs" in k)
    logged = [b for k, b in buckets.items() if k != logs_id]
    assert len(logged) == 2
    for bucket in logged:
        config = bucket["Properties"]["LoggingConfiguration"]
        assert config["DestinationBucketName"] == {"Ref": logs_id}


def test_removal_policy_per_environment(dev: assertions.Template, prod: assertions.Template) -> None:
    for bucket in prod.find_resources("AWS::S3::Bucket").values():
        assert bucket["DeletionPolicy"] == "Retain" and bucket["UpdateReplacePolicy"] == "Retain"
    for key in prod.find_resources("AWS::KMS::Key").values():
        assert key["DeletionPolicy"] == "Retain"
        assert key["Properties"]["PendingWindowInDays"] == 30
    for bucket in dev.find_resources("AWS::S3::Bucket").values():
        assert bucket["DeletionPolicy"] == "Delete"


def test_data_key_rotates_and_lets_s3_logging_use_it(dev: assertions.Template) -> None:
    # The data stack's other key is the budget topic's (gpu_constructs.budgets): only the data key encrypts data.
    keys = {k: v for k, v in dev.find_resources("AWS::KMS::Key").items() if k.startswith("StorageDataKey")}
    assert len(keys) == 1
    key = next(iter(keys.values()))["Properties"]
    assert key["EnableKeyRotation"] is True
    principals = [s.get("Principal", {}).get("Service") for s in key["KeyPolicy"]["Statement"]]
    assert "logging.s3.amazonaws.com" in principals


def test_outputs_expose_bucket_names(dev: assertions.Template) -> None:
    outputs = dev.find_outputs("*")
    assert {"DatasetsBucketName", "ArtifactsBucketName", "DataKeyArn"} <= set(outputs)


# -- grants -------------------------------------------------------------------------------------------


@pytest.fixture()
def granted():
    stack = cdk.Stack(cdk.App(), "G", env=cdk.Environment(region="us-east-1"))
    storage = PlatformStorage(stack, "Storage")
    role = iam.Role(stack, "Job", assumed_by=iam.ServicePrincipal("sagemaker.amazonaws.com"))
    return stack, storage, role


def _statements(stack: cdk.Stack) -> list[dict]:
    template = assertions.Template.from_stack(stack)
    policies = template.find_resources("AWS::IAM::Policy")
    return [s for p in policies.values() for s in p["Properties"]["PolicyDocument"]["Statement"]]


def _resources(statement: dict) -> list:
    res = statement["Resource"]
    return res if isinstance(res, list) else [res]


def test_grant_read_datasets_is_prefix_scoped(granted) -> None:
    stack, storage, role = granted
    storage.grant_read_datasets(role, prefix="imagenet/v1")
    statements = _statements(stack)
    s3_stmt = next(s for s in statements if s["Action"] == "s3:GetObject")
    joined = str(_resources(s3_stmt))
    assert "/imagenet/v1/*" in joined
    listing = next(s for s in statements if s["Action"] == "s3:ListBucket")
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["imagenet/v1/*", "imagenet/v1"]}}
    assert "/" not in str(_resources(listing))  # the bucket itself, not its objects
    kms_stmt = next(s for s in statements if "kms:Decrypt" in s["Action"])
    assert kms_stmt["Action"] == "kms:Decrypt"


def test_grants_name_exact_actions(granted) -> None:
    """No CDK action group (s3:GetObject*, s3:List*, kms:GenerateDataKey*): cdk-nag's IAM5 only sees the
    object-key wildcard of each prefix, which the grantee acknowledges (acknowledge_data_grants)."""
    stack, storage, role = granted
    storage.grant_read_datasets(role)
    storage.grant_write_artifacts(role)
    storage.grant_read_artifacts(role)
    storage.grant_read_write_checkpoints(role)
    actions = {a for s in _statements(stack) for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    assert actions == {
        "s3:GetObject", "s3:ListBucket", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject",
        "kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey",
    }  # fmt: skip
    whole_bucket = [s for s in _statements(stack) if s["Action"] == "s3:ListBucket" and "Condition" not in s]
    assert len(whole_bucket) == 1  # grant_read_datasets() with the default prefix "" lists the whole bucket


def test_checkpoint_grant_reads_writes_and_deletes(granted) -> None:
    stack, storage, role = granted
    grant = storage.grant_read_write_checkpoints(role)
    statements = _statements(stack)
    objects = next(s for s in statements if "s3:DeleteObject" in s["Action"])
    assert sorted(objects["Action"]) == ["s3:AbortMultipartUpload", "s3:DeleteObject", "s3:GetObject", "s3:PutObject"]
    assert "/checkpoints/*" in str(_resources(objects))
    assert len(grant.principal_statements) == 3  # objects, listing, key


def test_grant_objects_needs_an_action(granted) -> None:
    _, storage, role = granted
    with pytest.raises(ValidationError, match="read, write and/or delete"):
        grant_objects(role, storage.datasets_bucket, "x/*")


def test_grant_write_artifacts_is_prefix_scoped(granted) -> None:
    stack, storage, role = granted
    storage.grant_write_artifacts(role, prefix="output/job-1/")
    statements = _statements(stack)
    s3_stmt = next(s for s in statements if any(a.startswith("s3:PutObject") for a in s3_actions(s)))
    assert not any(a.startswith("s3:GetObject") or a.startswith("s3:Delete") for a in s3_actions(s3_stmt))
    assert "/output/job-1/*" in str(_resources(s3_stmt))


def s3_actions(statement: dict) -> list[str]:
    actions = statement["Action"]
    return [a for a in (actions if isinstance(actions, list) else [actions]) if a.startswith("s3:")]


def test_write_needs_a_prefix(granted) -> None:
    _, storage, role = granted
    with pytest.raises(ValidationError, match=r"G/Storage: prefix='' is not allowed; allowed: a non-empty prefix"):
        storage.grant_write_artifacts(role, prefix="")


@pytest.mark.parametrize("prefix", ["/abs/", "../up/", "a b/"])
def test_bad_prefixes_are_rejected(granted, prefix: str) -> None:
    _, storage, role = granted
    with pytest.raises(ValidationError, match=r"prefix=.* is not allowed; allowed: a relative S3 key prefix"):
        storage.grant_read_datasets(role, prefix=prefix)


def test_checkpoint_grant_must_stay_under_checkpoints(granted) -> None:
    _, storage, role = granted
    with pytest.raises(
        ValidationError, match=r"prefix='models/' is not allowed; allowed: a prefix under 'checkpoints/'"
    ):
        storage.grant_read_write_checkpoints(role, prefix="models/")


def test_expiration_must_be_positive() -> None:
    stack = cdk.Stack(cdk.App(), "E")
    with pytest.raises(ValidationError, match=r"E/Storage: checkpoint_expiration \(days\)=0"):
        PlatformStorage(stack, "Storage", checkpoint_expiration=cdk.Duration.days(0))
