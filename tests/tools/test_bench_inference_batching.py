"""benchmarks.inference_batching: where each model's report goes and what it says about the model.

The servers themselves are exercised by ``python -m benchmarks.inference_batching --quick`` (and the gpu_serve
tests); this checks the report logic that decides which docs/benchmarks.md section a run rewrites.
"""

from __future__ import annotations

from argparse import Namespace
from pathlib import Path

from benchmarks.inference_batching import RunResult, plot_path, render, section_name


def test_the_mlp_keeps_its_section_and_the_convnet_gets_its_own() -> None:
    assert section_name("mlp") == "inference-batching"
    assert section_name("convnet") == "inference-batching-convnet"
    assert plot_path("mlp").name == "inference_batching.png"
    assert plot_path("convnet").name == "inference_batching_convnet.png"
    # A GPU run keeps its own section and plot, beside the CPU run's.
    assert section_name("mlp", gpu=True) == "inference-batching-gpu"
    assert section_name("convnet", gpu=True) == "inference-batching-convnet-gpu"
    assert plot_path("convnet", gpu=True).name == "inference_batching_convnet_gpu.png"


def _results(base_tput: float, dyn_tput: float) -> dict[str, list[RunResult]]:
    base = RunResult(32, 100, 100 / base_tput, [10.0] * 99 + [40.0])
    dyn = RunResult(32, 100, 100 / dyn_tput, [5.0] * 99 + [20.0], mean_batch=15.5)
    return {"per-request": [base], "dynamic": [dyn]}


def _args(model: str) -> Namespace:
    return Namespace(
        model=model, max_batch_size=32, max_batch_delay_ms=5.0, requests=1500, in_features=512, width=2048,
        depth=4, threads=1, device="auto",
    )  # fmt: skip


def _info() -> dict[str, object]:
    return {
        "date": "2026-11-24", "device": "cpu", "cpus": 2, "torch": "2.13.0+cpu", "threads": 1, "params_m": 0.7,
        "load": "1.0-1.5", "forward_ms": {1: 2.0, 16: 8.0},
    }  # fmt: skip


def test_the_convnet_report_names_the_convnet_its_command_and_the_measured_ratio() -> None:
    markdown, ok = render(_results(100.0, 300.0), _args("convnet"), _info(), 32, {})
    assert markdown.startswith("## Inference: dynamic batching vs one-request-per-forward (convnet, .npy requests)")
    assert "`python -m benchmarks.inference_batching --model convnet --requests 1500`" in markdown
    assert "ResNet-18-style convnet" in markdown and "MLP" not in markdown
    assert "**3.00x** throughput" in markdown and ok


def test_a_ratio_under_2x_is_reported_as_not_met() -> None:
    markdown, ok = render(_results(100.0, 150.0), _args("mlp"), _info(), 32, {})
    assert "(MLP, JSON requests)" in markdown and "MB of weights" in markdown
    assert "**NOT met**" in markdown and not ok


def test_the_command_shown_repeats_a_device_other_than_the_default() -> None:
    args = _args("mlp")
    args.device = "cuda"
    markdown, _ = render(_results(100.0, 300.0), args, _info(), 32, {})
    assert "`python -m benchmarks.inference_batching --device cuda --requests 1500`" in markdown


def test_both_load_benchmarks_draw_their_curves_with_the_shared_plot(tmp_path: Path) -> None:
    from collections import Counter

    from benchmarks.inference_batching import plot
    from benchmarks.serve_peers import Cell, LoadResult
    from benchmarks.serve_peers import plot as peers_plot

    plot(_results(100.0, 300.0), tmp_path / "batching.png", "batching")
    cells = {}
    for name in ("gpu_serve", "torchserve"):
        cell = Cell(name, 8)
        for tput in (90.0, 110.0):
            cell.add(LoadResult(8, 100, 100 / tput, [5.0, 9.0], Counter({200: 100})), 0.1, [4])
        cells[name] = [cell]
    peers_plot(cells, tmp_path / "peers.png", "peers")
    for name in ("batching.png", "peers.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
