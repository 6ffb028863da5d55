"""Why TorchServe batching is refused on the stock PyTorch inference DLC, shown with the DLC's own handler code.

The DLC's handler service is ``sagemaker_inference``'s ``DefaultHandlerService`` around a ``Transformer``
(sagemaker-pytorch-inference 2.0.25 ``HandlerService`` passes ``Transformer(DefaultPytorchInferenceHandler())``;
this test's user module defines all four handler functions, so the default handler is never used). The real
code of the pip package ``sagemaker-inference`` (requirements-dev.txt) receives a batch the way TorchServe hands
it over: ``handle(data, context)`` with one ``{"body": ...}`` per request and, in ``context.request_processor``,
one request processor per request holding its headers (``ts/service.py`` ``retrieve_data_for_inference`` and
``ts/context.py`` of torchserve 0.12.0, mirrored by :class:`TorchServeContext` below). What TorchServe does
with the returned list is :func:`torchserve_statuses` (``Service.predict``). The rule these facts back is
``gpu_constructs.dlc.dlc_batching_problem`` (the construct, the config loader and the ``DlcTorchServeBatching``
rule of the pack). The platform's own server, gpu_serve, answers the same two requests each on its own.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from container_helpers import TorchServeContext
from serve_http import invoke, npy
from serve_models import assert_close, reference_model

from gpu_serve.process import ServerProcess

USER_MODULE = "dlc_toolkit_user_code"
USER_CODE = """
import json

PREDICT_CALLS = []
SEEN_CONTENT_TYPES = []


def model_fn(model_dir):
    return lambda rows: [sum(r) for r in rows]


def input_fn(body, content_type):
    SEEN_CONTENT_TYPES.append(content_type)
    if content_type == "application/json":
        return json.loads(body)
    if content_type == "text/csv":
        return [[float(x) for x in line.split(",")] for line in body.strip().splitlines()]
    raise ValueError(f"unsupported content type {content_type}")


def predict_fn(data, model):
    PREDICT_CALLS.append(len(data))
    return model(data)


def output_fn(prediction, accept):
    return json.dumps(prediction)
