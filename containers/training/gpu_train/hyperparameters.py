"""Typed, validated hyperparameters.

SageMaker passes every hyperparameter as a string (the SageMaker Python SDK JSON-encodes values, so
``"3"``, ``"\\"cosine\\""`` and ``"true"`` all occur). Each one is parsed into its declared type and
checked against its allowed values; an unknown name, a value of the wrong type or one out of range
fails the job at once with a message that names the hyperparameter, the value and what is allowed.
Names that start with ``sagemaker_`` are set by the SageMaker SDK and are ignored.

``HYPERPARAMETERS`` is the single table of names, types, defaults and help text; the README's
table is generated from the same data (:func:`markdown_table`).
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from gpu_train.errors import HyperparameterError

ARCHS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet_tiny")
IGNORED_PREFIXES = ("sagemaker_",)


@dataclass(frozen=True)
class Spec:
    """One hyperparameter: type, default, constraint and help."""

    kind: str  # int, float, bool, str, choice, floats
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    length: int | None = None  # for "floats"

    def allowed(self) -> str:
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind == "bool":
            return "true or false"
        if self.kind == "floats":
            return f"{self.length} comma-separated numbers or a JSON list"
        if self.kind in ("int", "float"):
            word = "an integer" if self.kind == "int" else "a number"
            lo = "" if self.minimum is None else f" >= {self.minimum:g}"
            hi = "" if self.maximum is None else f" <= {self.maximum:g}"
            both = " and".join(p for p in (lo, hi) if p)
            return word + both
        return "a string"


HYPERPARAMETERS: dict[str, Spec] = {
    # schedule
    "epochs": Spec("int", 10, "passes over the training data", minimum=1),
    "max_steps": Spec("int", 0, "stop after this many optimizer steps in total (0: no limit)", minimum=0),
    "batch_size": Spec("int", 128, "samples per process (per GPU) and step", minimum=1),
    "lr": Spec("float", 0.1, "peak learning rate", minimum=0),
    "lr_schedule": Spec("choice", "cosine", "learning-rate decay after warm-up", choices=("cosine", "constant")),
    "warmup_epochs": Spec("float", 0.0, "linear warm-up length in epochs", minimum=0),
    "optimizer": Spec("choice", "sgd", "optimizer", choices=("sgd", "adamw")),
    "momentum": Spec("float", 0.9, "SGD momentum", minimum=0, maximum=0.999),
    "nesterov": Spec("bool", True, "Nesterov momentum (SGD)"),
    "weight_decay": Spec("float", 5e-5, "weight decay", minimum=0),
    "label_smoothing": Spec("float", 0.0, "label smoothing of the cross-entropy loss", minimum=0, maximum=0.5),
    "seed": Spec("int", 0, "seed of initialisation, data order and augmentation", minimum=0),
    # model
    "arch": Spec("choice", "resnet50", "built-in model", choices=ARCHS),
    "width": Spec("int", 64, "channels of the first ResNet stage", minimum=4, maximum=512),
    "stem": Spec(
        "choice",
        "auto",
        "ResNet stem: 'imagenet' (7x7/2 + max-pool), 'cifar' (3x3/1, for images <= 64 px), 'auto'",
        choices=("auto", "imagenet", "cifar"),
    ),
    "num_classes": Spec("int", 0, "output classes (0: from the dataset index)", minimum=0),
    "image_size": Spec("int", 0, "input height and width in pixels (0: from the dataset index)", minimum=0),
    "model_module": Spec(
        "str", "", "your model: 'module:function' or 'file.py:function' returning an nn.Module (see README)"
    ),
    "dataset_decoder": Spec("str", "", "your sample decoder: 'module:function' or 'file.py:function' (see README)"),
    "normalize_mean": Spec("floats", (0.485, 0.456, 0.406), "per-channel mean of [0, 1] pixels", length=3),
    "normalize_std": Spec("floats", (0.229, 0.224, 0.225), "per-channel std of [0, 1] pixels", length=3),
    # performance
    "amp": Spec(
        "choice",
        "auto",
        "mixed precision: 'auto' = bf16 on GPUs that support it, else fp16 on GPU, off on CPU",
        choices=("auto", "bf16", "fp16", "off"),
    ),
    "channels_last": Spec("bool", True, "NHWC memory format for the convnet (on GPUs; ignored on CPUs)"),
    "compile": Spec("bool", False, "torch.compile the model (slow start, faster steps)"),
    "augment": Spec(
        "choice",
        "flip_crop",
        "GPU augmentation: random resized crop + flip, flip only, or none",
        choices=("flip_crop", "flip", "none"),
    ),
    "num_workers": Spec(
        "int", -1, "data-loader workers per process (-1: vCPUs per GPU minus one, at most 16)", minimum=-1
    ),
    "prefetch_factor": Spec("int", 4, "batches each loader worker prepares ahead", minimum=1),
    # distribution
    "processes_per_host": Spec("int", 0, "training processes per host (0: one per GPU, or 1 without GPUs)", minimum=0),
    "expect_gpu": Spec(
        "choice",
        "auto",
        "fail when no GPU is usable: 'auto' = when the instance has GPUs (SM_NUM_GPUS, instance type, /dev/nvidia*)",
        choices=("auto", "true", "false"),
    ),
    # data
    "train_channel": Spec("str", "train", "input channel with the training shards"),
    "validation_channel": Spec(
        "str", "validation", "input channel with validation shards (skipped when not configured)"
    ),
    # checkpoints and output
    "checkpoint_steps": Spec("int", 500, "checkpoint every N steps (0: only at epoch ends and on SIGTERM)", minimum=0),
    "keep_checkpoints": Spec("int", 2, "checkpoints kept on disk", minimum=1),
    "log_steps": Spec("int", 50, "print a metric line every N steps", minimum=1),
    "model_tarball": Spec(
        "bool",
        False,
        "also write output/data/model.tar.gz (SageMaker packs /opt/ml/model itself; useful off SageMaker)",
    ),
}


@dataclass(frozen=True)
class Hyperparameters:
    """The parsed hyperparameters (see :data:`HYPERPARAMETERS` for meaning and defaults)."""

    epochs: int
    max_steps: int
    batch_size: int
    lr: float
    lr_schedule: str
    warmup_epochs: float
    optimizer: str
    momentum: float
    nesterov: bool
    weight_decay: float
    label_smoothing: float
    seed: int
    arch: str
    width: int
    stem: str
    num_classes: int
    image_size: int
    model_module: str
    dataset_decoder: str
    normalize_mean: tuple[float, ...]
    normalize_std: tuple[float, ...]
    amp: str
    channels_last: bool
    compile: bool
    augment: str
    num_workers: int
    prefetch_factor: int
    processes_per_host: int
    expect_gpu: str
    train_channel: str
    validation_channel: str
    checkpoint_steps: int
    keep_checkpoints: int
    log_steps: int
    model_tarball: bool

    def as_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def auto_workers(num_cpus: int, procs_per_host: int) -> int:
    """``num_workers=-1``: loader workers per training process, vCPUs per process minus one (the training
    thread), 1..16. Torch-free, so the launcher derives the same number for any script."""
    return max(1, min(16, num_cpus // max(1, procs_per_host) - 1))


def unquote(raw: str) -> str:
    """The SDK sends ``json.dumps(value)``: unwrap one level of JSON string quoting."""
    text = raw.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return text
        if isinstance(value, str):
            return value.strip()
    return text


def _bad(name: str, raw: object, spec: Spec, why: str = "") -> HyperparameterError:
    reason = f" ({why})" if why else ""
    return HyperparameterError(f"hyperparameter {name}={raw!r} is not allowed{reason}; allowed: {spec.allowed()}")


def _number(name: str, raw: str, spec: Spec, why: str) -> float:
    """``raw`` (quotes stripped) as a float; ``why`` is the reason given when it is not a number at all."""
    try:
        return float(unquote(raw))
    except ValueError:
        raise _bad(name, raw, spec, why) from None


def _parse_int(name: str, raw: str, spec: Spec) -> int:
    number = _number(name, raw, spec, "not an integer")
    if not number.is_integer():
        raise _bad(name, raw, spec, "not an integer")
    return int(number)


def _parse_float(name: str, raw: str, spec: Spec) -> float:
    number = _number(name, raw, spec, "not a number")
    if number != number or number in (float("inf"), float("-inf")):
        raise _bad(name, raw, spec, "not a finite number")
    return number


def _parse_bool(name: str, raw: str, spec: Spec) -> bool:
    text = unquote(raw).lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise _bad(name, raw, spec)


def _parse_floats(name: str, raw: str, spec: Spec) -> tuple[float, ...]:
    text = unquote(raw)
    values: list[Any]
    if text.startswith("["):
        try:
            values = list(json.loads(text))
        except (json.JSONDecodeError, TypeError):
            raise _bad(name, raw, spec, "not a JSON list") from None
    else:
        values = [v for v in text.split(",") if v.strip()]
    try:
        numbers = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise _bad(name, raw, spec, "not numbers") from None
    if spec.length is not None and len(numbers) != spec.length:
        raise _bad(name, raw, spec, f"{len(numbers)} values")
    return numbers


_PARSERS: dict[str, Callable[[str, str, Spec], Any]] = {
    "int": _parse_int,
    "float": _parse_float,
    "bool": _parse_bool,
    "floats": _parse_floats,
}


def parse_value(name: str, raw: str, spec: Spec) -> Any:
    """Parse one raw string into the declared type and check its bounds."""
    if spec.kind == "choice":
        value: Any = unquote(raw)
        if value not in spec.choices:
            raise _bad(name, raw, spec)
        return value
    if spec.kind == "str":
        return unquote(raw)
    value = _PARSERS[spec.kind](name, raw, spec)
    if spec.kind in ("int", "float"):
        if spec.minimum is not None and value < spec.minimum:
            raise _bad(name, raw, spec, "too small")
        if spec.maximum is not None and value > spec.maximum:
            raise _bad(name, raw, spec, "too large")
    return value


def parse(raw: Mapping[str, str]) -> Hyperparameters:
    """Parse and validate raw hyperparameters; defaults fill what is not given."""
    values = {name: spec.default for name, spec in HYPERPARAMETERS.items()}
    for name, text in raw.items():
        if name.startswith(IGNORED_PREFIXES):
            continue
        spec = HYPERPARAMETERS.get(name)
        if spec is None:
            close = difflib.get_close_matches(name, list(HYPERPARAMETERS), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise HyperparameterError(
                f"unknown hyperparameter {name!r}{hint}; allowed: {', '.join(sorted(HYPERPARAMETERS))}"
            )
        values[name] = parse_value(name, str(text), spec)
    if any(s <= 0 for s in values["normalize_std"]):
        raise HyperparameterError(
            f"hyperparameter normalize_std={list(values['normalize_std'])!r} is not allowed; allowed: three numbers > 0"
        )
    return Hyperparameters(**values)


def markdown_table() -> str:
    """The hyperparameter table of the README."""
    rows = ["| name | type | default | meaning |", "| --- | --- | --- | --- |"]
    for name, spec in HYPERPARAMETERS.items():
        kind = "/".join(spec.choices) if spec.kind == "choice" else spec.kind
        default = ",".join(f"{v:g}" for v in spec.default) if spec.kind == "floats" else spec.default
        if isinstance(default, bool):
            default = str(default).lower()
        rows.append(f"| `{name}` | {kind} | `{default}` | {spec.help} |")
    return "\n".join(rows)
