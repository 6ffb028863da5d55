"""gpuctl: the operator CLI of the GPU platform (shard datasets, train, serve, check GPUs)."""

# The version is written once, in gpu_constructs/_version.py (this distribution ships gpu_constructs too).
from gpu_constructs._version import __version__ as __version__
