"""gpu_serve against TorchServe and LitServe: the same model.tar.gz, the same load, over real HTTP on localhost.

Three servers serve one artifact, a ResNet-18-style convnet (width 16, 32x32 input, 10 classes) exported by
``gpu_train.export`` (``model.pt`` + ``model_config.json`` + ``code/inference.py``):

- ``gpu_serve``: the inference image's server as ``gpuctl serve model.tar.gz`` with
  ``GPU_SERVE_MAX_BATCH_SIZE=16``, ``GPU_SERVE_MAX_BATCH_DELAY_MS=5``, ``GPU_SERVE_NUM_THREADS=1``;
- ``torchserve``: TorchServe 0.12 with server-side batching (``batchSize`` 16, ``maxBatchDelay`` 5 ms, one
  worker) and a custom handler class written the obvious way: decode each request's body, ``torch.cat``,
  one forward pass, split (TorchServe batch inference:
  https://pytorch.org/serve/batch_inference_with_ts.html, custom handlers:
  https://pytorch.org/serve/custom_service.html);
- ``litserve``: LitServe with ``max_batch_size=16``, ``batch_timeout=0.005`` and the obvious ``LitAPI``
  (``decode_request`` / ``batch`` / ``predict`` / ``unbatch`` / ``encode_response``, https://lightning.ai/docs/litserve).
  LitServe hands ``decode_request`` a parsed JSON body or a form (its endpoint reads nothing else), so the
  ``.npy`` sample reaches it as a ``multipart/form-data`` file upload: the same bytes, wrapped.

The peer handlers load the artifact with its own ``code/inference.py`` (``model_fn``, ``input_fn``,
``predict_fn``, ``output_fn``: the SageMaker PyTorch handler contract), so all three do the same decode and
forward work per request and differ only in how they serve. Every process runs one torch intra-op thread
(``OMP_NUM_THREADS=1`` and ``torch.set_num_threads(1)``, https://pytorch.org/docs/stable/notes/cpu_threading_torchscript_inference.html);
each server reports its thread count at start and the run stops if it is not 1.

An asyncio client in this process keeps N keep-alive connections busy (closed loop: each sends its next
request when the previous answer arrives), one ``.npy`` sample per request, for N = 1, 8, 32, 64. Each N
is measured in several rounds; round r rotates the order of the servers by r, so that drift in machine load
hits all of them alike. Reported per server and N: median throughput over the rounds and its spread
(min-max), p50 and p99 latency (client side, all rounds pooled), server CPU seconds per request (user + system
time of the server's whole process tree, from /proc), ``cores`` (that CPU time per second of the runs: how much
of the machine the server's processes got), the run-queue wait per request (time its threads were runnable but
had no CPU, from ``/proc/<pid>/task/<tid>/schedstat``), the mean batch each server formed, and the process
tree's peak RSS. Each throughput ratio is also split into its two factors, requests per CPU-second times
cores. Two probes follow: ``mixed`` (half JSON, half ``.npy`` requests in one stream, measured in rounds like
the cells) and ``poison`` (one malformed ``.npy`` sent together with 7 valid requests at N=8: how many of the 7
still get 200).

TorchServe (with torch-model-archiver) and LitServe are installed on demand into the peer benchmarks' virtual
environment, ``.bench/peers-venv`` (made by :mod:`benchmarks._peers`), under its constraints file, which pins
torch and numpy to the project's versions, so that neither peer can upgrade them; the project's venv never
gets these packages. TorchServe needs Java 17 on PATH.

Variants, each written to its own section beside the default run's:

- ``--busy K`` runs K busy-loop processes (one runnable pure-Python thread each) beside the servers while they
  are timed: the machine shared with other work, made repeatable (section ``serve-peers-busy``). They end
  with the benchmark, however it ends.
- ``--workers W`` gives every server W model workers: gpu_serve ``GPU_SERVE_MODEL_PROCESSES=W``, TorchServe
  ``minWorkers``/``maxWorkers``, LitServe ``workers_per_device`` (section ``serve-peers-2workers`` for W=2).
- ``--servers gpu_serve,gpu_serve_1proc,...`` adds gpu_serve with the model on a thread of its HTTP process
  (``GPU_SERVE_MODEL_PROCESSES=0``), to measure what the process layout changes.

Run: ``python -m benchmarks.serve_peers [--quick] [--device cpu|cuda] [--busy K] [--workers W]`` (``--help``
for options). Writes its section of docs/benchmarks.md and its plot in docs/img/ unless ``--no-write``. About
3 minutes on 2 cores, 5 with ``--busy 2`` and four servers (plus a few minutes the first time, to make the
peers' venv);
``--quick`` (2 rounds of 150 requests, short probes, docs/ untouched) about a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import _peers
from benchmarks._report import LoadCurve, plot_load_curves, write_section

ROOT = Path(__file__).resolve().parent.parent
SECTION = "serve-peers"
PLOT = ROOT / "docs" / "img" / "serve_peers.png"


def _variant(busy: int, workers: int) -> list[str]:
    return (["busy"] if busy else []) + ([f"{workers}workers"] if workers > 1 else [])


def section_name(busy: int, workers: int = 1) -> str:
    """The docs/benchmarks.md section a run writes: runs with busy neighbours or several workers each keep
    their own, beside the default run's."""
    return "-".join([SECTION, *_variant(busy, workers)])


def plot_path(busy: int, workers: int = 1) -> Path:
    return PLOT.with_name("_".join([PLOT.stem, *_variant(busy, workers)]) + PLOT.suffix)


SERVERS = ("gpu_serve", "torchserve", "litserve")
#: Servers run only when named in ``--servers``: gpu_serve with the model on a thread of its HTTP process
#: (``GPU_SERVE_MODEL_PROCESSES=0``), the layout before model processes, to measure what the layout changes.
OPTIONAL_SERVERS = ("gpu_serve_1proc",)
#: What each ``--busy`` neighbour runs: a pure-Python loop, one runnable thread, like another tenant's work. It
#: ends by itself once its parent (this benchmark) is gone, however that ended.
BUSY_LOOP = (
    "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(1_000_000):\n        pass\n"
)
MAX_BATCH_SIZE = 16
MAX_BATCH_DELAY_MS = 5.0
#: The peers, pinned so that a later run measures the same code.
PEER_PINS = {
    "torchserve": "0.12.0",
    "torch-model-archiver": "0.12.0",
    "litserve": "0.2.19",
    "python-multipart": "0.0.34",  # what LitServe (Starlette) parses form uploads with
}
#: The model: gpu_train.export.export_example_model arguments.
ARCH, WIDTH, IMAGE_SIZE, NUM_CLASSES = "resnet18", 16, 32, 10
POISON_N = 8
DEFAULT_ROUNDS, DEFAULT_REQUESTS = 5, 500
IDLE_SECONDS = 5.0  # how long the servers' CPU use at rest is measured, before the timed cells
REQUEST_TIMEOUT_S = 60.0


# -- the peers' virtual environment ---------------------------------------------------------------------------
def version_matches(installed: str | None, pin: str) -> bool:
    """Whether ``installed`` satisfies ``==pin``; as in PEP 440, a pin without a local label (``+cpu``) ignores it."""
    if installed is None:
        return False
    return installed == pin or ("+" not in pin and installed.split("+", 1)[0] == pin)


def missing_requirements(installed: Mapping[str, str | None], wanted: Mapping[str, str]) -> list[str]:
    """``name==version`` of each wanted distribution that is absent or at another version."""
    return [f"{name}=={pin}" for name, pin in wanted.items() if not version_matches(installed.get(name), pin)]


