"""Checks that an ordered fallback chain of GPU instance types is *compatible* with its first choice.

SageMaker and EC2 take ordered lists of instance types to fall back on when the first has no capacity:
``ResourceConfig.InstancePreferences`` (training and processing jobs), ``ProductionVariant.InstancePools``
(endpoints) and a mixed-instances policy (EC2 auto scaling groups). AWS checks that each name exists and
that the quotas allow it; nothing checks that a fallback can run the same job. :func:`check_fallback_chain`
does, with the catalog:

1. the list is not empty, names each type once, and has at most ``max_entries`` entries;
2. every entry is an NVIDIA GPU type valid for the use (:func:`~gpu_constructs.catalog.require_nvidia_gpu`);
3. the image's CUDA build supports every entry's GPU architecture
   (:func:`~gpu_constructs.catalog.cuda_support_problem`);
4. GPU memory per device is at least the first choice's (a model that fits there fits everywhere);
5. GPUs x hosts (the data-parallel world size, and so the global batch) equals the first choice's, unless
   the caller opts out (``keep_world_size=False``);
6. with ``max_cost_ratio``, each entry's hourly price x count is at most that ratio x the first choice's
   (prices from :mod:`gpu_constructs.catalog.pricing`), so a 1-GPU job does not silently fall back to 8.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpu_constructs.catalog import cuda_support_problem, lookup, require_nvidia_gpu
from gpu_constructs.catalog.pricing import PRICE_TABLE_FILE, PRICES_AS_OF, hourly_price
from gpu_constructs.catalog.types import InstanceType, Usage
from gpu_constructs.errors import ValidationError

__all__ = ["FallbackChoice", "check_fallback_chain"]


@dataclass(frozen=True)
class FallbackChoice:
    """One entry of a fallback chain: an instance type and, optionally, its own host count."""

    instance_type: str
    #: Hosts of this type; None means the job's (or endpoint's) count (``default_count``).
    instance_count: int | None = None


def _normalize(choices: Sequence[FallbackChoice | str], where: str, param: str) -> list[FallbackChoice]:
    if isinstance(choices, str) or not isinstance(choices, Sequence):
        raise ValidationError(where, f"{param}={choices!r} is not a list; allowed: an ordered list of instance types")
    out: list[FallbackChoice] = []
    for i, choice in enumerate(choices):
        if isinstance(choice, str):
            out.append(FallbackChoice(choice))
        elif isinstance(choice, FallbackChoice):
            out.append(choice)
        else:
            raise ValidationError(
                where,
                f"{param}[{i}]={choice!r} is not an instance type; allowed: a name such as 'ml.g5.xlarge' "
                "or a FallbackChoice(instance_type, instance_count)",
            )
    return out


def _count_of(choice: FallbackChoice, default_count: int, where: str, label: str) -> int:
    count = default_count if choice.instance_count is None else choice.instance_count
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValidationError(where, f"{label} instance_count={count!r} is not allowed; allowed: an integer >= 1")
    return count


def _check_shape(entries: list[FallbackChoice], where: str, param: str, max_entries: int | None) -> None:
    if not entries:
        raise ValidationError(where, f"{param}=[] is empty; allowed: 1 or more instance types, first choice first")
    if max_entries is not None and len(entries) > max_entries:
        raise ValidationError(
            where,
            f"{param} has {len(entries)} entries; allowed: at most {max_entries} "
            f"(drop {', '.join(repr(e.instance_type) for e in entries[max_entries:])})",
        )
    seen: dict[str, int] = {}
    for i, entry in enumerate(entries):
        key = lookup(entry.instance_type, where=where, param=f"{param}[{i}]").name
        if key in seen:
            raise ValidationError(
                where,
                f"{param}[{i}]={entry.instance_type!r} repeats {param}[{seen[key]}]; allowed: each instance type once",
            )
        seen[key] = i


def _world_size_message(
    param: str,
    i: int,
    it: InstanceType,
    usage: Usage,
    count: int,
    first_world: int,
    first: InstanceType,
    opt_out: str,
) -> str:
    gpus = it.nvidia_gpu_count
    keeps = f"instance_count={first_world // gpus}" if gpus and first_world % gpus == 0 else None
    fix = f"set {keeps} on this entry to keep it" if keeps else "no count of this type keeps it"
    return (
        f"{param}[{i}]={it.name_for(usage)!r} x {count} gives {gpus * count} GPUs but the first choice "
        f"{first.name_for(usage)!r} gives {first_world}: the data-parallel world size, and so the global batch "
        f"size, would change on fallback; allowed: {first_world} GPUs in total ({fix}), or {opt_out} if the job "
        "adapts its batch to the world size"
    )


def _check_cost(
    entries: list[tuple[int, InstanceType, int]],
    *,
    usage: Usage,
    region: str,
    ratio: float,
    where: str,
    param: str,
) -> None:
    def price_of(i: int, it: InstanceType, count: int) -> float:
        name = it.name_for(usage)
        hourly = hourly_price(name, usage, region)
        if hourly is None:
            raise ValidationError(
                where,
                f"{param}[{i}]={name!r}: no {usage} price for {region} in the price table "
                f"({PRICE_TABLE_FILE}, prices as of {PRICES_AS_OF.isoformat()}), so max_cost_ratio={ratio:g} "
                "cannot be checked; allowed: a type the table prices (add its price there) or no cost ceiling",
            )
        return hourly * count

    _, first_it, first_count = entries[0]
    base = price_of(*entries[0])
    for i, it, count in entries[1:]:
        cost = price_of(i, it, count)
        if cost > ratio * base + 1e-9:
            raise ValidationError(
                where,
                f"{param}[{i}]={it.name_for(usage)!r} x {count} costs ${cost:,.2f}/hour, {cost / base:.2f} x the "
                f"first choice {first_it.name_for(usage)!r} x {first_count} (${base:,.2f}/hour); allowed: at most "
                f"max_cost_ratio={ratio:g} x (${ratio * base:,.2f}/hour): pick a cheaper fallback or raise the ceiling",
            )


def check_fallback_chain(
    choices: Sequence[FallbackChoice | str],
    *,
    usage: Usage,
    where: str,
    param: str,
    default_count: int = 1,
    cuda_version: str | None = None,
    keep_world_size: bool = True,
    max_cost_ratio: float | None = None,
    region: str = "us-east-1",
    max_entries: int | None = None,
    world_size_opt_out: str = "pass keep_world_size=False",
) -> list[InstanceType]:
    """Check an ordered fallback chain against its first choice and return the catalog entries, in order.

    ``choices`` are names (``"ml.g5.2xlarge"``) or :class:`FallbackChoice` with a per-type host count
    (None: ``default_count``). Each refusal is a :class:`ValidationError` naming ``param``, the entry
    (``param[i]``) and what is allowed; see the module docstring for the six checks. ``world_size_opt_out`` is how
    the caller's user turns the world-size check off, as the world-size refusal says it (a config key, a prop).
    """
    entries = _normalize(choices, where, param)
    _check_shape(entries, where, param, max_entries)
    resolved: list[tuple[int, InstanceType, int]] = []
    for i, entry in enumerate(entries):
        label = f"{param}[{i}]"
        it = require_nvidia_gpu(entry.instance_type, where=where, usage=usage, param=label)
        if cuda_version is not None:
            problem = cuda_support_problem(it, cuda_version)
            if problem is not None:
                raise ValidationError(
                    where, f"{label}={it.name_for(usage)!r} with cuda_version={cuda_version!r}: {problem}"
                )
        resolved.append((i, it, _count_of(entry, default_count, where, label)))
    _, first, first_count = resolved[0]
    first_world = first.nvidia_gpu_count * first_count
    for i, it, count in resolved[1:]:
        if it.gpu_memory_mib < first.gpu_memory_mib:
            raise ValidationError(
                where,
                f"{param}[{i}]={it.name_for(usage)!r} has {it.gpu_memory_gib:.1f} GiB per GPU, less than the "
                f"{first.gpu_memory_gib:.1f} GiB of the first choice {first.name_for(usage)!r}: a model that fits "
                f"there may not fit here; allowed: types with at least {first.gpu_memory_mib} MiB per GPU",
            )
        if keep_world_size and it.nvidia_gpu_count * count != first_world:
            raise ValidationError(
                where, _world_size_message(param, i, it, usage, count, first_world, first, world_size_opt_out)
            )
    if max_cost_ratio is not None:
        if isinstance(max_cost_ratio, bool) or not isinstance(max_cost_ratio, int | float) or max_cost_ratio <= 0:
            raise ValidationError(where, f"max_cost_ratio={max_cost_ratio!r} is not allowed; allowed: a number > 0")
        _check_cost(resolved, usage=usage, region=region, ratio=float(max_cost_ratio), where=where, param=param)
    return [it for _, it, _ in resolved]
