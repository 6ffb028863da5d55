"""Write the model artifact: ``model.pt``, ``model_config.json`` and ``code/`` (the inference handler).

Layout of ``/opt/ml/model`` (SageMaker packs it as ``model.tar.gz``; :func:`package` does the same
off SageMaker)::

    model.pt              state_dict (torch.save), float32, CPU tensors
    model_config.json     {"arch", "num_classes", "image_size", "mean", "std", "width", "stem", ...}
    code/inference.py     model_fn / input_fn / predict_fn / output_fn (torch + numpy + Pillow only)
    code/model.py         the ResNet definition (built-in models), or
    code/<your module>.py the module of ``model_module`` (custom models)

For a small artifact in tests of the inference side::

    from gpu_train.export import export_example_model
    tarball = export_example_model(tmp_path)  # resnet_tiny, 3 classes, 32x32, ~0.1 MB, < 1 s
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from gpu_train.models import resnet

PACKAGE_DIR = Path(__file__).resolve().parent
INFERENCE_SOURCE = PACKAGE_DIR / "serving" / "inference.py"
MODEL_SOURCE = PACKAGE_DIR / "models" / "resnet.py"
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain module inside DDP / torch.compile wrappers."""
    while True:
        if hasattr(model, "module") and isinstance(model.module, nn.Module):
            model = model.module
        elif hasattr(model, "_orig_mod") and isinstance(model._orig_mod, nn.Module):
            model = model._orig_mod
        else:
            return model


def model_config(
    *,
    arch: str,
    num_classes: int,
    image_size: int,
    mean: Sequence[float] = IMAGENET_MEAN,
    std: Sequence[float] = IMAGENET_STD,
    width: int = 64,
    stem: str | None = None,
    classes: Sequence[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    """The ``model_config.json`` dictionary (the contract with the inference image)."""
    config: dict[str, Any] = {
        "arch": arch,
        "num_classes": int(num_classes),
        "image_size": int(image_size),
        "mean": [float(v) for v in mean],
        "std": [float(v) for v in std],
        "width": int(width),
        "stem": stem or resnet.default_stem(image_size),
        "input": {"layout": "NCHW", "channels": 3, "dtype": "float32", "normalized": True},
        "framework": "pytorch",
        "torch_version": torch.__version__.split("+")[0],
    }
    if classes:
        config["classes"] = list(classes)
    config.update(extra)
    return config


def export_model(
    model: nn.Module,
    model_dir: Path,
    config: dict[str, Any],
    *,
    module_file: Path | None = None,
    tarball: Path | None = None,
) -> Path:
    """Write the artifact into ``model_dir`` (and ``tarball`` when given); returns ``model_dir``.

    ``module_file``: the source of a custom model (``config["builder"]`` names its function); it is
    copied into ``code/`` and ``config["module_file"]`` set to its name.
    """
    model_dir.mkdir(parents=True, exist_ok=True)
    code = model_dir / "code"
    code.mkdir(exist_ok=True)
    state = {k: v.detach().to("cpu").clone() for k, v in unwrap(model).state_dict().items()}
    torch.save(state, model_dir / "model.pt")
    shutil.copyfile(INFERENCE_SOURCE, code / "inference.py")
    config = dict(config)
    if module_file is not None:
        target = "user_model.py" if module_file.name in ("inference.py", "model.py") else module_file.name
        shutil.copyfile(module_file, code / target)
        config["module_file"] = target
        config.setdefault("builder", "build_model")
        config["arch"] = config.get("arch") or "custom"
    else:
        shutil.copyfile(MODEL_SOURCE, code / "model.py")
    (model_dir / "model_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    if tarball is not None:
        package(model_dir, tarball)
    return model_dir


def _add_tree(archive: tarfile.TarFile, root: Path) -> None:
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts:
            continue
        relative = path.relative_to(root).as_posix()
        info = archive.gettarinfo(str(path), arcname=relative)
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o755 if path.is_dir() else 0o644
        if path.is_file():
            with open(path, "rb") as handle:
                archive.addfile(info, handle)
        else:
            archive.addfile(info)


def package(model_dir: Path, tarball: Path) -> Path:
    """``model.tar.gz`` with the contents of ``model_dir`` at its root, byte-for-byte reproducible."""
    tarball.parent.mkdir(parents=True, exist_ok=True)
    tmp = tarball.with_name(f".{tarball.name}.tmp-{os.getpid()}")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        _add_tree(archive, model_dir)
    with open(tmp, "wb") as out, gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0) as gz:
        gz.write(raw.getvalue())
    os.replace(tmp, tarball)
    return tarball


def export_example_model(
    out_dir: str | os.PathLike[str],
    *,
    num_classes: int = 3,
    image_size: int = 32,
    arch: str = "resnet_tiny",
    width: int = 8,
    seed: int = 0,
    classes: Sequence[str] = (),
) -> Path:
    """A small, randomly initialised (seeded) model as ``out_dir/model.tar.gz``; ``out_dir/model`` holds
    the unpacked files. For tests of the inference runtime; takes well under a second.

    ``out_dir`` may be a ``str`` or any path-like; it is created when missing."""
    out_dir = Path(out_dir)
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        model = resnet.build_model(arch, num_classes, width=width, stem=resnet.default_stem(image_size))
        # Non-trivial batch-norm statistics and residual weights, so outputs depend on every layer.
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                assert module.running_mean is not None and module.running_var is not None
                module.running_mean.uniform_(-0.1, 0.1)
                module.running_var.uniform_(0.5, 1.5)
                nn.init.uniform_(module.weight, 0.5, 1.5)
    finally:
        torch.random.set_rng_state(generator_state)
    config = model_config(
        arch=arch,
        num_classes=num_classes,
        image_size=image_size,
        width=width,
        classes=classes or [f"class_{i}" for i in range(num_classes)],
    )
    tarball = out_dir / "model.tar.gz"
    export_model(model.eval(), out_dir / "model", config, tarball=tarball)
    return tarball