_VERSIONS_SCRIPT = """
import json, sys
from importlib import metadata
out = {}
for name in sys.argv[1:]:
    try:
        out[name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        out[name] = None
print(json.dumps(out))
"""


def venv_versions(python: Path, names: Iterable[str]) -> dict[str, str | None]:
    """Installed version (or None) of each distribution in the environment of ``python``."""
    done = subprocess.run([str(python), "-c", _VERSIONS_SCRIPT, *names], capture_output=True, text=True)
    if done.returncode != 0:
        raise _peers.PeerError(f"reading package versions with {python} failed:\n{done.stderr[-2000:]}")
    versions: dict[str, str | None] = json.loads(done.stdout)
    return versions


def ensure_serving_peers(log: Callable[[str], None] = print) -> Path:
    """The shared peer venv with TorchServe, torch-model-archiver and LitServe in it; returns its python.

    The venv itself is :func:`benchmarks._peers.ensure_venv`'s (``.bench/peers-venv``: torch 2.13.0 and the
    project's numpy, Pillow and xxhash, pinned by its ``constraints.txt``). The serving peers are added with
    the same constraints file, so they cannot replace torch or numpy; afterwards every pin is checked again.
    """
    python = _peers.ensure_venv(log=log)
    constraints = python.parent.parent / "constraints.txt"
    missing = missing_requirements(venv_versions(python, PEER_PINS), PEER_PINS)
    if missing:
        log(f"adding {', '.join(missing)} to {python.parent.parent}")
        cmd = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-c", str(constraints)]
        done = subprocess.run([*cmd, *missing], capture_output=True, text=True)
        if done.returncode != 0:
            raise _peers.PeerError(f"pip install {' '.join(missing)} failed (exit {done.returncode}):\n"
                                   f"{done.stderr[-4000:]}")  # fmt: skip
    wanted = {**_peers.pins(), **PEER_PINS}
    versions = venv_versions(python, wanted)
    wrong = missing_requirements(versions, wanted)
    if wrong:
        raise _peers.PeerError(f"{python.parent.parent} should hold {', '.join(wrong)}; it holds {versions}")
    return python


# -- shipped into the peers' handlers (each function is self-contained: its source is copied) ------------------
def load_artifact(tarball: str, target: str) -> tuple[Any, Any]:
    """Unpack ``model.tar.gz`` into ``target``, import its ``code/inference.py``, return (module, model_fn(target))."""
    import importlib.util
    import os
    import sys
    import tarfile

    with tarfile.open(tarball) as archive:
        archive.extractall(target, filter="data")
    code = os.path.join(target, "code")  # inference.py loads its sibling model module by path
    spec = importlib.util.spec_from_file_location("artifact_inference", os.path.join(code, "inference.py"))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {code}/inference.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["artifact_inference"] = module
    spec.loader.exec_module(module)
    return module, module.model_fn(target)


def decode_sample(body: Any, inference: Any) -> Any:
    """One request body -> float tensor (rows, 3, H, W) with the artifact's ``input_fn``.

    ``bytes`` are a ``.npy`` file; ``str`` is JSON text; a dict or list is a JSON body that the server already
    parsed (TorchServe and LitServe parse ``application/json`` before the handler sees it), converted the way
    ``input_fn`` converts its ``"instances"``.
    """
    import numpy as np
    import torch

    if isinstance(body, (bytes, bytearray, memoryview)):
        return inference.input_fn(bytes(body), "application/x-npy")
    if isinstance(body, str):
        return inference.input_fn(body, "application/json")
    instances = body.get("instances") if isinstance(body, dict) else body
    if instances is None:
        raise ValueError('JSON request must be {"instances": [...]} (a nested list of numbers)')
    array = np.asarray(instances, dtype=np.float32)
    size = int(inference.load_config()["image_size"])
    if array.ndim == 3:
        array = array[None]
    if array.ndim != 4 or array.shape[1:] != (3, size, size):
        raise ValueError(f'"instances" has shape {array.shape}; allowed: (N, 3, {size}, {size}) or (3, {size}, {size})')
    if not np.isfinite(array).all():
        raise ValueError("input holds NaN or infinite values")
    return torch.from_numpy(np.ascontiguousarray(array))


def write_ready(path: str, server: str, model: Any) -> None:
    """Record this process's pid, torch thread count and the model's device (read by the benchmark)."""
    import json
    import os

    import torch

    parameter = next(model.parameters())
    record = {"server": server, "pid": os.getpid(), "torch_threads": torch.get_num_threads()}
    record["device"] = str(parameter.device)
    with open(path, "w") as handle:
        json.dump(record, handle)


_HELPERS = "\n\n".join(inspect.getsource(f) for f in (load_artifact, decode_sample, write_ready))

TORCHSERVE_HANDLER = f'''"""TorchServe handler of the serve-peers benchmark: batched inference of a model.tar.gz.

TorchServe gathers up to batchSize requests (or waits maxBatchDelay ms) and calls handle() once with all of
them; handle() decodes each request's body, stacks them, runs one forward pass and splits the result.
"""
import json
import os
from typing import Any

import torch


{_HELPERS}


class BatchedArtifactHandler:
    """Custom TorchServe handler class: initialize(context) once, handle(data, context) per batch."""

    def initialize(self, context: Any) -> None:
        torch.set_num_threads(1)
        model_dir = context.system_properties["model_dir"]
        with open(os.path.join(model_dir, "peer.json")) as handle:
            config = json.load(handle)
        tarball = os.path.join(model_dir, "model.tar.gz")
        self.inference, self.model = load_artifact(tarball, os.path.join(model_dir, "artifact"))
        self.model.to(getattr(torch, config.get("dtype", "float32")))
        self.batch_log = open(config["batch_log"], "a", buffering=1)
        write_ready(config["ready_file"], "torchserve", self.model)
        self.initialized = True

    def handle(self, data: list, context: Any) -> list:
        rows = [decode_sample(item.get("data") or item.get("body"), self.inference) for item in data]
        logits = self.inference.predict_fn(torch.cat(rows), self.model)
        self.batch_log.write(f"{{len(rows)}}\\n")
        parts = logits.split([row.shape[0] for row in rows])
        return [self.inference.output_fn(part, "application/json") for part in parts]
'''

LITSERVE_APP = f'''"""LitServe app of the serve-peers benchmark: batched inference of a model.tar.gz.

Usage: python app.py CONFIG_JSON (keys: tarball, artifact_dir, batch_log, ready_file, port, accelerator,
max_batch_size, batch_timeout, workers, dtype).
"""
import json
import sys
from typing import Any

import litserve as ls
import torch


{_HELPERS}


class BatchedArtifactAPI(ls.LitAPI):
    """decode_request per request, batch (torch.cat), predict, unbatch (one row each), encode_response."""

    def __init__(self, config: dict, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = config

    def setup(self, device: str) -> None:
        torch.set_num_threads(1)
        self.inference, self.model = load_artifact(self.config["tarball"], self.config["artifact_dir"])
        self.model.to(getattr(torch, self.config.get("dtype", "float32")))
        self.batch_log = open(self.config["batch_log"], "a", buffering=1)
        write_ready(self.config["ready_file"], "litserve", self.model)

    def decode_request(self, request):  # no annotation: LitServe passes the parsed JSON body or form
        if "file" in request:  # a multipart/form-data upload of the .npy file
            return decode_sample(request["file"].file.read(), self.inference)
        return decode_sample(request, self.inference)  # a JSON body, parsed by LitServe

    def batch(self, inputs: list) -> torch.Tensor:
        self.batch_log.write(f"{{len(inputs)}}\\n")
        return torch.cat(inputs)

    def predict(self, x: torch.Tensor) -> torch.Tensor:
        return self.inference.predict_fn(x, self.model)

    def unbatch(self, output: torch.Tensor) -> list:
        return list(output.split(1))

    def encode_response(self, output: torch.Tensor) -> dict:
        return {{"predictions": output.tolist()}}


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        CONFIG = json.load(handle)
    api = BatchedArtifactAPI(
        CONFIG, max_batch_size=CONFIG["max_batch_size"], batch_timeout=CONFIG["batch_timeout"]
    )
    server = ls.LitServer(api, accelerator=CONFIG["accelerator"], workers_per_device=CONFIG["workers"], timeout=60)
    server.run(host="127.0.0.1", port=CONFIG["port"], generate_client_file=False)
'''


