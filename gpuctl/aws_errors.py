"""AWS errors in plain words, each with the next step to take.

``explain(exc, ...)`` turns a botocore exception (``ClientError``, missing or expired credentials, no
network) into an :class:`AwsProblem`: one sentence that says what went wrong for *this* request and one
that says what to do next. ``explain_failure_reason(reason, ...)`` does the same for the
``FailureReason`` of a failed training job (capacity, quota, the training code, the data).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SAGEMAKER_QUOTA_USES",
    "AwsProblem",
    "explain",
    "explain_failure_reason",
    "quota_name",
    "sagemaker_quota_name",
    "service_quotas_url",
]


@dataclass
class AwsProblem(Exception):
    """What went wrong (``what``) and what to do about it (``next_step``)."""

    what: str
    next_step: str
    code: str = ""

    def __str__(self) -> str:
        return f"{self.what}\n  next step: {self.next_step}"


def service_quotas_url(region: str | None, service: str = "sagemaker") -> str:
    """The Service Quotas console page of ``service``'s quotas (service code ``sagemaker`` or ``ec2``) in ``region``."""
    host = f"{region}.console.aws.amazon.com" if region else "console.aws.amazon.com"
    return f"https://{host}/servicequotas/home/services/{service}/quotas"


#: The uses SageMaker counts instances for, each with a quota per instance type named
#: ``"<ml type> for <use>"`` in Service Quotas (service code ``sagemaker``), e.g. "ml.g5.xlarge for endpoint usage":
#: https://docs.aws.amazon.com/general/latest/gr/sagemaker.html (SageMaker endpoints and quotas)
SAGEMAKER_QUOTA_USES: tuple[str, ...] = (
    "training job usage",
    "spot training job usage",
    "endpoint usage",
    "processing job usage",
    "notebook instance usage",
)


def sagemaker_quota_name(instance_type: str | None, use: str) -> str:
    """The Service Quotas name of SageMaker's quota on ``instance_type`` for ``use`` (one of
    :data:`SAGEMAKER_QUOTA_USES`), e.g. ``ml.g5.xlarge for notebook instance usage``."""
    if use not in SAGEMAKER_QUOTA_USES:
        raise ValueError(f"use={use!r} is not a SageMaker quota use; allowed: {', '.join(SAGEMAKER_QUOTA_USES)}")
    return f"{instance_type or '<instance type>'} for {use}"


def quota_name(instance_type: str | None, *, spot: bool = False) -> str:
    """The name of the SageMaker quota that limits training on ``instance_type`` (as Service Quotas shows it)."""
    return sagemaker_quota_name(instance_type, "spot training job usage" if spot else "training job usage")


def _error_code(exc: BaseException) -> tuple[str, str]:
    response: dict[str, Any] = getattr(exc, "response", None) or {}
    error = response.get("Error", {}) if isinstance(response, dict) else {}
    return str(error.get("Code", "")), str(error.get("Message", str(exc)))


#: Error codes whose explanation needs only the request's facts: (codes, what went wrong, the next step).
#: ``what`` is a ``str.format`` template over ``api`` and ``request`` (the operation, or "this API" / "the
#: request" without one), ``operation_note`` (`` (<operation>)`` or nothing), ``where`` (`` in <region>`` or
#: nothing), ``message``, ``code`` and ``job_name``. :func:`explain` tries the codes it words differently first.
_BY_CODE: tuple[tuple[frozenset[str], str, str], ...] = (
    (
        frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "UnauthorizedException"}),
        "Your AWS identity may not call {api}{where}: {message}",
        "use a role that has the training setup's job permissions (TrainingPipeline.grant_run_jobs: create, "
        "describe and stop jobs with the setup's prefix and pass its execution role); check who you are "
        "with aws sts get-caller-identity",
    ),
    (
        frozenset({"ExpiredToken", "ExpiredTokenException", "RequestExpired", "InvalidClientTokenId"}),
        "Your AWS credentials are expired or invalid ({code}).",
        "sign in again (aws sso login) or refresh the credentials of AWS_PROFILE",
    ),
    (
        frozenset({"ThrottlingException", "Throttling", "TooManyRequestsException"}),
        "AWS throttled {request}: {message}",
        "wait a minute and run the command again",
    ),
    (
        frozenset({"ResourceInUse"}),
        "A job named {job_name!r} already exists{where}: {message}",
        "choose another name (--job-name) or leave it out to get a new one",
    ),
    (
        frozenset({"ValidationException", "ValidationError"}),
        "AWS rejected the request{operation_note}: {message}",
        "fix the value the message names; gpuctl train --dry-run prints the exact request",
    ),
)


