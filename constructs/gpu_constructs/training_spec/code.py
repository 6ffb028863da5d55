"""What a training job runs: a code package and its entry point, started by the platform's launcher.

Code travels to the job as two input channels, the way SageMaker SDK v3's ``ModelTrainer`` delivers it
(its ``code`` and ``sm_drivers`` channels), and the image's own entry is replaced:

* ``code``: the user's source folder, packaged (``sourcedir.tar.gz``, or a CDK asset's ``.zip``), in File mode;
* ``sm_drivers``: the platform's launcher, one zipapp (``gpu_train_driver.pyz``: the ``gpu_train`` runtime
  plus vendored wheels of its two compiled dependencies), in File mode;
* ``AlgorithmSpecification.ContainerEntrypoint`` runs ``python3 <the zipapp> launch`` and
  ``ContainerArguments`` name the entry point and the launcher's options.

So the same request runs on the platform's image, the stock AWS PyTorch training DLC or the TensorFlow DLC:
the image only has to hold Python and the framework. Without the override the DLC would start the SageMaker
training toolkit, which stops with "The training entry point name is empty" when no ``sagemaker_program``
hyperparameter names code (sagemaker-training's ``_entry_point_type``/``environment`` modules).

``ContainerEntrypoint`` and ``ContainerArguments`` are lists of 1 to 100 strings of at most 256 characters
each (botocore 1.44.5 ``sagemaker`` service model, shapes ``TrainingContainerEntrypoint`` /
``TrainingContainerArguments``; the same for processing's ``ContainerEntrypoint``); the request is checked
against that model where it is rendered.

The channel is an S3 prefix equal to the package's object key (``S3Prefix``: "SageMaker uses all objects
that match the specified key name prefix", API reference ``S3DataSource``), so exactly that object is
downloaded; the launcher finds the one archive in the channel folder whatever its name, and the entry
point below globs the driver folder, so neither depends on the local file name SageMaker chooses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from gpu_constructs.errors import is_token
from gpu_constructs.training_spec.rules import s3_problem

__all__ = [
    "CODE_CHANNEL",
    "DEFAULT_ENTRY_POINT",
    "DRIVERS_CHANNEL",
    "FRAMEWORKS",
    "LAUNCH_DISTRIBUTIONS",
    "LAUNCH_ENTRYPOINT",
    "RESERVED_CHANNELS",
    "TrainingCode",
    "entry_point_problem",
    "launcher_arguments",
]

#: The channel of the user's code package (SageMaker SDK v3 ``ModelTrainer``'s name).
CODE_CHANNEL = "code"
#: The channel of the platform's launcher (SageMaker SDK v3 ``ModelTrainer``'s name).
DRIVERS_CHANNEL = "sm_drivers"
RESERVED_CHANNELS = (CODE_CHANNEL, DRIVERS_CHANNEL)
#: The built-in trainer's script in the default code package (``containers/training/default_code``).
DEFAULT_ENTRY_POINT = "train.py"
LAUNCH_DISTRIBUTIONS = ("auto", "torchrun", "single")
FRAMEWORKS = ("auto", "pytorch", "tensorflow")

#: ``sh -c SCRIPT NAME ARGS...``: run the one file of the driver channel with python3 (``exec``: Python
#: becomes the container's PID 1 and receives SageMaker's SIGTERM itself). ``GPU_TRAIN_ROOT`` moves the
#: ``/opt/ml`` tree for local runs of the same request (``gpuctl train --local``).
LAUNCH_SCRIPT = (
    'for driver in "${GPU_TRAIN_ROOT:-/opt/ml}"/input/data/' + DRIVERS_CHANNEL + "/*; do "
    'exec python3 "$driver" launch "$@"; done; '
    'echo "no launcher in the ' + DRIVERS_CHANNEL + ' channel" >&2; exit 1'
)
LAUNCH_ENTRYPOINT = ("/bin/sh", "-c", LAUNCH_SCRIPT, "gpu-train-launch")

_ENTRY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,200}\.py$")
ENTRY_POINT_ALLOWED = "a relative path to a .py file inside the source folder, e.g. train.py or src/train.py"

Distribution = Literal["auto", "torchrun", "single"]
Framework = Literal["auto", "pytorch", "tensorflow"]


def entry_point_problem(entry_point: Any) -> str | None:
    """Why ``entry_point`` cannot name a script of a code package (``None`` when it can)."""
    if isinstance(entry_point, str) and is_token(entry_point):
        return None
    if (
        not isinstance(entry_point, str)
        or not _ENTRY_RE.match(entry_point)
        or ".." in entry_point.split("/")
        or "//" in entry_point
    ):
        return f"entry_point={entry_point!r} is not allowed; allowed: {ENTRY_POINT_ALLOWED}"
    return None


def launcher_arguments(entry_point: Any, distribution: str, framework: str, package_index: bool) -> list[Any]:
    """``ContainerArguments``: what ``python3 gpu_train_driver.pyz launch`` is given (``entry_point`` may be a
    Step Functions reference)."""
    return [
        "--entry-point",
        entry_point,
        "--distribution",
        distribution,
        "--framework",
        framework,
        "--package-index",
        "yes" if package_index else "no",
    ]


@dataclass(frozen=True)
class TrainingCode:
    """The code of a training job and how the launcher starts it.

    :param source_s3_uri: the code package: ``s3://bucket/key`` of a ``.tar.gz`` or ``.zip`` of the source folder
        (what ``gpuctl train --source-dir`` uploads, or a CDK asset).
    :param drivers_s3_uri: the launcher zipapp ``s3://bucket/key``.
    :param entry_point: the script to run, relative to the source folder (default ``train.py``).
    :param distribution: ``auto`` (torchrun over every GPU and host when there is more than one process, else
        one plain process), ``torchrun`` (always) or ``single`` (one plain process per host). Default ``auto``.
    :param framework: ``auto`` (PyTorch when the image has it, else TensorFlow), ``pytorch`` or ``tensorflow``:
        which GPU check runs before the script. Default ``auto``.
    :param package_index: the job has a route to a package index (``requirements.txt`` of the package is
        installed from it); without one only wheels vendored into the package (``wheels/``) are installed.
    :param upload_prefix: ``s3://bucket/prefix/`` where ``gpuctl`` may upload code packages for this setup
        (the job role reads it; default: none).
    :param builtin: the code is the platform's built-in trainer (its hyperparameters are checked by the
        runtime's own parser before a job starts).
    """

    source_s3_uri: str
    drivers_s3_uri: str
    entry_point: str = DEFAULT_ENTRY_POINT
    distribution: Distribution = "auto"
    framework: Framework = "auto"
    package_index: bool = False
    upload_prefix: str | None = None
    builtin: bool = False

    def problems(self) -> list[str]:
        out: list[str] = []
        for name, uri in (("code.source_s3_uri", self.source_s3_uri), ("code.drivers_s3_uri", self.drivers_s3_uri)):
            problem = s3_problem(name, uri)
            if problem:
                out.append(problem)
        if self.upload_prefix is not None:
            problem = s3_problem("code.upload_prefix", self.upload_prefix)
            if problem:
                out.append(problem)
        problem = entry_point_problem(self.entry_point)
        if problem:
            out.append("code." + problem)
        if self.distribution not in LAUNCH_DISTRIBUTIONS:
            out.append(
                f"code.distribution={self.distribution!r} is not allowed; allowed: {', '.join(LAUNCH_DISTRIBUTIONS)}"
            )
        if self.framework not in FRAMEWORKS:
            out.append(f"code.framework={self.framework!r} is not allowed; allowed: {', '.join(FRAMEWORKS)}")
        return out

    def channels(self, source_s3_uri: Any = None) -> list[dict[str, Any]]:
        """The ``code`` and ``sm_drivers`` channels (``source_s3_uri`` may be a Step Functions reference)."""
        return [
            _file_channel(CODE_CHANNEL, self.source_s3_uri if source_s3_uri is None else source_s3_uri),
            _file_channel(DRIVERS_CHANNEL, self.drivers_s3_uri),
        ]

    def arguments(self, entry_point: Any = None) -> list[Any]:
        return launcher_arguments(
            self.entry_point if entry_point is None else entry_point,
            self.distribution,
            self.framework,
            self.package_index,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_s3_uri": self.source_s3_uri,
            "drivers_s3_uri": self.drivers_s3_uri,
            "entry_point": self.entry_point,
            "distribution": self.distribution,
            "framework": self.framework,
            "package_index": self.package_index,
            "upload_prefix": self.upload_prefix,
            "builtin": self.builtin,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingCode:
        return cls(**dict(data))


def _file_channel(name: str, s3_uri: Any) -> dict[str, Any]:
    return {
        "ChannelName": name,
        "DataSource": {
            "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": s3_uri, "S3DataDistributionType": "FullyReplicated"}
        },
        "InputMode": "File",
    }