# -- request bodies -----------------------------------------------------------------------------------------------
NPY = "application/x-npy"
JSON = "application/json"


def npy_bytes(array: Any) -> bytes:
    """``array`` as a ``.npy`` file."""
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def json_instances(array: Any, digits: int = 6) -> bytes:
    """``{"instances": ...}`` JSON of ``array`` (rounded to ``digits`` decimals)."""
    return json.dumps({"instances": _rounded(array.tolist(), digits)}, separators=(",", ":")).encode()


def _rounded(value: Any, digits: int) -> Any:
    if isinstance(value, list):
        return [_rounded(v, digits) for v in value]
    return round(float(value), digits)


def malformed_npy() -> bytes:
    """A body that claims to be ``.npy`` but is cut off inside its header."""
    return b"\x93NUMPY\x01\x00v\x00{'descr': '<f4', 'fortran_order': False, 'sha"


def multipart(field_name: str, filename: str, content: bytes, content_type: str, boundary: str) -> tuple[bytes, str]:
    """One file as a ``multipart/form-data`` body (RFC 7578); returns (body, Content-Type header value)."""
    if f"--{boundary}".encode() in content:
        raise ValueError(f"multipart boundary {boundary!r} occurs in the content; choose another")
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field_name}"; filename="{filename}"\r\n'
        f"Content-Type: {content_type}\r\n\r\n"
    ).encode()
    return head + content + f"\r\n--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def http_request(path: str, port: int, body: bytes, content_type: str) -> bytes:
    """A keep-alive HTTP/1.1 POST with ``body``."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n"
        f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


# -- process tree accounting (/proc, Linux: https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html) -----
def parse_stat(text: str) -> tuple[int, int]:
    """(ppid, CPU clock ticks) from a ``/proc/PID/stat`` line: utime + stime + cutime + cstime.

    The command name (field 2) is in parentheses and may hold spaces or parentheses itself, so fields are
    counted from the last ``)``.
    """
    rest = text[text.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): ppid is field 4, utime..cstime are fields 14..17.
    return int(rest[1]), sum(int(v) for v in rest[11:15])


def descendants(root: int, parents: Mapping[int, int]) -> list[int]:
    """``root`` and every process below it, from a pid -> ppid map."""
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(sorted(children.get(pid, [])))
    return tree


def status_kib(text: str, key: str) -> int:
    """A ``kB`` value such as ``VmHWM`` from ``/proc/PID/status`` text (0 when absent, e.g. a zombie)."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name == key:
            return int(value.split()[0])
    return 0


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:  # the process exited meanwhile
        return None


