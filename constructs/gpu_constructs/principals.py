"""What the platform's compute constructs (a fleet, a notebook, a training pipeline) expose alike:
``connections`` (their security groups), ``grant_principal`` (their role) and, for a fleet and a notebook, the
acknowledgment of the data grants made to that role."""

from __future__ import annotations

from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms

from gpu_constructs.role_acknowledgments import PolicyWildcards, expect_data_grants

__all__ = ["RoleCompute", "RoleConnectable"]


class RoleConnectable:
    """Mixin of a construct that runs as ``role`` behind the security groups of ``_connections``
    (``ec2.IConnectable`` and ``iam.IGrantable``)."""

    role: iam.IRole
    _connections: ec2.Connections

    @property
    def connections(self) -> ec2.Connections:
        """The security groups the construct's compute runs behind: open targets (FSx, EFS) to it with them."""
        return self._connections

    @property
    def grant_principal(self) -> iam.IPrincipal:
        """The construct's role: grant it access to the data its compute reads."""
        return self.role.grant_principal


class RoleCompute(RoleConnectable):
    """A :class:`RoleConnectable` that also acknowledges the data grants made to its role.

    ``_wildcards`` is the IAM5 acknowledgment of the role's own policy (None for a role passed in).
    """

    _wildcards: PolicyWildcards | None

    def acknowledge_data_grants(self, *grants: iam.Grant, encryption_key: kms.IKey | None = None) -> None:
        """Acknowledge the wildcard findings (IAM5) of S3 data grants to this construct's role, exactly those.

        ``PlatformStorage`` grants name exact actions (``s3:GetObject``, ``s3:PutObject``, ...); what remains is
        the object-key wildcard of each grant's resource, ``<bucket>/<prefix>*`` (one prefix of one bucket).
        ``encryption_key``: wildcard KMS actions on that key only are acknowledged too (grants made by other
        code may add them; the platform's exact grants do not). Nothing for a role passed in (its owner's
        policy).
        """
        expect_data_grants(self._wildcards, grants, encryption_key)
