"""The AWS requests a journey makes, derived from the request that starts it, and their evaluation.

Each function takes what the platform sends (a ``CreateTrainingJob`` or ``CreateProcessingJob`` request as the
state machine or ``gpuctl`` renders it, with concrete values) and returns the requests AWS then authorizes, as
:class:`~gpu_constructs.authz.policy.AuthRequest`. What SageMaker does with the execution role is in the SageMaker
Developer Guide, "How to use SageMaker AI execution roles", sections "CreateTrainingJob API: Execution Role
Permissions" and "CreateProcessingJob API: Execution Role Permissions"
(https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-roles.html):

* every ``S3Prefix`` input is listed before it is read: "Scope the s3:ListBucket permission to a specific bucket
  that you specify as the InputDataConfig.DataSource.S3DataSource.S3Uri", with ``s3:prefix`` the URI's key
  (S3 API Reference, ListObjectsV2: the ``prefix`` request parameter is the ``s3:prefix`` condition key), then
  each object is read (``s3:GetObject``); an SSE-KMS object is decrypted with its key (``kms:Decrypt`` through
  S3, ``kms:ViaService`` = ``s3.<region>.amazonaws.com``; the encryption context is the bucket ARN when the
  bucket uses S3 Bucket Keys, else the object ARN: Amazon S3 User Guide, "Using SSE-KMS", "Encryption context");
* the output is written under ``S3OutputPath`` (``s3:PutObject`` of ``<path>/<job>/output/model.tar.gz``),
  encrypted with ``OutputDataConfig.KmsKeyId`` or the bucket's key (``kms:GenerateDataKey``; a multipart upload
  also needs ``kms:Decrypt``: S3 User Guide, "Uploading and copying objects using multipart upload");
* checkpoints are listed, read and written under ``CheckpointConfig.S3Uri``;
* logs go to ``/aws/sagemaker/TrainingJobs`` (``/aws/sagemaker/ProcessingJobs``) and metrics to that namespace;
* the ML storage volume key (``VolumeKmsKeyId``) is used through a grant (``kms:CreateGrant`` with
  ``kms:GrantIsForAWSResource``);
* an image of this account's ECR is pulled with the role (``ecr:GetAuthorizationToken`` on ``*``,
  ``ecr:BatchGetImage``, ``ecr:GetDownloadUrlForLayer`` and ``ecr:BatchCheckLayerAvailability`` on the repository).

The principal that starts the job needs ``sagemaker:CreateTrainingJob`` on the job's ARN (the name lowercased, as
SageMaker ARNs are) and ``iam:PassRole`` on the execution role with ``iam:PassedToService`` =
``sagemaker.amazonaws.com`` (IAM User Guide, "Granting a user permissions to pass a role to an AWS service").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from gpu_constructs.authz.assembly import PARTITION, Assembly, UnresolvableValue
from gpu_constructs.authz.policy import AuthRequest, Decision, evaluate

__all__ = [
    "Denied",
    "JobKind",
    "check_requests",
    "job_requests",
    "s3_read_requests",
    "s3_write_requests",
    "start_job_requests",
]

JobKind = Literal["training", "processing"]
_NAMESPACES = {"training": "/aws/sagemaker/TrainingJobs", "processing": "/aws/sagemaker/ProcessingJobs"}
_S3_URI = re.compile(r"^s3://(?P<bucket>[^/]+)/?(?P<key>.*)$")
ECR_URI = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com/(?P<repo>[^:@]+)")
SECURE = {"aws:SecureTransport": "true", "s3:TlsVersion": "1.3"}


def split_s3(uri: str) -> tuple[str, str]:
    match = _S3_URI.match(uri)
    if match is None:
        raise ValueError(f"{uri!r} is not an s3:// URI")
    return match.group("bucket"), match.group("key")


def kms_via_s3(principal: str, key_arn: str, region: str, context_arn: str, action: str, why: str) -> AuthRequest:
    return AuthRequest(
        principal,
        action,
        key_arn,
        {
            "kms:ViaService": f"s3.{region}.amazonaws.com",
            "kms:CallerAccount": principal.split(":")[4],
            "kms:EncryptionContext:aws:s3:arn": context_arn,
            "kms:EncryptionContextKeys": ["aws:s3:arn"],
        },
        why,
    )


def kms_context_arn(assembly: Assembly, bucket: str, key: str) -> str:
    bucket_arn = f"arn:{PARTITION}:s3:::{bucket}"
    return bucket_arn if assembly.bucket_key_enabled(bucket) else f"{bucket_arn}/{key}"


def s3_read_requests(
    assembly: Assembly, principal: str, uri: str, region: str, *, list_first: bool = True, why: str = ""
) -> list[AuthRequest]:
    """Listing ``uri``'s prefix (when ``list_first``) and reading one object under it (or the object itself)."""
    bucket, key = split_s3(uri)
    sample_key = key + "part-00000.tar" if key.endswith("/") or not key else key
    out = []
    if list_first:
        out.append(
            AuthRequest(principal, "s3:ListBucket", f"arn:{PARTITION}:s3:::{bucket}", {"s3:prefix": key, **SECURE}, why)
        )
    out.append(AuthRequest(principal, "s3:GetObject", f"arn:{PARTITION}:s3:::{bucket}/{sample_key}", SECURE, why))
    key_arn = assembly.bucket_key(bucket)
    if key_arn is not None:
        context = kms_context_arn(assembly, bucket, sample_key)
        out.append(kms_via_s3(principal, key_arn, region, context, "kms:Decrypt", why))
    return out


