"""The requests SageMaker makes with an endpoint's execution role, derived from the synthesized model and config.

For every ``AWS::SageMaker::Endpoint`` of an assembly, its ``AWS::SageMaker::EndpointConfig`` and the
``AWS::SageMaker::Model`` of each production variant give the requests below, all made with the model's
``ExecutionRoleArn`` (in the region of the role's stack). What SageMaker does with that role is in the SageMaker
Developer Guide, "How to use SageMaker AI execution roles", section "CreateModel API: Execution Role Permissions"
(https://docs.aws.amazon.com/sagemaker/latest/dg/sagemaker-roles.html#sagemaker-roles-createmodel-perms), which lists
``cloudwatch:PutMetricData``, ``logs:CreateLogStream``, ``logs:PutLogEvents``, ``logs:CreateLogGroup``,
``logs:DescribeLogStreams``, ``s3:GetObject``, ``s3:ListBucket`` and the four ECR pull actions, and says to "Scope S3
permissions to objects that you specify in the ``PrimaryContainer.ModelDataUrl``" and "Scope Amazon ECR permissions
to a specific registry path that you specify as the ``PrimaryContainer.Image``":

* ``model``: the model artifact is read (``s3:GetObject`` on ``ModelDataUrl``; ``kms:Decrypt`` through S3 when its
  bucket is SSE-KMS). A ``ModelDataSource.S3DataSource`` of ``S3DataType`` ``S3Prefix`` is listed first
  (``s3:ListBucket`` with ``s3:prefix``), as a training channel is;
* ``image``: an image of this account's ECR is pulled (``ecr:GetAuthorizationToken`` on ``*``, then
  ``ecr:BatchGetImage``, ``ecr:GetDownloadUrlForLayer``, ``ecr:BatchCheckLayerAvailability`` on the repository). An
  image given as an SSM parameter (``AWS::SSM::Parameter::Value<String>``) is the value of the assembly's parameter
  of that name. A repository encrypted with a KMS key needs no key permission of the puller: "Amazon ECR adds an
  AWS KMS grant to the KMS key with the Amazon ECR repository as the grantee principal" and decrypts through it
  when an image is pulled (Amazon ECR User Guide, "Encryption at rest"). Another account's image (an AWS DLC) is
  that registry's to authorize;
* ``logs``: the container's logs go to ``/aws/sagemaker/Endpoints/<endpoint name>`` (``logs:CreateLogStream`` and
  ``logs:PutLogEvents`` on a stream ``<variant>/<instance id>``), metrics to ``/aws/sagemaker/Endpoints``
  (``cloudwatch:PutMetricData`` with ``cloudwatch:namespace``);
* ``rollback-alarms``: "If you plan to use the SageMaker deployment guardrails feature for model deployment in
  production, ensure that your execution role has permission to perform the ``cloudwatch:DescribeAlarms`` action
  on your auto-rollback alarms" (same section): one request per alarm of
  ``DeploymentConfig.AutoRollbackConfiguration``;
* ``vpc``: with ``VpcConfig``, the ENIs in the model's subnets ("If you specify a private VPC for your model, add
  the following permissions": ``ec2:CreateNetworkInterface``, ``ec2:CreateNetworkInterfacePermission``,
  ``ec2:DeleteNetworkInterface``, ``ec2:DeleteNetworkInterfacePermission`` and the five ``ec2:Describe*``), with the
  condition keys ``ec2:Vpc`` (the subnets' VPC) and ``aws:RequestedRegion``;
* ``data-capture``: captured requests are written under ``DataCaptureConfig.DestinationS3Uri``
  (``<uri>/<endpoint>/<variant>/yyyy/mm/dd/hh/<file>.jsonl``) with ``DataCaptureConfig.KmsKeyId`` (``s3:PutObject``,
  ``kms:GenerateDataKey`` and, for a multipart upload, ``kms:Decrypt``, through S3);
* ``async-input``/``async-output``/``async-failure``: an asynchronous endpoint reads the request payload the client
  put in S3 ("To invoke the endpoint, you need to place the request payload in Amazon S3": the location the stack
  publishes as an output ``.../<endpoint>/input/``), writes results under ``AsyncInferenceConfig.OutputConfig``
  ``S3OutputPath`` and failures under ``S3FailurePath``, with ``OutputConfig.KmsKeyId``;
* ``async-notify``: results and failures are published to ``NotificationConfig.SuccessTopic``/``ErrorTopic``
  (``sns:Publish``): SageMaker publishes with the execution role ("create an IAM role that can run SageMaker AI and
  has access to Amazon S3 and Amazon SNS. Using this role, SageMaker AI can run under your account and access your
  Amazon S3 bucket and Amazon SNS topics", "Complete the prerequisites", Asynchronous inference). To an encrypted
  topic the publisher also needs ``kms:GenerateDataKey*`` and ``kms:Decrypt`` on the topic's key (Amazon SNS
  Developer Guide, "Key management": "Allow a user to send messages to a topic with SSE").

Not execution-role requests: the endpoint config's ``KmsKeyId`` (the ML storage volume key) is used by whoever
calls ``CreateEndpoint``/``UpdateEndpoint`` ("The KMS key policy must grant permission to the IAM role that you
specify in your CreateEndpoint, UpdateEndpoint requests", botocore ``CreateEndpointConfigInput.KmsKeyId``): here
CloudFormation's execution role, outside the assembly; and it "does not encrypt instance local storage" of types
with local NVMe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpu_constructs.authz.assembly import PARTITION, Assembly, Located, UnresolvableValue
from gpu_constructs.authz.journeys import ECR_URI, SECURE, s3_read_requests, s3_write_requests, split_s3
from gpu_constructs.authz.policy import AuthRequest
from gpu_constructs.templates import StackView

__all__ = [
    "ENDPOINT_LOG_GROUP_PREFIX",
    "ENDPOINT_METRICS_NAMESPACE",
    "EndpointJourney",
    "endpoint_journeys",
    "endpoint_requests",
]

ENDPOINT_LOG_GROUP_PREFIX = "/aws/sagemaker/Endpoints/"
ENDPOINT_METRICS_NAMESPACE = "/aws/sagemaker/Endpoints"
_ECR_PULL = ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer", "ecr:BatchCheckLayerAvailability")
_ENI_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:CreateNetworkInterfacePermission",
    "ec2:DeleteNetworkInterface",
    "ec2:DeleteNetworkInterfacePermission",
)
_EC2_DESCRIBE = (
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeVpcs",
    "ec2:DescribeDhcpOptions",
    "ec2:DescribeSubnets",
    "ec2:DescribeSecurityGroups",
)
#: A sample object name where the service chooses it at run time (an inference id, an instance id, a date).
SAMPLE_ID = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class EndpointJourney:
    """One endpoint of the assembly and the requests SageMaker makes with its models' execution roles."""

    stack: StackView
    logical_id: str
    name: str
    requests: tuple[AuthRequest, ...]

    @property
    def actions(self) -> set[str]:
        return {r.action for r in self.requests}