def _stats() -> dict[int, tuple[int, int]]:
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            text = _read(f"/proc/{entry}/stat")
            if text:
                out[int(entry)] = parse_stat(text)
    return out


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) used so far by ``root`` and its descendants."""
    stats = _stats()
    pids = descendants(root, {pid: ppid for pid, (ppid, _) in stats.items()})
    return sum(stats[pid][1] for pid in pids if pid in stats) / os.sysconf("SC_CLK_TCK")


def parse_schedstat(text: str) -> int:
    """Nanoseconds a thread has waited on a run queue (runnable, not running), from its ``schedstat`` line:
    time on the CPU, time waiting, timeslices (https://docs.kernel.org/scheduler/sched-stats.html)."""
    return int(text.split()[1])


def tree_wait_seconds(root: int) -> float:
    """Seconds the threads of ``root`` and its descendants have spent runnable but waiting for a CPU."""
    stats = _stats()
    total = 0
    for pid in descendants(root, {pid: ppid for pid, (ppid, _) in stats.items()}):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            text = _read(f"/proc/{pid}/task/{tid}/schedstat")
            if text:
                total += parse_schedstat(text)
    return total / 1e9


def idle_cores(roots: Mapping[str, int], seconds: float = IDLE_SECONDS) -> dict[str, float]:
    """CPU-seconds per second each process tree uses while it serves nothing (all measured over the same
    ``seconds``): what a server costs the machine at rest, polling loops included."""
    before = {name: tree_cpu_seconds(pid) for name, pid in roots.items()}
    time.sleep(seconds)
    return {name: (tree_cpu_seconds(pid) - before[name]) / seconds for name, pid in roots.items()}


def tree_memory(root: int) -> tuple[int, float]:
    """(process count, sum over the tree of each process's peak RSS ``VmHWM`` in MiB)."""
    pids = descendants(root, {pid: ppid for pid, (ppid, _) in _stats().items()})
    peaks = [status_kib(_read(f"/proc/{pid}/status") or "", "VmHWM") for pid in pids]
    return len(pids), sum(peaks) / 1024.0


# -- batch logs ---------------------------------------------------------------------------------------------------
def parse_batch_lines(text: str, fmt: str) -> list[int]:
    """Requests per batch from complete log lines: ``gpu_serve`` JSON ``batch`` events, or ``plain`` integers."""
    sizes = []
    for line in text.splitlines():
        if fmt == "plain":
            if line.strip():
                sizes.append(int(line))
        elif fmt == "gpu_serve":
            if '"batch"' not in line:
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("event") == "batch":
                sizes.append(int(record["requests"]))
        else:
            raise ValueError(f"batch log format {fmt!r} is not allowed; allowed: gpu_serve, plain")
    return sizes


class BatchLog:
    """Reads the batches a server logged since the last call (complete lines only)."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path, self.fmt, self.offset = path, fmt, 0

    def new_batches(self) -> list[int]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        return parse_batch_lines(data[:end].decode("utf-8", "replace"), self.fmt)


# -- servers ------------------------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """One server process (group) and how to talk to it."""

    name: str
    command: list[str]
    env: dict[str, str]
    cwd: Path
    port: int
    path: str
    batches: BatchLog
    wrap_npy: bool = False  # send .npy bodies as a multipart/form-data file upload
    ready_file: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.cwd / f"{self.name}.log"

    def request(self, body: bytes, content_type: str) -> bytes:
        if self.wrap_npy and content_type == NPY:
            body, content_type = multipart("file", "sample.npy", body, NPY, "serve-peers-0d5c8e")
        return http_request(self.path, self.port, body, content_type)

    def start(self) -> Server:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                self.command, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def wait_ready(self, body: bytes, timeout: float = 240.0) -> None:
        """Until a valid ``.npy`` request gets 200; raises with the log tail when the process exits, the request is
        answered with an error other than "not there yet" (no connection, 404 from TorchServe before the model is
        registered, 502-504) or ``timeout`` passes."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        status, answer = 0, b""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}; log:\n{self.log_tail()}")
            status, answer = post(self, body, NPY)
            if status == 200:
                return
            if status not in (0, 404, 502, 503, 504):
                raise RuntimeError(f"{self.name} refused a valid request with {status}: {answer[:500]!r}")
            time.sleep(0.5)
        raise RuntimeError(
            f"{self.name} did not answer a valid request within {timeout:g} s (last status {status}); "
            f"log:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        """SIGTERM to the server's process group (it was started in its own session), SIGKILL after 30 s."""
        if self.proc is None or self.proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue


def post(server: Server, body: bytes, content_type: str) -> tuple[int, bytes]:
    """One request on a fresh connection: (status, body); status 0 when there was no answer."""

    async def once() -> tuple[int, bytes]:
        conn = _Connection(server.port)
        try:
            return await conn.exchange(server.request(body, content_type))
        finally:
            conn.close()

    return asyncio.run(once())


def peer_config_env(device: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def gpu_serve_server(work: Path, tarball: Path, device: str, name: str = "gpu_serve", workers: int = 1) -> Server:
    """``gpuctl serve`` of the artifact with ``workers`` model processes; ``gpu_serve_1proc`` runs the model in the
    HTTP process."""
    env = peer_config_env(device)
    env.update(
        {
            "GPU_SERVE_MAX_BATCH_SIZE": str(MAX_BATCH_SIZE),
            "GPU_SERVE_MAX_BATCH_DELAY_MS": f"{MAX_BATCH_DELAY_MS:g}",
            "GPU_SERVE_NUM_THREADS": "1",
            "GPU_SERVE_DEVICE": device,
            "GPU_SERVE_MODEL_PROCESSES": "0" if name == "gpu_serve_1proc" else str(workers),
        }
    )
    port = free_port()
    cwd = work / name
    cwd.mkdir()
    command = [sys.executable, "-m", "gpuctl", "serve", str(tarball), "--host", "127.0.0.1", "--port", str(port)]
    return Server(name, command, env, cwd, port, "/invocations", BatchLog(cwd / f"{name}.log", "gpu_serve"))


class BusyNeighbours:
    """``count`` processes that each keep one thread runnable (:data:`BUSY_LOOP`), while the context is open."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> BusyNeighbours:
        for _ in range(self.count):
            self._procs.append(subprocess.Popen([sys.executable, "-c", BUSY_LOOP], start_new_session=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            proc.kill()
        for proc in self._procs:
            proc.wait()
        self._procs.clear()


def torchserve_server(
    work: Path,
    tarball: Path,
    device: str,
    python: Path,
    workers: int = 1,
    max_batch_size: int = MAX_BATCH_SIZE,
    delay_ms: float = MAX_BATCH_DELAY_MS,
    dtype: str = "float32",
) -> Server:
    """Build the .mar (handler + the model.tar.gz itself) and the config.properties of a TorchServe with
    ``workers`` workers, batches of up to ``max_batch_size`` requests, the model cast to ``dtype``."""
    cwd = work / "torchserve"
    store = cwd / "model-store"
    store.mkdir(parents=True)
    ports = [free_port() for _ in range(3)]
    batch_log, ready_file = cwd / "batches.log", cwd / "ready.json"
    (cwd / "handler.py").write_text(TORCHSERVE_HANDLER)
    peer = {"batch_log": str(batch_log), "ready_file": str(ready_file), "dtype": dtype}
    (cwd / "peer.json").write_text(json.dumps(peer))
    shutil.copyfile(tarball, cwd / "model.tar.gz")
    archiver = python.parent / "torch-model-archiver"
    subprocess.run(
        [str(archiver), "--model-name", "resnet", "--version", "1.0", "--handler", "handler.py",
         "--extra-files", "model.tar.gz,peer.json", "--export-path", str(store)],
        cwd=cwd, check=True,
    )  # fmt: skip
    models = {
        "resnet": {
            "1.0": {
                "defaultVersion": True,
                "marName": "resnet.mar",
                "minWorkers": workers,
                "maxWorkers": workers,
                "batchSize": max_batch_size,
                "maxBatchDelay": int(delay_ms),
                "responseTimeout": 120,
            }
        }
    }
    properties = {
        "inference_address": f"http://127.0.0.1:{ports[0]}",
        "management_address": f"http://127.0.0.1:{ports[1]}",
        "metrics_address": f"http://127.0.0.1:{ports[2]}",
        "model_store": str(store),
        "load_models": "resnet.mar",
        "models": json.dumps(models),
        "number_of_gpu": "1" if device == "cuda" else "0",
        "disable_token_authorization": "true",
    }
    (cwd / "config.properties").write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    env = peer_config_env(device)
    env["TMPDIR"] = str(cwd)  # TorchServe keeps its pid file in the temp dir: one per run, beside other users'
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    command = [
        str(python.parent / "torchserve"), "--start", "--foreground", "--ncs", "--disable-token-auth",
        "--model-store", str(store), "--ts-config", str(cwd / "config.properties"),
    ]  # fmt: skip
    return Server(
        "torchserve", command, env, cwd, ports[0], "/predictions/resnet", BatchLog(batch_log, "plain"),
        ready_file=ready_file,
    )  # fmt: skip


def litserve_server(
    work: Path,
    tarball: Path,
    device: str,
    python: Path,
    workers: int = 1,
    max_batch_size: int = MAX_BATCH_SIZE,
    delay_ms: float = MAX_BATCH_DELAY_MS,
    dtype: str = "float32",
) -> Server:
    cwd = work / "litserve"
    cwd.mkdir()
    port = free_port()
    batch_log, ready_file = cwd / "batches.log", cwd / "ready.json"
    config = {
        "tarball": str(tarball),
        "artifact_dir": str(cwd / "artifact"),
        "batch_log": str(batch_log),
        "ready_file": str(ready_file),
        "port": port,
        "accelerator": device,
        "max_batch_size": max_batch_size,
        "batch_timeout": delay_ms / 1000.0,
        "workers": workers,
        "dtype": dtype,
    }
    (cwd / "app.py").write_text(LITSERVE_APP)
    (cwd / "config.json").write_text(json.dumps(config))
    command = [str(python), str(cwd / "app.py"), str(cwd / "config.json")]
    return Server(
        "litserve", command, peer_config_env(device), cwd, port, "/predict", BatchLog(batch_log, "plain"),
        wrap_npy=True, ready_file=ready_file,
    )  # fmt: skip


def ready_record(server: Server) -> dict[str, Any]:
    """The server's own account of its torch threads and device (its ``ready`` log line or ready file)."""
    if server.ready_file is not None:
        record: dict[str, Any] = json.loads(server.ready_file.read_text())
        return record
    for line in server.log.read_text(errors="replace").splitlines():
        if '"ready"' in line:
            event = json.loads(line)
            if event.get("event") == "ready":
                return {"server": server.name, "torch_threads": event["torch_threads"], "device": event["device"]}
    raise RuntimeError(f"{server.name} logged no ready event; log:\n{server.log_tail()}")


# -- load generator -----------------------------------------------------------------------------------------------
async def read_response(reader: asyncio.StreamReader) -> tuple[int, bool, bytes]:
    """(status, connection closes, body) of one HTTP/1.1 response; sized or chunked body."""
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("server closed the connection")
    status = int(status_line.split()[1])
    length, chunked, close = 0, False, status_line.startswith(b"HTTP/1.0")
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        key, value = name.strip().lower(), value.strip().lower()
        if key == "content-length":
            length = int(value)
        elif key == "transfer-encoding" and "chunked" in value:
            chunked = True
        elif key == "connection":
            close = value == "close"
    if not chunked:
        return status, close, (await reader.readexactly(length) if length else b"")
    parts: list[bytes] = []
    while True:
        size = int((await reader.readline()).split(b";")[0], 16)
        if size == 0:
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            return status, close, b"".join(parts)
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)


@dataclass
class LoadResult:
    concurrency: int
    requests: int
    seconds: float
    latencies_ms: list[float]
    statuses: Counter[int]

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds > 0 else 0.0


class _Connection:
    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def exchange(self, request: bytes) -> tuple[int, bytes]:
        """Send ``request``, read the answer: (status, body); status 0 on a connection error or timeout."""
        try:
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
            assert self.reader is not None
            self.writer.write(request)
            status, close, body = await asyncio.wait_for(read_response(self.reader), REQUEST_TIMEOUT_S)
        except (OSError, ConnectionError, asyncio.IncompleteReadError, asyncio.TimeoutError, ValueError):
            self.close()
            return 0, b""
        if close:
            self.close()
        return status, body

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def closed_loop(port: int, requests: Sequence[bytes], concurrency: int, total: int) -> LoadResult:
    """``total`` requests from ``concurrency`` keep-alive connections; request k is ``requests[k % len]``."""
    issued = [0]
    latencies: list[float] = []
    statuses: Counter[int] = Counter()

    async def client() -> None:
        conn = _Connection(port)
        try:
            while issued[0] < total:
                request = requests[issued[0] % len(requests)]
                issued[0] += 1
                t0 = time.perf_counter()
                status, _ = await conn.exchange(request)
                latencies.append((time.perf_counter() - t0) * 1000.0)
                statuses[status] += 1
        finally:
            conn.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return LoadResult(concurrency, total, time.perf_counter() - t0, latencies, statuses)


# -- statistics ---------------------------------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of ``values``; NaN when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q={q} is not allowed; allowed: 0 to 100")
    data = sorted(values)
    if not data:
        return float("nan")
    return data[min(len(data) - 1, max(0, round(q / 100.0 * (len(data) - 1))))]


def rotated(names: Sequence[str], round_index: int) -> list[str]:
    """The server order of round ``round_index``: ``names`` shifted left by the round number."""
    if not names:
        return []
    k = round_index % len(names)
    return [*names[k:], *names[:k]]


@dataclass
class Cell:
    """One server at one concurrency, over all rounds."""

    server: str
    concurrency: int
    throughputs: list[float] = field(default_factory=list)
    latencies_ms: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    cpu_seconds: float = 0.0
    wait_seconds: float = 0.0
    wall_seconds: float = 0.0
    requests: int = 0
    batches: list[int] = field(default_factory=list)

    def add(self, run: LoadResult, cpu_seconds: float, batches: Sequence[int], wait_seconds: float = 0.0) -> None:
        self.throughputs.append(run.throughput)
        self.latencies_ms += run.latencies_ms
        self.statuses.update(run.statuses)
        self.cpu_seconds += cpu_seconds
        self.wall_seconds += run.seconds
        self.wait_seconds += wait_seconds
        self.requests += run.requests
        self.batches += batches

    @property
    def throughput(self) -> float:
        return statistics.median(self.throughputs) if self.throughputs else 0.0

    @property
    def spread(self) -> tuple[float, float]:
        return (min(self.throughputs), max(self.throughputs)) if self.throughputs else (0.0, 0.0)

    def pct(self, q: float) -> float:
        return percentile(self.latencies_ms, q)

    @property
    def cpu_ms_per_request(self) -> float:
        return 1000.0 * self.cpu_seconds / self.requests if self.requests else float("nan")

    @property
    def wait_ms_per_request(self) -> float:
        """Time the server's threads spent runnable but waiting for a CPU, per request."""
        return 1000.0 * self.wait_seconds / self.requests if self.requests else float("nan")

    @property
    def cores(self) -> float:
        """CPU-seconds the server's process tree got per second of the runs: its share of the machine."""
        return self.cpu_seconds / self.wall_seconds if self.wall_seconds else float("nan")

    @property
    def mean_batch(self) -> float:
        return sum(self.batches) / len(self.batches) if self.batches else float("nan")

    @property
    def errors(self) -> dict[int, int]:
        return {s: c for s, c in sorted(self.statuses.items()) if s != 200}


def run_cell(
    server: Server, requests: Sequence[bytes], n: int, total: int
) -> tuple[LoadResult, float, list[int], float]:
    """One closed-loop run with the server's CPU time, batches and run-queue wait over it."""
    server.batches.new_batches()
    cpu0, wait0 = tree_cpu_seconds(server.pid), tree_wait_seconds(server.pid)
    run = asyncio.run(closed_loop(server.port, requests, n, total))
    cpu, wait = tree_cpu_seconds(server.pid) - cpu0, tree_wait_seconds(server.pid) - wait0
    check_answered(server, run)
    return run, cpu, server.batches.new_batches(), wait


def check_answered(server: Server, run: LoadResult) -> None:
    """Stop the benchmark when a server died or stopped answering during a run: requests that got no answer at
    all would otherwise count as (very fast) throughput. HTTP error statuses are reported, not fatal."""
    unanswered = run.statuses.get(0, 0)
    died = server.proc is not None and server.proc.poll() is not None
    if died or unanswered > max(1, run.requests // 100):
        state = f"exited with {server.proc.returncode}" if died and server.proc else "is still running"
        raise RuntimeError(
            f"{server.name}: {unanswered} of {run.requests} requests at N={run.concurrency} got no answer (no "
            f"connection, a reset or a {REQUEST_TIMEOUT_S:g} s timeout); the server {state}. Its log:\n"
            f"{server.log_tail()}"
        )


def measure(
    servers: Mapping[str, Server], bodies: Mapping[str, Sequence[bytes]], n: int, per_round: int, rounds: int, warm: int
) -> dict[str, Cell]:
    for name, srv in servers.items():  # warm-up: connections, allocator, the first batches at this N
        asyncio.run(closed_loop(srv.port, bodies[name], n, warm))
    cells = {name: Cell(name, n) for name in servers}
    for rnd in range(rounds):
        for name in rotated(list(servers), rnd):
            cells[name].add(*run_cell(servers[name], bodies[name], n, per_round))
    for cell in cells.values():
        lo, hi = cell.spread
        print(
            f"{cell.server:>10} N={n:<3} {cell.throughput:7.1f} req/s [{lo:.0f}-{hi:.0f}]  p50 {cell.pct(50):7.2f} ms  "
            f"p99 {cell.pct(99):7.2f} ms  cpu {cell.cpu_ms_per_request:5.2f} ms/req ({cell.cores:.2f} cores, "
            f"waited {cell.wait_ms_per_request:5.2f} ms/req)  "
            f"batch {cell.mean_batch:5.1f}" + (f"  non-200: {cell.errors}" if cell.errors else ""),
            flush=True,
        )
    return cells


@dataclass
class PoisonResult:
    server: str
    trials: int
    malformed_statuses: Counter[int]
    valid_ok: int
    valid_total: int
    healthy_after: bool


async def _poison(port: int, valid: bytes, bad: bytes, trials: int) -> tuple[Counter[int], int, int]:
    conns = [_Connection(port) for _ in range(POISON_N)]
    bad_statuses: Counter[int] = Counter()
    ok = total = 0
    try:
        for trial in range(trials):
            slot = trial % POISON_N
            answers = await asyncio.gather(
                *(conn.exchange(bad if i == slot else valid) for i, conn in enumerate(conns))
            )
            statuses = [status for status, _ in answers]
            bad_statuses[statuses[slot]] += 1
            mates = [s for i, s in enumerate(statuses) if i != slot]
            ok += sum(1 for s in mates if s == 200)
            total += len(mates)
    finally:
        for conn in conns:
            conn.close()
    return bad_statuses, ok, total


def poison_probe(server: Server, npy: bytes, trials: int) -> PoisonResult:
    """``trials`` times: 8 requests at once, one a malformed ``.npy``; count the valid ones answered 200."""
    valid, bad = server.request(npy, NPY), server.request(malformed_npy(), NPY)
    bad_statuses, ok, total = asyncio.run(_poison(server.port, valid, bad, trials))
    healthy = post(server, npy, NPY)[0] == 200
    return PoisonResult(server.name, trials, bad_statuses, ok, total, healthy)


# -- report -------------------------------------------------------------------------------------------------------
LABELS = {
    "gpu_serve": "gpu_serve",
    "torchserve": "TorchServe",
    "litserve": "LitServe",
    "gpu_serve_1proc": "gpu_serve (one process)",
}


def _peer_rows(cells: Mapping[str, Sequence[Cell]], pair: Callable[[Cell, Cell], list[str]]) -> list[str]:
    """One markdown row per N: the N, then ``pair(gpu_serve's cell, the peer's cell)`` for each peer."""
    peers = [p for p in cells if p != "gpu_serve"]
    rows = []
    for i, ours in enumerate(cells["gpu_serve"]):
        parts = [str(ours.concurrency)]
        for peer in peers:
            parts += pair(ours, cells[peer][i])
        rows.append("| " + " | ".join(parts) + " |")
    return rows


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else float("nan")


def ratio_rows(cells: Mapping[str, Sequence[Cell]]) -> list[str]:
    """Markdown rows: gpu_serve / each peer, throughput (higher is better) and p99 (lower is better)."""
    return _peer_rows(
        cells,
        lambda ours, theirs: [
            f"**{_ratio(ours.throughput, theirs.throughput):.2f}x**",
            f"{_ratio(ours.pct(99), theirs.pct(99)):.2f}",
        ],
    )


def share_rows(cells: Mapping[str, Sequence[Cell]]) -> list[str]:
    """Markdown rows splitting each throughput ratio into its two factors: requests per CPU-second (what each
    request costs) and cores (how much of the machine the server's processes got)."""
    return _peer_rows(
        cells,
        lambda ours, theirs: [
            f"{_ratio(theirs.cpu_ms_per_request, ours.cpu_ms_per_request):.2f}x",
            f"{_ratio(ours.cores, theirs.cores):.2f}x",
        ],
    )


def behind(cells: Mapping[str, Sequence[Cell]]) -> list[str]:
    """Where gpu_serve is behind a peer: lower median throughput or higher p99, with the ratio."""
    out = []
    for i, ours in enumerate(cells["gpu_serve"]):
        for peer in (p for p in cells if p != "gpu_serve"):
            theirs = cells[peer][i]
            if theirs.throughput and ours.throughput < theirs.throughput:
                out.append(
                    f"N={ours.concurrency} throughput vs {LABELS[peer]} ({ours.throughput / theirs.throughput:.2f}x)"
                )
            if theirs.pct(99) and ours.pct(99) > theirs.pct(99):
                out.append(f"N={ours.concurrency} p99 vs {LABELS[peer]} ({ours.pct(99) / theirs.pct(99):.2f}x)")
    return out


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 'es' if noun.endswith('s') else 's'}"


def _errors_text(errors: Mapping[int, int]) -> str:
    return ", ".join(f"{c} x {s if s else 'no answer'}" for s, c in errors.items()) or "0"


def render(
    cells: Mapping[str, Sequence[Cell]],
    mixed: Mapping[str, Cell],
    poison: Mapping[str, PoisonResult],
    memory: Mapping[str, tuple[int, float]],
    info: Mapping[str, Any],
    args: argparse.Namespace,
    idle: Mapping[str, float] | None = None,
) -> str:
    names = list(cells)
    peers = [p for p in names if p != "gpu_serve"]
    command = " ".join(["python -m benchmarks.serve_peers", *args.argv])
    reduced = args.quick or args.rounds < DEFAULT_ROUNDS or args.requests < DEFAULT_REQUESTS
    workers = _plural(args.workers, "model worker")
    busy = (
        f"**{_plural(args.busy, 'busy-loop process')} ran beside the servers while they were timed** (each keeps "
        "one pure-Python thread runnable, as other work on a shared machine does). "
        if args.busy
        else ""
    )
    lines = [
        "## Inference: gpu_serve vs TorchServe and LitServe"
        + (" on a busy machine" if args.busy else "")
        + (f", {args.workers} model workers each" if args.workers > 1 else ""),
        "",
        f"Command: `{command}` (measured {info['date']} on {info['machine']}, {info['device']}, torch {info['torch']}; "
        f"1-minute load average {info['load']} at start and end; TorchServe {info['versions']['torchserve']} on "
        f"{info['java']}, LitServe {info['versions']['litserve']}). "
        + (
            f"**Smoke run: fewer rounds or requests per cell than the defaults ({DEFAULT_ROUNDS} x "
            f"{DEFAULT_REQUESTS}); its numbers show that every server answers, not how they rank.** "
            if reduced
            else ""
        )
        + busy
        + "The client runs on the same cores as the servers, so absolute numbers include its share of the CPU.",
        "",
        f"Model: ResNet-18-style convnet, width {WIDTH}, {IMAGE_SIZE}x{IMAGE_SIZE} input, "
        f"{NUM_CLASSES} classes ({info['params_m']:.2f} M parameters, fp32), one `model.tar.gz` made by "
        "`gpu_train.export`, served by all three. Request: one `.npy` sample (1, 3, 32, 32) float32 "
        f"({info['npy_bytes']} bytes; LitServe gets it as a multipart file upload, {info['multipart_bytes']} bytes); "
        "response: JSON logits. Batching: at most "
        f"{MAX_BATCH_SIZE} requests, {MAX_BATCH_DELAY_MS:g} ms delay on every server (gpu_serve: "
        f"`GPU_SERVE_MAX_BATCH_SIZE`/`GPU_SERVE_MAX_BATCH_DELAY_MS`, {workers}; TorchServe: "
        f"`batchSize`/`maxBatchDelay`, {workers}; LitServe: `max_batch_size`/`batch_timeout`, {workers}). "
        "One torch thread in every server "
        f"process (reported by each at start: {info['threads']}). Each cell: {_plural(args.rounds, 'round')} of "
        f"{args.requests} requests after {args.warmup} warm-up requests; round r rotates the server order by r. "
        "Throughput is the median over rounds with its min-max; latency is client-side over all rounds; "
        "CPU is user + system time of the server's process tree per request; cores is that CPU time per second "
        "of the runs (the server's share of the machine); run-queue wait is the time the tree's threads were "
        "runnable but waiting for a CPU (`/proc/<pid>/task/<tid>/schedstat`), per request.",
        "",
        "| N | server | req/s (median) | min-max | p50 ms | p99 ms | CPU ms/req | cores | run-queue wait ms/req "
        "| mean batch | non-200 |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i in range(len(cells["gpu_serve"])):
        for name in names:
            c = cells[name][i]
            lo, hi = c.spread
            lines.append(
                f"| {c.concurrency} | {LABELS[name]} | {c.throughput:.0f} | {lo:.0f}-{hi:.0f} | {c.pct(50):.1f} "
                f"| {c.pct(99):.1f} | {c.cpu_ms_per_request:.2f} | {c.cores:.2f} | {c.wait_ms_per_request:.2f} "
                f"| {c.mean_batch:.1f} | {_errors_text(c.errors)} |"
            )
    if peers:
        head = " | ".join(f"vs {LABELS[p]}: throughput | vs {LABELS[p]}: p99" for p in peers)
        lines += [
            "",
            "gpu_serve / peer (throughput: above 1 is gpu_serve ahead; p99: below 1 is gpu_serve ahead):",
            "",
            f"| N | {head} |",
            "|---|" + "---|" * (2 * len(peers)),
            *ratio_rows(cells),
            "",
            "gpu_serve is behind in: " + ("; ".join(behind(cells)) or "no cell") + ".",
            "",
            "Where each throughput ratio comes from: requests per CPU-second (gpu_serve / peer: what a request "
            "costs) times cores (gpu_serve / peer: how much of the machine the server's processes got while "
            "being timed):",
            "",
            "| N | " + " | ".join(f"vs {LABELS[p]}: per CPU-second | vs {LABELS[p]}: cores" for p in peers) + " |",
            "|---|" + "---|" * (2 * len(peers)),
            *share_rows(cells),
        ]
    lines += [
        "",
        "| server | processes | peak RSS, MiB (sum of each process's VmHWM) | CPU at rest, cores |",
        "|---|---|---|---|",
        *(
            f"| {LABELS[n]} | {memory[n][0]} | {memory[n][1]:.0f} | "
            + (f"{idle[n]:.3f}" if idle and n in idle else "-")
            + " |"
            for n in names
        ),
        "",
        "Peak RSS counts shared pages (libtorch, the JVM) once per process that maps them, so a server with "
        "several Python processes shows more than it adds to the machine's memory use. CPU at rest: the tree's "
        f"CPU time per second over {IDLE_SECONDS:g} s with no request, after start-up (polling loops show here).",
    ]
    if mixed:
        n_mixed = next(iter(mixed.values())).concurrency
        lines += [
            "",
            f'Mixed content (N={n_mixed}, every other request `application/json` `{{"instances": ...}}` '
            f"({info['json_bytes']} bytes), the rest `.npy`, one stream per connection; "
            f"{_plural(args.rounds, 'round')} of {args.mixed_requests} requests, rotated as above):",
            "",
            "| server | req/s (median) | min-max | p50 ms | p99 ms | CPU ms/req | cores | run-queue wait ms/req "
            "| mean batch | non-200 |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *(
                f"| {LABELS[n]} | {c.throughput:.0f} | {c.spread[0]:.0f}-{c.spread[1]:.0f} | {c.pct(50):.1f} "
                f"| {c.pct(99):.1f} | {c.cpu_ms_per_request:.2f} | {c.cores:.2f} | {c.wait_ms_per_request:.2f} "
                f"| {c.mean_batch:.1f} "
                f"| {_errors_text(c.errors)} |"
                for n, c in mixed.items()
            ),
        ]
    if poison:
        trials = next(iter(poison.values())).trials
        lines += [
            "",
            f"Poison (N={POISON_N}: {trials} times, {POISON_N} requests sent at once, one of them a `.npy` cut off "
            "inside its header):",
            "",
            "| server | malformed request got | valid batch-mates answered 200 | valid request right after |",
            "|---|---|---|---|",
            *(
                f"| {LABELS[n]} | {', '.join(f'{c} x {s}' for s, c in sorted(p.malformed_statuses.items()))} | "
                f"**{p.valid_ok} / {p.valid_total}** | {'200' if p.healthy_after else 'failed'} |"
                for n, p in poison.items()
            ),
            "",
            "gpu_serve decodes each request on its own before it joins a batch, so a malformed body fails alone "
            "(400). The obvious TorchServe handler and LitAPI decode inside the batch call, where one exception "
            "fails every request of that batch (TorchServe answers them all 503 `Prediction failed`, LitServe 500).",
        ]
    lines += ["", f"![gpu_serve vs TorchServe and LitServe](img/{plot_path(args.busy, args.workers).name})"]
    return "\n".join(lines)


def plot(cells: Mapping[str, Sequence[Cell]], path: Path, title: str) -> None:
    curves = [
        LoadCurve(
            LABELS[name],
            [c.concurrency for c in row],
            [c.throughput for c in row],
            [c.pct(50) for c in row],
            [c.pct(99) for c in row],
            spread=[c.spread for c in row],
        )
        for name, row in cells.items()
    ]
    plot_load_curves(curves, path, title, "requests/s (median, min-max of rounds)")


# -- main ---------------------------------------------------------------------------------------------------------
def _java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"TorchServe needs Java 17 on PATH; `java -version` failed: {exc}") from None
    first = (done.stderr or done.stdout).splitlines()[0] if (done.stderr or done.stdout) else "java"
    found = re.search(r'version "([^"]+)"', first)
    return f"Java {found.group(1)}" if found else first


