"""Where the model artifact comes from (:class:`ModelData`); ``grant_objects`` here is a deprecated alias."""

from __future__ import annotations

from typing import Literal

from aws_cdk import CfnParameter, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from gpu_constructs import storage
from gpu_constructs.deprecation import warn_deprecated
from gpu_constructs.endpoint.checks import is_model_archive_key, is_model_archive_uri, is_ssm_parameter_name
from gpu_constructs.errors import ValidationError, is_token
from gpu_constructs.s3_keys import as_key_prefix, is_key_prefix, split_s3_uri


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
            if not is_model_archive_key(key):
                raise ValidationError(
                    where,
                    f"model_data key={key!r} is not allowed; allowed: a relative S3 key of a model.tar.gz "
                    "such as 'models/classifier/v3/model.tar.gz'",
                )
        elif self.kind == "uri":
            uri = self.uri or ""
            if is_token(uri):
                return
            if not is_model_archive_uri(uri):
                raise ValidationError(
                    where,
                    f"model_data uri={uri!r} is not allowed; allowed: s3://<bucket>/<key>.tar.gz",
                )
        else:
            name = self.parameter_name or ""
            if not is_ssm_parameter_name(name):
                raise ValidationError(
                    where,
                    f"model_data parameter_name={name!r} is not allowed; allowed: an SSM parameter name such as "
                    "'/gpu-prod/models/classifier/latest'",
                )
            prefix = self.prefix or ""
            if not is_key_prefix(prefix):
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
            storage.grant_objects(grantee, self.bucket, self.key, read=True)
            return f"s3://{self.bucket.bucket_name}/{self.key}", []
        if self.kind == "uri":
            assert self.uri is not None
            parts = split_s3_uri(self.uri)
            assert parts is not None  # validated
            bucket_name, key = parts
            stack = Stack.of(scope)
            iam.Grant.add_to_principal(
                grantee=grantee,
                actions=["s3:GetObject"],
                resource_arns=[f"arn:{stack.partition}:s3:::{bucket_name}/{key}"],
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
        prefix = as_key_prefix(self.prefix or "")
        storage.grant_objects(grantee, self.bucket, f"{prefix}*", read=True)
        return parameter.value_as_string, [f"{prefix}*"]


def grant_objects(grantee: iam.IGrantable, bucket: s3.IBucket, pattern: str, *, write: bool = False) -> iam.Grant:
    """Deprecated: use :func:`gpu_constructs.storage.grant_objects`, which names what it grants.

    This name read the objects matching ``pattern`` by default and wrote them (without reading) with
    ``write=True``; it delegates with ``read=not write, write=write``, so it grants exactly what it did.
    """
    warn_deprecated(
        "gpu_constructs.endpoint.grant_objects",
        "gpu_constructs.storage.grant_objects(grantee, bucket, pattern, read=True) to read, write=True to write",
    )
    return storage.grant_objects(grantee, bucket, pattern, read=not write, write=write)
