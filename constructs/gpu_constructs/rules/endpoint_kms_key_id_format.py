"""An endpoint config's ``KmsKeyId`` must be a KMS key reference SageMaker accepts; on local-NVMe types it stays.

Two texts disagree about ``KmsKeyId`` on instance types with local (NVMe instance store) storage:

* Older SageMaker API text, still in the AWS CloudFormation reference of ``AWS::SageMaker::EndpointConfig``
  ``KmsKeyId`` (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-resource-sagemaker-endpointconfig.html)
  and in older SDK models: "Certain Nitro-based instances include local storage, dependent on the instance type.
  Local storage volumes are encrypted using a hardware module on the instance. You can't request a KmsKeyId when
  using an instance type with local storage. If any of the models that you specify in the ProductionVariants
  parameter use nitro-based instances with local storage, do not specify a value for the KmsKeyId parameter. If
  you specify a value for KmsKeyId when using any nitro-based instances with local storage, the call to
  CreateEndpointConfig fails."
* botocore 1.44.5, service ``sagemaker`` (2017-07-24), shape ``CreateEndpointConfigInput``, member ``KmsKeyId``:
  "The Amazon Resource Name (ARN) of a Amazon Web Services Key Management Service key that SageMaker uses to
  encrypt data on the storage volume attached to the ML compute instance that hosts the endpoint. The KmsKeyId
  can be any of the following formats: Key ID: 1234abcd-12ab-34cd-56ef-1234567890ab / Key ARN:
  arn:aws:kms:us-west-2:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab / Alias name: alias/ExampleAlias /
  Alias name ARN: arn:aws:kms:us-west-2:111122223333:alias/ExampleAlias ... Certain Nitro-based instances include
  local storage, dependent on the instance type. Local storage volumes are encrypted using a hardware module on
  the instance. If any of the models that you specify in the ProductionVariants parameter use nitro-based
  instances with local storage, the KmsKeyId parameter does not encrypt instance local storage." The shape
  ``KmsKeyId`` is a string of at most 2048 characters matching ``[a-zA-Z0-9:/_-]*``.

The newest botocore model wins: a ``KmsKeyId`` on an endpoint config whose variants run on local-NVMe types
(ml.g5, ml.g4dn, ml.p4d, ...) is accepted, and the platform keeps it (it encrypts the ML storage volume of any
variant type that has one; the instance store is encrypted by the instance's hardware module either way). This
rule therefore never reports a ``KmsKeyId`` because of the instance type. What the current text still
constrains is the value itself: it must be one of the four formats above. Non-compliant (one finding each):

* ``KmsKeyId:format``: a literal value that is none of key id, key ARN, alias name or alias ARN (for example
  an S3 bucket ARN, or a key ARN of another service);
* ``KmsKeyId:not-a-key:<LogicalId>``: a ``Ref``/``Fn::GetAtt`` to a resource of the same template that is
  neither an ``AWS::KMS::Key`` nor an ``AWS::KMS::Alias``.

Compliant: no ``KmsKeyId``, a value in one of the formats, a reference to a key or alias of the template.
Imports, parameters and other tokens are not applicable.
"""

from __future__ import annotations

import re

from gpu_constructs.rules._rule import COMPLIANT, NOT_APPLICABLE, Resource, Result, ref_id, rule

_KEY_ID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_ALIAS = r"alias/[a-zA-Z0-9/_-]+"
#: The four formats of the botocore text, in the shape's character set ``[a-zA-Z0-9:/_-]*``.
KMS_KEY_ID_FORMATS = re.compile(
    rf"^(?:{_KEY_ID}|mrk-[0-9a-f]{{32}}|{_ALIAS}"
    rf"|arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{{12}}:(?:key/(?:{_KEY_ID}|mrk-[0-9a-f]{{32}})|{_ALIAS}))$"
)
_KEY_TYPES = frozenset({"AWS::KMS::Key", "AWS::KMS::Alias", "AWS::KMS::ReplicaKey"})


@rule(
    id="EndpointKmsKeyIdFormat",
    resource_types=("AWS::SageMaker::EndpointConfig",),
    info="The endpoint config's KmsKeyId is not a KMS key id, key ARN, alias name or alias ARN. (A KmsKeyId on "
    "local-NVMe instance types is allowed by the current SageMaker model; it does not encrypt the instance store.)",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    value = resource.properties.get("KmsKeyId")
    if value is None:
        return NOT_APPLICABLE
    if isinstance(value, str):
        return COMPLIANT if len(value) <= 2048 and KMS_KEY_ID_FORMATS.match(value) else ["KmsKeyId:format"]
    target = ref_id(value)
    if target is None:
        return NOT_APPLICABLE  # an import, a join or another intrinsic: nothing literal to read
    other = resource.other(target)
    if other is None:
        return NOT_APPLICABLE  # a parameter or pseudo parameter
    if other.get("Type") in _KEY_TYPES:
        return COMPLIANT
    return [f"KmsKeyId:not-a-key:{target}"]
