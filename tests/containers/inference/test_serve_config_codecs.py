"""Configuration from the environment, content negotiation, and the default decoders and encoders."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from gpu_serve import codecs
from gpu_serve.config import ENV_VARS, ServeConfig
from gpu_serve.errors import BadRequestError, ConfigError, ServeError, UnsupportedAcceptError
from gpu_serve.metrics import LOG_METRIC_FILTERS


# -- config ---------------------------------------------------------------------------------------------------
def test_defaults_follow_the_sagemaker_contract() -> None:
    cfg = ServeConfig.from_env({})
    assert (cfg.host, cfg.port, cfg.model_dir) == ("0.0.0.0", 8080, Path("/opt/ml/model"))
    assert cfg.max_body_bytes == 6_291_456
    assert cfg.module_name == "inference"
    assert cfg.default_accept == "application/json"
    assert cfg.request_timeout_s < 60 and cfg.drain_timeout_s < 30


def test_env_values_are_parsed() -> None:
    cfg = ServeConfig.from_env(
        {
            "SAGEMAKER_BIND_TO_PORT": "9090",
            "GPU_SERVE_MAX_BATCH_SIZE": "64",
            "GPU_SERVE_MAX_BATCH_DELAY_MS": "2.5",
            "GPU_SERVE_QUEUE_SIZE": "10",
            "GPU_SERVE_DTYPE": "bf16",
            "GPU_SERVE_DEVICE": "CUDA:1",
            "GPU_SERVE_INPUT_SHAPE": "3,224,224",
            "GPU_SERVE_ACCESS_LOG": "false",
            "SAGEMAKER_PROGRAM": "serve_me.py",
        }
    )
    assert (cfg.port, cfg.max_batch_size, cfg.max_batch_delay_ms, cfg.queue_size) == (9090, 64, 2.5, 10)
    assert (cfg.dtype, cfg.device, cfg.input_shape) == ("bfloat16", "cuda:1", (3, 224, 224))
    assert cfg.access_log is False and cfg.module_name == "serve_me"


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({"GPU_SERVE_MAX_BATCH_SIZE": "0"}, r"MAX_BATCH_SIZE=0 is not allowed; allowed: a number in \[1, 4096"),
        ({"GPU_SERVE_MAX_BATCH_SIZE": "lots"}, r"GPU_SERVE_MAX_BATCH_SIZE='lots' is not allowed; allowed: an integer"),
        ({"GPU_SERVE_DTYPE": "int8"}, r"GPU_SERVE_DTYPE='int8' is not allowed; allowed: .*bf16.*fp16"),
        ({"GPU_SERVE_DEVICE": "tpu"}, r"GPU_SERVE_DEVICE='tpu' is not allowed; allowed: auto, cpu, cuda, cuda:N"),
        ({"SAGEMAKER_BIND_TO_PORT": "70000"}, r"SAGEMAKER_BIND_TO_PORT=70000 is not allowed"),
        ({"GPU_SERVE_INPUT_SHAPE": "3,-1"}, r"GPU_SERVE_INPUT_SHAPE='3,-1' is not allowed"),
        ({"GPU_SERVE_ACCESS_LOG": "maybe"}, r"GPU_SERVE_ACCESS_LOG='maybe' is not allowed; allowed: true or false"),
        ({"SAGEMAKER_PROGRAM": "code/inference"}, r"SAGEMAKER_PROGRAM='code/inference' is not allowed"),
    ],
)
def test_bad_env_values_name_the_variable_and_the_allowed_values(env: dict[str, str], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        ServeConfig.from_env(env)


def test_every_variable_and_metric_filter_is_documented_in_the_readme() -> None:
    readme = (Path(__file__).parents[3] / "containers" / "inference" / "README.md").read_text()
    missing = [name for name in ENV_VARS if f"| `{name}` | " not in readme]
    assert not missing, f"README.md does not document {missing}"
    for f in LOG_METRIC_FILTERS:  # the exact patterns, as a stack creates them
        assert f"| `{f.metric_name}` | `{f.filter_pattern}` | `{f.metric_value}` | {f.unit} |" in readme, f.metric_name


# -- negotiation ------------------------------------------------------------------------------------------------
def test_media_type_drops_parameters_and_case() -> None:
    assert codecs.media_type("Application/JSON; charset=utf-8") == "application/json"
    assert codecs.media_type(None) == ""


JSON, NPY = codecs.JSON, codecs.NPY
DEFAULTS = codecs.DEFAULT_ACCEPT_TYPES


def test_accept_ranges_keep_their_weights_and_skip_malformed_ones() -> None:
    ranges = codecs.parse_accept("Application/JSON;q=0.5, application/x-npy, text/csv;q=0, text/html;q=abc, x")
    assert [(r.media_type, r.q, r.index) for r in ranges] == [
        ("application/json", 0.5, 0),
        ("application/x-npy", 1.0, 1),
        ("text/csv", 0.0, 2),
    ]
    assert codecs.parse_accept(None) == [] and codecs.parse_accept(" ") == []
    assert codecs.parse_accept("text/csv;q=1.5, text/csv;q=nan, text/csv;q=-0") == []


@pytest.mark.parametrize(
    ("header", "supported", "chosen"),
    [
        (None, DEFAULTS, JSON),
        ("*/*", DEFAULTS, JSON),
        ("application/json;q=0.5, application/x-npy", DEFAULTS, NPY),
        ("text/html, application/*;q=0.5", DEFAULTS, JSON),  # wildcard tie: the default
        ("application/x-npy, */*", DEFAULTS, NPY),  # tie: the range listed first
        ("text/html", DEFAULTS, None),
        # q=0 means "not acceptable" (RFC 9110 section 12.4.2), also under a wildcard that would match.
        ("application/json;q=0", DEFAULTS, None),
        ("application/json;q=0.0, application/x-npy;q=0", DEFAULTS, None),
        ("*/*;q=0", DEFAULTS, None),
        ("application/json;q=0, */*", DEFAULTS, NPY),
        ("application/*;q=0, application/x-npy;q=0.1", DEFAULTS, NPY),  # the more specific range wins
        ("application/json;q=abc", DEFAULTS, JSON),  # a malformed weight is ignored, like no header
        (None, ("text/plain",), "text/plain"),  # no Accept: anything is acceptable
        # A handler's own output_fn without ACCEPT_TYPES takes what the client names.
        ("text/csv", None, "text/csv"),
        ("application/json;q=0", None, None),
        ("application/json;q=0, */*", None, "*/*"),
    ],
)
def test_accept_negotiation(header: str | None, supported: tuple[str, ...] | None, chosen: str | None) -> None:
    assert codecs.negotiate_accept(header, JSON, supported) == chosen


# -- decoders ---------------------------------------------------------------------------------------------------
def test_json_bodies_become_float32_batches() -> None:
    assert codecs.decode_json("[[1, 2], [3, 4]]").dtype == torch.float32
    assert codecs.decode_json(b'{"inputs": [[1, 2]]}').shape == (1, 2)
    assert codecs.decode_json('{"instances": [[1, 2], [3, 4]]}').tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("[1, 2", r"body is not valid JSON"),
        ("[[1, 2], [3]]", r"not a rectangular array of numbers"),
        ('[["a", "b"]]', r"not a rectangular array of numbers"),
        ('{"x": [1]}', r"exactly one of the keys 'inputs' or 'instances'; got keys \['x'\]"),
        ("[" * 100 + "1" + "]" * 100, r"not a rectangular array of numbers"),  # over numpy's 64 dimensions
        ("[" * 50_000 + "]" * 50_000, r"nests arrays/objects 50000 levels deep, more than the JSON parser"),
        ('{"inputs": ' + "[" * 5_000 + "]" * 5_000 + "}", r"5001 levels deep"),
    ],
)
def test_bad_json_is_a_bad_request_that_says_what_was_expected(body: str, match: str) -> None:
    with pytest.raises(BadRequestError, match=match) as info:
        codecs.decode_json(body)
    assert info.value.status_code == 400
    assert "expected" in info.value.details


def test_json_depth_ignores_brackets_inside_strings() -> None:
    assert codecs.json_depth("[[1, 2], [3]]") == 2
    assert codecs.json_depth(b'{"a": "[[[[\\" [", "b": [1]}') == 2
    assert codecs.json_depth("1") == 0 and codecs.json_depth("") == 0


def test_npy_keeps_integers_casts_float64_and_refuses_pickles() -> None:
    def npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=allow_pickle)
        return buf.getvalue()

    assert codecs.decode_npy(npy(np.arange(6, dtype=np.int64).reshape(2, 3))).dtype == torch.int64
    assert codecs.decode_npy(npy(np.zeros((2, 3)))).dtype == torch.float32
    with pytest.raises(BadRequestError, match="no pickles"):
        codecs.decode_npy(npy(np.array([{"a": 1}], dtype=object), allow_pickle=True))
    with pytest.raises(BadRequestError, match=r"not a valid \.npy array"):
        codecs.decode_npy(b"not numpy")


def _image_bytes(fmt: str, size: tuple[int, int] = (20, 10), mode: str = "RGB") -> bytes:
    buf = io.BytesIO()
    Image.new(mode, size, color=(255, 0, 0) if mode == "RGB" else 255).save(buf, format=fmt)
    return buf.getvalue()


@pytest.mark.parametrize(("fmt", "ctype"), [("PNG", "image/png"), ("JPEG", "image/jpeg")])
def test_images_are_resized_to_the_model_input_and_scaled(fmt: str, ctype: str) -> None:
    tensor = codecs.decode_image(_image_bytes(fmt), ctype, input_shape=(3, 8, 8))
    assert tensor.shape == (1, 3, 8, 8) and tensor.dtype == torch.float32
    red = tensor[0, 0].mean().item()
    assert red == pytest.approx(1.0, abs=0.02) and tensor[0, 1].mean().item() == pytest.approx(0.0, abs=0.02)


def test_image_normalisation_and_grey_inputs() -> None:
    norm = codecs.decode_image(_image_bytes("PNG"), "image/png", (3, 4, 4), mean=[0.5] * 3, std=[0.5] * 3)
    assert norm[0, 0].mean().item() == pytest.approx(1.0) and norm[0, 1].mean().item() == pytest.approx(-1.0)
    grey = codecs.decode_image(_image_bytes("PNG", mode="L"), "image/png", (1, 5, 5))
    assert grey.shape == (1, 1, 5, 5)


def test_bad_images_are_bad_requests() -> None:
    with pytest.raises(BadRequestError, match="not a valid image/png image"):
        codecs.decode_image(b"\x89PNG but not really", "image/png")


def test_batch_dim_is_added_to_one_sample_and_shapes_are_checked() -> None:
    assert codecs.fit_batch_dim(torch.zeros(4), (4,)).shape == (1, 4)
    assert codecs.fit_batch_dim(torch.zeros(5, 4), (4,)).shape == (5, 4)
    assert codecs.fit_batch_dim(torch.zeros(4), None).shape == (1, 4)
    with pytest.raises(BadRequestError, match=r"input has shape \[2, 3\]; expected \(N, 4\) or \(4\)") as info:
        codecs.fit_batch_dim(torch.zeros(2, 3), (4,))
    assert info.value.details == {"expected_shape": ["N", 4], "got_shape": [2, 3]}
    with pytest.raises(BadRequestError, match="empty batch"):
        codecs.fit_batch_dim(torch.zeros(0, 4), (4,))
    with pytest.raises(BadRequestError, match="scalar"):
        codecs.fit_batch_dim(torch.tensor(1.0), None)


# -- encoders ---------------------------------------------------------------------------------------------------
def test_predictions_encode_as_json_and_npy_whatever_their_dtype() -> None:
    pred = torch.tensor([[0.5, -1.25]], dtype=torch.bfloat16)
    assert json.loads(codecs.encode(pred, "application/json")) == [[0.5, -1.25]]
    arr = np.load(io.BytesIO(codecs.encode(pred, "application/x-npy")))
    assert arr.dtype == np.float32 and arr.tolist() == [[0.5, -1.25]]
    assert json.loads(codecs.encode({"p": torch.ones(1, 2)}, "application/json")) == {"p": [[1.0, 1.0]]}
    with pytest.raises(UnsupportedAcceptError, match="cannot encode the prediction as 'text/csv'"):
        codecs.encode(pred, "text/csv")


def _strict_json(text: bytes) -> object:
    """Parse as RFC 8259 JSON: NaN, Infinity and -Infinity are refused (Python's json module takes them)."""

    def refuse(name: str) -> object:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("[[NaN, 1, 2, 3]]", r"JSON body holds NaN, which is not a JSON number \(RFC 8259"),
        ("[[1, Infinity]]", r"JSON body holds Infinity"),
        ('{"inputs": [[1, -Infinity]]}', r"JSON body holds -Infinity"),
        ("[[1, 2], [3, 1e999]]", r"not finite in float32 at index \[1, 1\] .*such as 1e999"),
        ("[[1e39]]", r"not finite in float32 at index \[0, 0\] .*beyond float32's range"),
    ],
)
def test_non_finite_json_numbers_are_a_bad_request_naming_them(body: str, match: str) -> None:
    with pytest.raises(BadRequestError, match=match) as info:
        codecs.decode_json(body)
    assert info.value.status_code == 400 and info.value.details["expected"] == "a JSON array of finite numbers"
    with pytest.raises(BadRequestError, match=match):
        codecs.decode_json(body.encode())  # the same through orjson's path (bytes)


def test_non_finite_predictions_are_never_written_as_invalid_json() -> None:
    for bad in (float("nan"), float("inf"), float("-inf")):
        pred = torch.tensor([[1.0, bad]])
        with pytest.raises(ServeError, match=r"prediction holds NaN or Infinity.*ask for application/x-npy") as info:
            codecs.encode(pred, "application/json")
        assert info.value.status_code == 500
        with pytest.raises(ServeError):
            codecs.encode({"scores": pred.numpy()}, "application/json")
        arr = np.load(io.BytesIO(codecs.encode(pred, "application/x-npy")))  # npy carries any float
        assert arr[0, 0] == 1.0 and not np.isfinite(arr[0, 1])
    assert _strict_json(codecs.encode(torch.tensor([[1.5, -2.0]]), "application/json")) == [[1.5, -2.0]]
