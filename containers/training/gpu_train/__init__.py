"""gpu_train: the runtime inside the GPU training image.

Importing the package is cheap and does not import torch, so the shard tools
(:mod:`gpu_train.shards`, :mod:`gpu_train.pack`) and the GPU check
(:mod:`gpu_train.gpu_check`) work on machines without torch, e.g. in ``gpuctl``.
"""

__version__ = "0.1.0"
