"""EndpointKmsKeyIdFormat: what botocore 1.44.5 still constrains about an endpoint config's KmsKeyId."""

from __future__ import annotations

from typing import Any

import botocore.loaders
from rule_helpers import findings, template

RULE = "EndpointKmsKeyIdFormat"
KEY_ARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"


def config(kms: Any, instance_type: str = "ml.g5.xlarge") -> dict[str, Any]:
    props: dict[str, Any] = {
        "ProductionVariants": [
            {"VariantName": "AllTraffic", "ModelName": "m", "InstanceType": instance_type, "InitialInstanceCount": 1}
        ]
    }
    if kms is not None:
        props["KmsKeyId"] = kms
    return {"Type": "AWS::SageMaker::EndpointConfig", "Properties": props}


def test_the_current_model_allows_kms_on_local_nvme_types_and_says_it_does_not_encrypt_them() -> None:
    shapes = botocore.loaders.create_loader().load_service_model("sagemaker", "service-2")["shapes"]
    text = shapes["CreateEndpointConfigInput"]["members"]["KmsKeyId"]["documentation"]
    assert "the <code>KmsKeyId</code> parameter does not encrypt instance local storage" in text
    assert "fails" not in text  # the older text: "... the call to CreateEndpointConfig fails"
    # so a key on ml.g5 / ml.p4d (local NVMe) is compliant: the rule keeps what the newest model allows
    tpl = template(G5=config(KEY_ARN), P4d=config(KEY_ARN, "ml.p4d.24xlarge"), P3=config(KEY_ARN, "ml.p3.2xlarge"))
    assert findings(RULE, tpl) == []


def test_every_documented_format_and_key_references_are_compliant() -> None:
    tpl = template(
        Key={"Type": "AWS::KMS::Key", "Properties": {}},
        Alias={"Type": "AWS::KMS::Alias", "Properties": {"AliasName": "alias/x", "TargetKeyId": {"Ref": "Key"}}},
        Id=config("1234abcd-12ab-34cd-56ef-1234567890ab"),
        Arn=config(KEY_ARN),
        AliasName=config("alias/ExampleAlias"),
        AliasArn=config("arn:aws:kms:us-west-2:111122223333:alias/ExampleAlias"),
        GovArn=config("arn:aws-us-gov:kms:us-gov-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"),
        KeyRef=config({"Ref": "Key"}),
        KeyAtt=config({"Fn::GetAtt": ["Key", "Arn"]}),
        AliasRef=config({"Ref": "Alias"}),
        Imported=config({"Fn::ImportValue": "data:KeyArn"}),
        Parameter=config({"Ref": "KeyParameter"}),
        NoKey=config(None),
    )
    assert findings(RULE, tpl) == []


def test_a_value_that_is_not_a_kms_key_is_a_finding() -> None:
    tpl = template(
        Bucket={"Type": "AWS::S3::Bucket", "Properties": {}},
        S3Arn=config("arn:aws:s3:::my-bucket"),
        Typo=config("arn:aws:kms:us-east-1:123456789012:1234abcd-12ab-34cd-56ef-1234567890ab"),
        BucketRef=config({"Fn::GetAtt": ["Bucket", "Arn"]}),
    )
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("BucketRef", "GpuPlatform::GpuPlatform-EndpointKmsKeyIdFormat[KmsKeyId:not-a-key:Bucket]"),
        ("S3Arn", "GpuPlatform::GpuPlatform-EndpointKmsKeyIdFormat[KmsKeyId:format]"),
        ("Typo", "GpuPlatform::GpuPlatform-EndpointKmsKeyIdFormat[KmsKeyId:format]"),
    ]
