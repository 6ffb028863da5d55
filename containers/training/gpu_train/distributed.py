"""Process group setup (NCCL on GPUs, gloo on CPUs) and a small CPU control plane.

The control plane is a gloo group used once per step to agree on two flags across all processes:
*stop* (some process got SIGTERM: all checkpoint at the same step and exit) and *exhausted* (some
process ran out of data: all end the epoch at the same step, so DDP never waits on a peer that has
stopped). Because it runs on CPU tensors, it never synchronises the GPU stream.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class DistContext:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    local_world: int = 1
    device: torch.device = torch.device("cpu")  # noqa: RUF009 - immutable default
    control: Any = None  # the gloo process group of the control plane (None: single process)

    @property
    def distributed(self) -> bool:
        return self.world > 1

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    def sync_flags(self, *flags: bool) -> list[bool]:
        """Logical OR of each flag over all processes."""
        if not self.distributed:
            return list(flags)
        tensor = torch.tensor([int(f) for f in flags], dtype=torch.int32)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.control)
        return [bool(v) for v in tensor.tolist()]

    def sum(self, *values: float) -> list[float]:
        """Sum of each value over all processes."""
        return self._reduce_floats(values, "SUM")

    def minimum(self, *values: float) -> list[float]:
        """Minimum of each value over all processes."""
        return self._reduce_floats(values, "MIN")

    def _reduce_floats(self, values: tuple[float, ...], op: str) -> list[float]:
        """``values`` reduced with ``dist.ReduceOp.<op>`` over all processes (as given when not distributed)."""
        if not self.distributed:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(tensor, op=getattr(dist.ReduceOp, op), group=self.control)
        return [float(v) for v in tensor.tolist()]

    def gather(self, obj: Any) -> list[Any]:
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.control)
        return out

    def broadcast(self, obj: Any) -> Any:
        if not self.distributed:
            return obj
        box = [obj if self.is_leader else None]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]


def init(use_cuda: bool, timeout_s: float = 1800.0) -> DistContext:
    """Join the process group torchrun set up (``RANK``, ``WORLD_SIZE``, ...); single process otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if use_cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world == 1:
        return DistContext(device=device)
    timeout = datetime.timedelta(seconds=timeout_s)
    backend = "nccl" if use_cuda else "gloo"
    kwargs: dict[str, Any] = {"backend": backend, "timeout": timeout}
    if use_cuda:
        kwargs["device_id"] = device  # eager NCCL init, bound to this process's GPU
    dist.init_process_group(**kwargs)
    control = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else dist.group.WORLD
    return DistContext(
        rank=rank, world=world, local_rank=local_rank, local_world=local_world, device=device, control=control
    )


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
