"""Secure S3 storage for GPU training: datasets, model artifacts and access logs.

``SecureBucket`` is an S3 bucket with the platform's defaults (KMS, TLS only, no public access,
versioning, lifecycle, server access logging). ``PlatformStorage`` composes the data KMS key and the
three buckets and offers narrow grants: read one dataset prefix, write artifacts under one prefix.
"""

from __future__ import annotations

from aws_cdk import Duration, Names, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from gpu_constructs import nag
from gpu_constructs.errors import ValidationError, fail, require_range
from gpu_constructs.keys import allow_s3_access_logs, given_or_new_key
from gpu_constructs.s3_keys import as_key_prefix, check_key_prefix

#: Prefixes of the artifacts bucket.
OUTPUT_PREFIX = "output/"
CHECKPOINTS_PREFIX = "checkpoints/"
MODELS_PREFIX = "models/"


def _normalize_prefix(scope: Construct, name: str, prefix: str) -> str:
    """'' means the whole bucket; otherwise a key prefix without a leading slash, ending in '/' (``s3_keys``)."""
    check_key_prefix(scope, name, prefix)
    return as_key_prefix(prefix)


class SecureBucket(Construct):
    """An S3 bucket with the platform's security defaults.

    :param encryption_key: KMS key for SSE-KMS with bucket keys (required: every bucket is KMS-encrypted).
    :param server_access_logs_bucket: bucket receiving server access logs (default: none — only the
        access-log bucket itself has none, because a bucket must not log into itself).
    :param server_access_logs_prefix: key prefix of this bucket's access logs (default: ``<id>/``).
    :param versioned: keep object versions (default: True).
    :param noncurrent_version_expiration: delete non-current versions after this (default: 30 days).
    :param abort_incomplete_multipart_upload_after: abort unfinished uploads after this (default: 7 days).
    :param lifecycle_rules: extra lifecycle rules (default: none).
    :param removal_policy: what happens on removal from the stack (default: RETAIN).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        encryption_key: kms.IKey,
        server_access_logs_bucket: s3.IBucket | None = None,
        server_access_logs_prefix: str | None = None,
        versioned: bool = True,
        noncurrent_version_expiration: Duration = Duration.days(30),
        abort_incomplete_multipart_upload_after: Duration = Duration.days(7),
        lifecycle_rules: list[s3.LifecycleRule] | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
    ) -> None:
        super().__init__(scope, construct_id)
        require_range(self, "noncurrent_version_expiration (days)", noncurrent_version_expiration.to_days(), minimum=1)
        require_range(
            self,
            "abort_incomplete_multipart_upload_after (days)",
            abort_incomplete_multipart_upload_after.to_days(),
            minimum=1,
        )
        rules = [
            s3.LifecycleRule(
                id="AbortIncompleteMultipartUploads",
                abort_incomplete_multipart_upload_after=abort_incomplete_multipart_upload_after,
            )
        ]
        if versioned:
            rules.append(
                s3.LifecycleRule(
                    id="ExpireNoncurrentVersions",
                    noncurrent_version_expiration=noncurrent_version_expiration,
                    expired_object_delete_marker=True,
                )
            )
        rules.extend(lifecycle_rules or [])
        self.bucket = s3.Bucket(
            self,
            "Resource",
            encryption=s3.BucketEncryption.KMS,
            encryption_key=encryption_key,
            bucket_key_enabled=True,
            enforce_ssl=True,
            minimum_tls_version=1.2,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            versioned=versioned,
            lifecycle_rules=rules,
            removal_policy=removal_policy,
        )
        if server_access_logs_bucket is not None:
            self._log_to(server_access_logs_bucket, server_access_logs_prefix or f"{construct_id}/")
        self.encryption_key = encryption_key
        nag.acknowledge_compliance(self.bucket, "S3BucketReplicationEnabled", REPLICATION_REASON)

    def _log_to(self, target: s3.IBucket, prefix: str) -> None:
        """Server access logging through a bucket policy on the target (never ACLs), whatever the app's
        feature flags: logging.s3.amazonaws.com may put objects under ``prefix`` for this bucket only."""
        prefix = _normalize_prefix(self, "server_access_logs_prefix", prefix)
        cfn = self.bucket.node.default_child
        assert isinstance(cfn, s3.CfnBucket)
        cfn.logging_configuration = s3.CfnBucket.LoggingConfigurationProperty(
            destination_bucket_name=target.bucket_name, log_file_prefix=prefix
        )
        target.add_to_resource_policy(
            iam.PolicyStatement(
                sid=f"S3ServerAccessLogs{Names.unique_id(self)[-40:]}",
                principals=[iam.ServicePrincipal("logging.s3.amazonaws.com")],
                actions=["s3:PutObject"],
                resources=[target.arn_for_objects(f"{prefix}*")],
                conditions={
                    "ArnLike": {"aws:SourceArn": self.bucket.bucket_arn},
                    "StringEquals": {"aws:SourceAccount": Stack.of(self).account},
                },
            )
        )

    @property
    def bucket_name(self) -> str:
        return self.bucket.bucket_name

    @property
    def bucket_arn(self) -> str:
        return self.bucket.bucket_arn


class PlatformStorage(Construct):
    """The data KMS key and the datasets, artifacts and access-log buckets.

    Each bucket is either created here (a :class:`SecureBucket`) or an existing one you pass in, for example
    ``s3.Bucket.from_bucket_attributes(self, "Data", bucket_name=..., encryption_key=key)``: give an imported
    bucket its ``encryption_key`` so the grants include the KMS permissions. Nothing is changed on an
    existing bucket (no policy, lifecycle or logging); the grants only touch the grantee's policy.

    :param key: KMS key for every bucket (default: a new key with yearly rotation). Later stacks use the
        same key for FSx, EBS volumes and SageMaker volumes through :attr:`key`.
    :param datasets_bucket: an existing datasets bucket (default: a new ``SecureBucket``).
    :param artifacts_bucket: an existing artifacts bucket (default: a new ``SecureBucket``).
    :param access_logs_bucket: an existing bucket for server access logs of the buckets created here
        (default: a new ``SecureBucket`` when this construct creates a bucket; none when both buckets exist).
    :param removal_policy: policy of buckets and key (default: RETAIN; use DESTROY only for disposable dev).
    :param checkpoint_expiration: delete ``checkpoints/`` objects after this (default: 30 days).
    :param noncurrent_version_expiration: default: 30 days.
    :param abort_incomplete_multipart_upload_after: default: 7 days.
    :param access_logs_expiration: delete access logs after this (default: 365 days).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        key: kms.IKey | None = None,
        removal_policy: RemovalPolicy = RemovalPolicy.RETAIN,
        checkpoint_expiration: Duration = Duration.days(30),
        noncurrent_version_expiration: Duration = Duration.days(30),
        abort_incomplete_multipart_upload_after: Duration = Duration.days(7),
        access_logs_expiration: Duration = Duration.days(365),
        datasets_bucket: s3.IBucket | None = None,
        artifacts_bucket: s3.IBucket | None = None,
        access_logs_bucket: s3.IBucket | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        require_range(self, "checkpoint_expiration (days)", checkpoint_expiration.to_days(), minimum=1)
        require_range(self, "access_logs_expiration (days)", access_logs_expiration.to_days(), minimum=1)
        description = f"Encrypts the GPU platform's data at rest ({self.node.path})"
        key = given_or_new_key(key, self, "DataKey", description=description, removal_policy=removal_policy)
        self.key: kms.IKey = key
        creates_buckets = datasets_bucket is None or artifacts_bucket is None
        if creates_buckets and access_logs_bucket is None:
            # S3 server access logging writes as logging.s3.amazonaws.com: it needs the key to write SSE-KMS
            # objects into the access-log bucket, for this account's buckets only.
            allow_s3_access_logs(key, Stack.of(self))
        common = {
            "encryption_key": key,
            "removal_policy": removal_policy,
            "noncurrent_version_expiration": noncurrent_version_expiration,
            "abort_incomplete_multipart_upload_after": abort_incomplete_multipart_upload_after,
        }
        #: The buckets this construct created (None where an existing bucket was given).
        self.access_logs: SecureBucket | None = None
        self.datasets: SecureBucket | None = None
        self.artifacts: SecureBucket | None = None
        if creates_buckets and access_logs_bucket is None:
            self.access_logs = SecureBucket(
                self,
                "AccessLogs",
                lifecycle_rules=[s3.LifecycleRule(id="ExpireAccessLogs", expiration=access_logs_expiration)],
                **common,  # type: ignore[arg-type]
            )
            nag.checkov_skip(self.access_logs.bucket, "CKV_AWS_18", ACCESS_LOGS_SELF_REASON)
            access_logs_bucket = self.access_logs.bucket
        self._access_logs_bucket = access_logs_bucket
        if datasets_bucket is None:
            self.datasets = SecureBucket(
                self,
                "Datasets",
                server_access_logs_bucket=access_logs_bucket,
                **common,  # type: ignore[arg-type]
            )
            datasets_bucket = self.datasets.bucket
        if artifacts_bucket is None:
            self.artifacts = SecureBucket(
                self,
                "Artifacts",
                server_access_logs_bucket=access_logs_bucket,
                lifecycle_rules=[
                    s3.LifecycleRule(
                        id="ExpireCheckpoints", prefix=CHECKPOINTS_PREFIX, expiration=checkpoint_expiration
                    )
                ],
                **common,  # type: ignore[arg-type]
            )
            artifacts_bucket = self.artifacts.bucket
        self._datasets_bucket: s3.IBucket = datasets_bucket
        self._artifacts_bucket: s3.IBucket = artifacts_bucket

    @property
    def datasets_bucket(self) -> s3.IBucket:
        """The datasets bucket (created here or the one passed in)."""
        return self._datasets_bucket

    @property
    def artifacts_bucket(self) -> s3.IBucket:
        """The artifacts bucket (``output/``, ``checkpoints/``, ``models/``; created here or passed in)."""
        return self._artifacts_bucket

    @property
    def access_logs_bucket(self) -> s3.IBucket | None:
        """The server access-log bucket (None when both data buckets were passed in without one)."""
        return self._access_logs_bucket

    # -- grants -----------------------------------------------------------------------------------------

    def grant_read_datasets(self, grantee: iam.IGrantable, prefix: str = "") -> iam.Grant:
        """Read (``s3:GetObject``, ``s3:ListBucket`` of the prefix) objects of the datasets bucket under
        ``prefix`` (default: all) and decrypt them (``kms:Decrypt``)."""
        prefix = _normalize_prefix(self, "prefix", prefix)
        return grant_objects(grantee, self._datasets_bucket, f"{prefix}*", read=True, list_prefix=prefix)

    def grant_write_artifacts(self, grantee: iam.IGrantable, prefix: str = OUTPUT_PREFIX) -> iam.Grant:
        """Write (``s3:PutObject``, ``s3:AbortMultipartUpload``) objects of the artifacts bucket under ``prefix``
        and encrypt them.

        Default prefix: ``output/``. Use ``checkpoints/`` for spot checkpoints, ``models/`` for promotion.
        """
        prefix = _normalize_prefix(self, "prefix", prefix)
        if not prefix:
            raise fail(self, "prefix", prefix, "a non-empty prefix such as 'output/' (write access is per prefix)")
        return grant_objects(grantee, self._artifacts_bucket, f"{prefix}*", write=True)

    def grant_read_artifacts(self, grantee: iam.IGrantable, prefix: str = MODELS_PREFIX) -> iam.Grant:
        """Read objects of the artifacts bucket under ``prefix`` (default: ``models/``) and decrypt them."""
        prefix = _normalize_prefix(self, "prefix", prefix)
        return grant_objects(grantee, self._artifacts_bucket, f"{prefix}*", read=True, list_prefix=prefix)

    def grant_read_write_checkpoints(self, grantee: iam.IGrantable, prefix: str = CHECKPOINTS_PREFIX) -> iam.Grant:
        """Read, write and delete spot-training checkpoints under ``prefix`` (default: ``checkpoints/``)."""
        prefix = _normalize_prefix(self, "prefix", prefix)
        if not prefix.startswith(CHECKPOINTS_PREFIX):
            raise fail(self, "prefix", prefix, f"a prefix under {CHECKPOINTS_PREFIX!r}")
        return grant_objects(
            grantee, self._artifacts_bucket, f"{prefix}*", read=True, write=True, delete=True, list_prefix=prefix
        )


