"""IAM of :class:`~gpu_constructs.training.TrainingPipeline`: the SageMaker job roles and the state machine's grants,
each scoped to the setup's job-name prefix.

The helpers take the values they read (the prefixes, the roles, the buckets), not the pipeline, so that this module
does not depend on the construct that composes it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from aws_cdk import ArnFormat, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from gpu_constructs.storage import PlatformStorage, _normalize_prefix, grant_objects

if TYPE_CHECKING:
    from gpu_constructs.training.options import ReadableInput

__all__ = ["SAGEMAKER_VPC_ACTIONS", "SYNC_RULES", "TrainingJobs"]

TRAINING_NAMESPACE = "/aws/sagemaker/TrainingJobs"
PROCESSING_NAMESPACE = "/aws/sagemaker/ProcessingJobs"
#: What SageMaker needs to place a job in a VPC (CreateTrainingJob / CreateProcessingJob with VpcConfig);
#: the same list aws-cdk-lib's SageMaker tasks grant.
SAGEMAKER_VPC_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
)
#: Managed EventBridge rules the ``.sync`` SageMaker integrations create in the account.
SYNC_RULES = {
    "training": "StepFunctionsGetEventsForSageMakerTrainingJobsRule",
    "processing": "StepFunctionsGetEventsForSageMakerProcessingJobsRule",
}
PASSED_TO_SAGEMAKER = {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}
JobKind = Literal["Training", "Processing"]


@dataclass(frozen=True)
class TrainingJobs:
    """The setup's SageMaker jobs as IAM sees them: the job-name prefixes every grant is scoped to and the roles
    the jobs run as (the only roles a caller may pass to SageMaker).

    :param job_name_prefix: training jobs are named ``<job_name_prefix>-*``.
    :param shard_job_name_prefix: prepare (sharding) processing jobs are named ``<shard_job_name_prefix>-*``.
    :param execution_role: the training jobs' role.
    :param prepare_role: the prepare jobs' role (None: the setup has no prepare step).
    """

    job_name_prefix: str
    shard_job_name_prefix: str
    execution_role: iam.IRole
    prepare_role: iam.IRole | None = None


def job_actions(kind: JobKind) -> list[str]:
    """Create, describe and stop jobs of ``kind``, and tag them (what a ``.sync`` task and ``gpuctl`` call)."""
    return [
        f"sagemaker:Create{kind}Job",
        f"sagemaker:Describe{kind}Job",
        f"sagemaker:Stop{kind}Job",
        "sagemaker:AddTags",
        "sagemaker:ListTags",
    ]


def job_arn(scope: Construct, kind: str, prefix: str) -> str:
    """``arn:...:sagemaker:<region>:<account>:<kind>/<prefix>-*``."""
    return Stack.of(scope).format_arn(service="sagemaker", resource=kind, resource_name=f"{prefix}-*")


def log_group_arn(stack: Stack, name: str) -> str:
    return stack.format_arn(
        service="logs", resource="log-group", resource_name=name, arn_format=ArnFormat.COLON_RESOURCE_NAME
    )


def job_role(
    scope: Construct,
    construct_id: str,
    kind: Literal["training", "processing"],
    vpc: ec2.IVpc | None,
    *,
    job_name_prefix: str,
    key: kms.IKey,
    existing: iam.IRole | None = None,
) -> iam.IRole:
    """A SageMaker job role (``existing`` or a new one under ``scope``) with logs, metrics, the use of ``key`` (the
    data key that encrypts the jobs' volumes and outputs) and (in a VPC) network-interface permissions.
    ``job_name_prefix`` names the jobs in the new role's description."""
    stack = Stack.of(scope)
    namespace = TRAINING_NAMESPACE if kind == "training" else PROCESSING_NAMESPACE
    role = existing or iam.Role(
        scope,
        construct_id,
        assumed_by=iam.ServicePrincipal(
            "sagemaker.amazonaws.com",
            conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
        ),
        description=f"SageMaker {kind} jobs {job_name_prefix}-*",
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="JobLogs",
            actions=["logs:CreateLogGroup", "logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"],
            resources=[log_group_arn(stack, namespace), log_group_arn(stack, f"{namespace}:*")],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="JobMetrics",
            actions=["cloudwatch:PutMetricData"],
            resources=["*"],
            conditions={"StringEquals": {"cloudwatch:namespace": namespace}},
        )
    )
    # Encrypted volumes and outputs (the same actions the bucket grants use, plus DescribeKey).
    key.grant(role, "kms:Decrypt", "kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*", "kms:DescribeKey")
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="VolumeEncryption",
            actions=["kms:CreateGrant"],
            resources=[key.key_arn],
            conditions={"Bool": {"kms:GrantIsForAWSResource": "true"}},
        )
    )
    if vpc is not None:
        _grant_vpc_jobs(role, stack, vpc)
    return role