def endpoint_journeys(assembly: Assembly) -> list[EndpointJourney]:
    """Every ``AWS::SageMaker::Endpoint`` of the assembly with its requests (see the module docstring)."""
    journeys = []
    for endpoint in assembly.resources("AWS::SageMaker::Endpoint"):
        name = _endpoint_name(assembly, endpoint)
        requests = endpoint_requests(assembly, endpoint)
        journeys.append(EndpointJourney(endpoint.stack, endpoint.logical_id, name, tuple(requests)))
    return journeys


def endpoint_requests(assembly: Assembly, endpoint: Located) -> list[AuthRequest]:
    """The requests made with the execution role(s) of ``endpoint`` (an ``AWS::SageMaker::Endpoint`` of the
    assembly), in the order SageMaker makes them: models and images, logs and metrics, traffic, guardrails."""
    stack = endpoint.stack
    name = _endpoint_name(assembly, endpoint)
    config = _referenced(
        assembly, stack, endpoint.properties.get("EndpointConfigName"), "AWS::SageMaker::EndpointConfig"
    )
    out: list[AuthRequest] = []
    roles: list[str] = []
    for variant in config.properties.get("ProductionVariants") or []:
        model = _referenced(assembly, stack, variant.get("ModelName"), "AWS::SageMaker::Model")
        role = assembly.text(model.properties["ExecutionRoleArn"], model.stack)
        roles.append(role)
        region = assembly.region_of(role)
        variant_name = str(assembly.resolve(variant.get("VariantName", "AllTraffic"), stack))
        out += _model_requests(assembly, model, role, region)
        out += _logs(role, region, name, variant_name)
    for role in dict.fromkeys(roles):  # each role once, in variant order
        region = assembly.region_of(role)
        out += _data_capture(assembly, config, role, region, name)
        out += _async(assembly, config, role, region, name)
        out += _rollback_alarms(assembly, endpoint, role, region)
    return out