#: Exact S3 and KMS actions of the data grants (never the CDK's action groups such as ``s3:GetObject*``).
READ_OBJECT_ACTIONS = ("s3:GetObject",)
WRITE_OBJECT_ACTIONS = ("s3:PutObject", "s3:AbortMultipartUpload")
DELETE_OBJECT_ACTIONS = ("s3:DeleteObject",)
#: SSE-KMS: reading decrypts; writing asks for a data key, and a multipart upload decrypts it again.
KEY_READ_ACTIONS = ("kms:Decrypt",)
KEY_WRITE_ACTIONS = ("kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey")


def grant_objects(
    grantee: iam.IGrantable,
    bucket: s3.IBucket,
    pattern: str,
    *,
    read: bool = False,
    write: bool = False,
    delete: bool = False,
    list_prefix: str | None = None,
) -> iam.Grant:
    """Grant exact actions on the objects of ``bucket`` matching ``pattern`` (e.g. ``"output/*"``).

    ``read``: ``s3:GetObject``; ``write``: ``s3:PutObject``, ``s3:AbortMultipartUpload``; ``delete``:
    ``s3:DeleteObject``. ``list_prefix`` (default: None, no listing) adds ``s3:ListBucket`` on the bucket,
    limited by an ``s3:prefix`` condition to keys under that prefix (``""``: the whole bucket, no condition).
    With the bucket's ``encryption_key``: ``kms:Decrypt`` to read, plus ``kms:Encrypt`` and
    ``kms:GenerateDataKey`` to write. Unlike ``IBucket.grant_read``/``grant_put`` no action has a wildcard,
    so only the object-key wildcard of ``pattern`` remains for cdk-nag's IAM5 to report.

    Example: ``grant_objects(role, bucket, "datasets/imagenet/*", read=True, list_prefix="datasets/imagenet/")``
    """
    if not (read or write or delete):
        raise ValidationError("grant_objects", f"pattern={pattern!r}: allowed: read, write and/or delete")
    actions = [
        *(READ_OBJECT_ACTIONS if read else ()),
        *(WRITE_OBJECT_ACTIONS if write else ()),
        *(DELETE_OBJECT_ACTIONS if delete else ()),
    ]
    grant = iam.Grant.add_to_principal(
        grantee=grantee, actions=actions, resource_arns=[bucket.arn_for_objects(pattern)]
    )
    if list_prefix is not None:
        # A listing of "data/" or of "data" (no trailing slash, as `aws s3 ls s3://bucket/data` asks) both match.
        conditions = (
            {"StringLike": {"s3:prefix": [f"{list_prefix}*", list_prefix.rstrip("/")]}} if list_prefix else None
        )
        grant = grant.combine(
            iam.Grant.add_to_principal(
                grantee=grantee, actions=["s3:ListBucket"], resource_arns=[bucket.bucket_arn], conditions=conditions
            )
        )
    key_actions = KEY_WRITE_ACTIONS if write else KEY_READ_ACTIONS if read else ()
    if bucket.encryption_key is not None and key_actions:
        grant = grant.combine(bucket.encryption_key.grant(grantee, *key_actions))
    return grant


ACCESS_LOGS_SELF_REASON = (
    "Safe because this is the server access log bucket itself: logging it into itself would log every "
    "log delivery, and all access to it is via the AWS-owned logging service plus CloudTrail"
)
REPLICATION_REASON = (
    "Safe because cross-region replication is a disaster-recovery decision of each deployment: it needs a "
    "bucket and KMS key in a second region that this single-region platform does not own; objects are "
    "versioned and retained in-region, and datasets are re-creatable from their source"
)
