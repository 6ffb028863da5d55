"""gpu_constructs.authz.policy, case by case against the IAM User Guide's evaluation logic.

Citations: "Policy evaluation logic" (EVAL: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html),
"IAM JSON policy elements: Condition operators" (COND: .../reference_policies_elements_condition_operators.html),
"Conditions with multiple context keys or values" (MULTI: .../reference_policies_multi-value-conditions.html),
AWS KMS Developer Guide "Key policies in AWS KMS" (KMS: https://docs.aws.amazon.com/kms/latest/developerguide/key-policies.html).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_constructs.authz.policy import AuthRequest, PolicySet, UnsupportedPolicy, evaluate

ROLE = "arn:aws:iam::111122223333:role/job"
BUCKET = "arn:aws:s3:::data"
KEY = "arn:aws:kms:us-east-1:111122223333:key/k-1"


def doc(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


def allow(action: Any, resource: Any = "*", **extra: Any) -> dict[str, Any]:
    return {"Effect": "Allow", "Action": action, "Resource": resource, **extra}


def request(action: str = "s3:GetObject", resource: str = f"{BUCKET}/a/b.tar", **context: Any) -> AuthRequest:
    return AuthRequest(ROLE, action, resource, {k.replace("__", ":"): v for k, v in context.items()})


def test_nothing_allows_it_so_it_is_implicitly_denied() -> None:
    # EVAL: "By default, all requests are implicitly denied"
    decision = evaluate(request(), PolicySet(identity=[doc(allow("s3:PutObject", f"{BUCKET}/*"))]))
    assert not decision and "implicitly denied" in decision.reason


def test_an_identity_policy_allows_it_with_wildcards_in_action_and_resource() -> None:
    # EVAL: "an identity-based policy ... allows the request"; action names are case-insensitive, ARNs are not
    policies = PolicySet(identity=[doc(allow("S3:Get*", f"{BUCKET}/a/*"))])
    assert evaluate(request(), policies)
    assert not evaluate(request(resource="arn:aws:s3:::DATA/a/b.tar"), policies)
    assert evaluate(
        request(resource=f"{BUCKET}/a/x"), PolicySet(identity=[doc(allow("s3:GetObject", f"{BUCKET}/a/?"))])
    )


def test_an_explicit_deny_anywhere_wins_over_any_allow() -> None:
    # EVAL: "An explicit deny in any of these policies overrides the allow"
    deny = {"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": f"{BUCKET}/*"}
    decision = evaluate(request(), PolicySet(identity=[doc(allow("s3:*"))], resource=doc(deny)))
    assert not decision and "explicitly denied by resource" in decision.reason


def test_not_action_and_not_resource_match_everything_else() -> None:
    # IAM JSON policy elements: NotAction / NotResource
    not_action = {"Effect": "Allow", "NotAction": "s3:DeleteObject", "Resource": "*"}
    assert evaluate(request(), PolicySet(identity=[doc(not_action)]))
    assert not evaluate(request("s3:DeleteObject"), PolicySet(identity=[doc(not_action)]))
    not_resource = {"Effect": "Allow", "Action": "s3:GetObject", "NotResource": f"{BUCKET}/secret/*"}
    assert evaluate(request(), PolicySet(identity=[doc(not_resource)]))
    assert not evaluate(request(resource=f"{BUCKET}/secret/x"), PolicySet(identity=[doc(not_resource)]))


def test_a_bucket_policy_naming_the_role_is_enough_in_the_same_account() -> None:
    # EVAL, "Evaluating policies within a single account": a resource-based policy that names the principal allows it
    statement = allow("s3:GetObject", f"{BUCKET}/*", Principal={"AWS": ROLE})
    assert evaluate(request(), PolicySet(resource=doc(statement)))


def test_a_bucket_policy_naming_the_account_only_delegates_to_identity_policies() -> None:
    statement = allow("s3:GetObject", f"{BUCKET}/*", Principal={"AWS": "arn:aws:iam::111122223333:root"})
    assert not evaluate(request(), PolicySet(resource=doc(statement)))
    assert evaluate(request(), PolicySet(identity=[doc(allow("s3:GetObject"))], resource=doc(statement)))


def test_a_kms_key_needs_its_key_policy_even_when_iam_allows_it() -> None:
    # KMS: "Unless the key policy explicitly allows it, you cannot use IAM policies to allow access to a KMS key"
    identity = [doc(allow("kms:Decrypt", KEY))]
    only_admins = doc(allow("kms:*", "*", Principal={"AWS": "arn:aws:iam::111122223333:role/admin"}))
    decision = evaluate(request("kms:Decrypt", KEY), PolicySet(identity=identity, resource=only_admins))
    assert not decision and "key policy allows neither" in decision.reason
    enables_iam = doc(allow("kms:*", "*", Principal={"AWS": "arn:aws:iam::111122223333:root"}))
    assert evaluate(request("kms:Decrypt", KEY), PolicySet(identity=identity, resource=enables_iam))
    assert not evaluate(request("kms:Decrypt", KEY), PolicySet(identity=[], resource=enables_iam))
    names_role = doc(allow("kms:Decrypt", "*", Principal={"AWS": ROLE}))
    assert evaluate(request("kms:Decrypt", KEY), PolicySet(identity=[], resource=names_role))


def test_a_permissions_boundary_must_allow_it_too() -> None:
    # EVAL: "the permissions boundary ... must allow the request"
    policies = PolicySet(identity=[doc(allow("s3:*"))], boundary=doc(allow("s3:PutObject")))
    assert not evaluate(request(), policies)


def test_s3_prefix_conditions_need_the_key_in_the_request() -> None:
    # COND: "If the key ... is not present in the request context, the values do not match and the condition is false"
    scoped = doc(allow("s3:ListBucket", BUCKET, Condition={"StringLike": {"s3:prefix": ["code/*", "code"]}}))
    listing = "s3:ListBucket"
    assert evaluate(request(listing, BUCKET, s3__prefix="code/p/abc.tar.gz"), PolicySet(identity=[scoped]))
    assert evaluate(request(listing, BUCKET, s3__prefix="code"), PolicySet(identity=[scoped]))
    assert not evaluate(request(listing, BUCKET, s3__prefix="data/"), PolicySet(identity=[scoped]))
    assert not evaluate(request(listing, BUCKET), PolicySet(identity=[scoped]))


def test_negated_operators_hold_when_the_key_is_absent_and_ifexists_passes_absent_keys() -> None:
    # COND: "If the policy condition requires that the key is not matched, such as StringNotLike or ArnNotLike, and
    # the right key is not present, the condition is true"; ...IfExists: "If the condition key is not present in the
    # context of the request, ... evaluate the condition as true"
    not_like = doc(allow("s3:GetObject", Condition={"StringNotLike": {"aws:userid": "AROA*"}}))
    assert evaluate(request(), PolicySet(identity=[not_like]))
    assert not evaluate(request(aws__userid="AROAX:me"), PolicySet(identity=[not_like]))
    if_exists = doc(allow("s3:GetObject", Condition={"ArnEqualsIfExists": {"ec2:Vpc": "arn:aws:ec2:*:*:vpc/vpc-1"}}))
    assert evaluate(request(), PolicySet(identity=[if_exists]))
    assert not evaluate(request(ec2__Vpc="arn:aws:ec2:us-east-1:1:vpc/vpc-2"), PolicySet(identity=[if_exists]))


def test_condition_keys_are_case_insensitive_and_blocks_are_anded_values_ored() -> None:
    # MULTI: operators and keys are ANDed; "multiple values for a context key ... evaluated using a logical OR"
    both = doc(
        allow(
            "kms:Decrypt",
            Condition={
                "StringEquals": {"kms:ViaService": ["s3.us-east-1.amazonaws.com", "s3.us-west-2.amazonaws.com"]},
                "Bool": {"kms:GrantIsForAWSResource": "true"},
            },
        )
    )
    ok = request(
        "kms:Decrypt", KEY, **{"KMS__VIASERVICE": "s3.us-west-2.amazonaws.com", "kms__GrantIsForAWSResource": "true"}
    )
    assert evaluate(ok, PolicySet(identity=[both]))
    half = request("kms:Decrypt", KEY, kms__ViaService="s3.us-west-2.amazonaws.com")
    assert not evaluate(half, PolicySet(identity=[both]))


def test_a_secure_transport_deny_only_hits_plain_http() -> None:
    # The CDK's enforceSSL statement: Deny s3:* when aws:SecureTransport is "false"
    deny = {"Effect": "Deny", "Principal": {"AWS": "*"}, "Action": "s3:*", "Resource": [BUCKET, f"{BUCKET}/*"],
            "Condition": {"Bool": {"aws:SecureTransport": "false"}}}  # fmt: skip
    policies = PolicySet(identity=[doc(allow("s3:GetObject"))], resource=doc(deny))
    assert evaluate(request(aws__SecureTransport="true"), policies)
    assert not evaluate(request(aws__SecureTransport="false"), policies)


def test_for_any_and_for_all_values_on_multivalued_keys() -> None:
    # MULTI: ForAllValues "returns true if every context key value in the request matches at least one value in
    # the policy ... also returns true if there are no context keys in the request"; ForAnyValue: at least one
    all_values = doc(
        allow("kms:Decrypt", Condition={"ForAllValues:StringEquals": {"kms:EncryptionContextKeys": ["a"]}})
    )
    assert evaluate(request("kms:Decrypt", KEY, kms__EncryptionContextKeys=["a"]), PolicySet(identity=[all_values]))
    assert not evaluate(
        request("kms:Decrypt", KEY, kms__EncryptionContextKeys=["a", "b"]), PolicySet(identity=[all_values])
    )
    assert evaluate(request("kms:Decrypt", KEY), PolicySet(identity=[all_values]))
    any_value = doc(allow("kms:Decrypt", Condition={"ForAnyValue:StringEquals": {"kms:EncryptionContextKeys": ["b"]}}))
    assert evaluate(request("kms:Decrypt", KEY, kms__EncryptionContextKeys=["a", "b"]), PolicySet(identity=[any_value]))
    assert not evaluate(request("kms:Decrypt", KEY), PolicySet(identity=[any_value]))


def test_what_it_does_not_implement_is_refused_not_guessed() -> None:
    ip = doc(allow("s3:GetObject", Condition={"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}))
    with pytest.raises(UnsupportedPolicy, match="IpAddress"):
        evaluate(request(aws__SourceIp="10.1.1.1"), PolicySet(identity=[ip]))
    variable = doc(allow("s3:GetObject", "arn:aws:s3:::data/${aws:username}/*"))
    with pytest.raises(UnsupportedPolicy, match="policy variable"):
        evaluate(request(), PolicySet(identity=[variable]))
