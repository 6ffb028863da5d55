"""Where the model artifact comes from: :class:`ModelData` and its sources (:class:`BucketModelData`,
:class:`UriModelData`, :class:`SsmParameterModelData`); ``grant_objects`` here is a deprecated alias."""

from __future__ import annotations

from abc import ABCMeta, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

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

ModelDataKind = Literal["bucket", "uri", "ssm"]


class _ModelDataMeta(ABCMeta):
    """Keeps the former ``ModelData(kind=..., ...)`` constructor working for one release (deprecated): calling
    the abstract base builds the subclass of that kind."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is ModelData:
            warn_deprecated(
                "gpu_constructs.endpoint.ModelData(kind=...)",
                "ModelData.from_bucket, ModelData.from_uri or ModelData.from_ssm_parameter",
            )
            return _from_kind(*args, **kwargs)
        return super().__call__(*args, **kwargs)


class ModelData(metaclass=_ModelDataMeta):
    """Where the model artifact (``model.tar.gz``) comes from. Use a factory.

    * :meth:`from_bucket` — one object in a bucket of this app (the GitOps default: the key is in
      config, so promoting a model is a reviewed commit). The role may read exactly that object.
    * :meth:`from_uri` — one object given as ``s3://bucket/key`` (a bucket outside this app).
    * :meth:`from_ssm_parameter` — the URI stored in an SSM parameter, resolved by CloudFormation at
      every deployment ("the latest output of the training pipeline"). The role may read ``prefix``.

    Each source is a subclass (:class:`BucketModelData`, :class:`UriModelData`, :class:`SsmParameterModelData`)
    with its own rules (:meth:`validate`) and grants (:meth:`bind`); another source is another subclass.
    """

    @property
    @abstractmethod
    def kind(self) -> ModelDataKind:
        """Which source this is: ``bucket``, ``uri`` or ``ssm``."""

    @abstractmethod
    def validate(self, where: str) -> None:
        """Raise a :class:`~gpu_constructs.errors.ValidationError` naming ``where`` for a bad value."""

    @abstractmethod
    def bind(self, scope: Construct, grantee: iam.IGrantable) -> tuple[str, list[str]]:
        """Grant ``grantee`` read access to the artifact.

        Returns the ``ModelDataUrl`` value and the object-key patterns with a wildcard that the grant
        used (only :meth:`from_ssm_parameter` has one: its prefix).
        """

    @classmethod
    def from_bucket(cls, bucket: s3.IBucket, key: str) -> BucketModelData:
        """The object ``key`` (``models/<name>/<version>/model.tar.gz``) of ``bucket``."""
        return BucketModelData(bucket=bucket, key=key)

    @classmethod
    def from_uri(cls, uri: str, *, encryption_key: kms.IKey | None = None) -> UriModelData:
        """An ``s3://bucket/key`` URI; pass the bucket's KMS key when objects are SSE-KMS encrypted."""
        return UriModelData(uri=uri, encryption_key=encryption_key)

    @classmethod
    def from_ssm_parameter(
        cls, parameter_name: str, *, bucket: s3.IBucket, prefix: str = "output/"
    ) -> SsmParameterModelData:
        """The ``s3://`` URI in SSM parameter ``parameter_name``, read at each deployment.

        The artifact must be in ``bucket`` under ``prefix`` (default: ``output/``, where training
        jobs write). Every deployment picks up the parameter's current value; a changed value rolls
        out like a changed URI.
        """
        return SsmParameterModelData(parameter_name=parameter_name, bucket=bucket, prefix=prefix)


@dataclass(frozen=True)
class BucketModelData(ModelData):
    """The object ``key`` of ``bucket``, a bucket of this app (:meth:`ModelData.from_bucket`)."""

    bucket: s3.IBucket
    key: str

    @property
    def kind(self) -> ModelDataKind:
        return "bucket"

    def validate(self, where: str) -> None:
        """A relative S3 key of a ``.tar.gz`` archive (a token is not checked)."""
        if is_token(self.key):
            return
        if not is_model_archive_key(self.key):
            raise ValidationError(
                where,
                f"model_data key={self.key!r} is not allowed; allowed: a relative S3 key of a model.tar.gz "
                "such as 'models/classifier/v3/model.tar.gz'",
            )

    def bind(self, scope: Construct, grantee: iam.IGrantable) -> tuple[str, list[str]]:
        """Read access to exactly this object."""
        storage.grant_objects(grantee, self.bucket, self.key, read=True)
        return f"s3://{self.bucket.bucket_name}/{self.key}", []