def _cpu_model() -> str:
    text = _read("/proc/cpuinfo") or ""
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return f"{os.cpu_count()} x {found.group(1).strip() if found else platform.machine()}"


def _check_answers(answers: Mapping[str, bytes], reference: Any) -> None:
    """Every server's logits for the sample match the model called directly (batched kernels round differently)."""
    import numpy as np

    for name, body in answers.items():
        got = np.asarray(json.loads(body)["predictions"], dtype=np.float32)
        if got.shape != reference.shape or not np.allclose(got, reference, rtol=1e-4, atol=1e-4):
            raise SystemExit(f"{name} answered {got.tolist()}; the model itself gives {reference.tolist()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 2 rounds of 150 requests, short probes; implies --no-write"
    )
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="device of every server")
    parser.add_argument(
        "--requests", type=int, help=f"requests per (server, N, round) (default {DEFAULT_REQUESTS}; quick 150)"
    )
    parser.add_argument("--rounds", type=int, help=f"rounds per N (default {DEFAULT_ROUNDS}; quick 2)")
    parser.add_argument("--warmup", type=int, help="warm-up requests per (server, N) (default 200; quick 50)")
    parser.add_argument("--concurrency", default="1,8,32,64", help="comma-separated N values")
    parser.add_argument(
        "--mixed-requests", type=int, help="requests per round of the mixed-content probe (default 500; quick 150)"
    )
    parser.add_argument("--poison-trials", type=int, help="rounds of the poison probe (default 20; quick 5)")
    parser.add_argument(
        "--servers",
        default=",".join(SERVERS),
        help=f"comma-separated subset of {', '.join(SERVERS + OPTIONAL_SERVERS)} (gpu_serve required)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="W",
        help="model workers of every server: gpu_serve GPU_SERVE_MODEL_PROCESSES, TorchServe min/maxWorkers, "
        "LitServe workers_per_device (default 1); W > 1 writes its own section",
    )
    parser.add_argument(
        "--busy",
        type=int,
        default=0,
        metavar="K",
        help="run K busy-loop processes beside the servers while timing (other work on a shared machine); "
        "writes the serve-peers-busy section instead",
    )
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    # SIGTERM (a kill, a CI timeout) unwinds like Ctrl-C, so that the servers and busy neighbours are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    quick = args.quick
    args.no_write = args.no_write or quick
    args.requests = args.requests or (150 if quick else DEFAULT_REQUESTS)
    args.rounds = args.rounds or (2 if quick else DEFAULT_ROUNDS)
    args.warmup = args.warmup if args.warmup is not None else (50 if quick else 200)
    args.mixed_requests = args.mixed_requests or (150 if quick else DEFAULT_REQUESTS)
    args.poison_trials = args.poison_trials or (5 if quick else 20)
    concurrency = [int(n) for n in args.concurrency.split(",")]
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    unknown = [n for n in names if n not in SERVERS + OPTIONAL_SERVERS]
    if unknown or "gpu_serve" not in names:
        parser.error(
            f"--servers {args.servers!r}: allowed names are {', '.join(SERVERS + OPTIONAL_SERVERS)}, gpu_serve included"
        )
    if not 1 <= args.workers <= 8:
        parser.error(f"--workers {args.workers}: allowed 1 to 8")
    if args.busy < 0:
        parser.error(f"--busy {args.busy}: the number of busy-loop processes must be 0 or more")
    if min(concurrency) < 1:
        parser.error(f"--concurrency {args.concurrency!r}: every N must be at least 1")

    print(
        f"serve_peers: {', '.join(names)}; N = {args.concurrency}, {args.rounds} x {args.requests} requests per "
        f"server and N"
        + (
            ""
            if args.no_write
            else f"; rewrites the {section_name(args.busy, args.workers)} section of docs/benchmarks.md"
        ),
        flush=True,
    )
    import numpy as np
    import torch

    from gpu_train.export import export_example_model

    java = _java_version() if "torchserve" in names else "no Java"
    peers_named = [n for n in names if n in SERVERS and n != "gpu_serve"]
    python = ensure_serving_peers() if peers_named else Path(sys.executable)
    if args.device == "cuda" and peers_named:
        probe = [str(python), "-c", "import torch; print(torch.__version__, torch.cuda.is_available())"]
        found = subprocess.run(probe, capture_output=True, text=True).stdout.split()
        if found[-1:] != ["True"]:
            raise SystemExit(
                f"--device cuda: the peers' torch in {python.parent.parent} "
                f"({' '.join(found[:1]) or 'not importable'}) sees no CUDA device; the peers need a CUDA build "
                "of the project's torch there"
            )
    versions = venv_versions(python, PEER_PINS)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="serve-peers-") as tmp:
        work = Path(tmp)
        tarball = export_example_model(
            work / "artifact", arch=ARCH, width=WIDTH, image_size=IMAGE_SIZE,
            num_classes=NUM_CLASSES,
        )  # fmt: skip
        artifact, model = load_artifact(str(tarball), str(work / "reference"))  # what the peers load
        params_m = sum(p.numel() for p in model.parameters()) / 1e6
        sample = torch.randn(1, 3, IMAGE_SIZE, IMAGE_SIZE, generator=torch.Generator().manual_seed(1))
        sample_np = sample.numpy().astype(np.float32)
        npy, js = npy_bytes(sample_np), json_instances(sample_np)
        reference = artifact.predict_fn(artifact.input_fn(js, JSON), model).numpy()

        makers: dict[str, Callable[[], Server]] = {
            "gpu_serve": lambda: gpu_serve_server(work, tarball, args.device, workers=args.workers),
            "gpu_serve_1proc": lambda: gpu_serve_server(work, tarball, args.device, "gpu_serve_1proc"),
            "torchserve": lambda: torchserve_server(work, tarball, args.device, python, args.workers),
            "litserve": lambda: litserve_server(work, tarball, args.device, python, args.workers),
        }
        servers: dict[str, Server] = {}
        try:
            for name in names:
                servers[name] = makers[name]().start()
            for srv in servers.values():
                srv.wait_ready(npy)
            records = {name: ready_record(srv) for name, srv in servers.items()}
            for name, rec in records.items():
                if int(rec["torch_threads"]) != 1 or not str(rec["device"]).startswith(args.device):
                    raise SystemExit(f"{name} runs torch with {rec['torch_threads']} threads on {rec['device']}; "
                                     f"the benchmark needs 1 thread on {args.device}")  # fmt: skip
            answers = {}
            for name, srv in servers.items():
                for body, ctype in ((npy, NPY), (js, JSON)):
                    status, answer = post(srv, body, ctype)
                    if status != 200:
                        raise SystemExit(f"{name} answered {status} to a valid {ctype} request: {answer[:300]!r}")
                    answers[f"{name} ({ctype})"] = answer
            _check_answers(answers, reference)
            print(f"all servers answer the model's logits; ready: {records}", flush=True)
            time.sleep(1.0)  # let the answers' log writes and batch timers settle
            idle = idle_cores({name: srv.pid for name, srv in servers.items()})
            print("CPU at rest (cores): " + ", ".join(f"{n} {c:.3f}" for n, c in idle.items()), flush=True)

            bodies = {name: [srv.request(npy, NPY)] for name, srv in servers.items()}
            cells: dict[str, list[Cell]] = {name: [] for name in servers}
            with BusyNeighbours(args.busy):
                for n in concurrency:
                    for name, cell in measure(servers, bodies, n, args.requests, args.rounds, args.warmup).items():
                        cells[name].append(cell)
                n_mixed = 32 if 32 in concurrency else max(concurrency)
                alternating = {name: [srv.request(npy, NPY), srv.request(js, JSON)] for name, srv in servers.items()}
                print(f"mixed content (every other request JSON) at N={n_mixed}:", flush=True)
                mixed = measure(servers, alternating, n_mixed, args.mixed_requests, args.rounds, args.warmup)
            poison = {name: poison_probe(srv, npy, args.poison_trials) for name, srv in servers.items()}
            for p in poison.values():
                print(f"poison {p.server:>10}: malformed got {dict(p.malformed_statuses)}, valid 200 "
                      f"{p.valid_ok}/{p.valid_total}, healthy after: {p.healthy_after}", flush=True)  # fmt: skip
            memory = {name: tree_memory(srv.pid) for name, srv in servers.items()}
        finally:
            for srv in servers.values():
                srv.stop()
        load_after = os.getloadavg()[0]
        multipart_bytes = len(multipart("file", "sample.npy", npy, NPY, "serve-peers-0d5c8e")[0])

    device = args.device if args.device == "cpu" else torch.cuda.get_device_name(0)
    info = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": _cpu_model(),
        "device": device,
        "torch": torch.__version__,
        "load": f"{min(load_before, load_after):.1f}-{max(load_before, load_after):.1f}",
        "versions": {k: v or "-" for k, v in versions.items()},
        "java": java,
        "params_m": params_m,
        "threads": ", ".join(f"{LABELS[n]} {r['torch_threads']}" for n, r in records.items()),
        "npy_bytes": len(npy),
        "json_bytes": len(js),
        "multipart_bytes": multipart_bytes,
    }
    markdown = render(cells, mixed, poison, memory, info, args, idle)
    print(markdown)
    if not args.no_write:
        title = (
            f"ResNet-18 w{WIDTH} {IMAGE_SIZE}px, {device}, {os.cpu_count()} CPUs"
            + (" (smoke run)" if args.rounds < DEFAULT_ROUNDS or args.requests < DEFAULT_REQUESTS else "")
            + (f", {args.busy} busy neighbours" if args.busy else "")
            + ": gpu_serve vs TorchServe vs LitServe"
        )
        plot(cells, plot_path(args.busy, args.workers), title)
        write_section(section_name(args.busy, args.workers), markdown)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except RuntimeError as exc:  # a server that would not start or stopped answering, a peer venv that failed
        print(f"serve_peers: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
