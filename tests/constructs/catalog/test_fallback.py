"""Fallback chains: one refusal per reason, and an all-clear chain that returns the catalog entries."""

from __future__ import annotations

import pytest

from gpu_constructs.catalog import FallbackChoice, check_fallback_chain
from gpu_constructs.catalog.fallback import FallbackChoice as DirectChoice
from gpu_constructs.errors import ValidationError

WHERE = "Config/training"


def test_all_clear_returns_entries_in_order() -> None:
    chain = check_fallback_chain(
        [FallbackChoice("ml.g5.xlarge", 2), FallbackChoice("ml.g6e.xlarge", 2)],
        usage="hosting",
        where=WHERE,
        param="instance_pools",
        cuda_version="12.4",
        max_cost_ratio=2.0,
        max_entries=5,
    )
    assert [it.name for it in chain] == ["g5.xlarge", "g6e.xlarge"]
    assert FallbackChoice is DirectChoice


def test_per_type_counts_keep_the_world_size() -> None:
    # 8 GPUs either way: 8 x g5.xlarge (1 GPU each) or 2 x g5.12xlarge (4 GPUs each)
    chain = check_fallback_chain(
        ["ml.g5.xlarge", FallbackChoice("ml.g5.12xlarge", 2)],
        usage="training",
        where=WHERE,
        param="instance_preferences",
        default_count=8,
    )
    assert [it.nvidia_gpu_count for it in chain] == [1, 4]


def test_empty_list_is_refused() -> None:
    with pytest.raises(
        ValidationError, match=r"Config/training: instance_preferences=\[\] is empty; allowed: 1 or more"
    ):
        check_fallback_chain([], usage="training", where=WHERE, param="instance_preferences")


def test_duplicate_is_refused() -> None:
    with pytest.raises(
        ValidationError,
        match=r"instance_preferences\[2\]='ml.g5.xlarge' repeats instance_preferences\[0\]; "
        r"allowed: each instance type once",
    ):
        check_fallback_chain(
            ["ml.g5.xlarge", "ml.g6e.xlarge", "ml.g5.xlarge"],
            usage="training",
            where=WHERE,
            param="instance_preferences",
        )


def test_too_many_entries_is_refused() -> None:
    names = ["ml.g5.xlarge", "ml.g5.2xlarge", "ml.g5.4xlarge", "ml.g5.8xlarge", "ml.g5.16xlarge", "ml.g6e.xlarge"]
    with pytest.raises(ValidationError, match=r"has 6 entries; allowed: at most 5 \(drop 'ml.g6e.xlarge'\)"):
        check_fallback_chain(names, usage="training", where=WHERE, param="instance_preferences", max_entries=5)


def test_non_gpu_entry_is_refused_with_gpu_suggestions() -> None:
    with pytest.raises(ValidationError) as caught:
        check_fallback_chain(
            ["ml.g5.xlarge", "ml.m5.xlarge"], usage="training", where=WHERE, param="instance_preferences"
        )
    message = str(caught.value)
    assert "instance_preferences[1]='ml.m5.xlarge' has no NVIDIA GPU" in message
    assert "Fitting GPU types for training" in message


def test_wrong_spelling_for_the_api_is_refused() -> None:
    with pytest.raises(ValidationError, match=r"instance_types\[1\]='ml.g6.xlarge' is not how EC2 spells this type"):
        check_fallback_chain(["g5.2xlarge", "ml.g6.xlarge"], usage="ec2", where=WHERE, param="instance_types")


def test_cuda_mismatch_is_refused() -> None:
    with pytest.raises(
        ValidationError,
        match=r"instance_preferences\[1\]='ml.p6-b200.48xlarge' with cuda_version='12.1': CUDA 12.1 cannot drive the "
        r"NVIDIA B200 .*allowed: CUDA 12.8 or newer",
    ):
        check_fallback_chain(
            ["ml.p5.48xlarge", "ml.p6-b200.48xlarge"],
            usage="training",
            where=WHERE,
            param="instance_preferences",
            cuda_version="12.1",
        )