@dataclass(frozen=True)
class UriModelData(ModelData):
    """The object at ``uri`` (``s3://bucket/key.tar.gz``), possibly outside this app (:meth:`ModelData.from_uri`).

    :param encryption_key: the bucket's KMS key when its objects are SSE-KMS encrypted (default: none).
    """

    uri: str
    encryption_key: kms.IKey | None = None

    @property
    def kind(self) -> ModelDataKind:
        return "uri"

    def validate(self, where: str) -> None:
        """``s3://<bucket>/<key>.tar.gz`` (a token is not checked)."""
        if is_token(self.uri):
            return
        if not is_model_archive_uri(self.uri):
            raise ValidationError(
                where,
                f"model_data uri={self.uri!r} is not allowed; allowed: s3://<bucket>/<key>.tar.gz",
            )

    def bind(self, scope: Construct, grantee: iam.IGrantable) -> tuple[str, list[str]]:
        """``s3:GetObject`` on exactly this object (and decrypt with :attr:`encryption_key`, if given)."""
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


@dataclass(frozen=True)
class SsmParameterModelData(ModelData):
    """The ``s3://`` URI in SSM parameter ``parameter_name``, read by CloudFormation at each deployment; the
    artifact lies in ``bucket`` under ``prefix`` (:meth:`ModelData.from_ssm_parameter`)."""

    parameter_name: str
    bucket: s3.IBucket
    prefix: str = "output/"

    @property
    def kind(self) -> ModelDataKind:
        return "ssm"

    def validate(self, where: str) -> None:
        """An SSM parameter name and a relative S3 key prefix."""
        if not is_ssm_parameter_name(self.parameter_name):
            raise ValidationError(
                where,
                f"model_data parameter_name={self.parameter_name!r} is not allowed; allowed: an SSM parameter name "
                "such as '/gpu-prod/models/classifier/latest'",
            )
        if not is_key_prefix(self.prefix):
            raise ValidationError(
                where, f"model_data prefix={self.prefix!r} is not allowed; allowed: a relative S3 key prefix"
            )

    def bind(self, scope: Construct, grantee: iam.IGrantable) -> tuple[str, list[str]]:
        """A ``ModelDataUrl`` template parameter resolving the SSM parameter, and read access to ``prefix*``
        (the artifact is chosen at deploy time, so the grant spans the prefix)."""
        parameter = CfnParameter(
            scope,
            "ModelDataUrl",
            type="AWS::SSM::Parameter::Value<String>",
            default=self.parameter_name,
            description=f"SSM parameter holding the s3:// URI of the model served by {scope.node.path}",
        )
        prefix = as_key_prefix(self.prefix)
        storage.grant_objects(grantee, self.bucket, f"{prefix}*", read=True)
        return parameter.value_as_string, [f"{prefix}*"]


def _from_kind(
    *,
    kind: ModelDataKind,
    bucket: s3.IBucket | None = None,
    key: str | None = None,
    uri: str | None = None,
    parameter_name: str | None = None,
    prefix: str | None = None,
    encryption_key: kms.IKey | None = None,
) -> ModelData:
    """The subclass the former ``ModelData(kind=...)`` constructor described (missing values read as ``""``, as
    its rules read them)."""
    if kind == "bucket":
        assert bucket is not None
        return BucketModelData(bucket=bucket, key=key or "")
    if kind == "uri":
        return UriModelData(uri=uri or "", encryption_key=encryption_key)
    assert bucket is not None
    return SsmParameterModelData(parameter_name=parameter_name or "", bucket=bucket, prefix=prefix or "")


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
