"""EndpointCapacityReservation: a variant's ML reservation is named, well-formed, matched to one InstanceType."""

from __future__ import annotations

from typing import Any

import botocore.session
from rule_helpers import findings, template

from gpu_constructs.endpoint.pools import CAPACITY_RESERVATIONS_ONLY, ML_RESERVATION_ARN_LENGTH, ML_RESERVATION_ARN_RE

RULE = "EndpointCapacityReservation"
ID = "GpuPlatform::GpuPlatform-EndpointCapacityReservation"
PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p4-for-inference-endpoint"


def variant(name: str = "AllTraffic", reservation: Any = None, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"VariantName": name, "ModelName": "m", "InitialInstanceCount": 1, **extra}
    if "InstancePools" not in extra:
        out.setdefault("InstanceType", "ml.p4d.24xlarge")
    if reservation is not None:
        out["CapacityReservationConfig"] = reservation
    return out


def config(*variants: dict[str, Any]) -> dict[str, Any]:
    return {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": list(variants)}}


def reserved(arn: Any = PLAN, preference: Any = CAPACITY_RESERVATIONS_ONLY) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if preference is not None:
        out["CapacityReservationPreference"] = preference
    if arn is not None:
        out["MlReservationArn"] = arn
    return out


def test_the_pattern_and_preference_are_botocores() -> None:
    model = botocore.session.get_session().get_service_model("sagemaker")
    shape = model.shape_for("ProductionVariantCapacityReservationConfig")
    arn = shape.members["MlReservationArn"].metadata
    assert ML_RESERVATION_ARN_RE.pattern == arn["pattern"]
    assert (arn["min"], arn["max"]) == ML_RESERVATION_ARN_LENGTH
    assert shape.members["CapacityReservationPreference"].enum == [CAPACITY_RESERVATIONS_ONLY]


def test_a_named_reservation_on_one_instance_type_is_compliant() -> None:
    tpl = template(
        Plan=config(variant(reservation=reserved())),
        ArnInParameter=config(variant(reservation=reserved({"Ref": "PlanArn"}))),
        NoPreference=config(variant(reservation=reserved(preference=None))),
        SamePlanTwice=config(variant("A", reserved()), variant("B", reserved())),
        NoReservation=config(variant()),
    )
    assert findings(RULE, tpl) == []


def test_each_violation_is_a_finding() -> None:
    pools = [{"InstanceType": "ml.p4d.24xlarge", "Priority": 1}]
    other = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/another"
    tpl = template(
        NoArn=config(variant(reservation=reserved(arn=None))),
        BadArn=config(variant(reservation=reserved("arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-1"))),
        Preference=config(variant(reservation=reserved(preference="capacity-reservations-first"))),
        Pools=config(variant(reservation=reserved(), InstancePools=pools)),
        TwoPlans=config(variant("A", reserved()), variant("B", reserved(other))),
    )
    assert sorted((f.logical_id, f.id) for f in findings(RULE, tpl)) == [
        ("BadArn", f"{ID}[AllTraffic:MlReservationArn-format]"),
        ("NoArn", f"{ID}[AllTraffic:no-MlReservationArn]"),
        ("Pools", f"{ID}[AllTraffic:with-InstancePools]"),
        ("Preference", f"{ID}[AllTraffic:preference-capacity-reservations-first]"),
        ("TwoPlans", f"{ID}[B:reservations-in-two-variants]"),
    ]
