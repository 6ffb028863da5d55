"""The training driver zipapp ``gpu_train_driver.pyz``, whose ``__main__.py`` is ``gpu_train/bootstrap.py``.

The tests build a small driver (the real ``gpu_train`` sources, this environment's own xxhash repacked as the
wheel for this interpreter, fake wheels for other interpreters) and run it with ``python -S``: without
site-packages, so ``gpu_train``'s imports of the vendored modules really come from the unpacked wheels.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpu_train import bootstrap

TRAINING_DIR = Path(__file__).resolve().parents[3] / "containers" / "training"
HERE = f"cp{sys.version_info[0]}{sys.version_info[1]}"
MACHINE = platform.machine()

SCRIPT = """
import json, os, gpu_train, gtdemo, xxhash
seen = {"xxhash": xxhash.__file__, "digest": xxhash.xxh3_64_hexdigest(b"abc"), "gtdemo": gtdemo.__file__,
        "gpu_train": gpu_train.__file__, "value": gtdemo.VALUE}
with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as f:
    json.dump(seen, f)
"""


def _wheel(directory: Path, filename: str, files: dict[str, bytes], top_level: str | None = None) -> Path:
    """A wheel file named ``filename`` holding ``files`` and a dist-info (with ``top_level.txt`` when given)."""
    dist, version = filename.split("-")[:2]
    info = f"{dist}-{version}.dist-info"
    directory.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(directory / filename, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        if top_level is not None:
            zf.writestr(f"{info}/top_level.txt", top_level)
    return directory / filename


def _this_xxhash(directory: Path) -> str:
    """This environment's xxhash (a compiled extension), repacked as the wheel the driver vendors for this
    interpreter; returns its file name."""
    import xxhash

    package = Path(xxhash.__file__).parent
    files = {
        f"xxhash/{path.relative_to(package)}": path.read_bytes()
        for path in package.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    name = f"xxhash-{xxhash.VERSION}-{HERE}-{HERE}-manylinux_2_17_{MACHINE}.manylinux2014_{MACHINE}.whl"
    return _wheel(directory, name, files, "xxhash\n").name


def _driver(path: Path, wheels: Path) -> Path:
    """``gpu_train_driver.pyz``: ``__main__.py``, ``gpu_train/**.py`` and ``wheels/*.whl``."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(TRAINING_DIR / "gpu_train" / "bootstrap.py", "__main__.py")
        for source in sorted((TRAINING_DIR / "gpu_train").rglob("*.py")):
            zf.write(source, str(source.relative_to(TRAINING_DIR)))
        for wheel in sorted(wheels.glob("*.whl")):
            zf.write(wheel, f"wheels/{wheel.name}")
    return path


def _run(
    driver: Path, *args: str, tmp: Path, root: Path, pythonpath: str = "", **extra_env: str
) -> subprocess.CompletedProcess[str]:
    """``python -S gpu_train_driver.pyz ARGS`` with a private temporary directory and SageMaker root."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "GPU_TRAIN_", "PYTHON"))}
    env.update(TMPDIR=str(tmp), GPU_TRAIN_ROOT=str(root), SM_NUM_CPUS="1", **extra_env)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    return subprocess.run(
        [sys.executable, "-S", str(driver), *args], cwd=str(tmp), env=env, capture_output=True, text=True, timeout=60
    )


def _job(root: Path) -> Path:
    """A SageMaker tree with SCRIPT as the code channel; returns the code directory."""
    config, code = root / "input" / "config", root / "input" / "data" / "code"
    config.mkdir(parents=True)
    code.mkdir(parents=True)
    (root / "output").mkdir()
    (config / "inputdataconfig.json").write_text(json.dumps({"code": {"TrainingInputMode": "File"}}))
    (code / "train.py").write_text(SCRIPT)
    return code


def test_driver_runs_the_launcher_with_modules_from_its_own_wheels(tmp_path: Path) -> None:
    """A CPU job (``CUDA_VISIBLE_DEVICES=''`` hides a GPU of the machine that runs the test): the stand-in
    TensorFlow has no GPU support, which the GPU check would rightly refuse where a GPU is expected."""
    wheels, tmp, root = tmp_path / "wheels", tmp_path / "tmp", tmp_path / "opt_ml"
    tmp.mkdir()
    xxhash_wheel = _this_xxhash(wheels)
    _wheel(wheels, "xxhash-4.1.0-cp27-cp27mu-manylinux1_x86_64.whl", {"xxhash/__init__.py": b"broken"}, "xxhash\n")
    _wheel(wheels, "gtdemo-1.0-py3-none-any.whl", {"gtdemo/__init__.py": b"VALUE = 'pure'\n"})  # no top_level.txt
    _wheel(wheels, "gtstd-1.0-py3-none-any.whl", {"json/__init__.py": b"raise ImportError"}, "json\n")  # importable
    driver = _driver(tmp_path / "gpu_train_driver.pyz", wheels)
    _job(root)
    fake_tf = tmp_path / "fake_tf"  # `python -S` hides torch: the launcher takes the TensorFlow path
    (fake_tf / "tensorflow").mkdir(parents=True)
    (fake_tf / "tensorflow" / "__init__.py").write_text("__version__ = '0'\n")

    result = _run(driver, "launch", "--entry-point", "train.py", "--framework", "tensorflow", tmp=tmp, root=root,
                  pythonpath=str(fake_tf), CUDA_VISIBLE_DEVICES="")  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    unpacked = f"gpu_train driver: unpacked gtdemo-1.0-py3-none-any.whl, {xxhash_wheel} for {bootstrap.interpreter()}"
    assert unpacked in output
    extracted = tmp / f"gpu_train_driver-{bootstrap._archive_digest(str(driver))}"
    assert sorted(p.name for p in tmp.iterdir()) == [extracted.name]  # no staging directory left behind
    seen = json.loads((root / "model" / "seen.json").read_text())
    assert seen == {
        "xxhash": str(extracted / "site" / "xxhash" / "__init__.py"),
        "digest": "78af5f94892f3950",  # XXH3-64 of b"abc": the extension module works
        "gtdemo": str(extracted / "site" / "gtdemo" / "__init__.py"),
        "gpu_train": str(extracted / "gpu_train" / "__init__.py"),
        "value": "pure",
    }
    assert not (extracted / "site" / "json").exists()  # its module is importable: that wheel stays packed

    # A second start reuses the extraction and the unpacked wheels.
    again = _run(driver, "gpu-check", tmp=tmp, root=root, CUDA_VISIBLE_DEVICES="")
    assert again.returncode == 0 and again.stdout.rstrip().endswith("OK"), again.stdout + again.stderr
    assert "unpacked" not in again.stdout and sorted(p.name for p in tmp.iterdir()) == [extracted.name]


def test_no_fitting_wheel_names_the_module_the_interpreter_and_the_wheels(tmp_path: Path) -> None:
    wheels, tmp, root = tmp_path / "wheels", tmp_path / "tmp", tmp_path / "opt_ml"
    tmp.mkdir()
    names = ["gtmissing-1.0-cp27-cp27mu-manylinux1_x86_64.whl", f"gtmissing-1.0-{HERE}-{HERE}-win_amd64.whl"]
    for name in names:
        _wheel(wheels, name, {"gtmissing/__init__.py": b""}, "gtmissing\n")
    driver = _driver(tmp_path / "gpu_train_driver.pyz", wheels)
    (root / "output").mkdir(parents=True)
    result = _run(driver, "gpu-check", tmp=tmp, root=root)
    assert result.returncode == 1, result.stdout + result.stderr
    expected = (
        f"DriverError: module gtmissing (distribution gtmissing) is not installed in this image and no wheel in the "
        f"driver fits {bootstrap.interpreter()} ({bootstrap._libc()}); wheels there: {', '.join(names)}; allowed: "
        "an image whose Python one of these wheels fits, or an image that already has gtmissing"
    )
    assert result.stderr.strip() == f"gpu_train driver: {expected}"
    assert (root / "output" / "failure").read_text().strip() == expected
    assert bootstrap.interpreter() == f"CPython {sys.version_info[0]}.{sys.version_info[1]} {MACHINE}"


@pytest.mark.parametrize(
    ("filename", "interpreter", "rank"),
    [
        ("xxhash-4.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", ((3, 11), "x86_64"), 3),
        ("xxhash-4.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", ((3, 13), "x86_64"), 0),
        ("xxhash-4.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", ((3, 11), "aarch64"), 0),
        ("xxhash-4.1.0-cp312-cp312-musllinux_1_2_x86_64.whl", ((3, 12), "x86_64"), 0),  # glibc here
        ("xxhash-4.1.0-cp312-cp312-manylinux_2_39_x86_64.whl", ((3, 12), "x86_64"), 0),  # newer than glibc 2.35
        ("xxhash-4.1.0-cp310-cp310-win_amd64.whl", ((3, 10), "x86_64"), 0),
        ("cryptography-46.0.0-cp38-abi3-manylinux_2_28_x86_64.whl", ((3, 13), "x86_64"), 2),
        ("nvidia_ml_py-13.615.71-py3-none-any.whl", ((3, 13), "aarch64"), 1),
        ("old-1.0-py2-none-any.whl", ((3, 13), "x86_64"), 0),
    ],
)
def test_wheel_fit_follows_the_interpreter(filename: str, interpreter: tuple[tuple[int, int], str], rank: int) -> None:
    wheel = bootstrap.parse_wheel(f"wheels/{filename}")
    assert wheel is not None
    version, machine = interpreter
    if sys.platform.startswith("linux"):
        assert bootstrap.fit(wheel, implementation="cpython", version=version, machine=machine, glibc=(2, 35)) == rank


def test_wheel_names_and_top_level_modules(tmp_path: Path) -> None:
    assert bootstrap.parse_wheel("notes.txt") is None and bootstrap.parse_wheel("a-b.whl") is None
    wheel = bootstrap.parse_wheel("x/Nvidia.ML_py-13.615.71-1-py3-none-any.whl")  # with a build tag
    assert wheel == bootstrap.Wheel("x/Nvidia.ML_py-13.615.71-1-py3-none-any.whl", "nvidia_ml_py", ("py3",), ("none",),
                                    ("any",))  # fmt: skip
    assert wheel.filename == "Nvidia.ML_py-13.615.71-1-py3-none-any.whl"
    listed = _wheel(tmp_path, "nvidia_ml_py-13.615.71-py3-none-any.whl", {"pynvml.py": b""}, "example\npynvml\n")
    assert bootstrap.top_level_modules(str(listed)) == ["example", "pynvml"]
    module = _wheel(tmp_path, "single-1.0-py3-none-any.whl", {"single.py": b""})
    assert bootstrap.top_level_modules(str(module)) == ["single"]


def test_a_concurrent_extractor_wins_and_its_copy_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "driver.pyz"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("__main__.py", "")
    base = tmp_path / "tmp"
    base.mkdir()
    replace = os.replace

    def other_process_first(src: str, dst: str) -> None:
        os.mkdir(dst)
        Path(dst, "winner").write_text("")
        replace(src, dst)  # fails: the directory is there and not empty

    monkeypatch.setattr(os, "replace", other_process_first)
    target = bootstrap.extract(str(archive), str(base))
    assert Path(target, "winner").exists() and not Path(target, "__main__.py").exists()
    assert sorted(p.name for p in base.iterdir()) == [Path(target).name]  # the loser's copy is gone
    monkeypatch.setattr(os, "replace", replace)
    assert bootstrap.extract(str(archive), str(base)) == target  # later starts reuse it
