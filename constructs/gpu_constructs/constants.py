"""Plain facts shared by the constructs and the config model. Importing this module does not load the CDK."""

from __future__ import annotations

#: Interface endpoints a private GPU workload needs (short name -> ``InterfaceVpcEndpointAwsService`` attr).
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
}

#: Subnet group names. Each is private; training jobs, endpoints and fleets get their own ranges so
#: their flow logs, NACLs and IP capacity stay separate.
TRAINING_SUBNETS = "Training"
ENDPOINT_SUBNETS = "Endpoints"
FLEET_SUBNETS = "Fleets"
