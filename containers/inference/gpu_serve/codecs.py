"""Content negotiation and the default request decoders / response encoders.

Decoders turn a request body into a float tensor with a leading batch dimension; encoders turn a
prediction into bytes. They back the default ``input_fn`` and ``output_fn`` of :mod:`gpu_serve.handler`.
"""

from __future__ import annotations

import io
import json
import re
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from gpu_serve.errors import BadRequestError, ServeError, UnsupportedAcceptError
from gpu_serve.negotiation import (  # noqa: F401 (re-exported: codecs.JSON, codecs.negotiate_accept, ...)
    ANY,
    CSV,
    DEFAULT_ACCEPT_TYPES,
    DEFAULT_CONTENT_TYPES,
    JPEG,
    JSON,
    NPY,
    PNG,
    UTF8_TYPES,
    MediaRange,
    media_type,
    negotiate_accept,
    parse_accept,
    unsupported_content_type,
)

orjson: Any
try:  # optional: parses a JSON array of floats ~10x faster than the json module
    import orjson
except ImportError:  # pragma: no cover - the image installs it; the json module is the fallback
    orjson = None


#: Largest decoded image (pixels) accepted; protects memory from decompression bombs in a 6 MB body.
MAX_IMAGE_PIXELS = 40_000_000
#: Most dimensions of a numpy array (``numpy.ndarray.ndim``; NPY_MAXDIMS is 64 since NumPy 2.0), so the
#: deepest nesting a JSON body can have and still be a tensor.
MAX_TENSOR_DIMS = 64
#: JSON has no NaN or Infinity (RFC 8259 section 6: "Numeric values that cannot be represented ... (such as
#: Infinity and NaN) are not permitted"; https://www.rfc-editor.org/rfc/rfc8259#section-6).
RFC8259_NUMBERS = "RFC 8259 section 6 has no NaN or Infinity"


def _as_tensor(array: np.ndarray, what: str) -> torch.Tensor:
    if array.dtype == object or array.dtype.kind not in "biuf":
        raise BadRequestError(
            f"{what} must hold numbers only; got elements of type {array.dtype}",
            expected="a numeric array",
        )
    if array.dtype.kind == "f" and array.dtype != np.float32:
        array = array.astype(np.float32)  # float64 / float16 inputs feed a float32 model
    elif array.dtype.kind == "b":
        array = array.astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(array))


def _refuse_constant(name: str) -> Any:
    """``parse_constant`` of the json module: ``NaN``, ``Infinity`` and ``-Infinity`` are not JSON numbers."""
    raise BadRequestError(
        f"JSON body holds {name}, which is not a JSON number ({RFC8259_NUMBERS}); send finite numbers",
        expected="a JSON array of finite numbers",
    )


def _loads(body: str | bytes) -> Any:
    if orjson is not None:
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # the json module words its errors better (and names NaN/Infinity, which both refuse)
    return json.loads(body, parse_constant=_refuse_constant)


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')


