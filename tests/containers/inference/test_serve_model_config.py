"""The per-sample input shape the server takes from model_config.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_serve.errors import ModelLoadError
from gpu_serve.handler import _shape_from_config
from gpu_train.export import export_example_model


@pytest.mark.parametrize(
    ("config", "shape"),
    [
        ({"input_shape": [4]}, (4,)),
        ({"image_size": 32}, (3, 32, 32)),
        ({"image_size": 64, "input": {"layout": "NCHW", "channels": 1}}, (1, 64, 64)),
        ({"image_size": 64, "input": {"layout": "NHWC", "channels": 3}}, None),
        ({"num_classes": 10}, None),
    ],
)
def test_input_shape_from_model_config(config: dict[str, object], shape: tuple[int, ...] | None) -> None:
    assert _shape_from_config(config, Path("model_config.json")) == shape


def test_bad_input_shape_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"model_config.json: input_shape=\[0\] is not allowed"):
        _shape_from_config(json.loads('{"input_shape": [0]}'), tmp_path / "model_config.json")


def test_example_model_exported_to_a_str_path_gives_the_server_its_input_shape(tmp_path: Path) -> None:
    tarball = export_example_model(str(tmp_path / "out"), image_size=16)  # a str, as scripts pass it
    assert tarball == tmp_path / "out" / "model.tar.gz" and tarball.is_file()
    config_file = tmp_path / "out" / "model" / "model_config.json"
    assert _shape_from_config(json.loads(config_file.read_text()), config_file) == (3, 16, 16)