# -- the model ------------------------------------------------------------------------------------------------


def _model_requests(assembly: Assembly, model: Located, role: str, region: str) -> list[AuthRequest]:
    props = model.properties
    containers = [props["PrimaryContainer"]] if props.get("PrimaryContainer") else list(props.get("Containers") or [])
    out: list[AuthRequest] = []
    for container in containers:
        out += _model_data(assembly, model.stack, container, role, region)
        image = _image_uri(assembly, model.stack, container.get("Image"))
        if image is not None:
            out += _ecr_pull(role, image, region)
    vpc = props.get("VpcConfig")
    if vpc:
        out += _vpc(assembly, model.stack, vpc, role, region)
    return out


def _model_data(
    assembly: Assembly, stack: StackView, container: Mapping[str, Any], role: str, region: str
) -> list[AuthRequest]:
    if container.get("ModelDataUrl") is not None:
        uri = assembly.text(container["ModelDataUrl"], stack)
        return _tag(
            s3_read_requests(assembly, role, uri, region, list_first=False, why="the model is downloaded"), "model"
        )
    source = (container.get("ModelDataSource") or {}).get("S3DataSource")
    if source:
        uri = assembly.text(source["S3Uri"], stack)
        prefix = str(assembly.resolve(source.get("S3DataType", "S3Object"), stack)) == "S3Prefix"
        why = f"the model is downloaded ({'every object under the prefix' if prefix else 'one object'})"
        return _tag(s3_read_requests(assembly, role, uri, region, list_first=prefix, why=why), "model")
    return []


def _image_uri(assembly: Assembly, stack: StackView, image: Any) -> str | None:
    """The image URI, an SSM parameter's value when the template reads it from one (``Ref`` of a parameter of type
    ``AWS::SSM::Parameter::Value<String>`` whose default is the name of an ``AWS::SSM::Parameter`` of the assembly)."""
    if image is None:
        return None
    if isinstance(image, Mapping) and set(image) == {"Ref"}:
        parameter = (stack.template.get("Parameters") or {}).get(image["Ref"])
        if parameter is not None and str(parameter.get("Type", "")).startswith("AWS::SSM::Parameter::Value"):
            name = str(parameter.get("Default", ""))
            for found in assembly.resources("AWS::SSM::Parameter"):
                if assembly.physical_name(found.stack, found.logical_id) == name:
                    return assembly.text(found.properties.get("Value"), found.stack)
            raise UnresolvableValue(f"the image is the SSM parameter {name}, which no stack of the assembly defines")
    return assembly.text(image, stack)


def _ecr_pull(role: str, image: str, region: str) -> list[AuthRequest]:
    match = ECR_URI.match(image)
    account = role.split(":")[4]
    if match is None or match.group("account") != account:
        return []  # another account's image (an AWS DLC): that registry's policy decides
    repository = f"arn:{PARTITION}:ecr:{match.group('region')}:{account}:repository/{match.group('repo')}"
    why = "the inference image is pulled"
    context: dict[str, str] = {}
    return _tag(
        [
            AuthRequest(role, "ecr:GetAuthorizationToken", "*", context, why),
            *(AuthRequest(role, action, repository, context, why) for action in _ECR_PULL),
        ],
        "image",
    )


def _vpc(assembly: Assembly, stack: StackView, vpc: Mapping[str, Any], role: str, region: str) -> list[AuthRequest]:
    account = role.split(":")[4]
    subnets = [str(s) for s in assembly.resolve(vpc.get("Subnets") or [], stack)]
    groups = [str(g) for g in assembly.resolve(vpc.get("SecurityGroupIds") or [], stack)]
    vpc_ids = {_subnet_vpc(assembly, subnet) for subnet in subnets}
    why = "the model's containers get network interfaces in the VPC"
    out: list[AuthRequest] = []
    for vpc_id in sorted(v for v in vpc_ids if v is not None):
        context = {
            "ec2:Vpc": f"arn:{PARTITION}:ec2:{region}:{account}:vpc/{vpc_id}",
            "aws:RequestedRegion": region,
        }
        resources = [f"arn:{PARTITION}:ec2:{region}:{account}:network-interface/*"]
        resources += [f"arn:{PARTITION}:ec2:{region}:{account}:subnet/{s}" for s in subnets]
        resources += [f"arn:{PARTITION}:ec2:{region}:{account}:security-group/{g}" for g in groups]
        out.append(AuthRequest(role, "ec2:CreateNetworkInterface", resources[0], context, why))
        out += [AuthRequest(role, "ec2:CreateNetworkInterface", r, context, why) for r in resources[1:]]
        out += [AuthRequest(role, action, resources[0], context, why) for action in _ENI_ACTIONS[1:]]
    region_only = {"aws:RequestedRegion": region}
    out += [AuthRequest(role, action, "*", region_only, why) for action in _EC2_DESCRIBE]
    return _tag(out, "vpc")


