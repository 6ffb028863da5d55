"""gpu_serve: the SageMaker-compatible PyTorch inference server of the GPU platform's inference image.

Run it as ``python -m gpu_serve serve`` (the image's entrypoint), or ``gpuctl serve MODEL`` locally.
"""

#: The distribution that ships this package (the repository's ``pyproject.toml``).
_DISTRIBUTION = "gpu-platform"


def __getattr__(name: str) -> str:
    """``__version__`` (PEP 562), found as :data:`gpu_train.__version__` is: the installed distribution's, else
    ``"0+unknown"`` (an image copies this package without installing it)."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib.metadata as metadata

    try:
        found = metadata.version(_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        found = "0+unknown"
    globals()[name] = found
    return found
