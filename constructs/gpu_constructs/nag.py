"""Scoped acknowledgments of compliance findings (cdk-nag 3.x / CDK validation plugins).

Each call acknowledges exactly ONE rule id on ONE L1 resource, with a reason that says why the
finding is safe there. The security tests walk the construct tree and fail any acknowledgment that is
not on an L1 resource, names more than one rule, or has a reason shorter than 20 characters or without
a "because"/"since" clause.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import aws_cdk as cdk
import jsii
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import IConstruct, IValidation

from gpu_constructs.errors import ValidationError, path_of
from gpu_constructs.templates import as_list  # one home for the policy-field reader (CDK-free)

AWS_SOLUTIONS = "AwsSolutions"
HIPAA = "HIPAA.Security"
NIST_R5 = "NIST.800.53.R5"
PCI_DSS = "PCI.DSS.321"
#: The compliance packs whose rules share a name (HIPAA, NIST 800-53 R5, PCI DSS 3.2.1).
COMPLIANCE_PACKS: tuple[str, ...] = (HIPAA, NIST_R5, PCI_DSS)

REASON_MIN_LENGTH = 20
REASON_MARKERS = ("because", "since")


def rule_id(pack: str, rule: str) -> str:
    """Full validation rule id, e.g. ``NIST.800.53.R5::NIST.800.53.R5-S3BucketReplicationEnabled``."""
    return f"{pack}::{pack}-{rule}"


def check_reason(reason: str, where: str = "acknowledgment") -> None:
    """Raise unless ``reason`` is at least 20 characters and says why (contains 'because' or 'since')."""
    text = reason.strip()
    if len(text) < REASON_MIN_LENGTH or not any(m in text.lower() for m in REASON_MARKERS):
        raise ValidationError(
            where,
            f"reason={reason!r} is not allowed; allowed: at least {REASON_MIN_LENGTH} characters that say why "
            f"the finding is safe here, with a 'because' or 'since' clause",
        )


def _l1(scope: IConstruct) -> IConstruct:
    """The L1 resource of ``scope`` (itself when it is one, else its default child)."""
    if isinstance(scope, cdk.CfnResource):
        return scope
    child = scope.node.default_child
    if child is None or not isinstance(child, cdk.CfnResource):
        raise ValidationError(
            path_of(scope),  # type: ignore[arg-type]
            "acknowledgments go on one L1 resource; this construct has no default L1 child",
        )
    return child


def acknowledge(scope: IConstruct, pack: str, rule: str, reason: str) -> None:
    """Acknowledge one rule of one pack on the L1 resource of ``scope``."""
    target = _l1(scope)
    check_reason(reason, f"{target.node.path}: {rule_id(pack, rule)}")
    cdk.Validations.of(target).acknowledge(cdk.Acknowledgment(id=rule_id(pack, rule), reason=reason))


def acknowledge_compliance(scope: IConstruct, rule: str, reason: str, packs: Iterable[str] = COMPLIANCE_PACKS) -> None:
    """Acknowledge the same-named rule once per compliance pack (one id per call) on ``scope``'s L1."""
    for pack in packs:
        acknowledge(scope, pack, rule, reason)


CHECKOV_METADATA_KEY = "checkov"


def checkov_skip(scope: IConstruct, check_id: str, comment: str) -> None:
    """Skip one checkov check on the L1 resource of ``scope`` via its template Metadata, with a comment.

    The comment follows the same rule as acknowledgments: it says why the finding is safe.
    """
    target = _l1(scope)
    check_reason(comment, f"{target.node.path}: {check_id}")
    assert isinstance(target, cdk.CfnResource)
    existing = target.get_metadata(CHECKOV_METADATA_KEY) or {}
    skips = [s for s in existing.get("skip", []) if s.get("id") != check_id]
    skips.append({"id": check_id, "comment": comment})
    target.add_metadata(CHECKOV_METADATA_KEY, {"skip": skips})