def json_depth(body: str | bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest (brackets inside strings do not count).

    Linear in the body and without recursion, so that it can measure bodies that the parsers refuse.
    """
    raw = body.encode("utf-8", "surrogatepass") if isinstance(body, str) else bytes(body)
    codes = np.frombuffer(_JSON_STRING.sub(b'""', raw), dtype=np.uint8)
    if codes.size == 0:
        return 0
    steps = np.isin(codes, (ord("["), ord("{"))).astype(np.int64) - np.isin(codes, (ord("]"), ord("}")))
    return max(0, int(np.cumsum(steps).max()))


def decode_json(body: str | bytes) -> torch.Tensor:
    """A JSON array (or ``{"inputs": [...]}`` / ``{"instances": [...]}``) -> float32 tensor."""
    try:
        data = _loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequestError(f"body is not valid JSON: {exc}", expected="a JSON array of numbers") from None
    except RecursionError:
        # orjson stops at 1,024 levels, the json module at Python's recursion limit: a body nested deeper is
        # no tensor (numpy allows 64 dimensions), so it is a client error, not a handler failure.
        raise BadRequestError(
            f"JSON body nests arrays/objects {json_depth(body)} levels deep, more than the JSON parser allows "
            f"(about {sys.getrecursionlimit()}); a tensor needs one level per dimension (at most 64)",
            expected="a JSON array of numbers with one nesting level per tensor dimension",
        ) from None
    if isinstance(data, dict):
        keys = [k for k in ("inputs", "instances") if k in data]
        if len(keys) != 1:
            raise BadRequestError(
                f"JSON object must have exactly one of the keys 'inputs' or 'instances'; got keys {sorted(data)}",
                expected='a JSON array of numbers, or {"inputs": [...]}',
            )
        data = data[keys[0]]
    try:
        with np.errstate(over="ignore"):  # 1e39 becomes inf in float32: refused below, naming where
            array = np.asarray(data, dtype=np.float32)
    except (ValueError, TypeError) as exc:
        depth = json_depth(body)
        if depth > MAX_TENSOR_DIMS:  # the parser took it (Python 3.12's json nests deeper than 3.11's)
            raise BadRequestError(
                f"JSON body is not a rectangular array of numbers: it nests arrays/objects {depth} levels deep; "
                f"a tensor needs one level per dimension (at most {MAX_TENSOR_DIMS})",
                expected="a JSON array of numbers with one nesting level per tensor dimension",
            ) from None
        raise BadRequestError(
            f"JSON body is not a rectangular array of numbers: {exc}",
            expected="a JSON array of numbers with equal-length rows",
        ) from None
    finite = np.isfinite(array)
    if not finite.all():
        where = [int(i) for i in np.argwhere(~finite)[0]]
        raise BadRequestError(
            f"JSON body holds a number that is not finite in float32 at index {where} (NaN, Infinity, or a "
            f"number beyond float32's range of about 3.4e38 such as 1e999; {RFC8259_NUMBERS}); send finite numbers",
            expected="a JSON array of finite numbers",
            index=where,
        )
    return torch.from_numpy(array)


def decode_npy(body: bytes) -> torch.Tensor:
    """An ``.npy`` file (``numpy.save``) -> tensor. Pickled object arrays are refused."""
    try:
        array = np.load(io.BytesIO(body), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise BadRequestError(
            f"body is not a valid .npy array (numpy.save format, no pickles): {exc}",
            expected="application/x-npy bytes written by numpy.save",
        ) from None
    if not isinstance(array, np.ndarray):
        raise BadRequestError("body is an .npz archive, not one .npy array", expected="one .npy array")
    return _as_tensor(array, "the .npy array")


def decode_image(
    body: bytes,
    content_type: str,
    input_shape: tuple[int, ...] | None = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
) -> torch.Tensor:
    """JPEG/PNG bytes -> float tensor (1, C, H, W) in [0, 1], resized to ``input_shape`` (C, H, W) if given,
    then normalised with ``mean``/``std`` per channel if given."""
    from PIL import Image, UnidentifiedImageError

    try:
        opened = Image.open(io.BytesIO(body))
        width, height = opened.size
        if width * height > MAX_IMAGE_PIXELS:
            raise BadRequestError(
                f"image is {width}x{height} = {width * height} pixels; the limit is {MAX_IMAGE_PIXELS}",
                expected=f"an image of at most {MAX_IMAGE_PIXELS} pixels",
            )
        channels = input_shape[0] if input_shape is not None and len(input_shape) == 3 else 3
        mode = {1: "L", 3: "RGB", 4: "RGBA"}.get(channels)
        if mode is None:
            raise BadRequestError(
                f"cannot decode an image into {channels} channels",
                expected="a model input of 1, 3 or 4 channels",
            )
        image = opened.convert(mode)
        if input_shape is not None and len(input_shape) == 3:
            target = (input_shape[2], input_shape[1])  # PIL sizes are (width, height)
            if image.size != target:
                image = image.resize(target, Image.Resampling.BILINEAR)
        array = np.asarray(image, dtype=np.uint8)
    except BadRequestError:
        raise
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise BadRequestError(
            f"body is not a valid {content_type} image: {exc}", expected=f"{content_type} bytes"
        ) from None
    if array.ndim == 2:
        array = array[:, :, None]
    tensor = torch.from_numpy(array.copy()).permute(2, 0, 1).float().div_(255.0)
    if mean is not None and std is not None:
        m = torch.tensor(list(mean), dtype=torch.float32).view(-1, 1, 1)
        s = torch.tensor(list(std), dtype=torch.float32).view(-1, 1, 1)
        tensor = (tensor - m) / s
    return tensor.unsqueeze(0)


def fit_batch_dim(tensor: torch.Tensor, input_shape: tuple[int, ...] | None) -> torch.Tensor:
    """Give ``tensor`` a leading batch dimension and check the per-sample shape against ``input_shape``.

    With a known ``input_shape`` a single sample of exactly that shape gets a batch dim of 1, a batch
    ``(N, *input_shape)`` passes, anything else is a 400 that says what was expected. Without one, a
    1-D input is taken as one sample and anything with 2+ dims as a batch.
    """
    shape = tuple(tensor.shape)
    if input_shape is not None:
        if shape == input_shape:
            tensor = tensor.unsqueeze(0)
        elif shape[1:] != input_shape:
            expected = ", ".join(str(d) for d in input_shape)
            raise BadRequestError(
                f"input has shape {list(shape)}; expected (N, {expected}) or ({expected})",
                expected_shape=["N", *input_shape],
                got_shape=list(shape),
            )
    elif tensor.dim() == 0:
        raise BadRequestError(
            "input is a scalar; expected an array with a leading batch dimension",
            expected_shape=["N", "..."],
            got_shape=[],
        )
    elif tensor.dim() == 1:
        tensor = tensor.unsqueeze(0)
    if tensor.shape[0] == 0:
        raise BadRequestError(
            "input has an empty batch (0 rows)", expected_shape=["N>=1", *shape[1:]], got_shape=list(shape)
        )
    return tensor


def to_numpy(value: Any) -> Any:
    """Tensors (any device or dtype, including bfloat16) -> numpy; containers recursively; others as-is."""
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.dtype in (torch.float16, torch.bfloat16):
            value = value.float()
        return value.cpu().numpy()
    if isinstance(value, dict):
        return {k: to_numpy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_numpy(v) for v in value]
    return value


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


def encode(prediction: Any, accept: str) -> bytes:
    """Encode a prediction as ``accept`` (JSON or npy).

    JSON is always valid JSON (RFC 8259): a prediction holding NaN or Infinity cannot be written as JSON and
    is refused with a 500 that says so (ask for ``application/x-npy``, which carries any float), never sent
    as the ``NaN`` tokens that Python's json module would write by default.
    """
    value = to_numpy(prediction)
    if accept == JSON:
        try:
            return json.dumps(value, default=_json_default, allow_nan=False).encode("utf-8")
        except ValueError as exc:
            if "JSON compliant" not in str(exc):
                raise
            raise ServeError(
                f"the prediction holds NaN or Infinity, which JSON cannot carry ({RFC8259_NUMBERS}); "
                f"ask for {NPY} (Accept header), which carries any float, or make the model's output finite",
                status_code=500,
            ) from None
    if accept == NPY:
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(value), allow_pickle=False)
        return buffer.getvalue()
    raise UnsupportedAcceptError(
        f"cannot encode the prediction as {accept!r}; supported: {', '.join(DEFAULT_ACCEPT_TYPES)}",
        supported=list(DEFAULT_ACCEPT_TYPES),
    )
