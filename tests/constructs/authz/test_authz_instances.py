"""gpu_constructs.authz.instances: reading an instance script's AWS calls and mapping them to IAM requests.

The platform's own scripts are checked against the synthesized apps in tests/e2e/test_authorized_instances.py;
here, small scripts show what counts as a call (outside quotes, comments and here-documents, inside ``$( )``),
that an unmapped command fails, and how each mapped command becomes requests.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_constructs.authz import Assembly, check_requests
from gpu_constructs.authz.instances import (
    CLI_COMMANDS,
    UnmappedCommand,
    autoscaling_group_arn,
    cli_calls,
    script_requests,
    script_settings,
)
from gpu_constructs.packaging.scripts import render_script
from gpu_constructs.templates import StackView

ACCOUNT, REGION = "123456789012", "us-east-1"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/node"


def _assembly(*statements: dict[str, Any], **resources: dict[str, Any]) -> Assembly:
    template = {
        "Resources": {
            "Node": {"Type": "AWS::IAM::Role", "Properties": {"RoleName": "node"}},
            "NodePolicy": {
                "Type": "AWS::IAM::Policy",
                "Properties": {"Roles": [{"Ref": "Node"}], "PolicyDocument": {"Statement": list(statements)}},
            },
            **resources,
        }
    }
    return Assembly([StackView("app", ACCOUNT, REGION, template)])


def _calls(script: str) -> list[tuple[str, str]]:
    return [(c.service, c.command) for c in cli_calls(script)]


def _requests(script: str, assembly: Assembly | None = None, **kwargs: Any) -> list[tuple[str, str]]:
    found = script_requests(assembly or _assembly(), script, ROLE, **kwargs)
    return [(r.action, r.resource) for r in found]


# -- the platform's scripts -----------------------------------------------------------------------------------


def test_the_boot_script_calls_exactly_the_two_autoscaling_commands() -> None:
    script = render_script(
        "fleet_boot.sh",
        {"FLEET_NAME": "f", "ASG_NAME": "f", "LIFECYCLE_HOOK_NAME": "h", "EXPECTED_GPUS": "1", "AWS_REGION": REGION},
    )
    assert _calls(script) == [
        ("autoscaling", "complete-lifecycle-action"),
        ("autoscaling", "set-instance-health"),
    ]
    settings = script_settings(script)
    assert settings["CW_NAMESPACE"] == "CWAgent"  # the script's own default
    assert settings["LOG_GROUP_NAME"] == ""


def test_the_notebook_start_script_calls_only_s3_cp() -> None:
    script = render_script(
        "notebook_on_start.sh",
        {"EXPECTED_GPUS": "1", "INSTANCE_TYPE": "ml.g5.xlarge", "GPUCTL_PACKAGE_URI": "s3://b/p/x-1-py3-none-any.whl"},
    )
    [call] = cli_calls(script)
    assert (call.service, call.command, call.positionals[0]) == ("s3", "cp", "s3://b/p/x-1-py3-none-any.whl")
    assert call.positionals[1] == "<run-time:package>"  # a local path chosen at run time


def test_every_command_of_the_table_cites_the_aws_document_that_maps_it() -> None:
    for (service, command), row in CLI_COMMANDS.items():
        assert row.citation, (service, command)
        assert "service-authorization/latest/reference/list_" in row.citation or "API Reference" in row.citation
        assert all(a.split(" ")[0].count(":") == 1 for a in row.actions), row.actions


# -- what is a call -------------------------------------------------------------------------------------------


def test_quoted_text_comments_and_here_documents_are_not_calls() -> None:
    script = """#!/bin/bash
# aws s3 cp s3://b/k /tmp/k
log "run aws s3 cp by hand"
FAIL_REASON='aws ssm get-parameter failed'
cat >/tmp/readme <<EOF
aws ec2 terminate-instances --instance-ids i-1
EOF
echo done # aws sts get-caller-identity
"""
    assert _calls(script) == []


def test_calls_inside_command_substitution_continuations_and_wrappers_are_calls() -> None:
    script = """#!/bin/bash
export ASG_NAME='g'
export HOOK='h'
log "token: $(aws ssm get-parameter --name /gpu/x --query Parameter.Value --output text)"
if ! bounded aws autoscaling complete-lifecycle-action --auto-scaling-group-name "$ASG_NAME" \\
    --lifecycle-hook-name "$HOOK" --instance-id "$INSTANCE_ID"; then exit 1; fi
