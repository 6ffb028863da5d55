"""The dynamic batcher in-process: grouping, row splitting, failure isolation, limits, cancellation."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from serve_models import assert_close

from gpu_serve.batching import BatchResult, DynamicBatcher, split_rows
from gpu_serve.handler import Handler


def make_handler(predict: Callable[[Any, Any], Any]) -> Handler:
    return Handler(
        model=None,
        device=torch.device("cpu"),
        dtype=torch.float32,
        input_fn=lambda body, ctype: body,
        predict_fn=predict,
        output_fn=lambda pred, accept: b"",
    )


class Recorder:
    """predict_fn that doubles its input and records every batch shape it saw.

    With ``hold``, every forward pass sets ``called`` and then waits for ``hold`` to be set: a test decides what
    arrives while a pass runs, instead of racing a sleep.
    """

    def __init__(self, fail_on: float | None = None, delay: float = 0.0, hold: threading.Event | None = None) -> None:
        self.shapes: list[tuple[int, ...]] = []
        self.fail_on = fail_on
        self.delay = delay
        self.hold = hold
        self.called = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, data: torch.Tensor, model: Any) -> torch.Tensor:
        with self.lock:
            self.shapes.append(tuple(data.shape))
        self.called.set()
        if self.hold is not None:
            assert self.hold.wait(10), "the test never released the forward pass"
        if self.delay:
            time.sleep(self.delay)
        if self.fail_on is not None and bool((data == self.fail_on).any()):
            raise ValueError("bad row")
        return data * 2


def run_batcher(predict: Callable[[Any, Any], Any], max_batch: int = 8, delay_s: float = 0.05) -> DynamicBatcher:
    batcher = DynamicBatcher(make_handler(predict), max_batch_size=max_batch, max_batch_delay_s=delay_s)
    batcher.start()
    return batcher


def submit_together(batcher: DynamicBatcher, tensors: list[torch.Tensor]) -> list[Any]:
    """Announce all requests first (as admitted requests being decoded), then submit them."""
    for _ in tensors:
        batcher.expect()
    return [batcher.submit(t) for t in tensors]


def test_concurrent_requests_share_one_forward_and_get_their_own_rows() -> None:
    rec = Recorder()
    batcher = run_batcher(rec)
    try:
        inputs = [torch.full((1, 3), float(i)) for i in range(5)] + [torch.full((2, 3), 9.0)]
        futures = submit_together(batcher, inputs)
        results: list[BatchResult] = [f.result(timeout=5) for f in futures]
    finally:
        batcher.stop(5)
    assert rec.shapes == [(7, 3)]  # one forward pass: 5 single rows and one 2-row request
    for x, res in zip(inputs, results, strict=True):
        assert_close(res.prediction, x * 2)
        assert res.batch_size == 7 and res.batch_requests == 6


def test_batches_respect_the_max_rows_and_group_by_trailing_shape() -> None:
    rec = Recorder()
    batcher = run_batcher(rec, max_batch=4)
    try:
        inputs = [torch.zeros(1, 3) for _ in range(6)] + [torch.zeros(1, 5), torch.zeros(1, 5)]
        for f in submit_together(batcher, inputs):
            f.result(timeout=5)
    finally:
        batcher.stop(5)
    assert sorted(rec.shapes) == [(2, 3), (2, 5), (4, 3)]
    assert all(s[0] <= 4 for s in rec.shapes)


def test_a_failing_request_fails_alone() -> None:
    rec = Recorder(fail_on=-1.0)
    batcher = run_batcher(rec)
    errors: list[str] = []
    batcher._on_error = lambda msg, exc, tb: errors.append(msg)
    try:
        inputs = [torch.ones(1, 2), torch.full((1, 2), -1.0), torch.full((1, 2), 3.0)]
        futures = submit_together(batcher, inputs)
        ok0, bad, ok2 = (f.exception(timeout=5) for f in futures)
    finally:
        batcher.stop(5)
    assert ok0 is None and ok2 is None
    assert isinstance(bad, ValueError)
    assert_close(futures[2].result().prediction, torch.full((1, 2), 6.0))
    assert rec.shapes[0] == (3, 2)  # tried together first, then one by one
    assert errors and "failed on a batch of 3 requests; retrying them one by one" in errors[0]


def test_output_without_batch_dim_falls_back_to_one_request_per_forward() -> None:
    calls: list[int] = []

    def scalar_predict(data: torch.Tensor, model: Any) -> torch.Tensor:
        calls.append(int(data.shape[0]))
        return data.sum()

    # Both are announced, so the batcher takes them together as soon as both are in; the long max delay only keeps
    # a loaded machine from starting a pass with the first alone.
    batcher = run_batcher(scalar_predict, delay_s=2.0)
    try:
        futures = submit_together(batcher, [torch.ones(1, 2), torch.full((1, 2), 2.0)])
        values = [float(f.result(timeout=5).prediction) for f in futures]
    finally:
        batcher.stop(5)
    assert values == [2.0, 4.0]
    assert calls == [2, 1, 1]


def test_no_wait_when_nobody_else_is_coming() -> None:
    rec = Recorder()
    batcher = run_batcher(rec, delay_s=2.0)
    try:
        batcher.expect()
        result = batcher.submit(torch.ones(1, 2)).result(timeout=5)
        counters = batcher.counters()
    finally:
        batcher.stop(5)
    # one batch of the one request, started without waiting (so not for the 2 s max delay either)
    assert (counters.batches, counters.requests, counters.rows) == (1, 1, 1)
    assert (counters.fill_waits, counters.delay_expiries) == (0, 0)
    assert (result.batch_size, result.batch_requests) == (1, 1)


def test_clients_that_come_back_at_once_are_batched_together_not_in_alternating_halves() -> None:
    gate = threading.Event()
    rec = Recorder(hold=gate)
    batcher = run_batcher(rec, max_batch=16, delay_s=0.6)
    try:
        # Four clients that each send their next request when answered: two start, two join meanwhile.
        first = submit_together(batcher, [torch.full((1, 2), float(i)) for i in range(2)])
        assert rec.called.wait(5)  # the first pass is running (held at the gate)
        second = [batcher.submit(torch.full((1, 2), 10.0 + i), expected=False) for i in range(2)]
        gate.set()
        [f.result(timeout=5) for f in first]
        time.sleep(0.1)  # the first two come back a little later
        before = batcher.counters()
        back = [batcher.submit(torch.full((1, 2), 20.0 + i), expected=False) for i in range(2)]
        [f.result(timeout=5) for f in second + back]
        together = batcher.counters()
        # The load drops to one client: its first request waits (at most the max delay) once, then never.
        batcher.submit(torch.ones(1, 2), expected=False).result(timeout=5)
        waited = batcher.counters()
        batcher.submit(torch.ones(1, 2), expected=False).result(timeout=5)
        alone = batcher.counters()
    finally:
        batcher.stop(5)
    # 4 rows were in the batcher at once, so the 2 queued rows waited for the 2 coming back: one pass of 4.
    assert [shape[0] for shape in rec.shapes] == [2, 4, 1, 1]
    assert (alone.batches, alone.requests, alone.rows) == (4, 8, 8)
    # the batch of 4 formed when the 2 came back, not when the 0.6 s max delay ran out
    assert before.delay_expiries == together.delay_expiries == 0
    # the lone client's first request waited once, until the max delay (nobody else was coming) ...
    assert (waited.fill_waits - together.fill_waits, waited.delay_expiries) == (1, 1)
    # ... and its second did not wait at all
    assert (alone.fill_waits, alone.delay_expiries) == (waited.fill_waits, waited.delay_expiries)


def test_a_request_cancelled_while_queued_is_skipped() -> None:
    gate = threading.Event()
    rec = Recorder(hold=gate)
    batcher = run_batcher(rec, max_batch=1)
    try:
        first = batcher.submit(torch.ones(1, 2), expected=False)
        assert rec.called.wait(5)  # the first pass is running (held at the gate)
        second = batcher.submit(torch.full((1, 2), 5.0), expected=False)
        assert second.cancel()  # still queued behind the first: a timed-out request gives up its place
        gate.set()
        first.result(timeout=5)
        assert batcher.stop(5)  # finishes what is queued: the cancelled request is taken off, not run
        counters = batcher.counters()
    finally:
        batcher.stop(5)
    assert rec.shapes == [(1, 2)]
    assert (counters.batches, counters.requests, counters.rows) == (2, 2, 2)


def test_transform_calls_run_alone_on_the_model_thread() -> None:
    batcher = run_batcher(Recorder())
    try:
        fut = batcher.submit_call(lambda: threading.current_thread().name, expected=False)
        name = fut.result(timeout=5).prediction
    finally:
        batcher.stop(5)
    assert name == "gpu-serve-model"


def test_submit_after_stop_is_refused() -> None:
    batcher = run_batcher(Recorder())
    assert batcher.stop(5)
    with pytest.raises(RuntimeError, match="stopping"):
        batcher.submit(torch.ones(1, 1), expected=False)


def test_split_rows_handles_containers() -> None:
    parts = split_rows({"p": torch.arange(6).view(3, 2), "n": np.arange(3)}, [1, 2])
    assert parts is not None and parts[1]["p"].tolist() == [[2, 3], [4, 5]] and parts[1]["n"].tolist() == [1, 2]
    assert split_rows([torch.zeros(3, 1), torch.ones(3)], [2, 1]) is not None
    assert split_rows(["a", "b", "c"], [2, 1]) == [["a", "b"], ["c"]]
    assert split_rows(torch.zeros(4, 2), [1, 2]) is None
