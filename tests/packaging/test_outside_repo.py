"""Script mode outside the repository: an ML engineer's own folder, the ``make wheel`` wheel, a saved job spec.

The platform engineer saves the job spec once in the checkout (``gpuctl train --synth --save-spec job.json``: the
synthesized app's spec, deploy-time values as stand-ins; ``make synth`` itself only writes ``cdk.out``). The ML
engineer installs the wheel into a new virtual environment (``pip install dist/gpu_platform-*.whl``: gpuctl, the
runtimes, ``gpu_constructs``, and the requirements the wheel lists) and, in a folder outside the repository that holds
only ``src/train.py`` (an argparse script that declares ``--lr`` and nothing else) and ``job.json``, runs:

* ``gpuctl train --spec job.json --dry-run --source-dir src --entry-point train.py -p lr=0.01``: the request, whose
  ``HyperParameters`` are only ``lr``;
* the same with ``--local`` and a ``--channel NAME=FOLDER`` per input channel: the script runs to success through the
  launcher, sees its channels, and ``model.tar.gz`` is left where gpuctl says (``./local-output/<job>``).

Torch, which the wheel does not list (it comes with the image, DLAMI or notebook), is this repository's torch: a
``.pth`` file of the new environment names a folder of links to torch and the distributions it requires, nothing else.
gpuctl runs with ``-I`` (no ``PYTHONPATH``, no script folder on ``sys.path``) from the user's folder, and the test
asserts that no module either process loaded (gpuctl, and the script under the launcher) comes from the checkout.

The fast tests check :func:`gpuctl.local_job.local_code_channels` where the library has no runtime folder (as
installed from the wheel): the launcher zipapp comes from the installed ``gpu_train``, and the built-in trainer's
code, which only a checkout has, is refused with the way out (``--source-dir``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

import gpu_train
from gpu_constructs.packaging.wheel import main as build_wheel_main
from gpu_constructs.training_spec import code_package
from gpuctl.local_job import LocalJobError, local_code_channels

ROOT = Path(__file__).resolve().parents[2]
#: The channels the launcher adds to every job that runs code (the package and the launcher zipapp).
CODE_CHANNELS = {"code", "sm_drivers"}
JOB = "gpu-dev-train-outside-1"  # the setup's roles create jobs of its prefix only

USER_SCRIPT = textwrap.dedent(
    """\
    import argparse
    import json
    import os
    import sys

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, required=True)
    args = parser.parse_args()  # any other argument (a hyperparameter of the setup's own code) fails here

    training = os.environ.get("SM_CHANNEL_TRAINING")
    channels = {
        name[len("SM_CHANNEL_"):].lower(): sorted(os.listdir(path))
        for name, path in os.environ.items()
        if name.startswith("SM_CHANNEL_") and os.path.isdir(path)
    }
    report = {
        "lr": args.lr,
        "argv": sys.argv[1:],
        "training": sorted(os.listdir(training)) if training else None,
        "channels": channels,
        "modules": sorted({getattr(m, "__file__", None) or "" for m in list(sys.modules.values())} - {""}),
    }
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "report.json"), "w") as handle:
        json.dump(report, handle)
    print(f"trained with lr={args.lr}")
    """
)

#: Runs gpuctl's own entry (``gpuctl.cli.main``) and, at exit, writes the files of every module it loaded.
GPUCTL_RUNNER = textwrap.dedent(
    """\
    import atexit, json, sys
    modules_file = sys.argv.pop(1)
    def dump():
        files = {getattr(m, "__file__", None) or "" for m in list(sys.modules.values())}
        with open(modules_file, "w") as handle:
            json.dump(sorted(files - {""}), handle)
    atexit.register(dump)
    from gpuctl.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _torch_closure() -> list[metadata.Distribution]:
    """torch and every distribution it requires (markers evaluated here), from this repository's environment."""
    found: dict[str, metadata.Distribution] = {}
    todo = ["torch"]
    while todo:
        name = todo.pop()
        if _key(name) in found or _key(name) in ("pip", "setuptools"):  # the new venv has its own
            continue
        dist = metadata.distribution(name)
        found[_key(name)] = dist
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return list(found.values())


def _link_torch(folder: Path) -> None:
    """``folder``: a link to each top-level entry (packages, modules, ``.dist-info``) of torch's distributions."""
    folder.mkdir()
    for dist in _torch_closure():
        for top in sorted({Path(str(f)).parts[0] for f in dist.files or []}):
            if top in ("..", "__pycache__") or (folder / top).exists():
                continue
            target = Path(str(dist.locate_file(top)))
            if target.exists():
                (folder / top).symlink_to(target)


