"""Serving on an NVIDIA GPU: gpu_serve's dynamic batching against one request per forward, LitServe and
TorchServe, on the same GPU, the same model.tar.gz and the same load, in one run.

The model is ResNet-50 (224x224 input, 1,000 classes, 25.6 M parameters) exported by ``gpu_train.export``
and served in bfloat16 by every server: gpu_serve casts it with ``GPU_SERVE_DTYPE=bfloat16``; the peers'
handlers (benchmarks/serve_peers.py) cast it with ``model.to(torch.bfloat16)`` after loading it with the
artifact's own ``code/inference.py``, whose ``predict_fn`` feeds the model its own dtype. A request is one
image as a ``.npy`` of uint8 pixels (1, 3, 224, 224), 150 KB, which the artifact's ``input_fn`` scales and
normalises; the answer is the JSON logits.

Servers (each with one model worker on the GPU, batches of at most ``--max-batch-size`` requests formed within
``--max-batch-delay-ms``):

- ``gpu_serve``: ``gpuctl serve model.tar.gz`` (``GPU_SERVE_MAX_BATCH_SIZE``, ``GPU_SERVE_MAX_BATCH_DELAY_MS``);
- ``per_request``: the same server with ``GPU_SERVE_MAX_BATCH_SIZE=1``: one forward pass per request, which is
  what the SageMaker PyTorch toolkit's default handler does;
- ``litserve``: LitServe (``max_batch_size``, ``batch_timeout``), the ``LitAPI`` of benchmarks/serve_peers.py;
- ``torchserve``: TorchServe (``batchSize``, ``maxBatchDelay``) with the handler of benchmarks/serve_peers.py.
  It needs Java 17 on PATH; without Java it is left out and the report says so.

An asyncio client keeps N keep-alive connections busy (closed loop) for N = 1, 8, 32, 64; each N runs
``--rounds`` rounds of ``--requests`` requests per server, the server order rotated each round. Reported per
server and N: median throughput (min-max of rounds), client-side p50/p99 latency, the mean batch each server
formed, and non-200 answers. Targets (docs/benchmarks.md): dynamic batching >= 5x one request per forward at
N = 32; gpu_serve >= 1.0x each peer's throughput at every N, with a lower p99.

Run: ``python -m benchmarks.serve_gpu`` on a machine with an NVIDIA GPU (``--help`` for options); the peers
must be importable by this interpreter (``make gpu-check`` installs LitServe from ``.gpu-wheels/``). Writes the
``serve-gpu`` section of docs/benchmarks.md and docs/img/serve_gpu.png unless ``--no-write``. About 2 minutes
on one H100. ``--device cpu --quick --model tiny`` is a CPU smoke run of the same code (docs/ untouched).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import serve_peers as sp
from benchmarks._report import LoadCurve, plot_load_curves, relative_to_repo, write_section

SECTION = "serve-gpu"
PLOT = Path(__file__).resolve().parent.parent / "docs" / "img" / "serve_gpu.png"
SERVERS = ("gpu_serve", "per_request", "litserve", "torchserve")
LABELS = {"gpu_serve": "gpu_serve", "per_request": "one request per forward", "litserve": "LitServe",
          "torchserve": "TorchServe"}  # fmt: skip
#: --model: (arch, width, image size, classes) for gpu_train.export.export_example_model.
MODELS = {"resnet50": ("resnet50", 64, 224, 1000), "tiny": ("resnet_tiny", 8, 32, 10)}
BATCHING_TARGET = 5.0  # dynamic / one request per forward at N = 32
BATCHING_TARGET_N = 32


def gpu_serve_server(work: Path, tarball: Path, args: argparse.Namespace, name: str) -> sp.Server:
    """``gpuctl serve`` of the artifact: dynamic batching (``gpu_serve``) or one request per forward."""
    env = sp.peer_config_env(args.device)
    env.update(
        {
            "GPU_SERVE_MAX_BATCH_SIZE": "1" if name == "per_request" else str(args.max_batch_size),
            "GPU_SERVE_MAX_BATCH_DELAY_MS": f"{args.max_batch_delay_ms:g}",
            "GPU_SERVE_NUM_THREADS": "1",
            "GPU_SERVE_DEVICE": args.device,
            "GPU_SERVE_DTYPE": args.dtype,
            "GPU_SERVE_MODEL_PROCESSES": "1",
        }
    )
    port = sp.free_port()
    cwd = work / name
    cwd.mkdir()
    command = [sys.executable, "-m", "gpuctl", "serve", str(tarball), "--host", "127.0.0.1", "--port", str(port)]
    return sp.Server(name, command, env, cwd, port, "/invocations", sp.BatchLog(cwd / f"{name}.log", "gpu_serve"))


def missing_peers(names: Sequence[str]) -> dict[str, str]:
    """Each named peer that cannot run here, with why (it is then left out, and the report says so)."""
    missing = {}
    if "litserve" in names and importlib.util.find_spec("litserve") is None:
        missing["litserve"] = f"LitServe is not importable by {sys.executable} (make gpu-wheels, then make gpu-check)"
    if "torchserve" in names:
        if shutil.which("java") is None:
            missing["torchserve"] = "TorchServe needs Java 17 on PATH and this machine has no `java`"
        elif shutil.which("torchserve") is None and not (Path(sys.executable).parent / "torchserve").exists():
            missing["torchserve"] = f"TorchServe is not installed beside {sys.executable}"
    return missing


def deviation(answer: bytes, reference: Any) -> float:
    """Largest |logit - reference| over the reference's largest |logit|: bfloat16 keeps 8 bits of mantissa."""
    import numpy as np

    got = np.asarray(json.loads(answer)["predictions"], dtype=np.float32).reshape(reference.shape)
    return float(np.abs(got - reference).max() / max(float(np.abs(reference).max()), 1e-12))


