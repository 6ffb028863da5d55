"""The GitOps pipeline stack: a self-mutating CDK pipeline (aws-cdk-lib ``pipelines``) that delivers from git.

Source: a CodeConnections connection to ``pipeline.repository`` at ``pipeline.branch``. The synth step runs
what CI runs — ``bash .ci/run`` (install, lint, ``make test`` with every security gate) and then
``make synth ENV=<env>`` for every stage, the pipeline's own environment last (its cloud assembly is the
step's output) — so a failing test or an unacknowledged cdk-nag finding stops the pipeline. Then the pipeline
updates itself, and deploys one stage per ``pipeline.stages`` entry, in order. Before each stage's deploy a
``Preflight<Stage>`` CodeBuild step runs ``gpuctl preflight --env <stage> --json`` against the stage's account:
a short quota, a type not offered in a zone, or a reservation that is gone or does not match (exit 1) stops the
pipeline, and so does a check that could not be made (exit 2: no credentials, access denied, a bad config),
because a gate that passes when it cannot look would let the deploy fail later, at the instance launch. Before a
stage listed in ``pipeline.approve_before`` a CodeBuild step prints its ``cdk diff``, a ``Cost<Stage>`` step prints
``gpuctl cost diff`` of the deployed templates (``gpuctl deployed``, CloudFormation ``GetTemplate``) against the
synthesized ones, and a manual approval waits for a reviewer.

The read-only steps reach the stage's account the way ``cdk diff`` does: in the pipeline's own account their
CodeBuild role is granted exactly the calls they make (:func:`gpuctl.commands.preflight.read_permissions` of the
stage's config; ``cloudformation:GetTemplate`` on the stage's stacks); in another account they assume that
account's CDK bootstrap lookup role through an AWS CLI profile with ``credential_source = EcsContainer`` (the
CodeBuild container's credentials). The CDK CLI's bootstrap template (``lib/api/bootstrap/bootstrap-template.yaml``
of the pinned ``aws-cdk``) gives ``LookupRole`` the managed policy ``ReadOnlyAccess`` and trusts the accounts of
``--trust-for-lookup`` and ``--trust``, so a pipeline account bootstrapped as trusted may read through it.

Artifacts go to a versioned, KMS-encrypted, access-logged bucket; CodeBuild logs to a KMS-encrypted log group.

Stage stacks keep the app's stack names and the logical ids of every stateful resource. Resources whose ids or
names embed the construct path (security-group rules between groups, scaling-policy names, ``Name`` tags)
differ from a root-level ``cdk deploy``: deliver each environment either by the pipeline or by ``cdk deploy``,
not both in turn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jsii
from aws_cdk import Duration, Environment, RemovalPolicy, Stack, StackProps, pipelines
from aws_cdk import aws_codebuild as codebuild
from aws_cdk import aws_codepipeline as codepipeline
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct, IValidation

from gpu_constructs import nag
from gpu_constructs.errors import ValidationError, fail
from gpu_constructs.keys import allow_cloudwatch_logs, allow_s3_access_logs, new_key
from gpu_constructs.nag import as_list as _as_list
from gpu_constructs.removal import for_named_resource
from gpu_constructs.retention import retention_days
from gpu_constructs.storage import SecureBucket
from gpuctl.commands.preflight import compute_needs, read_permissions
from stacks.base import REPOSITORY_ROOT
from stacks.config import EnvConfig, PipelineConfig, load_config
from stacks.context import StackContext, stack_arguments
from stacks.stage import PlatformStage, stage_id

#: CodeBuild image of every step: Ubuntu 22.04 with Python 3.11 and Node.js 20.
BUILD_IMAGE = codebuild.LinuxBuildImage.STANDARD_7_0
RUNTIME_VERSIONS = {"python": "3.11", "nodejs": "20"}


def pipeline_stack_name(prefix: str) -> str:
    return f"{prefix}-pipeline"


def cdk_cli_version() -> str:
    """The CDK CLI version package.json pins (``make synth`` uses it; so do the pipeline's steps)."""
    package = json.loads((REPOSITORY_ROOT / "package.json").read_text())
    return str(package["devDependencies"]["aws-cdk"])


def synth_commands(own_env: str, stages: tuple[str, ...]) -> list[str]:
    """The synth step's commands: CI first, then ``make synth`` per environment, the pipeline's own env last."""
    others = [env for env in stages if env != own_env]
    commands = ["bash .ci/run"]
    commands += [f"make synth ENV={env}" for env in others]
    # The last synth is the pipeline's cloud assembly: start from an empty cdk.out so nothing stale ships.
    commands += ["rm -rf cdk.out", f"make synth ENV={own_env}"]
    return commands


#: How the read-only steps install gpuctl from the checked-out repository (its own small dependency set).
GPUCTL_INSTALL = "pip install --disable-pip-version-check --quiet ."
#: The AWS CLI profile the read-only steps use in a stage of another account.
STAGE_PROFILE = "stage"


def preflight_command(env: str) -> str:
    """The preflight step's check: exit 1 (short, not offered, reservation problem) and 2 (not checked) fail it."""
    return f"gpuctl preflight --env {env} --json"


def cost_commands(stage_assembly: str) -> list[str]:
    """The cost step's commands: the deployed templates of the stage's stacks, then their cost difference; before
    the stage's first deploy (no stack deployed: an assembly without stacks, which ``gpuctl cost diff`` refuses)
    the whole cost of the stage, since all of it is new."""
    return [
        f"gpuctl deployed {stage_assembly} deployed.out",
        "if grep -q 'aws:cloudformation:stack' deployed.out/manifest.json; "
        f"then gpuctl cost diff deployed.out {stage_assembly}; else gpuctl cost --cdk-out {stage_assembly}; fi",
    ]


def profile_commands(role_arn: str) -> list[str]:
    """AWS CLI profile ``stage`` that assumes ``role_arn`` with the CodeBuild container's credentials (AWS CLI User
    Guide, "Use an IAM role in the AWS CLI": ``credential_source`` ``EcsContainer``,
    https://docs.aws.amazon.com/cli/v1/userguide/cli-configure-role.html); boto3 reads the same profile."""
    return [
        f"aws configure set profile.{STAGE_PROFILE}.role_arn {role_arn}",
        f"aws configure set profile.{STAGE_PROFILE}.credential_source EcsContainer",
    ]


def diff_command(pipeline_stack: str, stage: str) -> str:
    """``cdk diff`` of every stack of one stage, read from the synthesized assembly (the step's input)."""
    return f"npx --no-install cdk diff --app . --no-change-set --no-color '{pipeline_stack}/{stage}/*'"


class PipelineStack(Stack):
    """Self-mutating CodePipeline: source from git, test + synth, then one deployment stage per environment.

    :param context: the environment the pipeline belongs to (its region, account, name and removal policy).
    :param pipeline: the pipeline section of that environment's config.
    :param stage_configs: config of each stage by name (default: ``load_config(name)`` for each name).
    :param props: the :class:`~aws_cdk.Stack` props but ``env``: the pipeline deploys into ``pipeline.account``
        (default: the environment's account) in the environment's region.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        context: StackContext,
        pipeline: PipelineConfig,
        stage_configs: Mapping[str, EnvConfig] | None = None,
        props: StackProps | None = None,
    ) -> None:
        account = pipeline.account or context.account
        if account is None:
            raise fail(construct_id, "pipeline.account", None, "a 12-digit account id (or set the env's account)")
        if props is not None and props.env is not None:
            raise fail(construct_id, "props.env", props.env, "none (the pipeline's account and region decide)")
        env = Environment(account=account, region=context.region)
        super().__init__(scope, construct_id, **stack_arguments(props), env=env)
        self._validate_connection(pipeline, account, context.region)
        configs = {name: (stage_configs or {}).get(name) or load_config(name) for name in pipeline.stages}
        self._validate_production_approval(pipeline, configs)
        self.pipeline_config = pipeline
        removal = context.removal_policy

        self.key = new_key(
            self,
            "ArtifactsKey",
            description=f"Encrypts the artifacts and build logs of {construct_id}",
            removal_policy=removal,
        )
        self._allow_service_logs(self.key)
        self.access_logs = SecureBucket(
            self,
            "AccessLogs",
            encryption_key=self.key,
            lifecycle_rules=[s3.LifecycleRule(id="ExpireAccessLogs", expiration=Duration.days(365))],
            removal_policy=removal,
        )
        nag.checkov_skip(self.access_logs.bucket, "CKV_AWS_18", ACCESS_LOGS_SELF_REASON)
        self.artifacts = SecureBucket(
            self,
            "Artifacts",
            encryption_key=self.key,
            server_access_logs_bucket=self.access_logs.bucket,
            lifecycle_rules=[s3.LifecycleRule(id="ExpireArtifacts", expiration=Duration.days(90))],
            removal_policy=removal,
        )
        self.log_group = logs.LogGroup(
            self,
            "BuildLogs",
            encryption_key=self.key,
            retention=retention_days(pipeline.log_retention_days, "pipeline.log_retention_days"),
            removal_policy=removal,
        )
        build_defaults = pipelines.CodeBuildOptions(
            build_environment=codebuild.BuildEnvironment(
                build_image=BUILD_IMAGE, compute_type=codebuild.ComputeType.MEDIUM, privileged=False
            ),
            logging=codebuild.LoggingOptions(cloud_watch=codebuild.CloudWatchLoggingOptions(log_group=self.log_group)),
            partial_build_spec=codebuild.BuildSpec.from_object(
                {"phases": {"install": {"runtime-versions": RUNTIME_VERSIONS}}}
            ),
            timeout=Duration.minutes(60),
        )
        self.source = pipelines.CodePipelineSource.connection(
            pipeline.repository, pipeline.branch, connection_arn=pipeline.connection_arn, trigger_on_push=True
        )
        self.synth_step = pipelines.CodeBuildStep(
            "Synth",
            input=self.source,
            commands=synth_commands(context.env_name, pipeline.stages),
            primary_output_directory="cdk.out",
            env={"CI": "true"},
        )
        self.code_pipeline = pipelines.CodePipeline(
            self,
            "Pipeline",
            pipeline_name=construct_id,
            synth=self.synth_step,
            self_mutation=True,
            artifact_bucket=self.artifacts.bucket,
            cross_account_keys=True,
            enable_key_rotation=True,
            pipeline_type=codepipeline.PipelineType.V2,
            cli_version=cdk_cli_version(),
            code_build_defaults=build_defaults,
            publish_assets_in_parallel=False,
            docker_enabled_for_synth=False,
            docker_enabled_for_self_mutation=False,
        )
        #: env name -> (stage, diff step or None, approval step or None), in deployment order.
        self.stages: dict[str, tuple[PlatformStage, pipelines.Step | None, pipelines.Step | None]] = {}
        #: env name -> (preflight step, cost step or None): the read-only checks before the stage's deploy.
        self.checks: dict[str, tuple[pipelines.CodeBuildStep, pipelines.CodeBuildStep | None]] = {}
        for name in pipeline.stages:
            self._add_stage(name, configs[name], account, pipeline)
        self.code_pipeline.build_pipeline()
        self._harden()

    def _lookup_role(self, pipeline: PipelineConfig, target_account: str, region: str) -> str:
        return (
            f"arn:{self.partition}:iam::{target_account}:role/"
            f"cdk-{pipeline.cdk_qualifier}-lookup-role-{target_account}-{region}"
        )

    def _read_step(
        self,
        step_id: str,
        commands: list[str],
        statements: list[iam.PolicyStatement],
        lookup_role: str | None,
        *,
        assembly: bool = False,
    ) -> pipelines.CodeBuildStep:
        """A read-only step on the checked-out repository (gpuctl installed), with the synthesized assembly as
        ``cdk.out`` when ``assembly``: with ``statements`` in the pipeline's account, through ``lookup_role`` in
        another."""
        if lookup_role is not None:
            commands = [*profile_commands(lookup_role), *(f"AWS_PROFILE={STAGE_PROFILE} {c}" for c in commands)]
            statements = [iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[lookup_role])]
        synthesized = self.synth_step.primary_output
        assert synthesized is not None  # the synth step names cdk.out as its primary output
        return pipelines.CodeBuildStep(
            step_id,
            input=self.source,
            additional_inputs={"cdk.out": synthesized} if assembly else None,
            install_commands=[GPUCTL_INSTALL],
            commands=commands,
            role_policy_statements=statements,
        )

    def _checks(
        self, name: str, stage: PlatformStage, config: EnvConfig, account: str, pipeline: PipelineConfig
    ) -> tuple[pipelines.CodeBuildStep, pipelines.CodeBuildStep | None]:
        """The stage's preflight step and, before an approval, its cost step."""
        sid = stage_id(name)
        target_account = config.account or account
        lookup_role = None if target_account == account else self._lookup_role(pipeline, target_account, config.region)
        preflight = self._read_step(
            f"Preflight{sid}",
            [preflight_command(name)],
            [
                iam.PolicyStatement(actions=[action], resources=resources)
                for action, resources in read_permissions(compute_needs(config)).items()
            ],
            lookup_role,
        )
        cost = None
        if name in pipeline.approve_before:
            stacks = [
                f"arn:{self.partition}:cloudformation:{config.region}:{target_account}:stack/{s.stack_name}/*"
                for s in stage.platform.stacks
            ]
            cost = self._read_step(
                f"Cost{sid}",
                cost_commands(f"cdk.out/{stage.artifact_id}"),
                [iam.PolicyStatement(actions=["cloudformation:GetTemplate"], resources=stacks)],
                lookup_role,
                assembly=True,
            )
        return preflight, cost

    def _add_stage(self, name: str, config: EnvConfig, account: str, pipeline: PipelineConfig) -> None:
        sid = stage_id(name)
        stage = PlatformStage(self, sid, config=config)
        preflight, cost = self._checks(name, stage, config, account, pipeline)
        pre: list[pipelines.Step] = [preflight]
        diff = approval = None
        if name in pipeline.approve_before:
            target_account = config.account or account
            lookup_role = self._lookup_role(pipeline, target_account, config.region)
            diff = pipelines.CodeBuildStep(
                f"Diff{sid}",
                input=self.synth_step.primary_output,
                install_commands=[
                    f"npm install --no-save --no-package-lock --no-audit --no-fund aws-cdk@{cdk_cli_version()}"
                ],
                commands=[diff_command(self.stack_name, sid)],
                # cdk diff reads the deployed templates through the bootstrap lookup role (read-only) only.
                role_policy_statements=[iam.PolicyStatement(actions=["sts:AssumeRole"], resources=[lookup_role])],
            )
            approval = pipelines.ManualApprovalStep(
                f"Approve{sid}",
                comment=(
                    f"Before approving {name}: read the `cdk diff` printed by the Diff{sid} action of this stage "
                    f"and the cost difference printed by Cost{sid} (their CodeBuild logs). Approve only if every "
                    "change is intended; a replaced or removed bucket, key, file system or repository means lost data."
                ),
            )
            approval.add_step_dependency(preflight)
            approval.add_step_dependency(diff)
            assert cost is not None
            approval.add_step_dependency(cost)
            pre += [cost, diff, approval]
        self.code_pipeline.add_stage(stage, pre=pre)
        self.stages[name] = (stage, diff, approval)
        self.checks[name] = (preflight, cost)

    @property
    def support_stacks(self) -> list[Stack]:
        """CodePipeline's cross-region support stacks (one per region of a stage other than the pipeline's): they
        have no CDK lookup role, so ``cdk diff`` reads them with the caller's own credentials."""
        return [support.stack for support in self.code_pipeline.pipeline.cross_region_support.values()]

    def _harden(self) -> None:
        """Document the findings of the resources aws-cdk-lib ``pipelines`` generates (roles, projects, the
        cross-region replication bucket), fix what can be fixed, and leave anything unexpected reported."""
        for node in self.code_pipeline.node.find_all():
            if isinstance(node, codebuild.CfnProject):
                nag.acknowledge_compliance(
                    node, "CodeBuildProjectSourceRepoUrl", PROJECT_SOURCE_REASON, packs=(nag.HIPAA, nag.PCI_DSS)
                )
            elif isinstance(node, iam.Policy) and node.node.id == "DefaultPolicy":
                cfn = node.node.default_child
                assert isinstance(cfn, iam.CfnPolicy)
                nag.acknowledge_compliance(cfn, "IAMNoInlinePolicy", INLINE_POLICY_REASON)
                nag.acknowledge_wildcards(cfn, expected=_pipeline_wildcards(cfn), on=self)
        cfn_pipeline = self.code_pipeline.pipeline.node.default_child
        assert isinstance(cfn_pipeline, codepipeline.CfnPipeline)
        self.node.add_validation(_RoleArnsAsSub(cfn_pipeline))
        for support in self.code_pipeline.pipeline.cross_region_support.values():
            bucket = support.replication_bucket.node.default_child
            assert isinstance(bucket, s3.CfnBucket)
            # The bucket has a generated physical name: Retain would orphan it when the support stack's first
            # create rolls back, and every retry would fail with "already exists" (rule RetainedNamedResource).
            bucket.apply_removal_policy(for_named_resource(RemovalPolicy.RETAIN))
            bucket.versioning_configuration = s3.CfnBucket.VersioningConfigurationProperty(status="Enabled")
            bucket.lifecycle_configuration = s3.CfnBucket.LifecycleConfigurationProperty(
                rules=[
                    s3.CfnBucket.RuleProperty(
                        id="ExpireReplicatedArtifacts",
                        status="Enabled",
                        expiration_in_days=90,
                        noncurrent_version_expiration=s3.CfnBucket.NoncurrentVersionExpirationProperty(
                            noncurrent_days=30
                        ),
                        abort_incomplete_multipart_upload=s3.CfnBucket.AbortIncompleteMultipartUploadProperty(
                            days_after_initiation=7
                        ),
                    )
                ]
            )
            nag.acknowledge(bucket, nag.AWS_SOLUTIONS, "S1", REPLICATION_LOGGING_REASON)
            nag.acknowledge_compliance(bucket, "S3BucketLoggingEnabled", REPLICATION_LOGGING_REASON)
            nag.acknowledge_compliance(bucket, "S3BucketReplicationEnabled", REPLICATION_REPLICATION_REASON)
            nag.checkov_skip(bucket, "CKV_AWS_18", REPLICATION_LOGGING_REASON)

    def _allow_service_logs(self, key: kms.Key) -> None:
        """Let CloudWatch Logs (this account's log groups here) and S3 server access logging use ``key``."""
        allow_cloudwatch_logs(key, self, sid="AllowCloudWatchLogsForThisAccount")
        allow_s3_access_logs(key, self)

    def _validate_connection(self, pipeline: PipelineConfig, account: str, region: str) -> None:
        parts = pipeline.connection_arn.split(":")
        if parts[3] != region or parts[4] != account:
            raise fail(
                self,
                "pipeline.connection_arn",
                pipeline.connection_arn,
                f"a connection in the pipeline's region {region} and account {account} "
                "(CodePipeline uses connections of its own account and region)",
            )

    def _validate_production_approval(self, pipeline: PipelineConfig, configs: Mapping[str, EnvConfig]) -> None:
        missing = [n for n, c in configs.items() if c.is_production and n not in pipeline.approve_before]
        if missing:
            raise ValidationError(
                self.node.path,
                f"pipeline.approve_before={list(pipeline.approve_before)} is not allowed; allowed: a list that "
                f"includes every production stage ({', '.join(missing)}), because production needs a reviewed diff",
            )


ACCESS_LOGS_SELF_REASON = (
    "This is the server access-log bucket of the pipeline artifacts; it has no access logging itself because "
    "a bucket must not log into itself and a further log bucket would need one too"
)
PROJECT_SOURCE_REASON = (
    "Safe because the project's source type is CODEPIPELINE: the pipeline hands it the artifact from the "
    "CodeConnections source, so no repository URL or credential is stored in the project"
)
INLINE_POLICY_REASON = (
    "Safe because aws-cdk-lib pipelines creates this inline policy for exactly one role of the pipeline and "
    "deletes it with that role; it holds only the grants of that role's step"
)
REPLICATION_LOGGING_REASON = (
    "Safe because this is the CodePipeline cross-region replication bucket that aws-cdk-lib creates: it only "
    "holds KMS-encrypted copies of artifacts whose originals are in the access-logged artifacts bucket"
)
REPLICATION_REPLICATION_REASON = (
    "Safe because this bucket is itself the cross-region copy of pipeline artifacts, since CodePipeline "
    "replicates them here; replicating a transient copy again adds nothing"
)

#: Wildcard actions of aws-cdk-lib's bucket and key grants (artifact bucket read or read/write, key use).
_GRANT_ACTIONS = frozenset(
    {"s3:Abort*", "s3:DeleteObject*", "s3:GetBucket*", "s3:GetObject*", "s3:List*", "kms:GenerateDataKey*",
     "kms:ReEncrypt*"}
)  # fmt: skip
#: Actions aws-cdk-lib pipelines grants on "*", with why each is needed.
_STAR_ACTIONS: dict[str, str] = {
    "kms:Decrypt": "the cross-region replication key is known only by alias in its region",
    "kms:DescribeKey": "the cross-region replication key is known only by alias in its region",
    "kms:Encrypt": "the cross-region replication key is known only by alias in its region",
    "kms:GenerateDataKey*": "the cross-region replication key is known only by alias in its region",
    "kms:ReEncrypt*": "the cross-region replication key is known only by alias in its region",
    "cloudformation:DescribeStacks": "self-mutation reads the bootstrap stack's version",
    "s3:ListBucket": "self-mutation checks the bootstrap bucket",
    "codebuild:BatchGetBuilds": "the asset action starts and polls its own build",
    "codebuild:StartBuild": "the asset action starts and polls its own build",
    "codebuild:StopBuild": "the asset action starts and polls its own build",
    "servicequotas:ListServiceQuotas": "the preflight step reads applied quotas, an action with no resource type",
    "ec2:DescribeInstanceTypeOfferings": "the preflight step reads zone offerings, an action with no resource type",
    "ec2:DescribeCapacityReservations": "the preflight step reads reservations, an action with no resource type",
}
#: Of those, the write actions (checkov CKV_AWS_111 reports them on "*").
_STAR_WRITE_ACTIONS = frozenset(
    {"kms:Encrypt", "kms:GenerateDataKey*", "kms:ReEncrypt*", "codebuild:StartBuild", "codebuild:StopBuild"}
)
_CODEBUILD_LOGS = re.compile(r"arn:[a-z-]+:logs:[a-z0-9-]+:\d{12}:log-group:/aws/codebuild/(<[A-Za-z0-9]+>:)?\*")
_REPORT_GROUPS = re.compile(r"arn:[a-z-]+:codebuild:[a-z0-9-]+:\d{12}:report-group/(<[A-Za-z0-9]+>-)?\*")
_BOOTSTRAP_ROLES = re.compile(r"arn:\*:iam::\d{12}:role/\*")
_STAGE_STACKS = re.compile(r"arn:[<>A-Za-z:-]+:cloudformation:[a-z0-9-]+:\d{12}:stack/[A-Za-z0-9-]+/\*")


def expected_pipeline_wildcards(
    document: Mapping[str, Any], artifacts_bucket_id: str, replication_buckets: Sequence[str] = ()
) -> dict[str, str]:
    """IAM5 findings of a pipeline role's resolved policy that are expected, with the reason for each.

    Anything else (another wildcard action or resource, ``*`` on another action) is not returned, so cdk-nag
    still reports it.
    """
    found: dict[str, str] = {}
    for actions, wildcards, condition in nag.allow_statements(document.get("Statement", [])):
        for action in actions:
            if "*" in action and action in _GRANT_ACTIONS:
                found[f"Action::{action}"] = (
                    f"Safe because {action} comes from aws-cdk-lib's grant on the pipeline artifact bucket or key, "
                    "since the statement names only that bucket, the replication bucket or their keys"
                )
        for flat in wildcards:
            if flat == "*":
                if actions and all(a in _STAR_ACTIONS for a in actions):
                    why = "; ".join(sorted({_STAR_ACTIONS[a] for a in actions}))
                    found["Resource::*"] = f"Safe because aws-cdk-lib pipelines needs {', '.join(actions)} on *: {why}"
            elif flat == f"<{artifacts_bucket_id}.Arn>/*":
                found[f"Resource::{flat}"] = "Safe because the wildcard covers objects of the pipeline artifacts bucket"
            elif any(re.fullmatch(rf"arn:[a-z-]+:s3:::{re.escape(b)}/\*", flat) for b in replication_buckets):
                found[f"Resource::{flat}"] = (
                    "Safe because the wildcard covers objects of the cross-region replication bucket, since "
                    "CodePipeline copies artifacts there"
                )
            elif _CODEBUILD_LOGS.fullmatch(flat):
                found[f"Resource::{flat}"] = (
                    "Safe because CodeBuild's default log group names are per build, since aws-cdk-lib grants "
                    "the project's own /aws/codebuild log streams"
                )
            elif _REPORT_GROUPS.fullmatch(flat):
                found[f"Resource::{flat}"] = (
                    "Safe because CodeBuild report groups are named per build, since aws-cdk-lib grants the "
                    "project's own report groups"
                )
            elif _STAGE_STACKS.fullmatch(flat) and actions == ["cloudformation:GetTemplate"]:
                found[f"Resource::{flat}"] = (
                    "Safe because the wildcard is the stack id CloudFormation appends to the stage's own stack name, "
                    "since the cost step reads only the deployed template of that stack (GetTemplate)"
                )
            elif _BOOTSTRAP_ROLES.fullmatch(flat) and "iam:ResourceTag/aws-cdk:bootstrap-role" in json.dumps(condition):
                found[f"Resource::{flat}"] = (
                    "Safe because the condition limits sts:AssumeRole to roles tagged as CDK bootstrap roles, "
                    "since self-mutation deploys through them"
                )
    return found


def _pipeline_wildcards(policy: iam.CfnPolicy) -> nag.ExpectedFindings:
    """The expected IAM5 findings of one pipeline policy, computed once its document is final.

    When the policy also writes on ``*`` (an action of ``_STAR_WRITE_ACTIONS``) and that is expected, checkov's
    CKV_AWS_111 is skipped on it with the same reason.
    """

    def expected(document: Mapping[str, Any], stack: Stack) -> Mapping[str, str]:
        assert isinstance(stack, PipelineStack)
        bucket = stack.artifacts.bucket.node.default_child
        assert isinstance(bucket, s3.CfnBucket)
        bucket_id = str(stack.resolve(bucket.logical_id))
        replication = [
            str(stack.resolve(s.replication_bucket.bucket_name))
            for s in stack.code_pipeline.pipeline.cross_region_support.values()
        ]
        found = expected_pipeline_wildcards(document, bucket_id, replication)
        star_writes = {
            a
            for st in document.get("Statement", [])
            if "*" in _as_list(st.get("Resource"))
            for a in _as_list(st.get("Action"))
            if a in _STAR_WRITE_ACTIONS
        }
        if star_writes and "Resource::*" in found:
            nag.checkov_skip(policy, "CKV_AWS_111", found["Resource::*"])
        return found

    return expected


@jsii.implements(IValidation)
class _RoleArnsAsSub:
    """Writes the deploy actions' role ARNs (``Fn::Join`` of literals and pseudo parameters) as ``Fn::Sub``."""

    def __init__(self, pipeline: codepipeline.CfnPipeline) -> None:
        self._pipeline = pipeline
        self._done = False

    def validate(self) -> list[str]:
        if self._done:
            return []
        self._done = True
        stages = Stack.of(self._pipeline).resolve(self._pipeline.stages)
        for i, stage in enumerate(stages or []):
            for j, action in enumerate(stage.get("actions") or []):  # L1 (camelCase) names before rendering
                for key, value in sorted((action.get("configuration") or {}).items()):
                    sub = _join_as_sub(value)
                    if sub is not None:
                        self._pipeline.add_property_override(f"Stages.{i}.Actions.{j}.Configuration.{key}", sub)
        return []


def _join_as_sub(value: Any) -> dict[str, str] | None:
    """``{"Fn::Join": ["", [literals and {"Ref": "AWS::..."}]]}`` as the equivalent ``Fn::Sub``, else None."""
    if not isinstance(value, dict) or list(value) != ["Fn::Join"]:
        return None
    delimiter, parts = value["Fn::Join"]
    if delimiter != "":
        return None
    text = []
    for part in parts:
        if isinstance(part, str) and "${" not in part:
            text.append(part)
        elif isinstance(part, dict) and list(part) == ["Ref"] and str(part["Ref"]).startswith("AWS::"):
            text.append("${" + str(part["Ref"]) + "}")
        else:
            return None
    return {"Fn::Sub": "".join(text)}