def _user_env(base: Path, bin_dir: Path) -> dict[str, str]:
    """A workstation without the checkout: no PYTHON* variable, no AWS credentials, no folder of the repository on
    PATH, the new environment's bin first (as after ``source venv/bin/activate``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AWS_")) and k != "VIRTUAL_ENV"}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not Path(p).resolve().is_relative_to(ROOT)]
    env.update(
        PATH=os.pathsep.join([str(bin_dir), *path]),
        VIRTUAL_ENV=str(bin_dir.parent),
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONNOUSERSITE="1",
        AWS_EC2_METADATA_DISABLED="true",
        AWS_CONFIG_FILE=str(base / "aws-config"),  # missing files: no profile, no credentials
        AWS_SHARED_CREDENTIALS_FILE=str(base / "aws-credentials"),
    )
    return env


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a new virtual environment: the wheel of ``make wheel`` installed with pip, and torch."""
    base = tmp_path_factory.mktemp("outside-venv")
    assert (
        build_wheel_main([str(ROOT), str(base / "dist")]) == 0
    )  # make wheel: python -m gpu_constructs.packaging.wheel . dist
    (wheel,) = (base / "dist").glob("gpu_platform-*-py3-none-any.whl")
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True, timeout=120)
    bin_dir = base / "venv" / "bin"
    proc = subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
         str(wheel)],
        capture_output=True, text=True, timeout=900, env=_user_env(base, bin_dir),
    )  # fmt: skip
    assert proc.returncode == 0, f"pip install {wheel.name} failed:\n{proc.stdout}\n{proc.stderr}"
    purelib = subprocess.run(
        [str(bin_dir / "python"), "-I", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    _link_torch(base / "torch-only")
    (Path(purelib) / "torch-only.pth").write_text(f"{base / 'torch-only'}\n")
    return bin_dir


@pytest.fixture(scope="module")
def saved_spec(synth: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``gpuctl train --synth --save-spec job.json`` in the checkout (dev's synthesized app): the file and no job."""
    spec = tmp_path_factory.mktemp("saved-spec") / "job.json"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuctl", "train", "--env", "dev", "--synth", str(synth("dev").outdir),
         "--save-spec", str(spec)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=_user_env(spec.parent, Path(sys.executable).parent),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "" and f"job spec written to {spec}" in proc.stderr  # saved; no job started
    return spec


@pytest.fixture
def user_folder(tmp_path: Path, saved_spec: Path) -> Path:
    """The ML engineer's folder: ``src/train.py``, ``job.json`` and a data folder, nothing of the repository."""
    assert not tmp_path.resolve().is_relative_to(ROOT)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(USER_SCRIPT)
    (tmp_path / "job.json").write_text(saved_spec.read_text())
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sample.txt").write_text("one sample\n")
    return tmp_path


def _gpuctl(bin_dir: Path, cwd: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """``gpuctl ARGS`` in ``cwd`` with the new environment's Python in isolated mode; also the files of the modules
    it loaded."""
    runner, modules = cwd.parent / f"{cwd.name}-runner.py", cwd.parent / f"{cwd.name}-modules.json"
    runner.write_text(GPUCTL_RUNNER)
    proc = subprocess.run(
        [str(bin_dir / "python"), "-I", str(runner), str(modules), *args],
        capture_output=True, text=True, timeout=300, cwd=cwd, env=_user_env(cwd.parent, bin_dir),
    )  # fmt: skip
    return proc, json.loads(modules.read_text()) if modules.is_file() else []


def _from_checkout(files: list[str]) -> list[str]:
    """The module files under the repository (its .venv aside: the linked torch resolves there)."""
    resolved = [(f, Path(f).resolve()) for f in files]
    return [f for f, path in resolved if path.is_relative_to(ROOT) and not path.is_relative_to(ROOT / ".venv")]


def _assert_installed(files: list[str], bin_dir: Path, *packages: str) -> None:
    site = bin_dir.parent / "lib"
    for package in packages:
        found = [f for f in files if f"/{package}/" in f]
        assert found, f"{package} was not imported"
        assert all(Path(f).is_relative_to(site) for f in found), f"{package} not from the new environment: {found}"


@pytest.mark.slow
def test_dry_run_outside_the_repository_sends_only_the_users_hyperparameter(user_venv: Path, user_folder: Path) -> None:
    argv = ["train", "--spec", "job.json", "--dry-run", "--source-dir", "src", "--entry-point", "train.py"]
    proc, modules = _gpuctl(user_venv, user_folder, *argv, "-p", "lr=0.01", "--job-name", JOB)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    request = json.loads(proc.stdout)
    assert request["TrainingJobName"] == JOB
    assert request["HyperParameters"] == {"lr": "0.01"}
    arguments = request["AlgorithmSpecification"]["ContainerArguments"]
    assert arguments[arguments.index("--entry-point") + 1] == "train.py"
    (code,) = [c for c in request["InputDataConfig"] if c["ChannelName"] == "code"]
    assert code["DataSource"]["S3DataSource"]["S3Uri"].endswith("/sourcedir.tar.gz")
    assert re.search(r"would upload 1 files \(\d+ bytes\) to s3://\S+/sourcedir\.tar\.gz", proc.stderr), proc.stderr
    assert _from_checkout(modules) == []
    _assert_installed(modules, user_venv, "gpuctl", "gpu_constructs", "gpu_train")
    assert not [m for m in modules if "/torch/" in m or "/aws_cdk/" in m]  # a dry run loads neither


@pytest.mark.slow
def test_local_run_outside_the_repository_runs_the_users_script(user_venv: Path, user_folder: Path) -> None:
    argv = ["train", "--spec", "job.json", "--local", "--source-dir", "src", "--entry-point", "train.py"]
    argv += ["-p", "lr=0.01", "--job-name", JOB, "--channel", "training=data"]
    # The request --local runs (the same command with --dry-run), and a folder for each of its input channels.
    proc, _ = _gpuctl(user_venv, user_folder, *argv, "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [c["ChannelName"] for c in json.loads(proc.stdout)["InputDataConfig"]]
    inputs = [name for name in names if name not in CODE_CHANNELS]
    assert inputs and set(names) - set(inputs) == CODE_CHANNELS
    argv += [f"--channel={name}=data" for name in inputs if name != "training"]

    proc, modules = _gpuctl(user_venv, user_folder, *argv)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "algo-1: exit 0" in proc.stdout
    model = Path("local-output") / JOB / "model.tar.gz"  # the default --output, in the user's folder
    assert f"model: {model}" in proc.stdout
    with tarfile.open(user_folder / model) as archive:
        handle = archive.extractfile("report.json")
        assert handle is not None
        report = json.load(handle)
    assert (report["lr"], report["argv"]) == (0.01, ["--lr", "0.01"])
    assert report["training"] == (["sample.txt"] if "training" in inputs else None)
    for name in inputs:
        assert report["channels"][name] == ["sample.txt"], report["channels"]
    assert _from_checkout(modules) == [] and _from_checkout(report["modules"]) == []
    _assert_installed(modules, user_venv, "gpuctl", "gpu_constructs")
    assert not (ROOT / "local-output" / JOB).exists()


# --------------------------------------------------------------------------------------------------
# Fast: the code channels of a local run when the library has no runtime folder (as in the wheel)
# --------------------------------------------------------------------------------------------------


def _no_runtime_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    missing = tmp_path / "site-packages" / "gpu_constructs" / "_runtime" / "training"
    monkeypatch.setattr(code_package, "DEFAULT_RUNTIME_DIR", missing)
    monkeypatch.setattr(code_package, "DEFAULT_WHEELS_DIR", missing / "vendor")
    monkeypatch.setattr(code_package, "DEFAULT_CODE_DIR", missing / "default_code")


def test_without_a_runtime_folder_the_launcher_is_built_from_the_installed_gpu_train(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_runtime_folder(monkeypatch, tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "train.py").write_text(USER_SCRIPT)
    channels = local_code_channels(tmp_path / "src", "train.py")
    assert set(channels) == CODE_CHANNELS
    with tarfile.open(channels["code"]) as archive:
        assert archive.getnames() == ["train.py"]
    with zipfile.ZipFile(channels["sm_drivers"]) as driver:
        names = driver.namelist()
        launcher = driver.read("gpu_train/launcher.py")
    assert names[0] == "__main__.py" and "gpu_train/entrypoint.py" in names
    assert not [n for n in names if n.startswith("wheels/")]  # the local Python has the wheel's requirements
    assert launcher == (Path(gpu_train.__file__).parent / "launcher.py").read_bytes()


def test_without_a_runtime_folder_the_built_in_trainer_needs_the_checkout(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _no_runtime_folder(monkeypatch, tmp_path)
    with pytest.raises(
        LocalJobError, match=r"built-in trainer's code \(default_code/\) is not installed.*--source-dir"
    ):
        local_code_channels(None, "train.py")
