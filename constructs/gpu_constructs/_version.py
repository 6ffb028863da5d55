"""The platform's version, written here and nowhere else.

Everything else derives it: ``gpu_constructs.__version__`` and ``gpuctl.__version__`` import it; both
``pyproject.toml`` files declare ``version`` dynamic and setuptools reads this assignment statically
(``[tool.setuptools.dynamic] version = {attr = ...}``), as does the in-process wheel builder
(:mod:`gpu_constructs.packaging.wheel`); ``gpu_train`` and ``gpu_serve`` read the installed distribution's metadata.
A release edits this line and ``CHANGELOG.md``, nothing else. Keep it a plain string literal: the build
tools parse it without importing the package.
"""

__version__ = "0.1.0"