def test_smaller_gpu_memory_is_refused() -> None:
    with pytest.raises(
        ValidationError,
        match=r"instance_pools\[1\]='ml.g4dn.xlarge' has 16.0 GiB per GPU, less than the 22.4 GiB of the first choice "
        r"'ml.g5.xlarge'.*allowed: types with at least 22888 MiB per GPU",
    ):
        check_fallback_chain(["ml.g5.xlarge", "ml.g4dn.xlarge"], usage="hosting", where=WHERE, param="instance_pools")


def test_world_size_change_is_refused_and_names_the_count_that_keeps_it() -> None:
    with pytest.raises(ValidationError) as caught:
        check_fallback_chain(
            ["ml.g5.xlarge", "ml.g5.12xlarge"],
            usage="training",
            where=WHERE,
            param="instance_preferences",
            default_count=4,
        )
    message = str(caught.value)
    assert (
        "instance_preferences[1]='ml.g5.12xlarge' x 4 gives 16 GPUs but the first choice 'ml.g5.xlarge' gives 4"
        in message
    )
    assert "global batch size" in message
    assert "set instance_count=1 on this entry to keep it" in message
    assert "keep_world_size=False" in message
    # opting out accepts the chain
    chain = check_fallback_chain(
        ["ml.g5.xlarge", "ml.g5.12xlarge"],
        usage="training",
        where=WHERE,
        param="instance_preferences",
        default_count=4,
        keep_world_size=False,
    )
    assert len(chain) == 2


def test_cost_ceiling_is_enforced() -> None:
    # 1 x ml.g5.xlarge ($1.408/h) falling back to 1 x ml.g5.12xlarge ($7.09/h, 5.04 x) with a ceiling of 2 x
    with pytest.raises(
        ValidationError,
        match=r"instance_preferences\[1\]='ml.g5.12xlarge' x 1 costs \$7.09/hour, 5.04 x the first choice "
        r"'ml.g5.xlarge' "
        r"x 1 \(\$1.41/hour\); allowed: at most max_cost_ratio=2 x \(\$2.82/hour\)",
    ):
        check_fallback_chain(
            ["ml.g5.xlarge", "ml.g5.12xlarge"],
            usage="training",
            where=WHERE,
            param="instance_preferences",
            keep_world_size=False,
            max_cost_ratio=2,
        )


def test_unknown_price_under_a_ceiling_is_refused() -> None:
    with pytest.raises(
        ValidationError,
        match=r"instance_preferences\[1\]='ml.p5.48xlarge': no training price for us-east-1 in the price table "
        r"\(constructs/gpu_constructs/catalog/pricing.py, prices as of \d{4}-\d\d-\d\d\)"
        r".*add its price there\) or no cost ceiling",
    ):
        check_fallback_chain(
            ["ml.p4d.24xlarge", "ml.p5.48xlarge"],
            usage="training",
            where=WHERE,
            param="instance_preferences",
            max_cost_ratio=3,
        )


def test_bad_count_and_bad_ceiling_are_refused() -> None:
    with pytest.raises(ValidationError, match=r"pools\[1\] instance_count=0 is not allowed; allowed: an integer >= 1"):
        check_fallback_chain(
            ["ml.g5.xlarge", FallbackChoice("ml.g6e.xlarge", 0)], usage="hosting", where=WHERE, param="instance_pools"
        )
    with pytest.raises(ValidationError, match=r"max_cost_ratio=0 is not allowed; allowed: a number > 0"):
        check_fallback_chain(["ml.g5.xlarge"], usage="hosting", where=WHERE, param="instance_pools", max_cost_ratio=0)
    with pytest.raises(ValidationError, match=r"instance_pools='ml.g5.xlarge' is not a list"):
        check_fallback_chain("ml.g5.xlarge", usage="hosting", where=WHERE, param="instance_pools")
