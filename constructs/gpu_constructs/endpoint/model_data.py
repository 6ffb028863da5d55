"""Where the model artifact comes from (:class:`ModelData`) and exact-action object grants."""

from __future__ import annotations

import re
from typing import Literal

from aws_cdk import CfnParameter, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from gpu_constructs.endpoint.base import PREFIX_RE as _PREFIX_RE
from gpu_constructs.errors import ValidationError, is_token

_S3_URI_RE = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])/(.+)$")
_SSM_NAME_RE = re.compile(r"^/?[a-zA-Z0-9_.\-/]{1,2047}$")


class ModelData:
    """Where the model artifact (``model.tar.gz``) comes from. Use a factory.

    * :meth:`from_bucket` — one object in a bucket of this app (the GitOps default: the key is in
      config, so promoting a model is a reviewed commit). The role may read exactly that object.
    * :meth:`from_uri` — one object given as ``s3://bucket/key`` (a bucket outside this app).
    * :meth:`from_ssm_parameter` — the URI stored in an SSM parameter, resolved by CloudFormation at
      every deployment ("the latest output of the training pipeline"). The role may read ``prefix``.
    """

    def __init__(
        self,
        *,
        kind: Literal["bucket", "uri", "ssm"],
        bucket: s3.IBucket | None = None,
        key: str | None = None,
        uri: str | None = None,
        parameter_name: str | None = None,
        prefix: str | None = None,
        encryption_key: kms.IKey | None = None,
    ) -> None:
        self.kind = kind
        self.bucket = bucket
        self.key = key
        self.uri = uri
        self.parameter_name = parameter_name
        self.prefix = prefix
        self.encryption_key = encryption_key

    @classmethod
    def from_bucket(cls, bucket: s3.IBucket, key: str) -> ModelData:
        """The object ``key`` (``models/<name>/<version>/model.tar.gz``) of ``bucket``."""
        return cls(kind="bucket", bucket=bucket, key=key)

    @classmethod
    def from_uri(cls, uri: str, *, encryption_key: kms.IKey | None = None) -> ModelData:
        """An ``s3://bucket/key`` URI; pass the bucket's KMS key when objects are SSE-KMS encrypted."""
        return cls(kind="uri", uri=uri, encryption_key=encryption_key)

    @classmethod
    def from_ssm_parameter(cls, parameter_name: str, *, bucket: s3.IBucket, prefix: str = "output/") -> ModelData:
        """The ``s3://`` URI in SSM parameter ``parameter_name``, read at each deployment.

        The artifact must be in ``bucket`` under ``prefix`` (default: ``output/``, where training
        jobs write). Every deployment picks up the parameter's current value; a changed value rolls
        out like a changed URI.
        """
        return cls(kind="ssm", parameter_name=parameter_name, bucket=bucket, prefix=prefix)

    def validate(self, where: str) -> None:
        if self.kind == "bucket":
            key = self.key or ""
            if is_token(key):
                return
            if not key or key.startswith("/") or ".." in key or not key.endswith(".tar.gz"):
                raise ValidationError(
                    where,
                    f"model_data key={key!r} is not allowed; allowed: a relative S3 key of a model.tar.gz "
                    "such as 'models/classifier/v3/model.tar.gz'",
                )
        elif self.kind == "uri":
            uri = self.uri or ""
            if is_token(uri):
                return
            if not _S3_URI_RE.match(uri) or not uri.endswith(".tar.gz"):
                raise ValidationError(
                    where,
                    f"model_data uri={uri!r} is not allowed; allowed: s3://<bucket>/<key>.tar.gz",
                )
        else:
            name = self.parameter_name or ""
            if not _SSM_NAME_RE.match(name):
                raise ValidationError(
                    where,
                    f"model_data parameter_name={name!r} is not allowed; allowed: an SSM parameter name such as "
                    "'/gpu-prod/models/classifier/latest'",
                )
            prefix = self.prefix or ""
            if prefix.startswith("/") or ".." in prefix or not _PREFIX_RE.match(prefix):
                raise ValidationError(
                    where, f"model_data prefix={prefix!r} is not allowed; allowed: a relative S3 key prefix"
                )

    def bind(self, scope: Construct, grantee: iam.IGrantable) -> tuple[str, list[str]]:
        """Grant ``grantee`` read access to the artifact.

        Returns the ``ModelDataUrl`` value and the object-key patterns with a wildcard that the grant
        used (only :meth:`from_ssm_parameter` has one: its prefix).
        """
        if self.kind == "bucket":
            assert self.bucket is not None and self.key is not None
            grant_objects(grantee, self.bucket, self.key)
            return f"s3://{self.bucket.bucket_name}/{self.key}", []
        if self.kind == "uri":
            assert self.uri is not None
            match = _S3_URI_RE.match(self.uri)
            assert match is not None  # validated
            stack = Stack.of(scope)
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["s3:GetObject"],
                resource_arns=[f"arn:{stack.partition}:s3:::{match.group(1)}/{match.group(2)}"],
            )
            if self.encryption_key is not None:
                self.encryption_key.grant(grantee, "kms:Decrypt")
            return self.uri, []
        assert self.bucket is not None and self.parameter_name is not None
        parameter = CfnParameter(
            scope,
            "ModelDataUrl",
            type="AWS::SSM::Parameter::Value<String>",
            default=self.parameter_name,
            description=f"SSM parameter holding the s3:// URI of the model served by {scope.node.path}",
        )
        prefix = self.prefix or ""
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        grant_objects(grantee, self.bucket, f"{prefix}*")
        return parameter.value_as_string, [f"{prefix}*"]


def grant_objects(grantee: iam.IGrantable, bucket: s3.IBucket, pattern: str, *, write: bool = False) -> iam.Grant:
    """Read (``s3:GetObject``) or write (``s3:PutObject``, ``s3:AbortMultipartUpload``) the objects matching
    ``pattern`` in ``bucket``, plus the KMS actions that needs on the bucket's key.

    Unlike ``IBucket.grant_read``/``grant_put`` it names each action (no ``s3:GetObject*``,
    ``kms:GenerateDataKey*``) and grants no bucket-level listing.
    """
    actions = ["s3:PutObject", "s3:AbortMultipartUpload"] if write else ["s3:GetObject"]
    grant = iam.Grant.add_to_principal(
        grantee=grantee, actions=actions, resource_arns=[bucket.arn_for_objects(pattern)]
    )
    if bucket.encryption_key is not None:
        kms_actions = ["kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey"] if write else ["kms:Decrypt"]
        grant = grant.combine(bucket.encryption_key.grant(grantee, *kms_actions))
    return grant