def flatten_reference(node: Any) -> str:
    """A resolved CloudFormation value as cdk-nag writes it in finding ids (``<Logical.Arn>/prefix/*``).

    Granular findings such as ``AwsSolutions-IAM5[Resource::<Bucket.Arn>/models/*]`` name the resource
    this way, so a construct can acknowledge exactly the wildcards it grants on purpose.
    """
    if node is None:
        return ""
    if isinstance(node, str):
        return node.replace("${", "<").replace("}", ">")
    if isinstance(node, dict):
        if "Fn::Join" in node:
            delimiter, items = node["Fn::Join"]
            return str(delimiter).join(flatten_reference(item) for item in items)
        if "Fn::Sub" in node:
            return flatten_reference(node["Fn::Sub"])
        if "Fn::GetAtt" in node:
            resource, attribute = node["Fn::GetAtt"]
            return f"<{flatten_reference(resource)}.{flatten_reference(attribute)}>"
        if "Fn::ImportValue" in node:
            return flatten_reference(node["Fn::ImportValue"])
        if "Ref" in node:
            return f"<{flatten_reference(node['Ref'])}>"
    return json.dumps(node, separators=(",", ":"))


class AllowStatement(NamedTuple):
    """A resolved Allow statement as the IAM5 checks read it."""

    actions: list[str]
    #: its resources that hold a ``*``, flattened as cdk-nag names them in ``Resource::...`` finding ids
    wildcards: list[str]
    condition: Mapping[str, Any]


def allow_statements(statements: Iterable[Mapping[str, Any]]) -> Iterator[AllowStatement]:
    """The Allow statements of a resolved policy, in order (Deny statements cause no IAM5 finding)."""
    for statement in statements:
        if statement.get("Effect") != "Allow":
            continue
        actions = [str(a) for a in as_list(statement.get("Action"))]
        flat = (flatten_reference(resource) for resource in as_list(statement.get("Resource")))
        yield AllowStatement(actions, [f for f in flat if "*" in f], statement.get("Condition", {}))


# --------------------------------------------------------------------------------------------------
# Wildcard findings (AwsSolutions-IAM5)
# --------------------------------------------------------------------------------------------------


def wildcard_findings(statements: Iterable[Mapping[str, Any]]) -> set[str]:
    """The IAM5 finding ids (``Action::x*``, ``Resource::...*``) of resolved Allow statements."""
    found: set[str] = set()
    for actions, wildcards, _ in allow_statements(statements):
        found.update(f"Action::{a}" for a in actions if "*" in a)
        found.update(f"Resource::{flat}" for flat in wildcards)
    return found


def star_resource_actions(statements: Iterable[Mapping[str, Any]]) -> set[str]:
    """The actions of resolved Allow statements whose resources include ``*`` (one ``Resource::*`` finding)."""
    return {action for allow in allow_statements(statements) if "*" in allow.wildcards for action in allow.actions}


#: ``expected(document, stack)``: the finding ids a policy causes on purpose, with the reason for each.
ExpectedFindings = Callable[[Mapping[str, Any], cdk.Stack], Mapping[str, str]]


