"""A cloud assembly's templates as one deployed account: concrete names, ARNs and policies.

Authorization is decided on concrete strings (a role ARN, a bucket ARN, an ``s3:prefix``), while templates hold
intrinsic functions. :class:`Assembly` substitutes deterministic stand-ins for what a deployment decides, the same
way in every stack, so a name imported by one stack equals the name the exporting stack gives the resource:

* pseudo parameters: the stack's account and region (``123456789012`` / ``us-east-1`` when the stack is
  environment-agnostic), partition ``aws``;
* ``Ref X``: X's name property when the template sets it (``BucketName``, ``RoleName``, ...), else ``X-ref``
  (lowercased for S3 buckets, whose names are lowercase); ``Fn::GetAtt X.Arn``: an ARN of X's type over that name;
* ``Fn::ImportValue``: the exporting stack's ``Outputs`` value, resolved in that stack;
* ``Fn::Join``, ``Fn::Sub``, ``Fn::Select``, ``Fn::Split``, ``Fn::FindInMap``, ``Fn::If`` (the true branch).

It then answers the questions an authorization check asks: the identity policies of a role (inline
``Policies``, every ``AWS::IAM::Policy``/``AWS::IAM::ManagedPolicy`` of the assembly attached to it, and its
permissions boundary when that is a policy of the assembly), a bucket's policy and KMS key, a key's key policy.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from gpu_constructs.authz.policy import PolicySet
from gpu_constructs.templates import StackView, TemplateResource

SAMPLE_ACCOUNT = "123456789012"
SAMPLE_REGION = "us-east-1"
PARTITION = "aws"

#: ARN shapes of ``Fn::GetAtt <Resource>.Arn`` by resource type; ``{name}`` is the resource's physical name.
ARN_FORMATS: dict[str, str] = {
    "AWS::IAM::Role": "arn:{partition}:iam::{account}:role/{name}",
    "AWS::IAM::ManagedPolicy": "arn:{partition}:iam::{account}:policy/{name}",
    "AWS::Lambda::Function": "arn:{partition}:lambda:{region}:{account}:function:{name}",
    "AWS::S3::Bucket": "arn:{partition}:s3:::{name}",
    "AWS::KMS::Key": "arn:{partition}:kms:{region}:{account}:key/{name}",
    "AWS::SNS::Topic": "arn:{partition}:sns:{region}:{account}:{name}",
    "AWS::SQS::Queue": "arn:{partition}:sqs:{region}:{account}:{name}",
    "AWS::StepFunctions::StateMachine": "arn:{partition}:states:{region}:{account}:stateMachine:{name}",
    "AWS::Logs::LogGroup": "arn:{partition}:logs:{region}:{account}:log-group:{name}:*",
    "AWS::DynamoDB::Table": "arn:{partition}:dynamodb:{region}:{account}:table/{name}",
    "AWS::ECR::Repository": "arn:{partition}:ecr:{region}:{account}:repository/{name}",
    "AWS::SSM::Parameter": "arn:{partition}:ssm:{region}:{account}:parameter/{name}",
    "AWS::FSx::FileSystem": "arn:{partition}:fsx:{region}:{account}:file-system/{name}",
    "AWS::SageMaker::Model": "arn:{partition}:sagemaker:{region}:{account}:model/{name}",
    "AWS::CloudWatch::Alarm": "arn:{partition}:cloudwatch:{region}:{account}:alarm:{name}",
    "AWS::IAM::OIDCProvider": "arn:{partition}:iam::{account}:oidc-provider/{name}",
}
#: ``Ref`` of these types is the resource's ARN, not its name.
REF_IS_ARN = frozenset(
    {"AWS::SNS::Topic", "AWS::StepFunctions::StateMachine", "AWS::IAM::ManagedPolicy", "AWS::IAM::OIDCProvider"}
)
#: The property that names a resource, by type.
NAME_PROPERTIES: dict[str, str] = {
    "AWS::S3::Bucket": "BucketName",
    "AWS::IAM::Role": "RoleName",
    "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::ECR::Repository": "RepositoryName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
    "AWS::SSM::Parameter": "Name",
    "AWS::SageMaker::Model": "ModelName",
    "AWS::CloudWatch::Alarm": "AlarmName",
}

#: Resource types whose physical id has a fixed shape (``Ref``, and ``GroupId`` of a security group).
ID_PREFIXES: dict[str, str] = {
    "AWS::EC2::Subnet": "subnet-",
    "AWS::EC2::SecurityGroup": "sg-",
    "AWS::EC2::VPC": "vpc-",
    "AWS::FSx::FileSystem": "fs-",
}


class UnresolvableValue(ValueError):
    """A template value that has no stand-in (an unknown intrinsic, a missing export)."""


@dataclass(frozen=True)
class Located(TemplateResource):
    """A resource of the assembly: its stack, logical id and definition."""

    stack: StackView
    logical_id: str
    definition: Mapping[str, Any]


class Assembly:
    """Every stack of a cloud assembly, with intrinsic functions replaced by deployment stand-ins."""

    def __init__(self, stacks: Sequence[StackView]) -> None:
        self.stacks = tuple(stacks)

    # -- resolving values ---------------------------------------------------------------------------------

    @cached_property
    def _exports(self) -> dict[str, tuple[StackView, Any]]:
        found: dict[str, tuple[StackView, Any]] = {}
        for stack in self.stacks:
            for output in (stack.template.get("Outputs") or {}).values():
                name = (output.get("Export") or {}).get("Name")
                if name is not None:
                    found[str(self.resolve(name, stack))] = (stack, output.get("Value"))
        return found

    def account(self, stack: StackView) -> str:
        return stack.account or SAMPLE_ACCOUNT

    def region(self, stack: StackView) -> str:
        return stack.region or SAMPLE_REGION

    def pseudo(self, name: str, stack: StackView) -> str:
        values = {
            "AWS::AccountId": self.account(stack),
            "AWS::Region": self.region(stack),
            "AWS::Partition": PARTITION,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": stack.name,
            "AWS::StackId": f"arn:aws:cloudformation:{self.region(stack)}:{self.account(stack)}:stack/{stack.name}/0",
            "AWS::NoValue": "",
        }
        if name not in values:
            raise UnresolvableValue(f"pseudo parameter {name}")
        return values[name]

    def resolve(self, value: Any, stack: StackView) -> Any:
        """``value`` with every intrinsic function replaced by its stand-in (recursively)."""
        if isinstance(value, list):
            return [self.resolve(v, stack) for v in value]
        if isinstance(value, Mapping):
            if len(value) == 1:
                ((key, argument),) = value.items()
                if key == "Ref" or key.startswith("Fn::"):
                    return self._function(key, argument, stack)
            return {k: self.resolve(v, stack) for k, v in value.items()}
        return value

    def text(self, value: Any, stack: StackView) -> str:
        resolved = self.resolve(value, stack)
        if not isinstance(resolved, str):
            raise UnresolvableValue(f"{value!r} is not a string")
        return resolved

    def physical_name(self, stack: StackView, logical_id: str) -> str:
        definition = stack.resources.get(logical_id)
        if definition is None:
            parameters = stack.template.get("Parameters") or {}
            if logical_id in parameters:
                return str(parameters[logical_id].get("Default", f"{logical_id}-param"))
            raise UnresolvableValue(f"{stack.name} has no resource or parameter {logical_id}")
        kind = str(definition.get("Type", ""))
        if kind in ID_PREFIXES:  # ids AWS checks by shape: <prefix>-<17 hex digits>
            return ID_PREFIXES[kind] + hashlib.sha256(f"{stack.name}/{logical_id}".encode()).hexdigest()[:17]
        if kind == "AWS::IAM::OIDCProvider" and (definition.get("Properties") or {}).get("Url"):
            # IAM names a provider by its issuer's host and path: arn:aws:iam::<account>:oidc-provider/<host/path>
            return self.text(definition["Properties"]["Url"], stack).removeprefix("https://").rstrip("/")
        given = (definition.get("Properties") or {}).get(NAME_PROPERTIES.get(kind, ""))
        if given is not None:
            return self.text(given, stack)
        return f"{logical_id}-ref".lower() if kind == "AWS::S3::Bucket" else f"{logical_id}-ref"

    def arn(self, stack: StackView, logical_id: str) -> str:
        kind = str(stack.resources.get(logical_id, {}).get("Type", ""))
        name = self.physical_name(stack, logical_id)
        if kind == "AWS::SSM::Parameter":
            name = name.lstrip("/")
        service = kind.split("::")[1].lower() if kind.count("::") == 2 else "unknown"
        shape = ARN_FORMATS.get(kind, f"arn:{{partition}}:{service}:{{region}}:{{account}}:{{name}}")
        return shape.format(partition=PARTITION, region=self.region(stack), account=self.account(stack), name=name)

    def _function(self, function: str, argument: Any, stack: StackView) -> Any:
        if function == "Ref":
            if str(argument).startswith("AWS::"):
                return self.pseudo(str(argument), stack)
            kind = str(stack.resources.get(argument, {}).get("Type", ""))
            return self.arn(stack, argument) if kind in REF_IS_ARN else self.physical_name(stack, argument)
        if function == "Fn::GetAtt":
            logical, attribute = argument.split(".", 1) if isinstance(argument, str) else argument
            if attribute == "Arn":
                return self.arn(stack, logical)
            if attribute in ("KeyId", "RoleId", "Name", "TopicName", "QueueName", "GroupId", "VpcId", "SubnetId"):
                return self.physical_name(stack, logical)
            return f"{logical}-{attribute}"
        if function == "Fn::ImportValue":
            name = str(self.resolve(argument, stack))
            if name not in self._exports:
                raise UnresolvableValue(f"no stack of the assembly exports {name!r}")
            exporter, value = self._exports[name]
            return self.resolve(value, exporter)
        if function == "Fn::Join":
            delimiter, items = argument
            return str(delimiter).join(str(v) for v in self.resolve(items, stack))
        if function == "Fn::Select":
            index, items = argument
            return self.resolve(items, stack)[int(self.resolve(index, stack))]
        if function == "Fn::Split":
            delimiter, text = argument
            return str(self.resolve(text, stack)).split(delimiter)
        if function == "Fn::FindInMap":
            name, first, second = (self.resolve(part, stack) for part in argument)
            return stack.template["Mappings"][name][first][second]
        if function == "Fn::If":
            return self.resolve(argument[1], stack)
        if function == "Fn::Sub":
            return self._sub(argument, stack)
        if function == "Fn::GetAZs":
            return [f"{self.region(stack)}{z}" for z in "abc"]
        if function == "Fn::Base64":
            return self.resolve(argument, stack)
        raise UnresolvableValue(f"CloudFormation function {function}")

    def _sub(self, argument: Any, stack: StackView) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        values = {key: self.resolve(value, stack) for key, value in variables.items()}

        def substitute(match: re.Match[str]) -> str:
            body = match.group(1)
            if body.startswith("!"):
                return "${" + body[1:] + "}"
            if body in values:
                return str(values[body])
            if "." in body and not body.startswith("AWS::"):
                return str(self._function("Fn::GetAtt", body, stack))
            return str(self._function("Ref", body, stack))

        return re.sub(r"\$\{([^}]+)\}", substitute, str(text))

    # -- finding resources ------------------------------------------------------------------------------

    def resources(self, resource_type: str) -> Iterator[Located]:
        for stack in self.stacks:
            for logical_id, definition in stack.resources.items():
                if definition.get("Type") == resource_type:
                    yield Located(stack, logical_id, definition)

    def find_by_arn(self, resource_type: str, arn: str) -> Located | None:
        """The resource of ``resource_type`` whose ARN is ``arn`` (``None`` when it is not in the assembly)."""
        for located in self.resources(resource_type):
            if self.arn(located.stack, located.logical_id) == arn:
                return located
        return None

    def role(self, arn: str) -> Located | None:
        return self.find_by_arn("AWS::IAM::Role", arn)

    def region_of(self, role_arn: str) -> str:
        """The region of the stack that defines the role (where its jobs run); the sample region otherwise."""
        role = self.role(role_arn)
        return self.region(role.stack) if role is not None else SAMPLE_REGION

    def bucket(self, name: str) -> Located | None:
        return self.find_by_arn("AWS::S3::Bucket", f"arn:{PARTITION}:s3:::{name}")

    # -- policies -------------------------------------------------------------------------------------------

    def identity_policies(self, role_arn: str) -> PolicySet:
        """The identity policies and permissions boundary of the role ``role_arn`` (a role of the assembly)."""
        role = self.role(role_arn)
        if role is None:
            raise UnresolvableValue(f"role {role_arn} is not a role of the cloud assembly")
        name = self.physical_name(role.stack, role.logical_id)
        documents: list[Mapping[str, Any]] = [
            self.resolve(p.get("PolicyDocument", {}), role.stack) for p in role.properties.get("Policies") or []
        ]
        managed = {str(a) for a in self.resolve(role.properties.get("ManagedPolicyArns") or [], role.stack)}
        for kind in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            for policy in self.resources(kind):
                roles = [str(r) for r in self.resolve(policy.properties.get("Roles") or [], policy.stack)]
                attached = name in roles or self.arn(policy.stack, policy.logical_id) in managed
                if attached:
                    documents.append(self.resolve(policy.properties.get("PolicyDocument", {}), policy.stack))
        boundary = None
        if role.properties.get("PermissionsBoundary") is not None:
            boundary_arn = str(self.resolve(role.properties["PermissionsBoundary"], role.stack))
            found = self.find_by_arn("AWS::IAM::ManagedPolicy", boundary_arn)
            if found is None:
                raise UnresolvableValue(f"permissions boundary {boundary_arn} is not a policy of the cloud assembly")
            boundary = self.resolve(found.properties.get("PolicyDocument", {}), found.stack)
        return PolicySet(identity=tuple(documents), boundary=boundary)

    def resource_policy(self, arn: str) -> Mapping[str, Any] | None:
        """The resource policy of the resource ``arn``: a bucket's bucket policy (objects included), a key's key
        policy, a topic's topic policy, a repository's policy; ``None`` when it has none or is not in the assembly."""
        if arn.startswith(f"arn:{PARTITION}:s3:::"):
            bucket_name = arn.removeprefix(f"arn:{PARTITION}:s3:::").split("/", 1)[0]
            for policy in self.resources("AWS::S3::BucketPolicy"):
                if str(self.resolve(policy.properties.get("Bucket"), policy.stack)) == bucket_name:
                    return self.resolve(policy.properties.get("PolicyDocument", {}), policy.stack)
            return None
        key = self.find_by_arn("AWS::KMS::Key", arn)
        if key is not None:
            return self.resolve(key.properties.get("KeyPolicy", {}), key.stack)
        for policy in self.resources("AWS::SNS::TopicPolicy"):
            if arn in [str(t) for t in self.resolve(policy.properties.get("Topics") or [], policy.stack)]:
                return self.resolve(policy.properties.get("PolicyDocument", {}), policy.stack)
        repository = self.find_by_arn("AWS::ECR::Repository", arn)
        if repository is not None and repository.properties.get("RepositoryPolicyText") is not None:
            return self.resolve(repository.properties["RepositoryPolicyText"], repository.stack)
        return None

    def bucket_key(self, bucket_name: str) -> str | None:
        """The ARN of the KMS key that encrypts new objects of the bucket (SSE-KMS), else ``None``."""
        bucket = self.bucket(bucket_name)
        if bucket is None:
            return None
        rules = (bucket.properties.get("BucketEncryption") or {}).get("ServerSideEncryptionConfiguration") or []
        for rule in rules:
            default = rule.get("ServerSideEncryptionByDefault") or {}
            if str(default.get("SSEAlgorithm", "")).startswith("aws:kms") and default.get("KMSMasterKeyID"):
                return self.key_arn(str(self.resolve(default["KMSMasterKeyID"], bucket.stack)), bucket.stack)
        return None

    def bucket_key_enabled(self, bucket_name: str) -> bool:
        bucket = self.bucket(bucket_name)
        if bucket is None:
            return False
        rules = (bucket.properties.get("BucketEncryption") or {}).get("ServerSideEncryptionConfiguration") or []
        return any(rule.get("BucketKeyEnabled") is True for rule in rules)

    def key_arn(self, key: str, stack: StackView) -> str:
        """A key given as an ARN or a key id of the assembly, as its ARN."""
        if key.startswith("arn:"):
            return key
        return f"arn:{PARTITION}:kms:{self.region(stack)}:{self.account(stack)}:key/{key}"

    def policies_for(self, principal: str, resource_arn: str) -> PolicySet:
        """Everything that applies to ``principal`` acting on ``resource_arn``."""
        identity = self.identity_policies(principal)
        return PolicySet(identity.identity, identity.boundary, self.resource_policy(resource_arn))


def state_machine_definition(assembly: Assembly, machine: Located) -> dict[str, Any]:
    """The parsed ASL of a state machine of the assembly, every token replaced by its stand-in (JSON-escaped:
    tokens sit inside JSON strings)."""
    body = machine.properties.get("DefinitionString")
    if isinstance(body, Mapping) and "Fn::Join" in body:
        delimiter, parts = body["Fn::Join"]
        body = str(delimiter).join(
            part if isinstance(part, str) else json.dumps(str(assembly.resolve(part, machine.stack)))[1:-1]
            for part in parts
        )
    elif body is not None and not isinstance(body, str):
        body = assembly.text(body, machine.stack)
    if not isinstance(body, str):
        raise UnresolvableValue(f"{machine.logical_id} has no DefinitionString")
    parsed: dict[str, Any] = json.loads(body)
    return parsed
