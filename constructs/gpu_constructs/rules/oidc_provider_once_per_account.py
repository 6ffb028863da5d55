"""One IAM OIDC provider per issuer URL per account: two stacks of one account must not both create it.

IAM registers an OpenID Connect provider once per URL per account. ``CreateOpenIDConnectProvider`` (what
CloudFormation calls for ``AWS::IAM::OIDCProvider``, and the CDK's ``Custom::AWSCDKOpenIdConnectProvider``
handler) lists the error ``EntityAlreadyExists`` ("The request was rejected because it attempted to create a
resource that already exists.", HTTP 409), and the request's ``Url`` member says: "You cannot register the
same provider multiple times in a single Amazon Web Services account. If you try to submit a URL that has
already been used for an OpenID Connect provider in the Amazon Web Services account, you will get an error."
(botocore 1.44.5, service ``iam``, operation ``CreateOpenIDConnectProvider``, shapes
``CreateOpenIDConnectProviderRequest.Url`` and ``EntityAlreadyExistsException``; AWS CloudFormation User Guide,
"AWS::IAM::OIDCProvider", https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-iam-oidcprovider.html).
The provider is global to the account (IAM has no regions), so stacks in two regions collide too. Whichever
stack deploys second fails and rolls back. Create the provider in one stack per account and reference it
everywhere else by its deterministic ARN, ``arn:<partition>:iam::<account>:oidc-provider/<host and path>``
(``gpu_constructs.existing_oidc_provider``; ``gitops.oidc_provider: existing`` in this platform's config).

The rule looks across the cloud assembly. Non-compliant: a provider whose literal ``Url`` another provider of
the same template, or of another stack that may deploy into the same account, also creates. One finding per
other provider (``<stack name>/<logical id>``). Two stack views with the same stack name and compatible
account and region are one CloudFormation stack (an app-level stack and the pipeline stage that deploys it),
not two. A stack whose account is unknown (environment-agnostic: it deploys into whatever account the
credentials or the pipeline give it) may share an account with any stack, so it is counted as possibly the
same account. Not applicable: a ``Url`` that is not a literal string (a token or intrinsic function). URLs are
compared exactly as written.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpu_constructs.rules._rule import NOT_APPLICABLE, Resource, Result, StackView, literal, rule

#: Resource types that create an IAM OIDC provider, each with its URL property.
PROVIDER_TYPES: dict[str, str] = {
    "AWS::IAM::OIDCProvider": "Url",
    "Custom::AWSCDKOpenIdConnectProvider": "Url",
}


def _compatible(a: str | None, b: str | None) -> bool:
    return a is None or b is None or a == b


def same_stack(a: StackView, b: StackView) -> bool:
    """True when two views are one CloudFormation stack: same name, and account and region not known to differ."""
    return a.name == b.name and _compatible(a.account, b.account) and _compatible(a.region, b.region)


def possibly_same_account(account: str | None, other: str | None) -> bool:
    """True unless both accounts are known and differ (an unknown account may be any account)."""
    return _compatible(account, other)


def provider_url(definition: object) -> str | None:
    """The literal URL of a provider resource definition (``None``: not a provider, or not a literal URL)."""
    if not isinstance(definition, Mapping):
        return None
    prop = PROVIDER_TYPES.get(str(definition.get("Type", "")))
    if prop is None:
        return None
    return literal((definition.get("Properties") or {}).get(prop))


@rule(
    id="OidcProviderOncePerAccount",
    resource_types=tuple(PROVIDER_TYPES),
    info="Another stack of the same account (or this template) also creates the IAM OIDC provider for this URL: "
    "IAM allows one provider per URL per account, so the second create fails with EntityAlreadyExists. Create "
    "it in one stack per account and reference it elsewhere by ARN (arn:<partition>:iam::<account>:oidc-provider/"
    "<host>).",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    url = literal(resource.properties.get(PROVIDER_TYPES[resource.type]))
    if url is None:
        return NOT_APPLICABLE
    here = resource.stack
    clashes = [
        f"{here.name}/{logical_id}"
        for logical_id, definition in here.resources.items()
        if logical_id != resource.logical_id and provider_url(definition) == url
    ]
    for view in resource.assembly:
        if same_stack(view, here) or not possibly_same_account(view.account, here.account):
            continue
        clashes += [
            f"{view.name}/{logical_id}"
            for logical_id, definition in view.resources.items()
            if provider_url(definition) == url
        ]
    return clashes
