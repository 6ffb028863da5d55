"""``make gpu-check``: on a machine with an NVIDIA GPU, prove every runtime path that differs there, in one command.

It needs only ``python3`` with a CUDA build of torch (plus numpy, Pillow, xxhash, pytest, pytest-xdist; torchvision
for the GPU JPEG decoder): no CDK virtualenv and no network. It runs, in this order, each step with its own time
limit inside one budget (default 8 minutes):

1. **install**: the packages the tests and peers need that a GPU image lacks (gpuctl's pydantic and boto3, moto,
   the SageMaker toolkits the parity tests compare against, LitServe), from the wheels in ``.gpu-wheels/``, into
   ``.gpu-check/site`` (pip, ``--no-index``); ``python -m benchmarks.gpu_check fetch`` (``make gpu-wheels``)
   downloads them wherever the package registry is reachable, for the GPU host's Python version;
2. **tests**: every container test (``tests/containers``) on the GPU host, in parallel; the ``gpu`` tests run
   there (gpu_serve serving a real model on the GPU with batching, the training entry point on the GPU, GPU
   JPEG decoding), ``no_gpu`` tests are skipped with their reason, ``dev_tools`` tests (Dockerfile linters, not
   installed on a GPU image) are deselected;
3. **benchmarks**: ``benchmarks.training_gpu`` (ResNet-50 training, synthetic vs real shards, raw and JPEG),
   ``benchmarks.serve_gpu`` (ResNet-50 bf16 serving: dynamic batching vs one request per forward vs LitServe and
   TorchServe), ``benchmarks.inference_batching --device cuda`` (the MLP); each writes its section of
   docs/benchmarks.md.

Then it prints one summary, writes it to ``.gpu-check/summary.md`` and to the ``gpu-check`` section of
docs/benchmarks.md (``--no-write``: neither docs/ change), and exits 0 only when every step passed. A benchmark that
ran but missed a target is reported as such; it does not fail the check.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WHEELS = ROOT / ".gpu-wheels"
WORK = ROOT / ".gpu-check"
SITE = WORK / "site"
SECTION = "gpu-check"
DEFAULT_BUDGET_S = 480
MIN_STEP_S = 20  # a step is not started with less of the budget left

#: What a GPU image (python3 + torch, numpy, Pillow, xxhash, pytest, requests, werkzeug, PyYAML, scipy, psutil,
#: anyio, click, h11, ...) lacks for the container tests and the serving peers, pinned to the versions this
#: project's virtualenv and benchmarks use. Each is fetched without its dependencies: those it needs beyond a
#: GPU image are listed here too.
PINS: dict[str, str] = {
    # gpuctl (imported by the serving and training CLI tests)
    "pydantic": "2.14.4",
    "pydantic-core": "2.50.5",
    "annotated-types": "0.8.0",
    "typing-inspection": "0.4.5",
    "boto3": "1.44.8",
    "botocore": "1.44.8",
    "s3transfer": "0.19.3",
    "jmespath": "1.1.0",
    # moto (the packing tests' S3)
    "moto": "5.2.5",
    "responses": "0.26.3",
    "xmltodict": "1.0.4",
    "cryptography": "50.0.2",
    "cffi": "2.1.1",
    "pycparser": "3.12",
    # the DLC toolkits the parity tests run side by side with the runtimes
    "sagemaker-training": "5.1.4",
    "sagemaker-inference": "1.10.1",
    "retrying": "1.4.2",
    "inotify-simple": "2.0.1",
    "paramiko": "5.1.0",
    "bcrypt": "5.0.0",
    "pynacl": "1.6.2",
    # LitServe, the serving peer (benchmarks.serve_peers pins the same version)
    "litserve": "0.2.19",
    "fastapi": "0.165.0",
    "starlette": "1.10.0",
    "uvicorn": "0.54.0",
    "pyzmq": "27.3.0",
    "python-multipart": "0.0.34",
    "opentelemetry-api": "1.45.2",
}
#: manylinux tags pip matches exactly (https://packaging.python.org/en/latest/specifications/platform-compatibility-tags/)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")  # fmt: skip


class CheckError(Exception):
    """A problem that stops the check before it measures anything, with what to do about it."""


# -- fetch (where the package registry is reachable) ---------------------------------------------------------------
def fetch(python_version: str, dest: Path = WHEELS) -> list[Path]:
    """Download every pinned package for CPython ``python_version`` on x86-64 Linux into ``dest``: a binary wheel
    where one exists; else the sdist, built here into a wheel when it is pure Python (``py3-none-any``) and kept as
    an sdist (built on the GPU host) when it is not."""
    dest.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    binary = ["download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", python_version,
              "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS), "-d", str(dest)]  # fmt: skip
    for name, version in PINS.items():
        spec = f"{name}=={version}"
        if subprocess.run([*pip, *binary, spec], capture_output=True, text=True).returncode == 0:
            continue
        with_sdist = subprocess.run(
            [*pip, "download", "--quiet", "--no-deps", "--no-binary=:all:", "-d", str(dest), spec],
            capture_output=True,
            text=True,
        )
        if with_sdist.returncode != 0:
            raise CheckError(f"pip download {spec} found neither a wheel nor an sdist:\n{with_sdist.stderr[-1500:]}")
        sdist = _sdist(dest, name, version)
        built = subprocess.run([*pip, "wheel", "--quiet", "--no-deps", "-w", str(dest), str(sdist)],
                               capture_output=True, text=True)  # fmt: skip
        wheel = next(iter(sorted(dest.glob(f"{_dist_name(name)}-{version}-*.whl"))), None)
        if built.returncode == 0 and wheel is not None and wheel.name.endswith("-none-any.whl"):
            sdist.unlink()
        elif wheel is not None:  # a wheel for this machine's Python, not the GPU host's: keep the sdist only
            wheel.unlink()
    return sorted(p for p in dest.iterdir() if p.is_file())


def _dist_name(name: str) -> str:
    return name.replace("-", "_")


def _sdist(dest: Path, name: str, version: str) -> Path:
    for candidate in dest.glob("*.tar.gz"):
        dist, _, rest = candidate.name.removesuffix(".tar.gz").rpartition("-")
        if _dist_name(dist).lower() == _dist_name(name).lower() and rest == version:
            return candidate
    raise CheckError(f"pip downloaded no sdist of {name}=={version} into {dest}")


# -- the check -------------------------------------------------------------------------------------------------------
@dataclass
class Step:
    name: str
    status: str = "not run"  # passed | failed | missed target | skipped | not run
    seconds: float = 0.0
    detail: str = ""
    log: Path | None = None


@dataclass
class Check:
    budget_s: float
    started: float = field(default_factory=time.monotonic)
    steps: list[Step] = field(default_factory=list)

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.started)

    def run(self, name: str, command: Sequence[str], env: dict[str, str], limit_s: float) -> tuple[Step, int]:
        """``command`` with its output teed to ``.gpu-check/<name>.log``, stopped after ``limit_s`` (or what is
        left of the budget). Returns the step and the exit status (124 when stopped)."""
        log_path = WORK / f"{name}.log"
        step = Step(name, log=log_path)
        self.steps.append(step)
        limit = min(limit_s, self.left())
        if limit < MIN_STEP_S:
            step.status, step.detail = "not run", f"{self.left():.0f} s of the {self.budget_s:.0f} s budget left"
            return step, -1
        print(f"==> [{name}] {' '.join(command)} (at most {limit:.0f} s)", flush=True)
        began = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip
            assert proc.stdout is not None
            os.set_blocking(proc.stdout.fileno(), False)
            while True:
                chunk = proc.stdout.read()
                if chunk:
                    log.write(chunk)
                    sys.stdout.buffer.write(chunk)
                    sys.stdout.flush()
                if proc.poll() is not None and not chunk:
                    break
                if time.monotonic() - began > limit:
                    os.killpg(proc.pid, 9)
                    proc.wait()
                    break
                time.sleep(0.2)
        step.seconds = time.monotonic() - began
        code = 124 if proc.returncode == -9 else proc.returncode
        return step, code


def gpu_facts() -> dict[str, str]:
    """The machine, from torch and nvidia-smi; raises CheckError when torch sees no CUDA device."""
    try:
        import torch
    except ImportError as exc:
        raise CheckError(
            f"{sys.executable} cannot import torch ({exc}): run it with a Python that has a CUDA build of torch "
            "(make gpu-check GPU_PYTHON=/path/to/python), on a GPU host"
        ) from None

    if not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built with CUDA {torch.version.cuda}"
        raise CheckError(
            f"torch {torch.__version__} ({build}) sees no NVIDIA GPU: run `make gpu-check` on a GPU instance "
            "(e.g. g5, p4d, p5) with the NVIDIA driver; CI and `make test` need none"
        )
    driver = ""
    if shutil.which("nvidia-smi"):
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True)  # fmt: skip
        driver = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else ""
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": f"{torch.cuda.device_count()} x {props.name} ({props.total_memory / 2**30:.0f} GiB)",
        "driver": driver or "unknown",
        "torch": torch.__version__,
        "cuda": str(torch.version.cuda),
        "python": platform.python_version(),
        "vcpus": str(os.cpu_count()),
    }


def wheel_stamp(files: Sequence[Path]) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode() + str(path.stat().st_size).encode())
    return digest.hexdigest()


def install(check: Check, env: dict[str, str]) -> Step:
    """The wheels of ``.gpu-wheels/`` into ``.gpu-check/site`` (once per set of wheels)."""
    files = sorted(p for p in WHEELS.glob("*") if p.suffix in (".whl", ".gz"))
    if not files:
        raise CheckError(f"{WHEELS.relative_to(ROOT)}/ holds no wheels: run `make gpu-wheels` where the package "
                         "registry is reachable (it fetches them for the GPU host's Python, 3.12 by default; "
                         "PYTHON_VERSION=3.x for another), then copy the folder here")  # fmt: skip
    wanted = {_dist_name(name).lower() for name in PINS}
    found = {p.name.split("-")[0].lower() for p in files}
    if wanted - found:
        raise CheckError(f"{WHEELS.relative_to(ROOT)}/ lacks {', '.join(sorted(wanted - found))}: run "
                         "`make gpu-wheels` again")  # fmt: skip
    stamp = SITE / ".installed"
    if stamp.exists() and stamp.read_text() == wheel_stamp(files):
        step = Step("install", "passed", 0.0, f"{len(files)} packages already in {SITE.relative_to(ROOT)}")
        check.steps.append(step)
        return step
    shutil.rmtree(SITE, ignore_errors=True)
    SITE.mkdir(parents=True)
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index",
           "--no-deps", "--no-compile", "--target", str(SITE)]  # fmt: skip
    wheels = [str(p) for p in files if p.suffix == ".whl"]
    sdists = [str(p) for p in files if p.suffix == ".gz"]
    command = [*pip, *wheels] + ([] if not sdists else ["--no-build-isolation", *sdists])
    step, code = check.run("install", command, env, 180)
    step.status = "passed" if code == 0 else "failed"
    step.detail = f"{len(files)} packages into {SITE.relative_to(ROOT)}" + ("" if code == 0 else f" (pip exit {code})")
    if code == 0:
        stamp.write_text(wheel_stamp(files))
    return step


def junit_counts(path: Path) -> tuple[Counter[str], dict[str, int], list[str]]:
    """(outcome counts, skip reasons with counts, failed test ids) from pytest's JUnit XML."""
    counts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    failed = []
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                failed.append(test_id)
            elif child.tag == "skipped":
                outcome = "skipped"
                reasons[(child.get("message") or "").removeprefix("Skipped: ")[:160]] += 1
        counts[outcome] += 1
        if outcome == "passed" and "_gpu" in test_id:
            counts["gpu passed"] += 1
    return counts, dict(reasons), failed


