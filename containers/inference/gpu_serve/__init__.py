"""gpu_serve: the SageMaker-compatible PyTorch inference server of the GPU platform's inference image.

Run it as ``python -m gpu_serve serve`` (the image's entrypoint), or ``gpuctl serve MODEL`` locally.
"""

__version__ = "0.1.0"
