"""The ``pipeline`` section: the self-mutating CDK pipeline."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from stacks.config._base import (
    ENV_NAME_RE,
    AccountId,
    Allowed,
    CdkQualifier,
    Check,
    Retention,
    StrictModel,
    duplicates,
)

#: An AWS CodeConnections (or CodeStar Connections) connection ARN.
ConnectionArn = Annotated[
    str,
    Field(
        pattern=r"^arn:aws[a-z-]*:(codeconnections|codestar-connections):[a-z]{2}(-[a-z]+)+-\d:\d{12}:connection/"
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
    ),
    Allowed(
        message="must be a connection ARN such as arn:aws:codeconnections:us-west-2:123456789012:connection/"
        "<uuid> (create it in the console: Developer Tools > Settings > Connections)"
    ),
]

#: A repository as OWNER/REPO.
Repository = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"),
    Check(lambda v: ".." not in v, "'..'"),
    Allowed(message="must be OWNER/REPO (letters, digits, '_', '.', '-'), e.g. acme/gpu-platform"),
]

#: One exact git branch name (no wildcards, spaces, '..', leading '/' or '-', trailing '/' or '.lock').
BranchName = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9_./-]+$"),
    Check(lambda v: ".." not in v and not v.startswith(("/", "-")) and not v.endswith(("/", ".lock")), "ref"),
    Allowed(message="must be one exact branch name such as main or release/1.x (no wildcards or spaces)"),
]


class PipelineConfig(StrictModel):
    """A self-mutating CDK pipeline (AWS CodePipeline) that tests, synthesizes and deploys from git."""

    connection_arn: ConnectionArn = Field(
        description="AWS CodeConnections (or CodeStar Connections) ARN of the git connection, "
        "arn:aws:codeconnections:REGION:ACCOUNT:connection/ID"
    )
    repository: Repository = Field(description="Repository as OWNER/REPO (GitHub, GitLab or Bitbucket)")
    branch: BranchName = Field("main", description="Branch whose pushes run the pipeline")
    stages: Annotated[
        tuple[str, ...], Field(min_length=1), Allowed(message="list at least one environment, e.g. [dev, prod]")
    ] = Field(description="Environments deployed in order, each a config/<env>.yaml, e.g. [dev, prod]")
    approve_before: tuple[str, ...] = Field(
        (), description="Stages that need a manual approval after their `cdk diff` (every production stage must)"
    )
    account: AccountId | None = Field(
        None, description="12-digit account of the pipeline (default: this environment's account; one is needed)"
    )
    cdk_qualifier: CdkQualifier = Field("hnb659fds", description="Bootstrap qualifier of the target accounts")
    log_retention_days: Retention = Field(365, description="Retention of the CodeBuild log group")

    @field_validator("stages")
    @classmethod
    def _stages(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        bad = [v for v in value if not ENV_NAME_RE.fullmatch(v)]
        if bad:
            raise ValueError(f"{bad} are not environment names; allowed: names of config/<env>.yaml files")
        dupes = duplicates(value)
        if dupes:
            raise ValueError(f"duplicate stage(s) {dupes}; list each environment once")
        return value

    @model_validator(mode="after")
    def _approvals(self) -> PipelineConfig:
        unknown = [s for s in self.approve_before if s not in self.stages]
        if unknown:
            raise ValueError(f"approve_before: {list(unknown)} are not stages; allowed: {', '.join(self.stages)}")
        return self
