"""Dynamic batching vs one-request-per-forward, over real HTTP on localhost, in one run.

Two servers of the inference image's code (``python -m gpu_serve serve``) serve the same model side by side:

- ``per-request``: ``GPU_SERVE_MAX_BATCH_SIZE=1``: every request is its own forward pass, which is what the
  SageMaker PyTorch toolkit's default handler does;
- ``dynamic``: ``GPU_SERVE_MAX_BATCH_SIZE=32`` (``--max-batch-size``), ``GPU_SERVE_MAX_BATCH_DELAY_MS=5``.

For each concurrency N (default 1, 8, 32, 64) an asyncio load generator in this process keeps N keep-alive
connections busy until a fixed number of requests is answered, first against one server, then the other
(interleaved, so that machine noise hits both alike). It reports throughput, p50 and p99 latency (client
side), and the mean batch size from the server's ``batch`` log lines.

The model is an MLP (512 -> 4 x 2048 -> 10, 13.6 M parameters, fp32): one sample's forward pass reads all
54 MB of weights, the memory-bound regime in which a GPU serves small batches too, and which batching
amortises.

Run: ``python -m benchmarks.inference_batching`` (``--help`` for options). Writes the ``inference-batching``
section of docs/benchmarks.md and docs/img/inference_batching.png unless ``--no-write``. About 3 minutes on
2 cores; ``--quick`` (N = 1 and 32, fewer requests, no thread ablation, docs/ untouched) under a minute.

``--layouts`` is a different A/B, printed only: the same dynamic-batching settings in both servers, the model
on a thread of the HTTP process (``GPU_SERVE_MODEL_PROCESSES=0``) against a model process (``auto``, the
default); ``--model convnet`` serves the ResNet-18-style convnet of benchmarks/serve_peers.py (width 16,
32x32, one ``.npy`` sample per request) instead of the MLP. Each N runs ``--rounds`` interleaved rounds; the
table has the median throughput of each server and the median of the per-round ratios, with the 1-minute
load average.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._report import LoadCurve, plot_load_curves, write_section
from gpu_serve.process import ServerProcess

ROOT = Path(__file__).resolve().parent.parent

SECTION = "inference-batching"
QUICK_REQUESTS = 300  # --quick: requests per (server, N)
PLOT = ROOT / "docs" / "img" / "inference_batching.png"
NPY = "application/x-npy"


def section_name(model: str, gpu: bool = False) -> str:
    """The docs/benchmarks.md section of a ``--model`` (the MLP's keeps its original name); a run on a GPU
    writes its own section beside the CPU run's."""
    return SECTION + ("" if model == "mlp" else f"-{model}") + ("-gpu" if gpu else "")


def plot_path(model: str, gpu: bool = False) -> Path:
    stem = PLOT.stem + ("" if model == "mlp" else f"_{model}") + ("_gpu" if gpu else "")
    return PLOT.with_name(stem + PLOT.suffix)


HANDLER = '''"""Benchmark model: a wide MLP whose single-sample forward pass is bound by reading its weights."""
import json
import os

import torch


def build(cfg):
    layers = [torch.nn.Linear(cfg["in_features"], cfg["width"]), torch.nn.ReLU()]
    for _ in range(cfg["depth"] - 1):
        layers += [torch.nn.Linear(cfg["width"], cfg["width"]), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(cfg["width"], cfg["num_classes"]))
    return torch.nn.Sequential(*layers)


def model_fn(model_dir):
    with open(os.path.join(model_dir, "model_config.json")) as f:
        cfg = json.load(f)
    model = build(cfg)
    model.load_state_dict(torch.load(os.path.join(model_dir, "model.pt"), map_location="cpu"))
    return model
'''


def build_model_dir(root: Path, in_features: int, width: int, depth: int, num_classes: int = 10) -> Path:
    """Write model.pt (random weights, fixed seed), model_config.json and code/inference.py."""
    import torch

    model_dir = root / "model"
    (model_dir / "code").mkdir(parents=True, exist_ok=True)
    cfg = {
        "in_features": in_features,
        "width": width,
        "depth": depth,
        "num_classes": num_classes,
        "input_shape": [in_features],
    }
    (model_dir / "model_config.json").write_text(json.dumps(cfg))
    (model_dir / "code" / "inference.py").write_text(HANDLER)
    namespace: dict[str, Any] = {}
    exec(HANDLER, namespace)
    torch.manual_seed(0)
    torch.save(namespace["build"](cfg).state_dict(), model_dir / "model.pt")
    return model_dir


# -- load generator -----------------------------------------------------------------------------------------
@dataclass
class RunResult:
    concurrency: int
    requests: int
    seconds: float
    latencies_ms: list[float]
    statuses: Counter[int] = field(default_factory=Counter)
    mean_batch: float = 0.0

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds

    def pct(self, q: float) -> float:
        data = sorted(self.latencies_ms)
        if not data:
            return float("nan")
        k = min(len(data) - 1, max(0, round(q / 100.0 * (len(data) - 1))))
        return data[k]


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bool, bytes]:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("server closed the connection")
    status = int(status_line.split()[1])
    length = 0
    close = False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        key = name.strip().lower()
        if key == "content-length":
            length = int(value)
        elif key == "connection" and value.strip().lower() == "close":
            close = True
    body = await reader.readexactly(length) if length else b""
    return status, close, body