@jsii.implements(IValidation)
class WildcardAcknowledgment:
    """Acknowledges the expected IAM5 findings of one IAM policy, in the app's validation phase.

    Cross-stack references only become imports when the app is prepared, so the exact finding ids are
    computed then (before the compliance plugins run), one acknowledgment per finding id on the policy's L1
    resource. A finding is expected when one of these says so (the first one that does gives the reason):

    * ``expected(document, stack)``: a function of the resolved policy document (for findings that depend on
      logical ids or on conditions);
    * ``Resource::*``: when every action of the Allow statements on ``*`` is in ``star_actions`` or is an
      action of a statement passed to :meth:`expect` with ``*`` among its resources (actions without
      resource-level permissions); the reason is ``star_reason`` or that statement's reason;
    * a statement passed to :meth:`expect`: its own wildcards, with its reason;
    * :meth:`expect_key_actions`: wildcard ``kms:`` actions of statements whose only resource is the key;
    * ``patterns``: ``(regex, reason)`` pairs, the first whose regex fully matches a reported finding id.

    Any other wildcard stays reported. Use :func:`acknowledge_wildcards` to create and register one.
    """

    def __init__(
        self,
        policy: IConstruct,
        *,
        patterns: Sequence[tuple[str, str]] = (),
        star_actions: Iterable[str] = (),
        star_reason: str | None = None,
        expected: ExpectedFindings | None = None,
    ) -> None:
        self._policy = policy
        self._patterns = [(re.compile(pattern), reason) for pattern, reason in patterns]
        self._star_actions = frozenset(star_actions)
        self._star_reason = star_reason
        self._expected_fn = expected
        self._statements: list[tuple[iam.PolicyStatement, str]] = []
        self._keys: list[tuple[kms.IKey, str]] = []
        self._done = False

    def expect(self, statement: iam.PolicyStatement, reason: str) -> None:
        """Expect the wildcards of ``statement`` (as resolved in the final policy), with ``reason``."""
        check_reason(reason, f"{self._policy.node.path}: IAM5")
        self._statements.append((statement, reason))

    def expect_key_actions(self, key: kms.IKey, reason: str) -> None:
        """Expect the wildcard KMS actions of statements whose only resource is ``key``."""
        check_reason(reason, f"{self._policy.node.path}: IAM5")
        self._keys.append((key, reason))

    def _cfn(self) -> iam.CfnPolicy | None:
        cfn = self._policy if isinstance(self._policy, iam.CfnPolicy) else self._policy.node.default_child
        return cfn if isinstance(cfn, iam.CfnPolicy) else None  # an imported role's policy: nothing here

    def expected_findings(self, document: Mapping[str, Any], stack: cdk.Stack) -> dict[str, str]:
        """The finding ids of the resolved ``document`` to acknowledge, with the reason for each."""
        statements = as_list(document.get("Statement"))
        reported = wildcard_findings(statements)
        reasons: dict[str, str] = {}
        if self._expected_fn is not None:
            for finding, reason in self._expected_fn(document, stack).items():
                reasons.setdefault(finding, reason)
        self._expect_star(statements, reported, reasons)
        for statement, reason in self._statements:
            for finding in sorted(wildcard_findings([stack.resolve(statement.to_statement_json())])):
                if finding != "Resource::*" and finding in reported:
                    reasons.setdefault(finding, reason)
        for key, reason in self._keys:
            key_arn = flatten_reference(stack.resolve(key.key_arn))
            for st in statements:
                if st.get("Effect") != "Allow" or [flatten_reference(r) for r in as_list(st.get("Resource"))] != [
                    key_arn
                ]:
                    continue
                for action in map(str, as_list(st.get("Action"))):
                    if action.startswith("kms:") and "*" in action:
                        reasons.setdefault(f"Action::{action}", reason)
        for finding in sorted(reported - {"Resource::*"}):
            for pattern, reason in self._patterns:
                if pattern.fullmatch(finding):
                    reasons.setdefault(finding, reason)
                    break
        return reasons

    def _expect_star(self, statements: list[Any], reported: set[str], reasons: dict[str, str]) -> None:
        if "Resource::*" not in reported:
            return
        allowed = set(self._star_actions)
        reason = self._star_reason
        for statement, why in self._statements:
            if "*" in statement.resources:
                allowed.update(map(str, statement.actions))
                reason = reason or why
        if reason is not None and star_resource_actions(statements) <= allowed:
            reasons.setdefault("Resource::*", reason)

    def validate(self) -> list[str]:
        if self._done:
            return []
        self._done = True
        cfn = self._cfn()
        if cfn is None:
            return []
        stack = cdk.Stack.of(cfn)
        document = stack.resolve(cfn.policy_document)
        for finding, reason in sorted(self.expected_findings(document, stack).items()):
            acknowledge(cfn, AWS_SOLUTIONS, f"IAM5[{finding}]", reason)
        return []


def acknowledge_wildcards(
    policy: IConstruct,
    patterns: Sequence[tuple[str, str]] = (),
    *,
    star_actions: Iterable[str] = (),
    star_reason: str | None = None,
    expected: ExpectedFindings | None = None,
    on: IConstruct | None = None,
) -> WildcardAcknowledgment:
    """Acknowledge, when the app is validated, the IAM5 findings ``policy`` causes on purpose.

    ``policy`` is an ``iam.Policy`` (a role's ``DefaultPolicy``) or its ``iam.CfnPolicy``; the validation runs
    on ``on`` (default: the policy). See :class:`WildcardAcknowledgment` for what is expected; statements
    can be added later with :meth:`WildcardAcknowledgment.expect`. Example::

        nag.acknowledge_wildcards(
            role_policy,
            [(r"Resource::[^*]*/datasets/\\*", "Safe because the wildcard is the key suffix of one prefix")],
            star_actions={"ecr:GetAuthorizationToken"},
            star_reason="Safe because ecr:GetAuthorizationToken has no resource-level permissions",
        )
    """
    for _pattern, reason in patterns:
        check_reason(reason, f"{policy.node.path}: IAM5")
    if star_reason is not None:
        check_reason(star_reason, f"{policy.node.path}: IAM5")
    validation = WildcardAcknowledgment(
        policy, patterns=patterns, star_actions=star_actions, star_reason=star_reason, expected=expected
    )
    (on or policy).node.add_validation(validation)
    return validation
