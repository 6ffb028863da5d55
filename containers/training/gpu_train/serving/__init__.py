"""The inference handler shipped as ``code/inference.py`` in every ``model.tar.gz``."""
