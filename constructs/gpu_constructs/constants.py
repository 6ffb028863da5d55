"""Plain facts shared by the constructs and the config model. Importing this module does not load the CDK."""

from __future__ import annotations

import re

#: A SageMaker resource name (an endpoint, a variant, a notebook instance): 1-63 letters, digits and hyphens, starting
#: and ending with a letter or digit. The pattern of ``EndpointName``, ``VariantName`` and ``NotebookInstanceName`` in
#: the botocore sagemaker service model: ``^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}``.
SAGEMAKER_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")

#: Interface endpoints a private GPU workload may need (short name -> ``InterfaceVpcEndpointAwsService`` attr).
DEFAULT_INTERFACE_ENDPOINTS: dict[str, str] = {
    "sagemaker_api": "SAGEMAKER_API",
    "sagemaker_runtime": "SAGEMAKER_RUNTIME",
    "ecr_api": "ECR",
    "ecr_dkr": "ECR_DOCKER",
    "logs": "CLOUDWATCH_LOGS",
    "monitoring": "CLOUDWATCH_MONITORING",
    "sts": "STS",
    "kms": "KMS",
    "ssm": "SSM",
    "ssm_messages": "SSM_MESSAGES",
    "ec2_messages": "EC2_MESSAGES",
    "autoscaling": "AUTOSCALING",
}

#: The endpoint service of each short name: ``com.amazonaws.<region>.<service>``. Sources: EC2 Auto Scaling
#: user guide, "Amazon EC2 Auto Scaling and interface VPC endpoints" (``com.amazonaws.region.autoscaling``,
#: https://docs.aws.amazon.com/autoscaling/ec2/userguide/ec2-auto-scaling-vpc-endpoints.html); Systems
#: Manager user guide, "Improve the security of EC2 instances by using VPC endpoints for Systems Manager"
#: (ssm, ssmmessages, ec2messages); AWS PrivateLink guide, "AWS services that integrate with AWS
#: PrivateLink" (logs, monitoring, sts, kms, ecr.api, ecr.dkr, sagemaker.api, sagemaker.runtime).
ENDPOINT_SERVICE_NAMES: dict[str, str] = {
    "sagemaker_api": "sagemaker.api",
    "sagemaker_runtime": "sagemaker.runtime",
    "ecr_api": "ecr.api",
    "ecr_dkr": "ecr.dkr",
    "logs": "logs",
    "monitoring": "monitoring",
    "sts": "sts",
    "kms": "kms",
    "ssm": "ssm",
    "ssm_messages": "ssmmessages",
    "ec2_messages": "ec2messages",
    "autoscaling": "autoscaling",
}

#: Name of the S3 *gateway* endpoint in reachability declarations (it is not an interface endpoint).
S3_GATEWAY = "s3"

#: Interface endpoints of the SageMaker side of the platform (training and processing jobs, endpoints,
#: the state machine's SageMaker calls, ECR image pulls, job logs and metrics, KMS and STS): created
#: whenever the platform's network is (unchanged from earlier releases).
SAGEMAKER_ENDPOINTS: tuple[str, ...] = (
    "sagemaker_api",
    "sagemaker_runtime",
    "ecr_api",
    "ecr_dkr",
    "logs",
    "monitoring",
    "sts",
    "kms",
)

#: What the software on a GPU fleet instance calls, per feature (read from assets/fleet_boot.sh and the
#: agents the DLAMI runs). Each value is a tuple of short names (interface endpoints, or ``S3_GATEWAY``).
#:
#: * boot signals: ``aws autoscaling complete-lifecycle-action`` and ``set-instance-health``
#:   (EC2 Auto Scaling API);
#: * CloudWatch agent: PutMetricData (monitoring) and PutLogEvents/CreateLogStream (logs); the
#:   dimensions are literal or from the instance metadata service, so no EC2 DescribeTags call; when the
#:   agent is missing it is downloaded from the regional ``amazoncloudwatch-agent-<region>`` bucket (S3);
#: * Session Manager (the only shell access): the SSM agent calls ssm, ssmmessages and ec2messages
#:   (Systems Manager user guide, "Step 6: (Optional) Use AWS PrivateLink to set up a VPC endpoint for
#:   Systems Manager").
#:
#: Mounting FSx for Lustre calls no AWS API (LNET over TCP 988/1018-1023 to the file system's ENIs);
#: installing its client needs a package repository (see ``dlami.lustre_client_install``).
FLEET_FEATURE_SERVICES: dict[str, tuple[str, ...]] = {
    "boot signals (lifecycle hook, instance health)": ("autoscaling",),
    "CloudWatch agent (GPU metrics, boot and kernel logs)": ("monitoring", "logs", S3_GATEWAY),
    "Session Manager (SSM agent)": ("ssm", "ssm_messages", "ec2_messages"),
}


def fleet_endpoints() -> tuple[str, ...]:
    """The interface endpoints every GPU fleet needs (the union of :data:`FLEET_FEATURE_SERVICES`)."""
    names: list[str] = []
    for services in FLEET_FEATURE_SERVICES.values():
        names.extend(s for s in services if s != S3_GATEWAY and s not in names)
    return tuple(names)


def endpoint_service_name(name: str, region: str = "<region>") -> str:
    """``com.amazonaws.<region>.<service>`` of a short name (``s3`` for the gateway endpoint)."""
    service = "s3" if name == S3_GATEWAY else ENDPOINT_SERVICE_NAMES[name]
    return f"com.amazonaws.{region}.{service}"


#: Subnet group names. Each is private; training jobs, endpoints and fleets get their own ranges so
#: their flow logs, NACLs and IP capacity stay separate.
TRAINING_SUBNETS = "Training"
ENDPOINT_SUBNETS = "Endpoints"
FLEET_SUBNETS = "Fleets"
