"""gpuctl: the operator CLI of the GPU platform (shard datasets, train, serve, check GPUs)."""

__version__ = "0.1.0"