def grant_read_inputs(
    scope: Construct,
    role: iam.IRole,
    readable: Sequence[ReadableInput],
    dataset_prefix: str,
    *,
    storage: PlatformStorage,
) -> tuple[str, ...]:
    """Let the job role read exactly the setup's readable inputs and its dataset prefix; their ``s3://bucket/prefix``
    URIs (what the spec, ``gpuctl`` and the state machine check a user's inputs against).

    Per input: ``s3:ListBucket`` on the bucket, with an ``s3:prefix`` condition for the prefix (SageMaker lists every
    ``S3Prefix`` channel before it downloads it; no condition for the whole bucket), ``s3:GetObject`` on
    ``<prefix>*`` and ``kms:Decrypt`` with the bucket's key (the data key for the datasets bucket, ``kms_key_arn``
    for another bucket). The dataset prefix (the setup's own channels) gets its own grant unless a readable input
    of the datasets bucket covers it. ``storage`` holds the datasets bucket; imported buckets of other readable
    inputs are created under ``scope``, whose path a bad prefix's error names."""
    uris: list[str] = []
    datasets = storage.datasets_bucket
    covered = False
    for index, item in enumerate(readable):
        prefix = _normalize_prefix(scope, f"readable_inputs[{index}].prefix", item.prefix)
        bucket: s3.IBucket
        if item.bucket_name is None:
            bucket = datasets
            covered = covered or dataset_prefix.startswith(prefix)
        else:
            key = (
                kms.Key.from_key_arn(scope, f"ReadableInputKey{index}", item.kms_key_arn) if item.kms_key_arn else None
            )
            bucket = s3.Bucket.from_bucket_attributes(
                scope, f"ReadableInput{index}", bucket_name=item.bucket_name, encryption_key=key
            )
        grant_objects(role, bucket, f"{prefix}*", read=True, list_prefix=prefix)
        uris.append(f"s3://{bucket.bucket_name}/{prefix}")
    if not covered:
        storage.grant_read_datasets(role, dataset_prefix)
        uris.insert(0, f"s3://{datasets.bucket_name}/{dataset_prefix}")
    return tuple(uris)


def _grant_vpc_jobs(role: iam.IRole, stack: Stack, vpc: ec2.IVpc) -> None:
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="DescribeNetwork",
            actions=[a for a in SAGEMAKER_VPC_ACTIONS if ":Describe" in a],
            resources=["*"],
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="JobNetworkInterfaces",
            actions=[a for a in SAGEMAKER_VPC_ACTIONS if ":Describe" not in a],
            resources=[
                stack.format_arn(service="ec2", resource="network-interface", resource_name="*"),
                stack.format_arn(service="ec2", resource="subnet", resource_name="*"),
                stack.format_arn(service="ec2", resource="security-group", resource_name="*"),
            ],
            conditions={
                "ArnEqualsIfExists": {
                    "ec2:Vpc": stack.format_arn(service="ec2", resource="vpc", resource_name=vpc.vpc_id)
                }
            },
        )
    )


def job_policy(role: iam.IRole) -> iam.Policy | None:
    """A new role's DefaultPolicy, or the Policy the CDK attaches to an imported (mutable) role."""
    return role.node.try_find_child("DefaultPolicy") or role.node.try_find_child("Policy")  # type: ignore[return-value]


def grant_state_machine(scope: Construct, role: iam.IRole, jobs: TrainingJobs) -> None:
    """The state machine's role: ``jobs`` with the setup's prefixes, pass only their roles, the ``.sync`` rules."""
    stack = Stack.of(scope)
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="TrainingJobsWithThePrefix",
            actions=job_actions("Training"),
            resources=[job_arn(scope, "training-job", jobs.job_name_prefix)],
        )
    )
    pass_roles = [jobs.execution_role.role_arn]
    rules = [SYNC_RULES["training"]]
    if jobs.prepare_role is not None:
        role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ShardingJobsWithThePrefix",
                actions=job_actions("Processing"),
                resources=[job_arn(scope, "processing-job", jobs.shard_job_name_prefix)],
            )
        )
        pass_roles.append(jobs.prepare_role.role_arn)
        rules.append(SYNC_RULES["processing"])
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="PassOnlyTheJobRoles",
            actions=["iam:PassRole"],
            resources=pass_roles,
            conditions=PASSED_TO_SAGEMAKER,
        )
    )
    role.add_to_principal_policy(
        iam.PolicyStatement(
            sid="SyncIntegrationManagedRules",
            actions=["events:PutTargets", "events:PutRule", "events:DescribeRule"],
            resources=[stack.format_arn(service="events", resource="rule", resource_name=r) for r in rules],
        )
    )


def grant_run_jobs(
    scope: Construct,
    grantee: iam.IGrantable,
    jobs: TrainingJobs,
    *,
    spec_parameter: ssm.IStringParameter,
    artifacts_bucket: s3.IBucket,
    code_prefix: str,
) -> iam.Grant:
    """What ``gpuctl train/status/logs/stop`` need (see :meth:`TrainingPipeline.grant_run_jobs`): read the job spec
    ``spec_parameter`` and the stack's outputs, run training ``jobs`` as their execution role, read their logs and
    upload code packages under ``code_prefix`` of ``artifacts_bucket``."""
    stack = Stack.of(scope)
    spec_parameter.grant_read(grantee)
    iam.Grant.add_to_principal(
        grantee=grantee, actions=["cloudformation:DescribeStacks"], resource_arns=[stack.stack_id]
    )
    iam.Grant.add_to_principal(grantee=grantee, actions=["sagemaker:ListTrainingJobs"], resource_arns=["*"])
    grant = iam.Grant.add_to_principal(
        grantee=grantee,
        actions=job_actions("Training"),
        resource_arns=[job_arn(scope, "training-job", jobs.job_name_prefix)],
    )
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["iam:PassRole"],
        resource_arns=[jobs.execution_role.role_arn],
        conditions=PASSED_TO_SAGEMAKER,
    )
    iam.Grant.add_to_principal(
        grantee=grantee,
        actions=["logs:DescribeLogStreams", "logs:GetLogEvents", "logs:FilterLogEvents"],
        resource_arns=[log_group_arn(stack, f"{TRAINING_NAMESPACE}:*")],
    )
    # gpuctl train --source-dir: upload code packages (content-addressed: a listing of the package's key first
    # says whether it is there, gpuctl.code_upload).
    grant_objects(
        grantee,
        artifacts_bucket,
        f"{code_prefix}*",
        read=True,
        write=True,
        list_prefix=code_prefix,
    )
    return grant
