"""Process group setup (NCCL on GPUs, gloo on CPUs) and a small CPU control plane.

The control plane is a gloo group used once per step to agree on two flags across all processes:
*stop* (some process got SIGTERM: all checkpoint at the same step and exit) and *exhausted* (some
process ran out of data: all end the epoch at the same step, so DDP never waits on a peer that has
stopped). Because it runs on CPU tensors, it never synchronises the GPU stream.

NCCL runs one process per GPU. Before any NCCL call, :func:`init` fails with a :class:`GpuCheckError` that names
the GPUs when a process's ``LOCAL_RANK`` has no GPU of its own (more processes per host than GPUs) or when two
processes would share one GPU: several "hosts" of a job on one machine (``gpuctl train --local`` with
``InstanceCount`` 2 on a one-GPU workstation), where NCCL itself stops with "Duplicate GPU detected".
"""

from __future__ import annotations

import datetime
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from gpu_train.errors import GpuCheckError

# How to train where the GPUs are fewer than the processes: the advice of both errors below.
_ALLOWED = (
    "allowed: at most one training process per GPU of each machine (processes_per_host 0 = one per GPU, or at most "
    "the GPU count), one host of the job per machine, or CUDA_VISIBLE_DEVICES='' to train on the CPU with gloo"
)


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
        count = torch.cuda.device_count()
        if local_rank >= count:
            names = ", ".join(f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(count)) or "none"
            raise GpuCheckError(
                f"training process LOCAL_RANK={local_rank} (of {local_world} on this host) has no GPU of its own: "
                f"this host's processes see {count} GPU{'' if count == 1 else 's'} ({names}); {_ALLOWED}"
            )
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world == 1:
        return DistContext(device=device)
    timeout = datetime.timedelta(seconds=timeout_s)
    backend = "nccl" if use_cuda else "gloo"
    # NCCL's communicator is created at the first collective (DDP's first broadcast), after the GPU check below.
    dist.init_process_group(backend=backend, timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else dist.group.WORLD
    if use_cuda:
        mine = (
            socket.gethostname(),
            _gpu_id(local_rank),
            f"cuda:{local_rank} {torch.cuda.get_device_name(local_rank)}",
        )
        everyone: list[Any] = [None] * world
        dist.all_gather_object(everyone, mine, group=control)
        problem = shared_gpu([tuple(entry) for entry in everyone])
        if problem:
            raise GpuCheckError(problem)
    return DistContext(
        rank=rank, world=world, local_rank=local_rank, local_world=local_world, device=device, control=control
    )


def _gpu_id(index: int) -> str:
    """The GPU's identity on its machine (its UUID; its PCI bus id or index where torch has no UUID)."""
    props = torch.cuda.get_device_properties(index)
    uuid = getattr(props, "uuid", None)
    if uuid:
        return str(uuid)
    return str(getattr(props, "pci_bus_id", index))


def shared_gpu(ranks: Sequence[tuple[str, str, str]]) -> str | None:
    """The reason NCCL would refuse ``ranks`` (per rank: machine, GPU identity, ``cuda:N name``), or None when each
    rank has a GPU of its own."""
    owners: dict[tuple[str, str], list[int]] = {}
    for rank, (machine, gpu, _) in enumerate(ranks):
        owners.setdefault((machine, gpu), []).append(rank)
    for (machine, _), shared in owners.items():
        if len(shared) > 1:
            name = ranks[shared[0]][2]
            listed = ", ".join(str(r) for r in shared)
            return (
                f"training processes (ranks {listed}) would share GPU {name} of machine {machine}: NCCL runs one "
                f"process per GPU (it stops with 'Duplicate GPU detected'); this happens when several hosts of a job "
                f"run on one machine or there are more processes than GPUs; {_ALLOWED}"
            )
    return None


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