def run_tests(check: Check, env: dict[str, str], workers: int) -> Step:
    import importlib.util

    junit = WORK / "tests.xml"
    junit.unlink(missing_ok=True)
    command = [sys.executable, "-m", "pytest", "tests/containers", "-m", "not dev_tools", "-p", "no:cacheprovider",
               "-q", "-rfE", f"--junitxml={junit}"]  # fmt: skip
    if importlib.util.find_spec("xdist") is not None and workers > 1:
        command += ["-n", str(workers), "--dist", "worksteal"]  # test durations range from 0.1 to 60 s
    if importlib.util.find_spec("pytest_timeout") is not None:
        command += ["--timeout", "150"]
    step, code = check.run("tests", command, env, 240)
    if not junit.exists():
        step.status, step.detail = "failed", f"pytest exit {code}: no report (stopped after {step.seconds:.0f} s?)"
        return step
    counts, reasons, failed = junit_counts(junit)
    step.status = "passed" if code == 0 and not failed else "failed"
    step.detail = (
        f"{counts['passed']} passed ({counts['gpu passed']} of them GPU tests), {counts['failed']} failed, "
        f"{counts['skipped']} skipped"
        + "".join(f"; skipped {n}: {why}" for why, n in reasons.items())
        + "".join(f"; FAILED {t}" for t in failed[:20])
    )
    return step


