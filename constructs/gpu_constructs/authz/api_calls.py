"""The IAM requests behind AWS API calls a client makes (``gpuctl`` as a granted principal).

A test records every call a client sends (botocore's ``before-call`` event gives the service, the operation and
its parameters) and :func:`api_call_requests` turns each into what IAM authorizes, following the Service
Authorization Reference ("Actions, resources, and condition keys for ...": Amazon S3, Amazon SageMaker AI, AWS
Systems Manager, AWS CloudFormation, Amazon CloudWatch Logs, AWS Step Functions). A call with no entry in
:data:`OPERATIONS` raises :class:`UnknownOperation`, so a new call in the client cannot go unchecked.

Amazon S3 authorizes ``ListObjectsV2`` as ``s3:ListBucket`` on the bucket with the request's ``prefix`` as the
``s3:prefix`` condition key, ``HeadObject`` as ``s3:GetObject``; ``PutObject`` with SSE-KMS also needs
``kms:GenerateDataKey`` on the key (Amazon S3 User Guide, "Using server-side encryption with AWS KMS keys").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gpu_constructs.authz.assembly import PARTITION, Assembly
from gpu_constructs.authz.journeys import SECURE, kms_context_arn, kms_via_s3, start_job_requests
from gpu_constructs.authz.policy import AuthRequest

__all__ = ["OPERATIONS", "UnknownOperation", "api_call_requests"]


class UnknownOperation(LookupError):
    """An API call this module has no IAM mapping for."""


Mapper = Callable[[Assembly, str, str, str, Mapping[str, Any]], list[AuthRequest]]


def _s3_list(assembly: Assembly, principal: str, region: str, account: str, p: Mapping[str, Any]) -> list[AuthRequest]:
    context = {"s3:prefix": str(p.get("Prefix", "")), **SECURE}
    return [AuthRequest(principal, "s3:ListBucket", f"arn:{PARTITION}:s3:::{p['Bucket']}", context, "ListObjectsV2")]


def _s3_get(assembly: Assembly, principal: str, region: str, account: str, p: Mapping[str, Any]) -> list[AuthRequest]:
    arn = f"arn:{PARTITION}:s3:::{p['Bucket']}/{p['Key']}"
    return [AuthRequest(principal, "s3:GetObject", arn, SECURE, "GetObject/HeadObject")]


def _s3_put(assembly: Assembly, principal: str, region: str, account: str, p: Mapping[str, Any]) -> list[AuthRequest]:
    bucket, key = str(p["Bucket"]), str(p["Key"])
    out = [AuthRequest(principal, "s3:PutObject", f"arn:{PARTITION}:s3:::{bucket}/{key}", SECURE, "PutObject")]
    key_arn = p.get("SSEKMSKeyId") or assembly.bucket_key(bucket)
    if key_arn:
        context = kms_context_arn(assembly, bucket, key)
        out.append(kms_via_s3(principal, str(key_arn), region, context, "kms:GenerateDataKey", "PutObject (SSE-KMS)"))
    return out


def _training_job(action: str) -> Mapper:
    def mapper(
        assembly: Assembly, principal: str, region: str, account: str, p: Mapping[str, Any]
    ) -> list[AuthRequest]:
        arn = f"arn:{PARTITION}:sagemaker:{region}:{account}:training-job/{str(p['TrainingJobName']).lower()}"
        return [AuthRequest(principal, action, arn, {}, action)]

    return mapper


def _create_training_job(
    assembly: Assembly, principal: str, region: str, account: str, p: Mapping[str, Any]
) -> list[AuthRequest]:
    return start_job_requests(assembly, principal, "training", p)


def _any_resource(action: str) -> Mapper:
    def mapper(
        assembly: Assembly, principal: str, region: str, account: str, p: Mapping[str, Any]
    ) -> list[AuthRequest]:
        return [AuthRequest(principal, action, "*", {}, action)]

    return mapper


def _ssm_parameter(
    assembly: Assembly, principal: str, region: str, account: str, p: Mapping[str, Any]
) -> list[AuthRequest]:
    arn = f"arn:{PARTITION}:ssm:{region}:{account}:parameter/{str(p['Name']).lstrip('/')}"
    return [AuthRequest(principal, "ssm:GetParameter", arn, {}, "GetParameter")]


def _log_group(action: str) -> Mapper:
    def mapper(
        assembly: Assembly, principal: str, region: str, account: str, p: Mapping[str, Any]
    ) -> list[AuthRequest]:
        arn = f"arn:{PARTITION}:logs:{region}:{account}:log-group:{p['logGroupName']}:*"
        return [AuthRequest(principal, action, arn, {}, action)]

    return mapper


def _start_execution(
    assembly: Assembly, principal: str, region: str, account: str, p: Mapping[str, Any]
) -> list[AuthRequest]:
    return [AuthRequest(principal, "states:StartExecution", str(p["stateMachineArn"]), {}, "StartExecution")]


#: ``(service, operation)`` -> the IAM requests of one call.
OPERATIONS: dict[tuple[str, str], Mapper] = {
    ("s3", "ListObjectsV2"): _s3_list,
    ("s3", "HeadObject"): _s3_get,
    ("s3", "GetObject"): _s3_get,
    ("s3", "PutObject"): _s3_put,
    ("sagemaker", "CreateTrainingJob"): _create_training_job,
    ("sagemaker", "DescribeTrainingJob"): _training_job("sagemaker:DescribeTrainingJob"),
    ("sagemaker", "StopTrainingJob"): _training_job("sagemaker:StopTrainingJob"),
    ("sagemaker", "ListTrainingJobs"): _any_resource("sagemaker:ListTrainingJobs"),
    ("ssm", "GetParameter"): _ssm_parameter,
    ("logs", "DescribeLogStreams"): _log_group("logs:DescribeLogStreams"),
    ("logs", "GetLogEvents"): _log_group("logs:GetLogEvents"),
    ("logs", "FilterLogEvents"): _log_group("logs:FilterLogEvents"),
    ("states", "StartExecution"): _start_execution,
}


def api_call_requests(
    assembly: Assembly, principal: str, service: str, operation: str, params: Mapping[str, Any], region: str
) -> list[AuthRequest]:
    """The IAM requests of one API call by ``principal`` (an IAM role ARN) in ``region``."""
    mapper = OPERATIONS.get((service, operation))
    if mapper is None:
        known = ", ".join(f"{s}.{o}" for s, o in sorted(OPERATIONS))
        raise UnknownOperation(f"{service}.{operation} has no IAM mapping; known: {known}")
    account = principal.split(":")[4]
    return mapper(assembly, principal, region, account, params)
