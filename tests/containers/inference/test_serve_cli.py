"""``gpuctl serve`` / ``gpuctl invoke`` argument handling and the safe model.tar.gz extraction."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from gpu_serve.archive import extract_model_archive
from gpu_serve.errors import ModelLoadError
from gpuctl.cli import main
from gpuctl.commands.invoke import invocations_url


def _tar(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_archive_at_root_or_in_one_folder(tmp_path: Path) -> None:
    flat = _tar(tmp_path / "flat.tar.gz", {"model.pt": b"w", "code/inference.py": b""})
    assert extract_model_archive(flat, tmp_path / "a") == tmp_path / "a"
    nested = _tar(tmp_path / "nested.tar.gz", {"model/model.pt": b"w", "model/code/inference.py": b""})
    assert extract_model_archive(nested, tmp_path / "b") == tmp_path / "b" / "model"


def test_archive_escaping_its_folder_is_refused(tmp_path: Path) -> None:
    evil = _tar(tmp_path / "evil.tar.gz", {"../outside.txt": b"x"})
    with pytest.raises(ModelLoadError, match="cannot extract model archive"):
        extract_model_archive(evil, tmp_path / "c")
    assert not (tmp_path / "outside.txt").exists()
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(ModelLoadError, match="cannot extract model archive"):
        extract_model_archive(tmp_path / "junk.tar.gz", tmp_path / "d")


def test_serve_refuses_missing_or_unknown_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(tmp_path / "nope.tar.gz")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "model.zip").write_bytes(b"PK")
    assert main(["serve", str(tmp_path / "model.zip")]) == 2
    assert "neither a folder nor a .tar.gz/.tgz/.tar archive" in capsys.readouterr().err
    assert main(["serve", str(tmp_path), "--dtype", "int4"]) == 2
    assert "GPU_SERVE_DTYPE='int4' is not allowed" in capsys.readouterr().err
    assert main(["serve", str(tmp_path), "--model-processes", "many"]) == 2
    assert "GPU_SERVE_MODEL_PROCESSES='many' is not allowed; allowed: auto or an integer from 0 to 64" in (
        capsys.readouterr().err
    )
    assert main(["serve", str(tmp_path), "--model-processes", "65"]) == 2
    assert "GPU_SERVE_MODEL_PROCESSES=65 is not allowed" in capsys.readouterr().err


def test_invoke_url_and_content_type_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert invocations_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080/invocations"
    assert invocations_url("localhost:9000/") == "http://localhost:9000/invocations"
    assert invocations_url("https://h/custom?x=1") == "https://h/custom?x=1"
    with pytest.raises(ValueError, match="allowed: http"):
        invocations_url("ftp://h")
    (tmp_path / "data.bin").write_bytes(b"\x00")
    assert main(["invoke", "http://127.0.0.1:9", str(tmp_path / "data.bin")]) == 2
    assert "cannot tell the Content-Type" in capsys.readouterr().err
    assert main(["invoke", "http://127.0.0.1:9", str(tmp_path / "data.bin"), "--content-type", "x/y"]) == 1
    assert "cannot reach http://127.0.0.1:9/invocations" in capsys.readouterr().err
