"""The artifact's handler serves a model that the server cast to another dtype (``GPU_SERVE_DTYPE=bfloat16``)."""

from __future__ import annotations

import copy
import tarfile
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch
from container_helpers import import_model_handler

from gpu_train.export import export_example_model

SIZE = 32


@pytest.fixture(scope="module")
def handler_and_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, torch.nn.Module]:
    out = tmp_path_factory.mktemp("artifact-dtype")
    tarball = export_example_model(out, num_classes=4, image_size=SIZE)
    model_dir = out / "unpacked"
    with tarfile.open(tarball) as archive:
        archive.extractall(model_dir, filter="data")
    handler = import_model_handler(Path(model_dir), "artifact_inference_dtype")
    return handler, handler.model_fn(str(model_dir)).to("cpu")


def test_a_bfloat16_model_gets_bfloat16_input_and_answers_float32_logits(
    handler_and_model: tuple[ModuleType, torch.nn.Module],
) -> None:
    """Before, ``predict_fn`` always cast the input to float32, and a bfloat16 model raised "Input type
    (float) and bias type (c10::BFloat16) should be the same" on every request."""
    handler, model = handler_and_model
    pixels = np.random.default_rng(4).integers(0, 256, (3, 3, SIZE, SIZE), dtype=np.uint8)
    x = handler.input_fn(_npy(pixels), "application/x-npy")
    reference = handler.predict_fn(x, model)
    half = copy.deepcopy(model).to(torch.bfloat16)
    logits = handler.predict_fn(x, half)
    assert logits.dtype == torch.float32 and logits.shape == (3, 4)
    # bfloat16 keeps 8 bits of mantissa: the logits agree to about 1e-2 relative to their scale.
    scale = float(reference.abs().max())
    assert float((logits - reference).abs().max()) < 0.05 * scale
    assert not torch.equal(logits, reference)  # the model did run in bfloat16


def _npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()
