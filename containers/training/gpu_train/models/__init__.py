"""Built-in models (plain torch). :func:`build_model` is the default-architecture builder."""

from gpu_train.models.resnet import ARCHS, ResNet, build_from_config, build_model, default_stem

__all__ = ["ARCHS", "ResNet", "build_from_config", "build_model", "default_stem"]