out=$(aws sts get-caller-identity) && aws s3 cp --only-show-errors "s3://b/k" /tmp/k
"""
    calls = cli_calls(script)
    assert [(c.service, c.command) for c in calls] == [
        ("ssm", "get-parameter"),
        ("autoscaling", "complete-lifecycle-action"),
        ("sts", "get-caller-identity"),
        ("s3", "cp"),
    ]
    hook = calls[1]
    assert hook.options["--auto-scaling-group-name"] == "g" and hook.options["--lifecycle-hook-name"] == "h"
    assert hook.options["--instance-id"] == "<run-time:INSTANCE_ID>"
    assert calls[3].positionals == ("s3://b/k", "/tmp/k")
    assert _requests(script, region=REGION) == [
        ("ssm:GetParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/gpu/x"),
        ("autoscaling:CompleteLifecycleAction", autoscaling_group_arn(REGION, ACCOUNT, "g")),
        ("s3:GetObject", "arn:aws:s3:::b/k"),  # GetCallerIdentity needs no permission
    ]


def test_a_command_missing_from_the_table_fails_instead_of_going_unchecked() -> None:
    script = '#!/bin/bash\naws ec2 terminate-instances --instance-ids "$INSTANCE_ID"\n'
    with pytest.raises(UnmappedCommand, match="aws ec2 terminate-instances is not in CLI_COMMANDS"):
        script_requests(_assembly(), script, ROLE)


# -- how calls become requests ----------------------------------------------------------------------------------


def test_set_instance_health_acts_on_the_instances_own_group() -> None:
    script = "#!/bin/bash\naws autoscaling set-instance-health --instance-id i-1 --health-status Unhealthy\n"
    assert _requests(script, group_name="fleet-a", region="eu-west-1") == [
        ("autoscaling:SetInstanceHealth", autoscaling_group_arn("eu-west-1", ACCOUNT, "fleet-a"))
    ]
    arn = autoscaling_group_arn("eu-west-1", ACCOUNT, "fleet-a")
    assert arn.startswith(f"arn:aws:autoscaling:eu-west-1:{ACCOUNT}:autoScalingGroup:")
    assert arn.endswith(":autoScalingGroupName/fleet-a")


def test_an_empty_hook_or_package_setting_means_the_guarded_call_is_not_made() -> None:
    script = """#!/bin/bash
export LIFECYCLE_HOOK_NAME=''
export PACKAGE=''
aws autoscaling complete-lifecycle-action --auto-scaling-group-name g --lifecycle-hook-name "$LIFECYCLE_HOOK_NAME"
aws s3 cp "$PACKAGE" /tmp/p
"""
    assert _requests(script) == []


def test_an_sse_kms_download_decrypts_through_s3_and_a_recursive_one_lists_first() -> None:
    bucket = {
        "Type": "AWS::S3::Bucket",
        "Properties": {
            "BucketName": "data",
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": "k-1"}}
                ]
            },
        },
    }
    assembly = _assembly({"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::data/*"}, Data=bucket)
    script = "#!/bin/bash\naws s3 cp --recursive s3://data/sets/ /data\n"
    requests = script_requests(assembly, script, ROLE, region=REGION)
    assert [(r.action, r.resource) for r in requests] == [
        ("s3:ListBucket", "arn:aws:s3:::data"),
        ("s3:GetObject", "arn:aws:s3:::data/sets/part-00000.tar"),
        ("kms:Decrypt", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/k-1"),
    ]
    assert requests[2].context["kms:ViaService"] == f"s3.{REGION}.amazonaws.com"
    denied = {d.decision.request.action for d in check_requests(assembly, requests)}
    assert denied == {"s3:ListBucket", "kms:Decrypt"}


def test_an_unsigned_request_is_not_a_request_of_the_role() -> None:
    assert _requests("#!/bin/bash\naws s3 cp --no-sign-request s3://public/k /tmp/k\n") == []


# -- the CloudWatch agent ---------------------------------------------------------------------------------------

_AGENT = """#!/bin/bash
export LOG_GROUP_NAME='/fleet/a'
export NS='Gpu'
for ctl in amazon-cloudwatch-agent-ctl; do :; done
cat >"$config" <<EOF
{"metrics": {"namespace": "$NS", "append_dimensions": {"InstanceId": "\\${aws:InstanceId}"%s},
 "logs": {"logs_collected": {"files": {"collect_list": [
   {"file_path": "/var/log/a", "log_group_name": "$LOG_GROUP_NAME", "log_stream_name": "{instance_id}/a"}]}}}}
EOF
"$ctl" -a fetch-config -m ec2 -s -c "%s"
"""


def test_the_agent_started_from_a_file_config_publishes_and_ships_what_the_config_names() -> None:
    stream = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:/fleet/a:log-stream:i-0123456789abcdef0/a"
    requests = script_requests(_assembly(), _AGENT % ("", "file:$config"), ROLE, region=REGION)
    assert [(r.action, r.resource, dict(r.context)) for r in requests] == [
        ("cloudwatch:PutMetricData", "*", {"cloudwatch:namespace": "Gpu"}),
        ("logs:CreateLogStream", stream, {}),
        ("logs:PutLogEvents", stream, {}),
    ]


def test_the_agents_group_name_dimension_reads_tags_and_an_unknown_dimension_fails() -> None:
    with_group = _AGENT % (', "AutoScalingGroupName": "\\${aws:AutoScalingGroupName}"', "file:$config")
    assert ("ec2:DescribeTags", "*") in _requests(with_group, region=REGION)
    with pytest.raises(UnmappedCommand, match="aws:Unknown"):
        _requests(_AGENT % (', "X": "\\${aws:Unknown}"', "file:$config"), region=REGION)


def test_the_agent_fetching_its_config_from_ssm_reads_the_parameter() -> None:
    assert _requests(_AGENT % ("", "ssm:AmazonCloudWatch-gpu"), region=REGION) == [
        ("ssm:GetParameter", f"arn:aws:ssm:{REGION}:{ACCOUNT}:parameter/AmazonCloudWatch-gpu")
    ]