"""


def torchserve_statuses(ret: Any, batch_size: int, context: TorchServeContext) -> list[int]:
    """The HTTP status of each request of the batch, as ``ts/service.py`` ``Service.predict`` decides it::

        if not isinstance(ret, list): ... create_predict_response(None, req_id_map, "Invalid model predict output", 503)
        if len(ret) != len(input_batch): ... "number of batch response mismatched", 503)
        return create_predict_response(ret, req_id_map, "Prediction success", 200, context=self.context)

    (in the last case each request gets the status its request processor holds).
    """
    if not isinstance(ret, list) or len(ret) != batch_size:
        return [503] * batch_size
    return [int(p._status_code) for p in context.request_processor]


@pytest.fixture()
def toolkit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh sagemaker-inference ``DefaultHandlerService`` serving the user module above."""
    from sagemaker_inference.default_handler_service import DefaultHandlerService

    (tmp_path / f"{USER_MODULE}.py").write_text(USER_CODE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SAGEMAKER_PROGRAM", f"{USER_MODULE}.py")
    sys.modules.pop(USER_MODULE, None)
    yield DefaultHandlerService(), tmp_path
    sys.modules.pop(USER_MODULE, None)


def run_batch(toolkit: Any, requests: list[tuple[bytes, str]]) -> tuple[Any, TorchServeContext]:
    service, model_dir = toolkit
    context = TorchServeContext(
        model_dir, [{"Content-Type": ctype, "Accept": "application/json"} for _, ctype in requests]
    )
    return service.handle([{"body": body} for body, _ in requests], context), context


def test_toolkit_version_is_the_one_the_rule_quotes() -> None:
    from importlib.metadata import version

    assert version("sagemaker-inference") == "1.10.1"


def test_one_malformed_request_fails_its_neighbour(toolkit: Any) -> None:
    good, malformed = (b"[[1, 2, 3]]", "application/json"), (b"[[1, 2,", "application/json")
    ret, context = run_batch(toolkit, [good, malformed])
    assert isinstance(ret, list) and len(ret) == 1  # one answer for a batch of two
    assert ret[0].startswith("Expecting value")  # the JSON error of request 1 ...
    assert context.request_processor[0]._status_code == 500  # ... reported on request 0, the good one
    assert torchserve_statuses(ret, 2, context) == [503, 503]  # TorchServe fails both
    # alone, the good request is answered
    alone, alone_context = run_batch(toolkit, [good])
    assert alone == ["[6]"] and torchserve_statuses(alone, 1, alone_context) == [200]


def test_request_zeros_content_type_decodes_the_whole_batch(toolkit: Any) -> None:
    ret, context = run_batch(toolkit, [(b"[[1, 2]]", "application/json"), (b"3,4\n", "text/csv")])
    user = sys.modules[USER_MODULE]
    assert user.SEEN_CONTENT_TYPES == ["application/json", "application/json"]  # the CSV body read as JSON
    assert torchserve_statuses(ret, 2, context) == [503, 503]
    # each alone is fine: the CSV request only fails because it shares a batch with a JSON request
    user.SEEN_CONTENT_TYPES.clear()
    csv_alone, _ = run_batch(toolkit, [(b"3,4\n", "text/csv")])
    assert csv_alone == ["[7.0]"] and user.SEEN_CONTENT_TYPES == ["text/csv"]


def test_predict_fn_runs_once_per_request_so_batching_gains_nothing(toolkit: Any) -> None:
    ret, context = run_batch(toolkit, [(b"[[1, 2]]", "application/json"), (b"[[3, 4]]", "application/json")])
    assert ret == ["[3]", "[7]"] and torchserve_statuses(ret, 2, context) == [200, 200]
    assert sys.modules[USER_MODULE].PREDICT_CALLS == [1, 1]  # two forward passes of one row, not one of two
    assert context.request_processor[1]._response_header == {}  # only request 0 gets its content type set


# -- the platform's server: the same two requests, each answered on its own ------------------------------------

ENV = {
    "GPU_SERVE_MAX_BATCH_SIZE": "8",
    "GPU_SERVE_MAX_BATCH_DELAY_MS": "50",
    "GPU_SERVE_NUM_THREADS": "1",
}


@pytest.mark.slow
def test_gpu_serve_answers_both_requests_of_a_mixed_batch(mlp_dir: Path) -> None:
    model = reference_model(mlp_dir)
    server = ServerProcess(mlp_dir, env=ENV).start(timeout=90)
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            busy = pool.submit(invoke, server.port, [[777, 0, 0, 0]])  # a 0.3 s forward: the next ones queue up
            time.sleep(0.15)
            as_json = pool.submit(invoke, server.port, [[1.0, 2.0, 3.0, 4.0]])
            as_npy = pool.submit(
                invoke, server.port, npy(np.array([[4.0, 3.0, 2.0, 1.0]], dtype=np.float32)), "application/x-npy"
            )
            malformed = pool.submit(invoke, server.port, b"[[1, 2,", "application/json")
            replies = [as_json.result(), as_npy.result()]
            bad = malformed.result()
            assert busy.result().status == 200
    finally:
        assert server.stop() == 0
    assert bad.status == 400  # the malformed request fails alone ...
    assert [r.status for r in replies] == [200, 200]  # ... and both neighbours are answered,
    for reply, row in zip(replies, ([1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]), strict=True):
        with torch.inference_mode():
            expected = model(torch.tensor([row]))
        assert_close(torch.tensor(json.loads(reply.body)), expected)  # each decoded with its own content type
    assert {int(r.headers["x-batch-size"]) for r in replies} == {2}  # in one forward pass of two rows