def missed_targets(lines: Sequence[str]) -> list[str]:
    """The targets a benchmark's output says were not met (its lines holding ``NOT met``), as plain text: a table
    row becomes its first four cells (what, figure, share, target)."""
    missed = []
    for line in lines:
        if "NOT met" not in line:
            continue
        text = line.replace("*", "").strip()
        if text.startswith("|"):
            text = ", ".join(cell.strip() for cell in text.strip("|").split("|")[:4])
        missed.append(text)
    return missed


def run_benchmark(check: Check, name: str, command: Sequence[str], env: dict[str, str], limit_s: float) -> Step:
    """A benchmark step: passed (exit 0, every target met), missed target (it ran; its output says which target
    was not met; ``inference_batching`` also exits 1 then), or failed."""
    step, code = check.run(name, command, env, limit_s)
    if code == -1:  # not started: too little of the budget left
        return step
    lines = step.log.read_text(errors="replace").strip().splitlines() if step.log else []
    missed = missed_targets(lines)
    if code == 0 or (code == 1 and name == "inference_batching" and missed):
        step.status = "missed target" if missed else "passed"
        step.detail = "; ".join(missed) if missed else "exit 0"
    else:
        step.status = "failed"
        step.detail = f"exit {code}" + (f": {lines[-1][:200]}" if lines else "")
    return step


