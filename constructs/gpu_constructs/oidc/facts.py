"""OIDC issuer presets and IAM OIDC provider facts. Importing this module does not load the CDK.

An AWS account holds at most one IAM OIDC provider per issuer URL: IAM's ``CreateOpenIDConnectProvider``
fails with ``EntityAlreadyExists`` for a URL the account already registered (botocore 1.44.5, service
``iam``, shape ``CreateOpenIDConnectProviderRequest``, member ``Url``: "You cannot register the same provider
multiple times in a single Amazon Web Services account. If you try to submit a URL that has already been
used for an OpenID Connect provider in the Amazon Web Services account, you will get an error.").

The provider's ARN is derived from the URL, so a stack can reference the account's provider without looking
it up: ``arn:<partition>:iam::<account>:oidc-provider/<URL without https://>`` — host, plus the path when
the issuer has one (IAM User Guide, "Creating a role for web identity or OpenID Connect federation":
``"Principal": {"Federated": "arn:aws:iam::123456789012:oidc-provider/server.example.com"}``,
https://docs.aws.amazon.com/IAM/latest/UserGuide/id_roles_create_for-idp_oidc.html; Amazon EKS User Guide,
"Assign IAM roles to Kubernetes service accounts", which builds the ARN from the issuer URL with ``https://``
removed, e.g. ``arn:aws:iam::111122223333:oidc-provider/oidc.eks.region-code.amazonaws.com/id/EXAMPLE...``,
https://docs.aws.amazon.com/eks/latest/userguide/associate-service-account-role.html).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class IssuerPreset:
    url: str
    audience: str
    subject_pattern: re.Pattern[str]
    subject_help: str


PRESETS: dict[str, IssuerPreset] = {
    "github": IssuerPreset(
        url="https://token.actions.githubusercontent.com",
        audience="sts.amazonaws.com",
        subject_pattern=re.compile(
            r"repo:[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+:(ref:refs/heads/[A-Za-z0-9_./-]+|environment:[A-Za-z0-9_. -]+)"
        ),
        subject_help="'repo:OWNER/REPO:ref:refs/heads/BRANCH' or 'repo:OWNER/REPO:environment:NAME'",
    ),
    "gitlab": IssuerPreset(
        url="https://gitlab.com",
        audience="https://gitlab.com",
        subject_pattern=re.compile(
            r"project_path:[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)+:ref_type:(branch|tag):ref:[A-Za-z0-9_./-]+"
        ),
        subject_help="'project_path:GROUP/PROJECT:ref_type:branch:ref:BRANCH'",
    ),
}

#: An IAM OIDC provider ARN: partition, account and the provider name (issuer host and path).
OIDC_PROVIDER_ARN = re.compile(
    r"arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{12}):oidc-provider/(?P<name>[^\s*?]+)"
)

#: How a stack gets the IAM OIDC provider of its issuer (``gitops.oidc_provider``; or an ARN).
CREATE = "create"
EXISTING = "existing"


def issuer_url(issuer: str, url: str | None = None) -> str:
    """The issuer URL of a preset (``github``, ``gitlab``) or the given custom ``url``."""
    if url:
        return url
    preset = PRESETS.get(issuer)
    return preset.url if preset else ""


def provider_name(url: str) -> str:
    """The IAM name of the OIDC provider for ``url``: the URL without ``https://`` (host and path)."""
    return url.removeprefix("https://")


def provider_arn(partition: str, account: str, url: str) -> str:
    """The ARN IAM gives the OIDC provider of ``url`` in ``account`` (deterministic; see the module doc)."""
    return f"arn:{partition}:iam::{account}:oidc-provider/{provider_name(url)}"
