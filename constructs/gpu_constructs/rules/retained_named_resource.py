"""Named resources that a failed first create leaves behind must not be ``Retain``-ed.

CloudFormation keeps a resource whose ``DeletionPolicy`` is ``Retain`` even when the stack's *first* create
fails and rolls back. When the resource has an explicit physical name (``LogGroupName``, ``BucketName``, ...),
the retried deployment then fails with "<name> already exists" and keeps failing until someone deletes the
orphan by hand. ``RetainExceptOnCreate`` keeps the resource on later updates and deletes, but lets a rollback
of the create delete it (AWS CloudFormation User Guide, "DeletionPolicy attribute": "RetainExceptOnCreate ...
retains the resource ... except when the resource is being created and the stack operation rolls back";
CDK: ``RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE``).

Non-compliant: a resource with a literal physical name and ``DeletionPolicy: Retain``. Compliant: no physical
name (CloudFormation generates a unique one per attempt), or ``RetainExceptOnCreate`` / ``Delete``/``Snapshot``.
"""

from __future__ import annotations

from gpu_constructs.rules._rule import COMPLIANT, NON_COMPLIANT, NOT_APPLICABLE, Resource, Result, rule

#: The physical-name property of resource types that the platform (or a typical ML app) names explicitly.
NAME_PROPERTIES: dict[str, str] = {
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::S3::Bucket": "BucketName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::IAM::Role": "RoleName",
    "AWS::KMS::Alias": "AliasName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
    "AWS::SSM::Parameter": "Name",
}


@rule(
    id="RetainedNamedResource",
    resource_types=tuple(NAME_PROPERTIES),
    info="A named resource is Retain-ed: a failed first create leaves it behind and every retry fails "
    "with 'already exists'. Use RetainExceptOnCreate (RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE).",
    doc=__doc__,
)
def check(resource: Resource) -> Result:
    name = resource.properties.get(NAME_PROPERTIES[resource.type])
    if name is None:
        return NOT_APPLICABLE
    if resource.definition.get("DeletionPolicy") == "Retain":
        return NON_COMPLIANT
    return COMPLIANT
