"""Metric lines in a stable format, and the SageMaker ``MetricDefinitions`` that parse them.

The training loop prints (rank 0 only)::

    epoch=1 step=200 loss=2.301234 samples_per_sec=4410.2 gpu_util=97.0 lr=0.100000 data_wait_pct=0.8
    epoch=1 val_loss=2.250000 val_accuracy=0.312500 val_samples=50000

* ``step`` counts optimizer steps over the whole run; ``loss`` is the mean over all processes since the
  previous line; ``samples_per_sec`` counts every process; ``gpu_util`` is the local GPU's utilisation in
  percent (``0.0`` without a GPU; ``nan`` when NVML is unavailable, so no data point is recorded);
  ``data_wait_pct`` is the share of wall time spent waiting for input batches: near 0 when the GPU, not
  the data pipeline, is the bottleneck.

:data:`METRIC_DEFINITIONS` is plain data (``[{"Name", "Regex"}]``), imported by the CDK training
construct. SageMaker matches each regex against every log line and records the first capture group.
"""

from __future__ import annotations

import math
import re

_NUMBER = r"(-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?)"

METRIC_DEFINITIONS: list[dict[str, str]] = [
    {"Name": "train:loss", "Regex": r"epoch=[0-9]+ step=[0-9]+ loss=" + _NUMBER},
    {"Name": "train:samples_per_sec", "Regex": r"epoch=[0-9]+ step=[0-9]+ .*samples_per_sec=" + _NUMBER},
    {"Name": "train:gpu_util", "Regex": r"epoch=[0-9]+ step=[0-9]+ .*gpu_util=" + _NUMBER},
    {"Name": "train:lr", "Regex": r"epoch=[0-9]+ step=[0-9]+ .*lr=" + _NUMBER},
    {"Name": "train:data_wait_pct", "Regex": r"epoch=[0-9]+ step=[0-9]+ .*data_wait_pct=" + _NUMBER},
    {"Name": "train:epoch", "Regex": r"epoch=([0-9]+) step=[0-9]+ loss="},
    {"Name": "validation:loss", "Regex": r"epoch=[0-9]+ val_loss=" + _NUMBER},
    {"Name": "validation:accuracy", "Regex": r"epoch=[0-9]+ val_loss=\S+ val_accuracy=" + _NUMBER},
]


def _fmt(value: float, digits: int) -> str:
    if math.isnan(value) or math.isinf(value):
        return "nan"
    return f"{value:.{digits}f}"


def train_line(
    *,
    epoch: int,
    step: int,
    loss: float,
    samples_per_sec: float,
    gpu_util: float,
    lr: float,
    data_wait_pct: float,
) -> str:
    return (
        f"epoch={epoch} step={step} loss={_fmt(loss, 6)} samples_per_sec={_fmt(samples_per_sec, 1)} "
        f"gpu_util={_fmt(gpu_util, 1)} lr={_fmt(lr, 6)} data_wait_pct={_fmt(data_wait_pct, 1)}"
    )


def validation_line(*, epoch: int, loss: float, accuracy: float, samples: int) -> str:
    return f"epoch={epoch} val_loss={_fmt(loss, 6)} val_accuracy={_fmt(accuracy, 6)} val_samples={samples}"


def parse(line: str) -> dict[str, float]:
    """Apply every metric definition to one log line: {metric name: value} for those that match."""
    values: dict[str, float] = {}
    for definition in METRIC_DEFINITIONS:
        match = re.search(definition["Regex"], line)
        if match:
            values[definition["Name"]] = float(match.group(1))
    return values
