"""gpu_serve: the SageMaker-compatible PyTorch inference server of the GPU platform's inference image.

Run it as ``python -m gpu_serve serve`` (the image's entrypoint), or ``gpuctl serve MODEL`` locally.
"""

#: The distribution that ships this package (the repository's ``pyproject.toml``).
_DISTRIBUTION = "gpu-platform"


def __getattr__(name: str) -> str:
    """``__version__``, read on first use from the installed distribution's metadata (PEP 562).

    The version is written once, in ``gpu_constructs/_version.py``; the package build copies it into the
    metadata. Reading it lazily keeps ``import gpu_serve`` cheap. An image copies this package without installing
    the distribution: there the version is ``"0+unknown"`` (a valid PEP 440 version that sorts first).
    """
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        value = version(_DISTRIBUTION)
    except PackageNotFoundError:
        value = "0+unknown"
    globals()["__version__"] = value
    return value