def s3_write_requests(
    assembly: Assembly, principal: str, uri: str, region: str, kms_key: str | None = None, *, why: str = ""
) -> list[AuthRequest]:
    """Writing the object ``uri`` (a multipart upload), encrypted with ``kms_key`` or the bucket's key."""
    bucket, key = split_s3(uri)
    out = [AuthRequest(principal, "s3:PutObject", f"arn:{PARTITION}:s3:::{bucket}/{key}", SECURE, why)]
    key_arn = kms_key or assembly.bucket_key(bucket)
    if key_arn is not None and key_arn.startswith("arn:aws:kms:") and ":alias/" not in key_arn:
        context = kms_context_arn(assembly, bucket, key)
        for action in ("kms:GenerateDataKey", "kms:Decrypt"):
            out.append(kms_via_s3(principal, key_arn, region, context, action, why))
    return out


def _ecr_pull(principal: str, image: str, why: str) -> list[AuthRequest]:
    match = ECR_URI.match(image)
    if match is None or match.group("account") != principal.split(":")[4]:
        return []  # another account's image (an AWS DLC): that registry's policy decides, not this account's
    region, account, name = match.group("region"), match.group("account"), match.group("repo")
    repository = f"arn:{PARTITION}:ecr:{region}:{account}:repository/{name}"
    return [
        AuthRequest(principal, "ecr:GetAuthorizationToken", "*", {}, why),
        *(
            AuthRequest(principal, action, repository, {}, why)
            for action in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability")
        ),
    ]


def _logs(principal: str, kind: JobKind, name: str, region: str) -> list[AuthRequest]:
    account = principal.split(":")[4]
    group = _NAMESPACES[kind]
    stream = f"arn:{PARTITION}:logs:{region}:{account}:log-group:{group}:log-stream:{name}/algo-1-0000000000"
    why = f"the job writes its logs to {group}"
    return [
        AuthRequest(principal, "logs:CreateLogStream", stream, {}, why),
        AuthRequest(principal, "logs:PutLogEvents", stream, {}, why),
        AuthRequest(principal, "cloudwatch:PutMetricData", "*", {"cloudwatch:namespace": group}, why),
    ]


def job_requests(assembly: Assembly, kind: JobKind, request: Mapping[str, Any]) -> list[AuthRequest]:
    """Every request SageMaker makes with the execution role of a ``CreateTrainingJob``/``CreateProcessingJob``
    (in the region of the role's stack)."""
    role = str(request["RoleArn"])
    region = assembly.region_of(role)
    if kind == "training":
        return _training_requests(assembly, role, request, region)
    return _processing_requests(assembly, role, request, region)


def _training_requests(assembly: Assembly, role: str, request: Mapping[str, Any], region: str) -> list[AuthRequest]:
    name = str(request.get("TrainingJobName", "job"))
    out: list[AuthRequest] = []
    for channel in request.get("InputDataConfig") or []:
        source = (channel.get("DataSource") or {}).get("S3DataSource")
        if not source:
            continue  # FileSystemDataSource: mounted over the VPC, no S3 request
        if not source.get("S3Uri"):
            continue  # set at run time
        why = f"channel {channel['ChannelName']} ({source.get('S3DataType', 'S3Prefix')}) is downloaded"
        reads = s3_read_requests(assembly, role, source["S3Uri"], region, why=why)
        out += _tag(reads, f"channel:{channel['ChannelName']}")
    output = request.get("OutputDataConfig") or {}
    if output.get("S3OutputPath"):
        uri = f"{str(output['S3OutputPath']).rstrip('/')}/{name}/output/model.tar.gz"
        writes = s3_write_requests(assembly, role, uri, region, output.get("KmsKeyId"), why="the model is uploaded")
        out += _tag(writes, "output")
    checkpoint = (request.get("CheckpointConfig") or {}).get("S3Uri")
    if checkpoint:
        why = "checkpoints are synced"
        prefix = str(checkpoint).rstrip("/") + "/"
        out += _tag(s3_read_requests(assembly, role, prefix, region, why=why), "checkpoints")
        out += _tag(s3_write_requests(assembly, role, prefix + "checkpoint.pt", region, why=why), "checkpoints")
    volume_key = (request.get("ResourceConfig") or {}).get("VolumeKmsKeyId")
    out += _tag(_volume_key(role, volume_key), "volume")
    image = (request.get("AlgorithmSpecification") or {}).get("TrainingImage", "")
    out += _tag(_ecr_pull(role, str(image), "the training image is pulled"), "image")
    out += _tag(_logs(role, "training", name, region), "logs")
    return out