async def _load(host: str, port: int, request: bytes, concurrency: int, total: int) -> RunResult:
    remaining = [total]
    latencies: list[float] = []
    statuses: Counter[int] = Counter()

    async def client() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while remaining[0] > 0:
                remaining[0] -= 1
                t0 = time.perf_counter()
                writer.write(request)
                status, close, _ = await _read_response(reader)
                latencies.append((time.perf_counter() - t0) * 1000.0)
                statuses[status] += 1
                if close:
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
        finally:
            writer.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return RunResult(concurrency, total, time.perf_counter() - t0, latencies, statuses)


def measure(
    servers: dict[str, ServerProcess],
    n: int,
    requests: int,
    rounds: int,
    body: bytes,
    content_type: str = "application/json",
) -> dict[str, RunResult]:
    """``requests`` requests from ``n`` clients against each server, split into interleaved rounds."""
    per_round = max(1, requests // rounds)
    for srv in servers.values():  # warm-up: connections, allocator, first batches
        request = make_request("127.0.0.1", srv.port, body, content_type)
        asyncio.run(_load("127.0.0.1", srv.port, request, n, min(200, per_round)))
    merged = {name: RunResult(n, 0, 0.0, []) for name in servers}
    rows = {name: [0, 0] for name in servers}
    for rnd in range(rounds):
        # Alternate which server goes first, so that drift in machine load hits both alike.
        order = list(servers.items()) if rnd % 2 == 0 else list(reversed(servers.items()))
        for name, srv in order:
            mark = len(srv.events("batch"))
            request = make_request("127.0.0.1", srv.port, body, content_type)
            run = asyncio.run(_load("127.0.0.1", srv.port, request, n, per_round))
            batches = srv.events("batch")[mark:]
            rows[name][0] += sum(int(b["batch_size"]) for b in batches)
            rows[name][1] += len(batches)
            m = merged[name]
            m.requests += run.requests
            m.seconds += run.seconds
            m.latencies_ms += run.latencies_ms
            m.statuses.update(run.statuses)
    for name, run in merged.items():
        run.mean_batch = rows[name][0] / rows[name][1] if rows[name][1] else 0.0
        bad = {s: c for s, c in run.statuses.items() if s != 200}
        print(
            f"{name:>30} N={n:<3} {run.throughput:8.1f} req/s  p50 {run.pct(50):7.2f} ms  "
            f"p99 {run.pct(99):7.2f} ms  mean batch {run.mean_batch:5.1f}" + (f"  non-200: {bad}" if bad else ""),
            flush=True,
        )
        if bad:
            raise SystemExit(f"{name} N={n}: non-200 responses {bad}")
    return merged


def forward_costs(batches: list[dict[str, Any]]) -> dict[int, float]:
    """Median forward-pass time (ms) per batch size, from the servers' ``batch`` log lines."""
    by_size: dict[int, list[float]] = {}
    for b in batches:
        by_size.setdefault(int(b["batch_size"]), []).append(float(b["model_latency_ms"]))
    return {size: sorted(v)[len(v) // 2] for size, v in sorted(by_size.items()) if len(v) >= 5}


def make_request(host: str, port: int, body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"POST /invocations HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: {content_type}\r\n"
        f"Accept: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def predict_once(srv: ServerProcess, body: bytes, content_type: str = "application/json") -> list[list[float]]:
    import urllib.request

    req = urllib.request.Request(
        srv.url + "/invocations",
        data=body,
        headers={"Content-Type": content_type, "Accept": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        answer = json.loads(resp.read())
    # The MLP's handler answers a bare list; an exported artifact {"predictions": [...]}.
    return list(answer["predictions"] if isinstance(answer, dict) else answer)


# -- report -------------------------------------------------------------------------------------------------
def plot(results: dict[str, list[RunResult]], path: Path, title: str) -> None:
    curves = [
        LoadCurve(
            label,
            [r.concurrency for r in runs],
            [r.throughput for r in runs],
            [r.pct(50) for r in runs],
            [r.pct(99) for r in runs],
        )
        for label, runs in results.items()
    ]
    plot_load_curves(curves, path, title, "throughput (requests/s)")


def forward_line(costs: dict[int, float]) -> str:
    if 1 not in costs or len(costs) < 2:
        return ""
    big = max(costs)
    return (
        f"Median forward pass in this run: {costs[1]:.1f} ms for 1 row, {costs[big]:.1f} ms for {big} rows "
        f"({costs[big] / costs[1]:.1f}x the time for {big}x the rows)."
    )


def render(
    results: dict[str, list[RunResult]],
    args: argparse.Namespace,
    info: dict[str, Any],
    target_n: int,
    ablation: dict[str, Any],
) -> tuple[str, bool]:
    base, dyn = results["per-request"], results["dynamic"]
    convnet = args.model == "convnet"
    flags = f" --model {args.model}" if convnet else ""
    if args.max_batch_size != 32:
        flags += f" --max-batch-size {args.max_batch_size}"
    if args.device != "auto":
        flags += f" --device {args.device}"
    model_text = (
        f"ResNet-18-style convnet, width 16, 32x32 input, 10 classes ({info['params_m']:.2f} M parameters, fp32; "
        "the model of the serve-peers benchmark below, exported by `gpu_train.export`), one `.npy` sample "
        "(1, 3, 32, 32) per request, JSON response."
        if convnet
        else f"MLP {args.in_features} -> {args.depth} x {args.width} -> 10 ({info['params_m']:.1f} M parameters, "
        "fp32), JSON request of one sample, JSON response."
    )
    why = (
        "Why: a convnet this small pays a fixed cost per operator (dispatch, allocation), which a batch pays "
        "once for all its rows. "
        f"{forward_line(info['forward_ms'])} "
        if convnet
        else f"Why: at batch 1 every request re-reads all {info['params_m'] * 4:.0f} MB of weights; a batch reads "
        f"them once for all its rows (a GEMM instead of many GEMVs). {forward_line(info['forward_ms'])} "
    )
    lines = [
        "## Inference: dynamic batching vs one-request-per-forward"
        + (" (convnet, .npy requests)" if convnet else " (MLP, JSON requests)"),
        "",
        f"Command: `python -m benchmarks.inference_batching{flags} --requests {args.requests}` "
        f"(measured {info['date']}, {info['device']}, {info['cpus']} CPUs, torch {info['torch']}, "
        f"`GPU_SERVE_NUM_THREADS={info['threads']}`; 1-minute load average {info['load']} at start and end: "
        "the machine is shared, so compare the columns of a row, which were measured back to back).",
        "",
        f"Model: {model_text} Same server code and model in both columns: "
        f"`per-request` is `GPU_SERVE_MAX_BATCH_SIZE=1` (what the SageMaker PyTorch toolkit's default handler "
        f"does), `dynamic` is `GPU_SERVE_MAX_BATCH_SIZE={args.max_batch_size}`, "
        f"`GPU_SERVE_MAX_BATCH_DELAY_MS={args.max_batch_delay_ms:g}`. Each N sends {args.requests} requests "
        "over N keep-alive connections from an asyncio client on the same machine; the two servers are "
        "measured back to back for each N. Latency is client-side.",
        "",
        "| N | per-request req/s | dynamic req/s | throughput ratio | per-request p50 / p99 ms "
        "| dynamic p50 / p99 ms | p99 ratio | mean batch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b, d in zip(base, dyn, strict=True):
        lines.append(
            f"| {b.concurrency} | {b.throughput:.0f} | {d.throughput:.0f} | **{d.throughput / b.throughput:.2f}x** "
            f"| {b.pct(50):.1f} / {b.pct(99):.1f} | {d.pct(50):.1f} / {d.pct(99):.1f} "
            f"| {d.pct(99) / b.pct(99):.2f} | {d.mean_batch:.1f} |"
        )
    b32 = next(r for r in base if r.concurrency == target_n)
    d32 = next(r for r in dyn if r.concurrency == target_n)
    ratio = d32.throughput / b32.throughput
    ok = ratio >= 2.0 and d32.pct(99) <= b32.pct(99)
    lines += [
        "",
        f"Target at N={target_n}: throughput >= 2x and p99 no worse than per-request. "
        f"Measured: **{ratio:.2f}x** throughput, p99 {d32.pct(99):.1f} ms vs {b32.pct(99):.1f} ms: "
        f"**{'met' if ok else 'NOT met'}**.",
        "",
        why + "The HTTP and decoding work per request stays, which is what bounds the dynamic server here "
        "(the HTTP process's event loop and the model process's decoding share the core the forward pass "
        "leaves). At N=1 there is nothing to batch: both servers do the same "
        "work (the model thread does not wait when no other request is being decoded, so batching adds no "
        "delay), and any difference in that row is noise. "
        "At N=8 the model thread waits (at most the batch delay) until as many rows are queued as the "
        "server held at its busiest since the previous batch, so clients that send again as soon as they are "
        "answered form batches of about N instead of two alternating smaller ones.",
        "",
        f"![dynamic batching vs per-request](img/{plot_path(args.model, info['device'] != 'cpu').name})",
    ]
    if ablation:
        tuned, default = ablation["dynamic"], ablation["dynamic, torch default threads"]
        lines[-1:-1] = [
            f"Tuning: both servers run with `GPU_SERVE_NUM_THREADS={args.threads}`. With torch's default "
            f"({ablation['default_threads']['torch_threads']} intra-op threads on {info['cpus']} cores) the "
            f"dynamic server made {default.throughput:.0f} req/s at N={target_n} (p99 {default.pct(99):.0f} ms) "
            f"instead of {tuned.throughput:.0f} req/s (p99 {tuned.pct(99):.0f} ms), measured back to back: "
            f"{default.throughput / tuned.throughput:.2f}x the throughput and {default.pct(99) / tuned.pct(99):.2f}x "
            "the p99 of one thread"
            + (
                ". OpenMP's intra-op workers spin on every core and compete with the decoding and HTTP work of "
                "the same requests."
                if default.pct(99) > 1.2 * tuned.pct(99) or default.throughput < 0.9 * tuned.throughput
                else ". Here a second thread shortens the passes more than it takes from decoding: measure your "
                "own model before pinning one thread."
                if default.throughput > 1.1 * tuned.throughput
                else ": no difference worth a setting at this model size."
            )
            + " The per-request server runs with the same setting.",
            "",
        ]
    if info["device"] == "cpu":
        lines += [
            "",
            "GPU: this run is CPU-only. On a GPU machine run the same command with `--device cuda` "
            "(target there: >= 5x at N=32).",
        ]
    return "\n".join(lines), ok


# -- --layouts: model on a thread of the HTTP process vs a model process -------------------------------------------
LAYOUTS = {"in-process": "0", "model process": "auto"}


def convnet_model(root: Path) -> tuple[Path, bytes, float]:
    """The serve-peers convnet exported by ``gpu_train.export``, one ``.npy`` sample (1, 3, 32, 32) and the
    model's parameters in millions."""
    import io

    import numpy as np

    from benchmarks.serve_peers import ARCH, IMAGE_SIZE, NUM_CLASSES, WIDTH, load_artifact
    from gpu_train.export import export_example_model

    tarball = export_example_model(
        root / "artifact", arch=ARCH, width=WIDTH, image_size=IMAGE_SIZE, num_classes=NUM_CLASSES
    )
    _, model = load_artifact(str(tarball), str(root / "reference"))
    params_m = sum(p.numel() for p in model.parameters()) / 1e6
    sample = np.random.default_rng(1).standard_normal((1, 3, IMAGE_SIZE, IMAGE_SIZE)).astype(np.float32)
    buffer = io.BytesIO()
    np.save(buffer, sample)
    return tarball.parent / "model", buffer.getvalue(), params_m


def measure_rounds(
    servers: dict[str, ServerProcess], n: int, per_round: int, rounds: int, body: bytes, content_type: str
) -> dict[str, list[RunResult]]:
    """``rounds`` interleaved rounds of ``per_round`` requests from ``n`` clients; one RunResult per round."""
    requests = {name: make_request("127.0.0.1", srv.port, body, content_type) for name, srv in servers.items()}
    for name, srv in servers.items():  # warm-up: connections, allocator, first batches
        asyncio.run(_load("127.0.0.1", srv.port, requests[name], n, min(200, per_round)))
    out: dict[str, list[RunResult]] = {name: [] for name in servers}
    names = list(servers)
    for rnd in range(rounds):
        for name in names[rnd % len(names) :] + names[: rnd % len(names)]:  # rotate who goes first
            srv = servers[name]
            run = asyncio.run(_load("127.0.0.1", srv.port, requests[name], n, per_round))
            bad = {s: c for s, c in run.statuses.items() if s != 200}
            if bad:
                raise SystemExit(f"{name} N={n}: non-200 responses {bad}")
            out[name].append(run)
    return out


def run_layouts(args: argparse.Namespace, concurrency: list[int]) -> int:
    """Print the in-process vs model-process A/B table (see the module docstring)."""
    import statistics

    base, alt = LAYOUTS
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "convnet":
            model_dir, body, _ = convnet_model(Path(tmp))
            content_type, label = "application/x-npy", "ResNet-18 w16 32x32 convnet, one .npy sample"
        else:
            model_dir = build_model_dir(Path(tmp), args.in_features, args.width, args.depth)
            body = json.dumps([[0.5] * args.in_features]).encode()
            content_type, label = "application/json", f"MLP {args.in_features} -> {args.depth} x {args.width}"
        env = {
            "GPU_SERVE_DEVICE": args.device,
            "GPU_SERVE_METRICS_INTERVAL_S": "0",
            "GPU_SERVE_MAX_BATCH_SIZE": str(args.max_batch_size),
            "GPU_SERVE_MAX_BATCH_DELAY_MS": str(args.max_batch_delay_ms),
        }
        if args.threads:
            env["GPU_SERVE_NUM_THREADS"] = env["OMP_NUM_THREADS"] = str(args.threads)
        servers = {
            name: ServerProcess(model_dir, env={**env, "GPU_SERVE_MODEL_PROCESSES": value})
            for name, value in LAYOUTS.items()
        }
        rows = []
        load_start = os.getloadavg()[0]
        try:
            for srv in servers.values():
                srv.start()
            for n in concurrency:
                runs = measure_rounds(servers, n, args.requests, args.rounds, body, content_type)
                load = os.getloadavg()[0]
                ratios = [b.throughput / a.throughput for a, b in zip(runs[base], runs[alt], strict=True)]
                row = (
                    n,
                    statistics.median(r.throughput for r in runs[base]),
                    statistics.median(r.throughput for r in runs[alt]),
                    statistics.median(ratios),
                    min(ratios),
                    max(ratios),
                    statistics.median(r.pct(50) for r in runs[base]),
                    statistics.median(r.pct(50) for r in runs[alt]),
                    load,
                )
                rows.append(row)
                print(
                    f"N={n:<3} {base} {row[1]:7.1f} req/s  {alt} {row[2]:7.1f} req/s  ratio {row[3]:.2f} "
                    f"({row[4]:.2f}-{row[5]:.2f})  load {load:.1f}",
                    flush=True,
                )
        finally:
            for srv in servers.values():
                srv.stop()
    lines = [
        f"Layouts A/B: {label}; `GPU_SERVE_MAX_BATCH_SIZE={args.max_batch_size}`, "
        f"`GPU_SERVE_MAX_BATCH_DELAY_MS={args.max_batch_delay_ms:g}`, `GPU_SERVE_NUM_THREADS={args.threads}`; "
        f"{args.rounds} interleaved rounds of {args.requests} requests per server and N; "
        f"{os.cpu_count()} CPUs, 1-minute load average {load_start:.1f} at start.",
        "",
        f"| N | {base} req/s (median) | {alt} req/s (median) | ratio (median of rounds) | ratio min-max "
        f"| {base} p50 ms | {alt} p50 ms | load avg |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for n, ra, rb, ratio, lo, hi, pa, pb, load in rows:
        lines.append(
            f"| {n} | {ra:.0f} | {rb:.0f} | **{ratio:.2f}x** | {lo:.2f}-{hi:.2f} | {pa:.1f} | {pb:.1f} | {load:.1f} |"
        )
    print("\n".join(lines))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1500, help="requests per (server, N)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds the requests are split into")
    parser.add_argument("--concurrency", default="1,8,32,64", help="comma-separated N values")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--max-batch-delay-ms", type=float, default=5.0)
    parser.add_argument("--in-features", type=int, default=512)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--device", default="auto", help="GPU_SERVE_DEVICE of both servers")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="GPU_SERVE_NUM_THREADS of the servers (default: 1; 0 = torch's default, one per core)",
    )
    parser.add_argument("--no-ablation", action="store_true", help="skip the run with torch's default thread count")
    parser.add_argument("--no-write", action="store_true", help="print the report only")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run: N = 1 and 32, {QUICK_REQUESTS} requests in 1 round, no ablation; implies --no-write "
        "and exits 0 whether or not the targets are met",
    )
    parser.add_argument(
        "--layouts",
        action="store_true",
        help="A/B of GPU_SERVE_MODEL_PROCESSES=0 (model on a thread of the HTTP process) vs auto (a model "
        "process), both with dynamic batching; prints a table, never writes docs/",
    )
    parser.add_argument(
        "--model",
        choices=("mlp", "convnet"),
        default="mlp",
        help="the MLP (JSON requests) or the serve-peers ResNet-18 w16 convnet (.npy requests); the convnet's "
        "report goes to the inference-batching-convnet section",
    )
    args = parser.parse_args(argv)
    if args.layouts:
        if args.quick:
            args.requests, args.rounds, args.concurrency = QUICK_REQUESTS, 2, "1,32"
        return run_layouts(args, [int(n) for n in args.concurrency.split(",")])
    if args.quick:
        args.requests, args.rounds, args.concurrency = QUICK_REQUESTS, 1, "1,32"
        args.no_ablation, args.no_write = True, True
    print(
        f"inference_batching: two servers, N = {args.concurrency}, {args.requests} requests per server and N"
        + ("" if args.no_write else f"; rewrites its {section_name(args.model)}[-gpu] section of docs/benchmarks.md"),
        flush=True,
    )
    concurrency = [int(n) for n in args.concurrency.split(",")]
    target_n = 32 if 32 in concurrency else concurrency[-1]

    import torch

    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        if args.model == "convnet":
            model_dir, body, params = convnet_model(Path(tmp))
            content_type = NPY
        else:
            model_dir = build_model_dir(Path(tmp), args.in_features, args.width, args.depth)
            params = (args.in_features * args.width + (args.depth - 1) * args.width**2 + args.width * 10) / 1e6
            sample = torch.randn(1, args.in_features, generator=torch.Generator().manual_seed(1))
            body = json.dumps([[round(v, 5) for v in sample[0].tolist()]]).encode()
            content_type = "application/json"
        common = {"GPU_SERVE_DEVICE": args.device, "GPU_SERVE_METRICS_INTERVAL_S": "0"}
        if args.threads:
            common["GPU_SERVE_NUM_THREADS"] = str(args.threads)
        else:
            args.threads = None
        dynamic_env = {
            **common,
            "GPU_SERVE_MAX_BATCH_SIZE": str(args.max_batch_size),
            "GPU_SERVE_MAX_BATCH_DELAY_MS": str(args.max_batch_delay_ms),
        }
        servers = {
            "per-request": ServerProcess(model_dir, env={**common, "GPU_SERVE_MAX_BATCH_SIZE": "1"}),
            "dynamic": ServerProcess(model_dir, env=dynamic_env),
        }
        ablate = not args.no_ablation and args.threads is not None and args.device in ("auto", "cpu")
        try:
            print("starting the per-request and the dynamic-batching server ...", flush=True)
            for srv in servers.values():
                srv.start()
            ready = servers["dynamic"].events("ready")[0]
            # Same answer from both (batched kernels may round differently in the last bits).
            a = torch.tensor(predict_once(servers["per-request"], body, content_type))
            b = torch.tensor(predict_once(servers["dynamic"], body, content_type))
            if not torch.allclose(a, b, rtol=1e-4, atol=1e-5):
                raise SystemExit(f"servers disagree: {a} vs {b}")
            results: dict[str, list[RunResult]] = {name: [] for name in servers}
            for n in concurrency:
                for name, run in measure(servers, n, args.requests, args.rounds, body, content_type).items():
                    results[name].append(run)
            forward_ms = forward_costs(servers["dynamic"].events("batch") + servers["per-request"].events("batch"))
            ablation: dict[str, Any] = {}
            if ablate:  # the same dynamic server with torch's default thread count, at the target N
                servers["dynamic, torch default threads"] = ServerProcess(
                    model_dir, env={**dynamic_env, "GPU_SERVE_NUM_THREADS": ""}
                ).start()
                pair = {k: servers[k] for k in ("dynamic", "dynamic, torch default threads")}
                ablation = dict(measure(pair, target_n, args.requests, args.rounds, body, content_type))
                ablation["default_threads"] = servers["dynamic, torch default threads"].events("ready")[0]
        finally:
            for srv in servers.values():
                srv.stop()

    info = {
        "date": time.strftime("%Y-%m-%d"),
        "device": ready["device"] if ready["device"] == "cpu" else str(ready.get("cuda_device") or "cuda"),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "threads": ready["torch_threads"],
        "params_m": params,
        "load": f"{min(load_before, os.getloadavg()[0]):.1f}-{max(load_before, os.getloadavg()[0]):.1f}",
        "machine": platform.machine(),
    }
    model_title = "ResNet-18 w16 32px" if args.model == "convnet" else f"MLP {args.depth}x{args.width}"
    title = f"{model_title}, {info['device']}, {info['cpus']} CPUs: dynamic batching vs per-request"
    info["forward_ms"] = forward_ms
    markdown, ok = render(results, args, info, target_n, ablation)
    print(markdown)
    if not args.no_write:
        gpu = info["device"] != "cpu"
        plot(results, plot_path(args.model, gpu), title)
        write_section(section_name(args.model, gpu), markdown)
    return 0 if ok or args.quick else 1


if __name__ == "__main__":
    raise SystemExit(main())
