"""The training job spec of a synthesized app (``make synth`` -> ``cdk.out``), for ``gpuctl train --synth``.

A deployed setup publishes its job spec in an SSM parameter; before anything is deployed, the same JSON is in the
synthesized training template, with CloudFormation references where deployment fills in values (the account,
bucket names, subnet and security-group ids, role and key ARNs). This module resolves those references to
labelled placeholders of the right shape, so the spec validates and ``--dry-run`` and ``--local`` work on a
fresh clone without an AWS account: account ``111122223333`` (the AWS documentation's example account), the
template's region, ``placeholder-<hash>`` bucket names, ``subnet-``/``sg-`` ids and ARNs naming the logical id.
The printed request is then the exact request of that environment but for those values.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["PLACEHOLDER_ACCOUNT", "SynthSpecError", "load_synth_spec"]

PLACEHOLDER_ACCOUNT = "111122223333"


class SynthSpecError(ValueError):
    """No synthesized job spec can be read (no ``cdk.out``, no training stack, an unknown reference)."""


def _digest(text: str, size: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:size]


def _placeholder(name: str, region: str) -> str:
    """A value of the right shape for what ``name`` (an export or logical id) names."""
    lowered = name.lower()
    if "subnet" in lowered:
        return f"subnet-{_digest(name, 17)}"
    if "securitygroup" in lowered:
        return f"sg-{_digest(name, 17)}"
    if "key" in lowered and "arn" in lowered:
        return f"arn:aws:kms:{region}:{PLACEHOLDER_ACCOUNT}:key/{_digest(name, 8)}-0000-4000-8000-{_digest(name, 12)}"
    if "role" in lowered:
        return f"arn:aws:iam::{PLACEHOLDER_ACCOUNT}:role/placeholder-{_digest(name, 8)}"
    if "mountname" in lowered:
        return _digest(name, 8)
    if "lustre" in lowered or "filesystem" in lowered:
        return f"fs-{_digest(name, 17)}"
    return f"placeholder-{_digest(name, 12)}"  # bucket names and anything else: a valid S3 bucket name


def _resolve(node: Any, template: Mapping[str, Any], region: str) -> Any:
    if isinstance(node, list):
        return [_resolve(item, template, region) for item in node]
    if not isinstance(node, Mapping):
        return node
    if len(node) != 1:
        return {key: _resolve(value, template, region) for key, value in node.items()}
    ((function, argument),) = node.items()
    pseudo = {"AWS::AccountId": PLACEHOLDER_ACCOUNT, "AWS::Region": region, "AWS::Partition": "aws"}
    if function == "Ref":
        if argument in pseudo:
            return pseudo[argument]
        kind = template.get("Resources", {}).get(argument, {}).get("Type", "")
        return _placeholder(f"{kind}{argument}", region)
    if function == "Fn::GetAtt":
        logical, attribute = argument.split(".", 1) if isinstance(argument, str) else argument
        kind = template.get("Resources", {}).get(logical, {}).get("Type", "")
        if kind == "AWS::IAM::Role" and attribute == "Arn":
            return f"arn:aws:iam::{PLACEHOLDER_ACCOUNT}:role/{logical}"
        return _placeholder(f"{kind}{logical}{attribute}", region)
    if function == "Fn::ImportValue":
        return _placeholder(str(_resolve(argument, template, region)), region)
    if function == "Fn::Join":
        delimiter, items = argument
        return str(delimiter).join(str(_resolve(item, template, region)) for item in items)
    if function == "Fn::Sub" and isinstance(argument, str):
        return re.sub(r"\$\{([^}]+)\}", lambda m: str(_resolve({"Ref": m.group(1)}, template, region)), argument)
    if function == "Fn::Select":
        index, items = argument
        return _resolve(items, template, region)[int(index)]
    if function == "Fn::Split":
        delimiter, value = argument
        return str(_resolve(value, template, region)).split(delimiter)
    return {key: _resolve(value, template, region) for key, value in node.items()}


def load_synth_spec(cdk_out: Path, stack_name: str, region: str) -> str:
    """The job spec JSON of ``stack_name`` in the cloud assembly ``cdk_out``, references as placeholders
    (``region``: the environment's region, what ``AWS::Region`` becomes)."""
    template_file = cdk_out / f"{stack_name}.template.json"
    if not template_file.is_file():
        raise SynthSpecError(
            f"{template_file} does not exist; allowed: synthesize first (make synth ENV=<env>) or pass --synth DIR"
        )
    template = json.loads(template_file.read_text())
    parameters = [
        resource["Properties"]
        for resource in template.get("Resources", {}).values()
        if resource.get("Type") == "AWS::SSM::Parameter" and "job-spec" in json.dumps(resource["Properties"]["Name"])
    ]
    if len(parameters) != 1:
        raise SynthSpecError(f"{template_file} holds no training job spec parameter; allowed: a training stack")
    try:
        value = _resolve(parameters[0]["Value"], template, region)
        json.loads(value)  # the placeholders kept it JSON
    except (IndexError, ValueError, TypeError) as exc:
        raise SynthSpecError(f"{template_file}: the job spec cannot be read with stand-ins ({exc})") from None
    return str(value)