def _processing_requests(assembly: Assembly, role: str, request: Mapping[str, Any], region: str) -> list[AuthRequest]:
    name = str(request.get("ProcessingJobName", "job"))
    out: list[AuthRequest] = []
    for item in request.get("ProcessingInputs") or []:
        source = item.get("S3Input")
        if source and source.get("S3Uri"):
            why = f"processing input {item.get('InputName')} is downloaded"
            reads = s3_read_requests(assembly, role, source["S3Uri"], region, why=why)
            out += _tag(reads, f"input:{item.get('InputName')}")
    config = request.get("ProcessingOutputConfig") or {}
    for item in config.get("Outputs") or []:
        target = item.get("S3Output")
        if target and target.get("S3Uri"):
            uri = f"{str(target['S3Uri']).rstrip('/')}/part-00000.tar"
            why = f"processing output {item.get('OutputName')} is uploaded"
            writes = s3_write_requests(assembly, role, uri, region, config.get("KmsKeyId"), why=why)
            out += _tag(writes, f"output:{item.get('OutputName')}")
    cluster = (request.get("ProcessingResources") or {}).get("ClusterConfig") or {}
    out += _tag(_volume_key(role, cluster.get("VolumeKmsKeyId")), "volume")
    image = (request.get("AppSpecification") or {}).get("ImageUri", "")
    out += _tag(_ecr_pull(role, str(image), "the processing image is pulled"), "image")
    out += _tag(_logs(role, "processing", name, region), "logs")
    return out


def _tag(requests: Iterable[AuthRequest], subject: str) -> list[AuthRequest]:
    return [replace(r, subject=subject) for r in requests]


def _volume_key(role: str, key: Any) -> list[AuthRequest]:
    if not key or not str(key).startswith("arn:"):
        return []
    why = "the ML storage volume is encrypted with the key (through a grant)"
    return [AuthRequest(role, "kms:CreateGrant", str(key), {"kms:GrantIsForAWSResource": "true"}, why)]


def start_job_requests(
    assembly: Assembly, principal: str, kind: JobKind, request: Mapping[str, Any]
) -> list[AuthRequest]:
    """What the principal that starts the job (a state machine's role, ``gpuctl``) is authorized for."""
    region = assembly.region_of(principal)
    account = principal.split(":")[4]
    name = str(request.get("TrainingJobName" if kind == "training" else "ProcessingJobName", "job")).lower()
    noun = "training-job" if kind == "training" else "processing-job"
    arn = f"arn:{PARTITION}:sagemaker:{region}:{account}:{noun}/{name}"
    action = "sagemaker:CreateTrainingJob" if kind == "training" else "sagemaker:CreateProcessingJob"
    out = [AuthRequest(principal, action, arn, {}, f"starts the {kind} job", "start")]
    if request.get("Tags"):
        out.append(AuthRequest(principal, "sagemaker:AddTags", arn, {}, "tags the job at creation", "start"))
    passed = {"iam:PassedToService": "sagemaker.amazonaws.com"}
    role = str(request["RoleArn"])
    out.append(AuthRequest(principal, "iam:PassRole", role, passed, "passes the execution role", "pass-role"))
    return out


@dataclass(frozen=True)
class Denied:
    """A request of a journey that AWS would deny, and why."""

    decision: Decision

    def __str__(self) -> str:
        request = self.decision.request
        return f"{request.principal} may not {request} ({request.why}): {self.decision.reason}"


def check_requests(
    assembly: Assembly,
    requests: Iterable[AuthRequest],
    on_unknown: Callable[[AuthRequest, Exception], None] | None = None,
) -> list[Denied]:
    """Evaluate every request against the assembly's policies; the denied ones (empty = all allowed).

    A principal that is not a role of the assembly cannot be judged: ``on_unknown`` is called (default: raise)."""
    denied = []
    for request in requests:
        try:
            policies = assembly.policies_for(request.principal, request.resource)
        except UnresolvableValue as exc:
            if on_unknown is None:
                raise
            on_unknown(request, exc)
            continue
        decision = evaluate(request, policies)
        if not decision.allowed:
            denied.append(Denied(decision))
    return denied
