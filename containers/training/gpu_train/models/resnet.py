"""ResNet in plain torch (no torchvision), with torchvision-compatible parameter names.

This file is self-contained (it imports only torch): the exporter copies it next to the inference
handler as ``code/model.py`` inside ``model.tar.gz``, so a server rebuilds the architecture from
``model_config.json`` without this package.

ResNet v1.5 (stride on the 3x3 convolution of the bottleneck), He et al. 2015. ``stem="cifar"``
replaces the 7x7/2 convolution and max-pool by a 3x3/1 convolution for small images (<= 64 px).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

# name -> (block, blocks per stage)
ARCHS: dict[str, tuple[str, tuple[int, int, int, int]]] = {
    "resnet_tiny": ("basic", (1, 1, 1, 1)),
    "resnet18": ("basic", (2, 2, 2, 2)),
    "resnet34": ("basic", (3, 4, 6, 3)),
    "resnet50": ("bottleneck", (3, 4, 6, 3)),
    "resnet101": ("bottleneck", (3, 4, 23, 3)),
}
STEMS = ("imagenet", "cifar")


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv3x3(cin, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv1x1(cin, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, width * self.expansion)
        self.bn3 = nn.BatchNorm2d(width * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def last_bn(self) -> nn.BatchNorm2d:
        return self.bn3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """ResNet for ``num_classes`` classes; input (N, 3, H, W) float, output (N, num_classes) logits."""

    def __init__(
        self,
        block: str,
        layers: tuple[int, int, int, int],
        num_classes: int,
        *,
        width: int = 64,
        stem: str = "imagenet",
        zero_init_residual: bool = True,
    ) -> None:
        super().__init__()
        if stem not in STEMS:
            raise ValueError(f"stem={stem!r} is not allowed; allowed: {', '.join(STEMS)}")
        if num_classes < 1:
            raise ValueError(f"num_classes={num_classes} is not allowed; allowed: an integer >= 1")
        block_cls: type[BasicBlock] | type[Bottleneck] = BasicBlock if block == "basic" else Bottleneck
        self.inplanes = width
        if stem == "imagenet":
            self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
            self.maxpool: nn.Module = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        else:
            self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
            self.maxpool = nn.Identity()
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block_cls, width, layers[0])
        self.layer2 = self._make_layer(block_cls, width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block_cls, width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block_cls, width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 8 * block_cls.expansion, num_classes)

        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(module, nn.BatchNorm2d):
                nn.init.ones_(module.weight)
                nn.init.zeros_(module.bias)
        if zero_init_residual:
            # Each residual branch starts as identity (Goyal et al. 2017): steadier large-batch training.
            for module in self.modules():
                if isinstance(module, (BasicBlock, Bottleneck)):
                    nn.init.zeros_(module.last_bn().weight)

    def _make_layer(
        self, block: type[BasicBlock] | type[Bottleneck], width: int, blocks: int, stride: int = 1
    ) -> nn.Sequential:
        downsample: nn.Module | None = None
        if stride != 1 or self.inplanes != width * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.inplanes, width * block.expansion, stride),
                nn.BatchNorm2d(width * block.expansion),
            )
        modules: list[nn.Module] = [block(self.inplanes, width, stride, downsample)]
        self.inplanes = width * block.expansion
        modules.extend(block(self.inplanes, width) for _ in range(1, blocks))
        return nn.Sequential(*modules)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def default_stem(image_size: int) -> str:
    """'cifar' for images of at most 64 pixels (the 7x7/2 stem + pool would shrink them to nothing)."""
    return "cifar" if image_size <= 64 else "imagenet"


def build_model(arch: str, num_classes: int, *, width: int = 64, stem: str = "imagenet", **_: Any) -> ResNet:
    """Build a ResNet by name (``resnet_tiny``, ``resnet18``, ``resnet34``, ``resnet50``, ``resnet101``)."""
    if arch not in ARCHS:
        raise ValueError(f"arch={arch!r} is not allowed; allowed: {', '.join(ARCHS)}")
    block, layers = ARCHS[arch]
    return ResNet(block, layers, num_classes, width=width, stem=stem)


def build_from_config(config: dict[str, Any]) -> ResNet:
    """Build the model described by a ``model_config.json`` dictionary."""
    return build_model(
        config["arch"],
        int(config["num_classes"]),
        width=int(config.get("width", 64)),
        stem=str(config.get("stem", "imagenet")),
    )
