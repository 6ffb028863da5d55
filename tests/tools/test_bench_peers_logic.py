"""benchmarks.loader_peers and benchmarks._peers: the pure logic of the loader comparison (shard sizes, round
order, best-of-epochs, medians and spreads, targets, output checks, the peer venv's pins and the child protocol).

The peers themselves (WebDataset, MosaicML Streaming, LitData) are not installed in the project's environment and
are not exercised here: ``python -m benchmarks.loader_peers --quick`` is their smoke test.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from typing import Any

import pytest

from benchmarks import _peers
from benchmarks.loader_peers import (
    MAX_SHARD_BYTES,
    MIN_SHARD_BYTES,
    RoundResult,
    Spread,
    best_of_epochs,
    check_outputs,
    loaders_for,
    round_order,
    shard_target_bytes,
    summarize,
    targets,
)


def test_shard_size_caps_at_128_mb_and_gives_each_worker_four_shards() -> None:
    assert shard_target_bytes(3_000_000_000, 2) == MAX_SHARD_BYTES
    assert shard_target_bytes(300_000_000, 2) == 37_500_000
    assert shard_target_bytes(300_000_000, 0) == 75_000_000  # no workers: the main process reads 4 shards
    assert shard_target_bytes(1000, 2) == MIN_SHARD_BYTES
    with pytest.raises(ValueError, match="total_bytes=0"):
        shard_target_bytes(0, 2)


def test_the_what_if_runs_on_pre_decoded_data_only() -> None:
    assert loaders_for("decoded") == ("shard", "webdataset", "mds", "litdata", "naive")
    assert loaders_for("decoded", what_if=True) == ("shard", "webdataset", "mds", "litdata", "naive", _peers.HELD)
    assert loaders_for("jpeg", what_if=True) == ("shard", "webdataset", "mds", "litdata", "naive")


def test_round_order_puts_every_loader_in_every_position() -> None:
    names = ["a", "b", "c"]
    orders = [round_order(names, r) for r in range(3)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert round_order(names, 4) == ["b", "c", "a"]
    assert round_order([], 2) == []


def test_spread_is_median_and_range() -> None:
    spread = Spread.of([3.0, 1.0, 10.0, 2.0])
    assert (spread.median, spread.low, spread.high) == (2.5, 1.0, 10.0)
    assert spread.show(1) == "2.5 (1.0-10.0)"
    assert Spread.of([0.55]).show(0, 100, "%") == "55%"
    with pytest.raises(ValueError, match="no values"):
        Spread.of([])


def _epochs(*pairs: tuple[float, float], samples: int = 1000) -> list[dict[str, Any]]:
    return [{"seconds": s, "cpu_seconds": c, "main_cpu_seconds": c / 4, "samples": samples} for s, c in pairs]


def test_best_of_epochs_skips_the_warm_up_and_takes_each_metric_at_its_best() -> None:
    # warm-up fastest of all (must be ignored); epoch 1 fastest wall, epoch 2 least CPU.
    result = best_of_epochs(0, "decoded", "shard", 150_000_000, 6000.0, _epochs((0.1, 0.1), (0.5, 1.0), (1.0, 0.8)))
    assert result.samples == 1000
    assert result.samples_per_sec == pytest.approx(2000.0)
    assert result.samples_per_cpu_sec == pytest.approx(1250.0)
    assert result.busy_cores == pytest.approx(2.0)  # of the fastest epoch
    assert result.main_share == pytest.approx(0.25)
    assert result.mb_per_sec == pytest.approx(300.0)
    assert result.of_cat == pytest.approx(0.05)
    with pytest.raises(ValueError, match="no timed epoch"):
        best_of_epochs(0, "decoded", "shard", 1, 1.0, _epochs((1.0, 1.0)))


def _result(
    round_index: int, variant: str, loader: str, rate: float, per_cpu: float, cat: float = 1000.0
) -> RoundResult:
    return RoundResult(round_index, variant, loader, 100, 100_000_000, rate, per_cpu, 1.0, 0.5, cat)


def test_summary_rows_follow_variant_and_loader_order_with_medians() -> None:
    results = [
        _result(0, "jpeg", "naive", 10, 5),
        _result(0, "decoded", "mds", 100, 50),
        _result(1, "decoded", "mds", 300, 70),
        _result(2, "decoded", "mds", 200, 60),
        _result(0, "decoded", "shard", 900, 400),
    ]
    rows = summarize(results)
    assert [(r.variant, r.loader) for r in rows] == [("decoded", "shard"), ("decoded", "mds"), ("jpeg", "naive")]
    mds = rows[1]
    assert (mds.samples_per_sec.median, mds.samples_per_sec.low, mds.samples_per_sec.high) == (200, 100, 300)
    assert mds.per_core.median == 60
    assert mds.mb_per_sec.median == pytest.approx(200.0)  # 200 samples/s x 1 MB per sample


def test_targets_are_paired_per_round_and_judged_on_the_median() -> None:
    results = []
    # Shard loader: 6 MB/s of a 10 MB/s cat (60%); 30x the naive JPEG loader; per CPU-second ahead of the best
    # peer in two rounds of three.
    for r, (shard_cpu, best_peer_cpu) in enumerate([(500, 400), (500, 600), (500, 450)]):
        results += [
            _result(r, "decoded", "shard", 6.0, shard_cpu, cat=10.0),
            _result(r, "decoded", "webdataset", 3.0, best_peer_cpu),
            _result(r, "decoded", "mds", 3.0, 100),
            _result(r, "decoded", "naive", 1.0, 999_999),  # the floor is not a peer for the per-core target
            _result(r, "jpeg", "naive", 0.2, 1),
        ]
    by_name = {t.name.split(" / ")[1]: t for t in targets(results)}
    of_cat = by_name["`cat` MB/s of the same shards (pre-decoded)"]
    assert of_cat.met and of_cat.show == "60%"
    vs_naive = by_name["naive per-file JPEG loader samples/s"]
    assert vs_naive.met and vs_naive.value.median == pytest.approx(30.0)
    per_core = by_name["best peer's (pre-decoded)"]
    assert per_core.value.median == pytest.approx(500 / 450)
    assert per_core.value.low == pytest.approx(500 / 600)
    assert per_core.met


def test_targets_not_met_when_the_shard_loader_is_behind() -> None:
    results = [_result(0, "decoded", "shard", 0.4, 100), _result(0, "decoded", "litdata", 1.0, 200)]
    results.append(_result(0, "jpeg", "naive", 0.1, 1))
    assert [t.met for t in targets(results)] == [False, False, False]


def _outcome(
    variant: str, loader: str, *, samples: int = 4, labels: list[int] | None = None, pixels: int = 7
) -> dict[str, Any]:
    return {
        "variant": variant,
        "loader": loader,
        "expected_samples": 4,
        "epochs": [{"samples": samples}, {"samples": samples}],
        "label_counts": labels or [2, 2],
        "pixel_sum": pixels,
    }


def test_output_check_compares_every_loader_with_the_shard_loader() -> None:
    same = [_outcome("decoded", "shard"), _outcome("decoded", "mds"), _outcome("jpeg", "shard")]
    assert check_outputs(same) == []
    problems = check_outputs(
        [
            _outcome("decoded", "shard"),
            _outcome("decoded", "mds", pixels=8),
            _outcome("decoded", "litdata", labels=[3, 1]),
            _outcome("decoded", "webdataset", samples=5),
        ]
    )
    assert problems == [
        "litdata (decoded): label counts differ from the shard loader's",
        "mds (decoded): pixel sum 8 != shard loader's 7",
        "webdataset (decoded): epochs delivered [5] samples, not 4",
    ]


def test_peer_venv_pins_torch_and_the_projects_numpy_pillow_xxhash() -> None:
    versions = {"numpy": "2.4.6", "pillow": "13.0.0", "xxhash": "4.1.0"}
    pinned = _peers.pins(versions.__getitem__)
    assert pinned == {"torch": "2.13.0", **versions}
    assert _peers.constraints_text(pinned) == "numpy==2.4.6\npillow==13.0.0\ntorch==2.13.0\nxxhash==4.1.0\n"

    def missing(name: str) -> str:
        raise PackageNotFoundError(name)

    with pytest.raises(_peers.PeerError, match="has no numpy"):
        _peers.pins(missing)


def test_child_result_is_the_last_result_line() -> None:
    out = 'noise\nRESULT {"a": 1}\nmore noise\nRESULT {"a": 2}\n'
    assert _peers.parse_result(out, "measure x") == {"a": 2}
    with pytest.raises(_peers.PeerError, match="measure x: the child printed no RESULT line"):
        _peers.parse_result("Traceback ...", "measure x")
    with pytest.raises(_peers.PeerError, match="RESULT is list"):
        _peers.parse_result("RESULT [1]", "measure x")


def test_cpu_total_counts_live_processes_and_reaped_children_once() -> None:
    # (user, system, children_user, children_system[, iowait]): the main process (with one reaped child) and a
    # live worker.
    assert _peers.cpu_total([(1.0, 0.5, 0.25, 0.25, 9.0), (2.0, 1.0, 0.0, 0.0)]) == pytest.approx(5.0)
    assert _peers.cpu_total([]) == 0.0