def render(
    cells: Mapping[str, Sequence[sp.Cell]],
    info: Mapping[str, Any],
    args: argparse.Namespace,
    left_out: Mapping[str, str],
) -> tuple[str, list[str]]:
    """The markdown section and the list of targets missed (empty when every target is met)."""
    names = list(cells)
    peers = [n for n in names if n in ("litserve", "torchserve")]
    rows = []
    for i in range(len(cells["gpu_serve"])):
        for name in names:
            c = cells[name][i]
            lo, hi = c.spread
            rows.append(
                f"| {c.concurrency} | {LABELS[name]} | {c.throughput:.0f} | {lo:.0f}-{hi:.0f} | {c.pct(50):.1f} "
                f"| {c.pct(99):.1f} | {c.mean_batch:.1f} | {sp._errors_text(c.errors)} |"
            )
    missed: list[str] = []
    ratio_rows = []
    for i, ours in enumerate(cells["gpu_serve"]):
        parts = [str(ours.concurrency)]
        if "per_request" in cells:
            single = cells["per_request"][i]
            batching = sp._ratio(ours.throughput, single.throughput)
            parts.append(f"**{batching:.2f}x**")
            if ours.concurrency == BATCHING_TARGET_N and not batching >= BATCHING_TARGET:
                missed.append(f"batching {batching:.2f}x one request per forward at N={ours.concurrency}")
        for peer in peers:
            theirs = cells[peer][i]
            speed, p99 = sp._ratio(ours.throughput, theirs.throughput), sp._ratio(ours.pct(99), theirs.pct(99))
            parts += [f"**{speed:.2f}x**", f"{p99:.2f}"]
            if not speed >= 1.0:
                missed.append(f"N={ours.concurrency} throughput {speed:.2f}x {LABELS[peer]}")
            if not p99 < 1.0:
                missed.append(f"N={ours.concurrency} p99 {p99:.2f}x {LABELS[peer]}'s")
        ratio_rows.append("| " + " | ".join(parts) + " |")
    head = (["dynamic / one per forward"] if "per_request" in cells else []) + [
        f"{h} {LABELS[p]}" for p in peers for h in ("throughput vs", "p99 vs")
    ]
    # a path in the repository is written relative to it: the section names no machine's folders
    command = " ".join(["python -m benchmarks.serve_gpu", *(relative_to_repo(a) for a in args.argv)])
    lines = [
        f"## Inference on the GPU: {info['model'].split(' ')[0]} {args.dtype}, dynamic batching vs one request per "
        "forward, LitServe and TorchServe",
        "",
        f"Command: `{command}` (measured {info['date']} on {info['device']}, {info['cpus']} vCPUs, torch "
        f"{info['torch']}, CUDA {info['cuda']}; " + ", ".join(f"{k} {v}" for k, v in info["versions"].items()) + ").",
        "",
        f"Model: {info['model']} ({info['params_m']:.1f} M parameters), one `model.tar.gz` made by "
        f"`gpu_train.export`, cast to {args.dtype} by every server. Request: one `.npy` of uint8 pixels "
        f"{info['shape']} ({info['npy_bytes']:,} bytes), normalised by the artifact's `input_fn`; response: JSON "
        f"logits. Batching: at most {args.max_batch_size} requests, {args.max_batch_delay_ms:g} ms delay, one model "
        f"worker on the GPU in every server. Each cell: {args.rounds} rounds of {args.requests} requests after "
        f"{args.warmup} warm-up requests, the server order rotated each round; throughput is the median over "
        "rounds (min-max beside it), latency is client-side over all rounds. Largest deviation of each server's "
        "logits from the float32 model on the CPU, relative to the largest logit: "
        + ", ".join(f"{LABELS[n]} {d:.3f}" for n, d in info["deviation"].items())
        + ".",
        "",
        "| N | server | req/s (median) | min-max | p50 ms | p99 ms | mean batch | non-200 |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Ratios (gpu_serve / other; throughput above 1 and p99 below 1 are gpu_serve ahead):",
        "",
        "| N | " + " | ".join(head) + " |",
        "|---|" + "---|" * len(head),
        *ratio_rows,
        "",
        f"Targets: dynamic batching >= {BATCHING_TARGET:g}x one request per forward at N={BATCHING_TARGET_N}; "
        "gpu_serve >= 1.0x each peer's throughput at every N with a lower p99. "
        + ("**All met.**" if not missed else "**Missed:** " + "; ".join(missed) + "."),
    ]
    if left_out:
        lines += ["", "Left out of this run: " + "; ".join(f"{LABELS[n]}: {why}" for n, why in left_out.items()) + "."]
    lines += ["", f"![gpu_serve on the GPU](img/{PLOT.name})"]
    return "\n".join(lines), missed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--model", choices=sorted(MODELS), default="resnet50")
    parser.add_argument("--dtype", choices=("bfloat16", "float16", "float32"), default="bfloat16")
    parser.add_argument("--servers", default=",".join(SERVERS), help=f"comma-separated subset of {', '.join(SERVERS)}")
    parser.add_argument("--concurrency", default="1,8,32,64")
    parser.add_argument("--requests", type=int, default=300, help="requests per (server, N, round)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=64, help="warm-up requests per (server, N)")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-batch-delay-ms", type=float, default=5.0)
    parser.add_argument("--quick", action="store_true", help="N = 1 and 32, 1 round of 60 requests; no report")
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    parser.add_argument("--summary", type=Path, help="also write the targets missed and the peers left out as JSON")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.quick:
        args.concurrency, args.requests, args.rounds, args.warmup, args.no_write = "1,32", 60, 1, 16, True
    names = [n.strip() for n in args.servers.split(",") if n.strip()]
    if "gpu_serve" not in names or any(n not in SERVERS for n in names):
        parser.error(f"--servers {args.servers!r}: allowed {', '.join(SERVERS)}, gpu_serve included")
    concurrency = [int(n) for n in args.concurrency.split(",")]
    if min(concurrency) < 1 or args.requests < 1 or args.rounds < 1 or args.max_batch_size < 1:
        parser.error("every N, --requests, --rounds and --max-batch-size must be at least 1")

    import numpy as np
    import torch

    from gpu_train.export import export_example_model

    if args.device == "cuda" and not torch.cuda.is_available():
        print(f"serve_gpu --device cuda: torch {torch.__version__} sees no CUDA device", file=sys.stderr)
        return 2
    left_out = missing_peers(names)
    names = [n for n in names if n not in left_out]
    for name, why in left_out.items():
        print(f"serve_gpu: leaving out {name}: {why}", flush=True)
    arch, width, size, classes = MODELS[args.model]
    print(f"serve_gpu: {arch} {size}px {args.dtype} on {args.device}; servers {', '.join(names)}; "
          f"N = {args.concurrency}, {args.rounds} x {args.requests} requests", flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="serve-gpu-") as tmp:
        work = Path(tmp)
        tarball = export_example_model(work / "artifact", arch=arch, width=width, image_size=size, num_classes=classes)
        artifact, model = sp.load_artifact(str(tarball), str(work / "reference"))
        model = model.to("cpu").float()
        params_m = sum(p.numel() for p in model.parameters()) / 1e6
        pixels = np.random.default_rng(1).integers(0, 256, (1, 3, size, size), dtype=np.uint8)
        npy = sp.npy_bytes(pixels)
        reference = artifact.predict_fn(artifact.input_fn(npy, sp.NPY), model).numpy()
        python = Path(sys.executable)
        makers: dict[str, Callable[[], sp.Server]] = {
            "gpu_serve": lambda: gpu_serve_server(work, tarball, args, "gpu_serve"),
            "per_request": lambda: gpu_serve_server(work, tarball, args, "per_request"),
            "litserve": lambda: sp.litserve_server(
                work, tarball, args.device, python, 1, args.max_batch_size, args.max_batch_delay_ms, args.dtype
            ),
            "torchserve": lambda: sp.torchserve_server(
                work, tarball, args.device, python, 1, args.max_batch_size, args.max_batch_delay_ms, args.dtype
            ),
        }
        servers: dict[str, sp.Server] = {}
        started = time.monotonic()
        try:
            for name in names:
                servers[name] = makers[name]().start()
            for srv in servers.values():
                srv.wait_ready(npy)
            print(f"all {len(servers)} servers answer after {time.monotonic() - started:.0f} s", flush=True)
            devices = {name: str(sp.ready_record(srv)["device"]) for name, srv in servers.items()}
            wrong = {n: d for n, d in devices.items() if not d.startswith(args.device)}
            if wrong:
                raise SystemExit(f"serve_gpu: servers not on {args.device}: {wrong}")
            deviations = {}
            for name, srv in servers.items():
                status, answer = sp.post(srv, npy, sp.NPY)
                if status != 200:
                    raise SystemExit(f"serve_gpu: {name} answered {status}: {answer[:300]!r}")
                deviations[name] = deviation(answer, reference)
            bodies = {name: [srv.request(npy, sp.NPY)] for name, srv in servers.items()}
            cells: dict[str, list[sp.Cell]] = {name: [] for name in servers}
            for n in concurrency:
                for name, cell in sp.measure(servers, bodies, n, args.requests, args.rounds, args.warmup).items():
                    cells[name].append(cell)
        finally:
            for srv in servers.values():
                srv.stop()
    info = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "CPU",
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda or "-",
        "versions": {k: v for k, v in sp.venv_versions(python, ("litserve", "torchserve")).items() if v},
        "model": f"{arch} {size}x{size}, {classes} classes",
        "params_m": params_m,
        "shape": tuple(pixels.shape),
        "npy_bytes": len(npy),
        "deviation": deviations,
    }
    markdown, missed = render(cells, info, args, left_out)
    print(markdown, flush=True)
    if args.summary:
        summary = {"missed": missed, "left_out": left_out, "device": info["device"]}
        Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
    if not args.no_write:
        curves = [
            LoadCurve(LABELS[name], [c.concurrency for c in row], [c.throughput for c in row],
                      [c.pct(50) for c in row], [c.pct(99) for c in row], spread=[c.spread for c in row])
            for name, row in cells.items()
        ]  # fmt: skip
        title = f"{arch} {args.dtype}, {info['device']}: gpu_serve vs one per forward vs peers"
        plot_load_curves(curves, PLOT, title, "requests/s (median, min-max of rounds)")
        write_section(SECTION, markdown)
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except RuntimeError as exc:  # a server that would not start or stopped answering
        print(f"serve_gpu: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
