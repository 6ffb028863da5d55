"""RetainedNamedResource: a named resource that a failed first create would leave behind."""

from __future__ import annotations

from rule_helpers import findings, template

RULE = "RetainedNamedResource"


def log_group(policy: str | None, name: str | None = "/aws/sagemaker/Endpoints/x") -> dict:
    resource: dict = {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": 30}}
    if name is not None:
        resource["Properties"]["LogGroupName"] = name
    if policy is not None:
        resource["DeletionPolicy"] = policy
        resource["UpdateReplacePolicy"] = policy
    return resource


def test_named_and_retained_is_a_finding() -> None:
    found = findings(RULE, template(Logs=log_group("Retain")))
    assert [(f.logical_id, f.id) for f in found] == [("Logs", "GpuPlatform::GpuPlatform-RetainedNamedResource")]


def test_retain_except_on_create_unnamed_or_deleted_is_compliant() -> None:
    tpl = template(
        A=log_group("RetainExceptOnCreate"),
        B=log_group("Retain", name=None),
        C=log_group("Delete"),
        D=log_group(None),
    )
    assert findings(RULE, tpl) == []


def test_other_named_types_are_checked() -> None:
    tpl = template(
        Bucket={"Type": "AWS::S3::Bucket", "DeletionPolicy": "Retain", "Properties": {"BucketName": "acme-data"}},
        Machine={"Type": "AWS::StepFunctions::StateMachine", "DeletionPolicy": "Retain",
                 "Properties": {"StateMachineName": "train"}},
    )  # fmt: skip
    assert sorted(f.logical_id for f in findings(RULE, tpl)) == ["Bucket", "Machine"]