def _subnet_vpc(assembly: Assembly, subnet: str) -> str | None:
    """The VPC (its stand-in id) of the assembly's subnet whose stand-in id is ``subnet``."""
    for found in assembly.resources("AWS::EC2::Subnet"):
        if assembly.physical_name(found.stack, found.logical_id) == subnet:
            return assembly.text(found.properties.get("VpcId"), found.stack)
    return None


# -- logs, metrics, guardrails --------------------------------------------------------------------------------


def _logs(role: str, region: str, endpoint: str, variant: str) -> list[AuthRequest]:
    account = role.split(":")[4]
    group = ENDPOINT_LOG_GROUP_PREFIX + endpoint
    stream = f"arn:{PARTITION}:logs:{region}:{account}:log-group:{group}:log-stream:{variant}/i-0123456789abcdef0"
    why = f"the endpoint's containers write their logs to {group} and publish metrics"
    context: dict[str, str] = {}
    return _tag(
        [
            AuthRequest(role, "logs:CreateLogStream", stream, context, why),
            AuthRequest(role, "logs:PutLogEvents", stream, context, why),
            AuthRequest(
                role,
                "cloudwatch:PutMetricData",
                "*",
                {"cloudwatch:namespace": ENDPOINT_METRICS_NAMESPACE, **context},
                why,
            ),
        ],
        "logs",
    )


def _rollback_alarms(assembly: Assembly, endpoint: Located, role: str, region: str) -> list[AuthRequest]:
    rollback = ((endpoint.properties.get("DeploymentConfig") or {}).get("AutoRollbackConfiguration") or {}).get(
        "Alarms"
    ) or []
    account = role.split(":")[4]
    why = "blue/green deployment guardrails read the auto-rollback alarms"
    out = []
    for alarm in rollback:
        name = alarm.get("AlarmName")
        arn = _alarm_arn(assembly, endpoint.stack, name, region, account)
        out.append(AuthRequest(role, "cloudwatch:DescribeAlarms", arn, {}, why))
    return _tag(out, "rollback-alarms")


def _alarm_arn(assembly: Assembly, stack: StackView, name: Any, region: str, account: str) -> str:
    """An alarm's ARN: of the assembly's ``AWS::CloudWatch::Alarm`` when ``name`` refers to one (as the policies
    that grant on ``Fn::GetAtt <alarm>.Arn`` resolve it), else ``arn:<partition>:cloudwatch:...:alarm:<name>``."""
    if isinstance(name, Mapping) and set(name) == {"Ref"} and name["Ref"] in stack.resources:
        return assembly.arn(stack, str(name["Ref"]))
    return f"arn:{PARTITION}:cloudwatch:{region}:{account}:alarm:{assembly.text(name, stack)}"


# -- data capture and asynchronous inference ----------------------------------------------------------------


def _data_capture(assembly: Assembly, config: Located, role: str, region: str, endpoint: str) -> list[AuthRequest]:
    capture = config.properties.get("DataCaptureConfig")
    if not capture or assembly.resolve(capture.get("EnableCapture", True), config.stack) in (False, "false"):
        return []
    destination = assembly.text(capture["DestinationS3Uri"], config.stack).rstrip("/")
    uri = f"{destination}/{endpoint}/AllTraffic/2026/01/01/00/{SAMPLE_ID}.jsonl"
    key = _key_arn(assembly, config.stack, capture.get("KmsKeyId"))
    why = "captured requests and responses are written"
    return _tag(s3_write_requests(assembly, role, uri, region, key, why=why), "data-capture")


