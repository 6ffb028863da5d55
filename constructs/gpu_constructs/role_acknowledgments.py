"""The cdk-nag acknowledgments of a role's own policy, shared by every construct that makes an instance role
(fleets, notebooks): its statements added with their wildcard (IAM5) acknowledgments, exactly those, and the
acknowledgment of S3 data grants made to it later."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from gpu_constructs import nag

__all__ = ["DATA_GRANT_REASON", "PolicyWildcards", "acknowledge_role_policy", "expect_data_grants", "wildcard_findings"]

DATA_GRANT_REASON = (
    "Safe because the data grants name exact S3 and KMS actions and this object-key wildcard covers exactly "
    "one key prefix of one platform bucket, encrypted with the platform's data key"
)


def acknowledge_role_policy(
    scope: Construct,
    role: iam.IRole,
    statements: Sequence[tuple[iam.PolicyStatement, str]],
    policy_reason: str,
) -> PolicyWildcards | None:
    """Add ``statements`` (statement, reason) to ``role``'s policy and acknowledge exactly their wildcards.

    The policy is a new role's ``DefaultPolicy`` or the ``Policy`` the CDK attaches to an imported mutable
    role; an immutable imported role has none (its owner grants the permissions): None then.
    """
    for statement, _reason in statements:
        role.add_to_principal_policy(statement)
    policy = role.node.try_find_child("DefaultPolicy") or role.node.try_find_child("Policy")
    if policy is None:
        return None
    nag.acknowledge_compliance(policy, "IAMNoInlinePolicy", policy_reason)
    wildcards = nag.acknowledge_wildcards(policy, on=scope)
    for statement, reason in statements:
        wildcards.expect(statement, reason)
    return wildcards


def expect_data_grants(
    wildcards: PolicyWildcards | None, grants: Iterable[iam.Grant], encryption_key: kms.IKey | None
) -> None:
    """Acknowledge the wildcard findings (IAM5) of S3 data grants, exactly those (nothing without a policy)."""
    if wildcards is None:
        return
    for grant in grants:
        for statement in grant.principal_statements:
            wildcards.expect(statement, DATA_GRANT_REASON)
    if encryption_key is not None:
        wildcards.expect_key_actions(encryption_key, DATA_GRANT_REASON)


#: The IAM5 acknowledgment of one policy (the platform's recipe: :class:`gpu_constructs.nag.WildcardAcknowledgment`).
PolicyWildcards = nag.WildcardAcknowledgment
wildcard_findings = nag.wildcard_findings
