"""Reading packed shards the way one training process does (shared by the training benchmarks)."""

from __future__ import annotations

from gpu_train.data import PREFETCH_DEPTH, DataSource, ShardLoader, StreamConfig


def single_process_loader(
    source: DataSource,
    *,
    batch_size: int,
    image_size: int,
    num_classes: int,
    num_workers: int,
    drop_last: bool = True,
    pin_memory: bool = False,
    jpeg_decode: str = "cpu",
    hold: int = PREFETCH_DEPTH + 1,
) -> ShardLoader:
    """A :class:`ShardLoader` of rank 0 in a world of 1 (seed 0), prefetching 4 batches per worker; ``hold``: the
    batches its consumer keeps using (``DevicePipeline.hold``)."""
    config = StreamConfig(
        source=source,
        batch_size=batch_size,
        image_size=image_size,
        num_classes=num_classes,
        seed=0,
        rank=0,
        world=1,
        num_workers=num_workers,
        drop_last=drop_last,
        jpeg_decode=jpeg_decode,
    )
    return ShardLoader(config, pin_memory=pin_memory, prefetch_factor=4, hold=hold)