def summary(check: Check, facts: dict[str, str], command: str) -> str:
    lines = [
        "## GPU check",
        "",
        f"Command: `{command}` (run {time.strftime('%Y-%m-%d')} on {facts['gpu']}, driver {facts['driver']}, "
        f"{facts['vcpus']} vCPUs, Python {facts['python']}, torch {facts['torch']}, CUDA {facts['cuda']}): "
        f"{time.monotonic() - check.started:.0f} s in all, budget {check.budget_s:.0f} s.",
        "",
        "| step | result | seconds | detail |",
        "|---|---|---:|---|",
        *(f"| {s.name} | {s.status} | {s.seconds:.0f} | {s.detail.replace('|', '/')} |" for s in check.steps),
        "",
        "Each benchmark's figures are in its own section of this file.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    fetch_parser = sub.add_parser("fetch", help="download the packages into .gpu-wheels/ (needs the package registry)")
    fetch_parser.add_argument("--python-version", default="3.12", help="the GPU host's Python (default 3.12)")
    run_parser = sub.add_parser("run", help="the check itself, on a GPU host (the default)")
    for p in (parser, run_parser):
        p.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds for all steps (default 480)")
        p.add_argument("--no-bench", action="store_true", help="install and tests only")
        p.add_argument("--no-write", action="store_true", help="leave docs/ untouched")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            files = fetch(args.python_version)
            size = sum(p.stat().st_size for p in files) / 2**20
            print(
                f"{len(files)} files, {size:.1f} MiB in {WHEELS.relative_to(ROOT)}/ for CPython {args.python_version}"
            )
            return 0
        return check_main(args, argv)
    except CheckError as exc:
        print(f"make gpu-check: {exc}", file=sys.stderr)
        return 2


def check_main(args: argparse.Namespace, argv: list[str] | None) -> int:
    facts = gpu_facts()
    print("==> make gpu-check on " + ", ".join(f"{k} {v}" for k, v in facts.items()), flush=True)
    WORK.mkdir(exist_ok=True)
    check = Check(args.budget)
    env = dict(os.environ)
    paths = [SITE, ROOT, ROOT / "containers" / "inference", ROOT / "containers" / "training"]
    env["PYTHONPATH"] = os.pathsep.join([*map(str, paths), *filter(None, [env.get("PYTHONPATH")])])
    env["PATH"] = os.pathsep.join([str(SITE / "bin"), env.get("PATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    if install(check, env).status == "passed":
        workers = max(1, min(14, (os.cpu_count() or 2) - 2))
        run_tests(check, env, workers)
        if not args.no_bench:
            py = sys.executable
            write = ["--no-write"] if args.no_write else []
            report = ["--no-report"] if args.no_write else []
            run_benchmark(check, "training_gpu", [py, "-m", "benchmarks.training_gpu", "--device", "cuda", "--profile",
                          *report], env, 160)  # fmt: skip
            run_benchmark(check, "serve_gpu", [py, "-m", "benchmarks.serve_gpu", "--summary",
                          str(WORK / "serve_gpu.json"), *write], env, 130)  # fmt: skip
            run_benchmark(check, "inference_batching", [py, "-m", "benchmarks.inference_batching", "--device", "cuda",
                          "--requests", "600", "--no-ablation", *write], env, 90)  # fmt: skip
            serve = WORK / "serve_gpu.json"
            if serve.exists() and check.steps[-2].status == "passed":
                missed = json.loads(serve.read_text()).get("missed") or []
                if missed:
                    check.steps[-2].status, check.steps[-2].detail = "missed target", "; ".join(missed)
    command = " ".join(["make gpu-check", *(["ARGS=" + " ".join(argv)] if argv else [])])
    text = summary(check, facts, command)
    (WORK / "summary.md").write_text(text + "\n")
    print("\n" + text, flush=True)
    if not args.no_write:
        from benchmarks._report import write_section

        write_section(SECTION, text)
    return 0 if all(s.status in ("passed", "missed target") for s in check.steps) else 1


if __name__ == "__main__":
    raise SystemExit(main())