def explain(
    exc: BaseException,
    *,
    operation: str = "",
    instance_type: str | None = None,
    region: str | None = None,
    spot: bool = False,
    job_name: str | None = None,
    stack_name: str | None = None,
) -> AwsProblem:
    """A plain-words :class:`AwsProblem` for ``exc`` raised by ``operation`` (e.g. ``CreateTrainingJob``)."""
    name = type(exc).__name__
    if name in ("NoCredentialsError", "PartialCredentialsError", "NoAuthTokenError"):
        return AwsProblem(
            "No AWS credentials were found, so nothing was sent to AWS.",
            "sign in (aws sso login, or aws configure) or set AWS_PROFILE, then run the command again",
            name,
        )
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError"):
        return AwsProblem(
            f"Could not reach the AWS API{f' in {region}' if region else ''} ({exc}).",
            "check the network connection, a proxy (HTTPS_PROXY) and the region (--region)",
            name,
        )
    code, message = _error_code(exc)
    where = f" in {region}" if region else ""
    if code == "ResourceLimitExceeded":
        quota = quota_name(instance_type, spot=spot)
        return AwsProblem(
            f"The account's quota '{quota}'{where} is too low for this job: {message}",
            f"request a quota increase for '{quota}' in Service Quotas ({service_quotas_url(region)}) — or run on "
            "a type with free quota (gpuctl train --instance-type ...)",
            code,
        )
    if "Capacity" in code:
        return AwsProblem(
            f"AWS has no free {instance_type or 'instance'} capacity{where} right now: {message}",
            "retry later, use managed spot with a longer max wait, or pick another GPU type or region",
            code,
        )
    if code == "ResourceNotFound" or (code == "ValidationException" and "not found" in message.lower()):
        return AwsProblem(
            f"No training job named {job_name!r} was found{where}: {message}",
            "check the job name and the region (--region); recent jobs of the setup: gpuctl status",
            code,
        )
    if code == "ValidationError" and "does not exist" in message and stack_name:
        return AwsProblem(
            f"The training stack {stack_name!r} is not deployed{where}.",
            f"deploy it (npx cdk deploy {stack_name} -c env=<env>), or pass --stack / --region / --spec",
            code,
        )
    for codes, what, next_step in _BY_CODE:
        if code in codes:
            facts = {
                "api": operation or "this API",
                "request": operation or "the request",
                "operation_note": f" ({operation})" if operation else "",
                "where": where,
                "message": message,
                "code": code,
                "job_name": job_name,
            }
            return AwsProblem(what.format(**facts), next_step, code)
    return AwsProblem(
        f"{operation or 'The request'} failed{where}: {code or name}: {message}",
        "read the message above; run with --dry-run to see the request, or retry if the error is transient",
        code or name,
    )


_CAPACITY = re.compile(r"CapacityError|InsufficientInstanceCapacity|insufficient capacity", re.I)
_QUOTA = re.compile(r"ResourceLimitExceeded|service limit|quota", re.I)
_ALGORITHM = re.compile(r"AlgorithmError", re.I)
_DATA = re.compile(r"No S3 objects found|S3 (object|key).*(not found|does not exist)|NoSuchKey|NoSuchBucket", re.I)
_ACCESS = re.compile(r"AccessDenied|not authorized|Access Denied", re.I)


def explain_failure_reason(
    reason: str,
    *,
    instance_type: str | None = None,
    region: str | None = None,
    spot: bool = False,
    job_name: str | None = None,
) -> AwsProblem:
    """Plain words and a next step for the ``FailureReason`` of a failed training job."""
    job = job_name or "the job"
    if _CAPACITY.search(reason):
        return AwsProblem(
            f"SageMaker could not get {instance_type or 'the requested'} capacity{f' in {region}' if region else ''}: "
            f"{reason}",
            "retry later, switch to managed spot with a longer max wait, or pick another GPU type "
            "(gpuctl train --instance-type ...)",
            "CapacityError",
        )
    if _QUOTA.search(reason):
        quota = quota_name(instance_type, spot=spot)
        return AwsProblem(
            f"A quota stopped {job}: {reason}",
            f"request a quota increase for '{quota}' in Service Quotas ({service_quotas_url(region)})",
            "ResourceLimitExceeded",
        )
    if _DATA.search(reason):
        return AwsProblem(
            f"{job} found no input data: {reason}",
            "check the dataset prefix and data version (gpuctl train --data-version ...); shard raw files with "
            "gpuctl shard, or run the pipeline with prepare: true",
            "DataError",
        )
    if _ACCESS.search(reason):
        return AwsProblem(
            f"The job's execution role was denied access: {reason}",
            "check that the data lies under the setup's dataset prefix and the image in an allowed repository; "
            "the role's grants come from the training stack",
            "AccessDenied",
        )
    if _ALGORITHM.search(reason):
        return AwsProblem(
            f"The training code in {job} failed: {reason}",
            f"read the job's logs (gpuctl logs {job_name or 'JOB'}); the first lines of the error are above",
            "AlgorithmError",
        )
    return AwsProblem(
        f"{job} failed: {reason}",
        f"read the job's logs (gpuctl logs {job_name or 'JOB'}) and its status (gpuctl status {job_name or 'JOB'})",
        "Failed",
    )