def _async(assembly: Assembly, config: Located, role: str, region: str, endpoint: str) -> list[AuthRequest]:
    settings = config.properties.get("AsyncInferenceConfig")
    if not settings:
        return []
    output = settings.get("OutputConfig") or {}
    key = _key_arn(assembly, config.stack, output.get("KmsKeyId"))
    out: list[AuthRequest] = []
    bucket = split_s3(assembly.text(output["S3OutputPath"], config.stack))[0] if output.get("S3OutputPath") else ""
    for uri in _async_inputs(assembly, config.stack, endpoint, bucket) if bucket else []:
        why = "the asynchronous request payload is read"
        out += _tag(s3_read_requests(assembly, role, uri, region, list_first=False, why=why), "async-input")
    for field_name, suffix, subject in (
        ("S3OutputPath", ".out", "async-output"),
        ("S3FailurePath", "-error.out", "async-failure"),
    ):
        if output.get(field_name) is not None:
            uri = assembly.text(output[field_name], config.stack).rstrip("/") + f"/{SAMPLE_ID}{suffix}"
            why = f"the asynchronous {'result' if subject == 'async-output' else 'failure'} is written"
            out += _tag(s3_write_requests(assembly, role, uri, region, key, why=why), subject)
    notification = output.get("NotificationConfig") or {}
    for topic_field in ("SuccessTopic", "ErrorTopic"):
        if notification.get(topic_field) is not None:
            topic = assembly.text(notification[topic_field], config.stack)
            out += _tag(_publish(assembly, role, region, topic, topic_field), "async-notify")
    return out


def _async_inputs(assembly: Assembly, stack: StackView, endpoint: str, bucket: str) -> list[str]:
    """Where clients put an asynchronous endpoint's payloads: each output of the endpoint's stack that names a key
    prefix ``.../<endpoint>/input/`` (in ``bucket``, the bucket of the output path) or such an ``s3://`` URI."""
    out = []
    for output in (stack.template.get("Outputs") or {}).values():
        value = assembly.resolve(output.get("Value"), stack)
        if isinstance(value, str) and value.rstrip("/").endswith(f"{endpoint}/input"):
            uri = value if value.startswith("s3://") else f"s3://{bucket}/{value}"
            out.append(uri.rstrip("/") + f"/{SAMPLE_ID}.json")
    return out


def _publish(assembly: Assembly, role: str, region: str, topic: str, which: str) -> list[AuthRequest]:
    why = f"the asynchronous {'result' if which == 'SuccessTopic' else 'failure'} notification is published"
    context = dict(SECURE)
    out = [AuthRequest(role, "sns:Publish", topic, context, why)]
    found = assembly.find_by_arn("AWS::SNS::Topic", topic)
    master = found.properties.get("KmsMasterKeyId") if found is not None else None
    if found is not None and master is not None:
        key = assembly.key_arn(assembly.text(master, found.stack), found.stack)
        if ":alias/" not in key:
            kms_context = {
                "kms:ViaService": f"sns.{region}.amazonaws.com",
                "kms:CallerAccount": role.split(":")[4],
            }
            out += [
                AuthRequest(role, action, key, kms_context, why) for action in ("kms:GenerateDataKey", "kms:Decrypt")
            ]
    return out


# -- helpers ----------------------------------------------------------------------------------------------------


def _endpoint_name(assembly: Assembly, endpoint: Located) -> str:
    given = endpoint.properties.get("EndpointName")
    return assembly.text(given, endpoint.stack) if given is not None else f"{endpoint.logical_id}-ref"


def _referenced(assembly: Assembly, stack: StackView, value: Any, resource_type: str) -> Located:
    """The resource of ``resource_type`` that ``value`` names: ``Fn::GetAtt``/``Ref`` of a resource of ``stack``,
    or the name of one of the assembly."""
    logical = None
    if isinstance(value, Mapping) and "Fn::GetAtt" in value:
        target = value["Fn::GetAtt"]
        logical = target[0] if isinstance(target, list) else str(target).split(".", 1)[0]
    elif isinstance(value, Mapping) and "Ref" in value:
        logical = str(value["Ref"])
    if logical is not None and stack.resources.get(logical, {}).get("Type") == resource_type:
        return Located(stack, logical, stack.resources[logical])
    name = assembly.text(value, stack)
    for found in assembly.resources(resource_type):
        if assembly.physical_name(found.stack, found.logical_id) == name:
            return found
    raise UnresolvableValue(f"{resource_type} {name!r} is not a resource of the cloud assembly")


def _key_arn(assembly: Assembly, stack: StackView, key: Any) -> str | None:
    if key is None:
        return None
    return assembly.key_arn(assembly.text(key, stack), stack)


def _tag(requests: Sequence[AuthRequest], subject: str) -> list[AuthRequest]:
    return [AuthRequest(r.principal, r.action, r.resource, r.context, r.why, subject or r.subject) for r in requests]
