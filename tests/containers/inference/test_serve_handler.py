"""Loading a model directory: the user's handler functions, the defaults, device/dtype placement, errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from serve_models import IN_FEATURES, TinyConv, assert_close, reference_model

from gpu_serve import codecs
from gpu_serve.config import ServeConfig
from gpu_serve.errors import ModelLoadError
from gpu_serve.handler import load_handler


def test_user_handler_with_sibling_module_and_default_codecs(mlp_dir: Path) -> None:
    handler = load_handler(ServeConfig(model_dir=mlp_dir))
    assert handler.user_functions == ("model_fn", "predict_fn")
    assert handler.input_shape == (IN_FEATURES,)
    assert handler.content_types == codecs.DEFAULT_CONTENT_TYPES  # default input_fn: known types
    model = handler.model
    assert isinstance(model, torch.nn.Module) and not model.training  # eval mode
    data = handler.input_fn("[[1, 2, 3, 4], [0, 0, 0, 1]]", "application/json")
    out = handler.predict(data)
    expected = reference_model(mlp_dir)(data)
    assert_close(out, expected)
    assert_close(torch.tensor(json.loads(handler.output_fn(out, "application/json"))), expected)


def test_default_model_fn_loads_torchscript(torchscript_dir: Path) -> None:
    handler = load_handler(ServeConfig(model_dir=torchscript_dir))
    assert handler.user_functions == ()
    x = torch.rand(2, 3, 8, 8)
    torch.manual_seed(1)
    expected = TinyConv().eval()(x)
    assert_close(handler.predict(x), expected)


def test_bfloat16_option_casts_the_model_and_inputs(torchscript_dir: Path) -> None:
    handler = load_handler(ServeConfig(model_dir=torchscript_dir, dtype="bfloat16"))
    out = handler.predict(torch.rand(2, 3, 8, 8))
    assert out.dtype == torch.bfloat16
    assert json.loads(handler.output_fn(out, "application/json"))[0][0] == pytest.approx(float(out[0, 0]))


def test_state_dict_without_model_fn_fails_with_a_clear_message(tmp_path: Path) -> None:
    torch.save(torch.nn.Linear(2, 2).state_dict(), tmp_path / "model.pt")
    with pytest.raises(ModelLoadError, match=r"model.pt is not a TorchScript archive.*define model_fn"):
        load_handler(ServeConfig(model_dir=tmp_path))


def test_missing_model_and_missing_dir_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"must hold model.pt or model.pth \(found none\)"):
        load_handler(ServeConfig(model_dir=tmp_path))
    with pytest.raises(ModelLoadError, match=r"model directory .*nowhere does not exist"):
        load_handler(ServeConfig(model_dir=tmp_path / "nowhere"))


def _write_handler(root: Path, source: str) -> Path:
    (root / "code").mkdir(parents=True)
    (root / "code" / "inference.py").write_text(source)
    return root


def test_handler_functions_may_take_a_context_and_declare_types(tmp_path: Path) -> None:
    root = _write_handler(
        tmp_path,
        "CONTENT_TYPES = ['text/csv']\nACCEPT_TYPES = ('text/plain',)\n"
        "import torch\n"
        "def model_fn(model_dir, context):\n    return torch.nn.Identity()\n"
        "def input_fn(body, content_type, context):\n"
        "    return torch.tensor([[float(v) for v in body.split(',')]])\n"
        "def output_fn(prediction, accept, context):\n    return str(prediction.sum().item()), 'text/plain'\n",
    )
    handler = load_handler(ServeConfig(model_dir=root))
    assert handler.content_types == ("text/csv",) and handler.accept_types == ("text/plain",)
    out = handler.predict(handler.input_fn("1,2,3", "text/csv"))
    assert handler.output_fn(out, "text/plain") == ("6.0", "text/plain")


def test_undeclared_user_codecs_accept_any_type(tmp_path: Path) -> None:
    root = _write_handler(
        tmp_path,
        "import torch\ndef model_fn(d):\n    return torch.nn.Identity()\n"
        "def input_fn(body, content_type):\n    return torch.zeros(1, 2)\n",
    )
    handler = load_handler(ServeConfig(model_dir=root))
    assert handler.content_types is None  # decided by input_fn itself
    assert handler.accept_types == codecs.DEFAULT_ACCEPT_TYPES  # output_fn is the default


@pytest.mark.parametrize(
    ("source", "match"),
    [
        (
            "def transform_fn(m, b, c, a):\n    pass\ndef input_fn(b, c):\n    pass\n",
            "defines transform_fn together with input_fn",
        ),
        ("raise ImportError('no such lib')\n", r"importing handler .*inference.py failed: ImportError: no such lib"),
        ("def model_fn(a, b, c):\n    pass\n", r"model_fn\(a, b, c\) must take 1 arguments"),
        ("def model_fn(d):\n    return None\n", "model_fn returned None"),
        ("def model_fn(d):\n    raise OSError('no weights')\n", r"model_fn\(.*\) failed: OSError: no weights"),
        ("CONTENT_TYPES = 'application/json'\ndef model_fn(d):\n    return 1\n", "CONTENT_TYPES must be a sequence"),
    ],
)
def test_broken_handlers_fail_at_load_with_the_cause(tmp_path: Path, source: str, match: str) -> None:
    with pytest.raises(ModelLoadError, match=match):
        load_handler(ServeConfig(model_dir=_write_handler(tmp_path, source)))


def test_cuda_device_without_cuda_is_refused(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this host has CUDA")
    root = _write_handler(tmp_path, "import torch\ndef model_fn(d):\n    return torch.nn.Identity()\n")
    with pytest.raises(ModelLoadError, match=r"GPU_SERVE_DEVICE='cuda' but torch sees no CUDA device"):
        load_handler(ServeConfig(model_dir=root, device="cuda"))


def test_bad_model_config_is_reported(tmp_path: Path) -> None:
    root = _write_handler(tmp_path, "import torch\ndef model_fn(d):\n    return torch.nn.Identity()\n")
    (root / "model_config.json").write_text('{"input_shape": [3, "224"]}')
    with pytest.raises(ModelLoadError, match=r"input_shape=\[3, '224'\] is not allowed"):
        load_handler(ServeConfig(model_dir=root))
