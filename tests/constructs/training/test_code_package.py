"""The code packages of a training job (gpu_constructs.training_spec.code_package) and their upload (gpuctl).

The source package must be byte-for-byte the same for the same folder (the S3 key and the CDK asset hash
are its SHA-256), keep exactly what the ignore rules keep, and refuse links, unknown entry points and
oversized folders with messages that say what to do. The launcher zipapp must be deterministic too and run.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from gpu_constructs.errors import ValidationError
from gpu_constructs.training_spec.code import DEFAULT_ENTRY_POINT
from gpu_constructs.training_spec.code_package import (
    CODE_ARCHIVE_NAME,
    DEFAULT_CODE_DIR,
    DEFAULT_RUNTIME_DIR,
    DEFAULT_WHEELS_DIR,
    DRIVER_NAME,
    MAX_SOURCE_BYTES,
    PACKAGED_RUNTIME_DIR,
    REPOSITORY_RUNTIME_DIR,
    build_driver,
    code_s3_key,
    ensure_driver,
    ensure_source_package,
    package_source_dir,
    parse_ignore_rules,
    resolve_runtime_dir,
)
from gpuctl.aws_errors import AwsProblem
from gpuctl.code_upload import upload_package

ROOT = Path(__file__).resolve().parents[3]
BOOTSTRAP = DEFAULT_RUNTIME_DIR / "gpu_train" / "bootstrap.py"


def write(root: Path, files: dict[str, str | bytes]) -> Path:
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root


@pytest.fixture
def source(tmp_path: Path) -> Path:
    root = write(
        tmp_path / "src",
        {
            "train.py": "print('train')\n",
            "model/__init__.py": "",
            "model/net.py": "LAYERS = 3\n",
            "run.sh": "#!/bin/sh\n",
            "wheels/extra-1.0-py3-none-any.whl": b"PK\x05\x06" + b"\0" * 18,
            "requirements.txt": "extra==1.0\n",
            # built-in exclusions
            ".git/HEAD": "ref: refs/heads/main\n",
            "__pycache__/train.cpython-311.pyc": b"\0",
            "model/__pycache__/net.cpython-311.pyc": b"\0",
            "model/stale.pyc": b"\0",
            ".venv/bin/python": "",
            "venv/lib/x.py": "",
            "notebooks/.ipynb_checkpoints/a.ipynb": "{}",
            ".DS_Store": b"\0",
            "model/.DS_Store": b"\0",
            "my_code.egg-info/PKG-INFO": "",
            ".mypy_cache/x.json": "{}",
            ".pytest_cache/v": "",
        },
    )
    (root / "run.sh").chmod(0o755)
    return root


def members(data: bytes) -> list[tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        return archive.getmembers()


# --------------------------------------------------------------------------------------------------
# The source package
# --------------------------------------------------------------------------------------------------


def test_package_keeps_code_and_wheels_and_drops_the_built_in_exclusions(source: Path) -> None:
    package = package_source_dir(source, "train.py")
    assert package.files == (
        "model/__init__.py",
        "model/net.py",
        "requirements.txt",
        "run.sh",
        "train.py",
        "wheels/extra-1.0-py3-none-any.whl",
    )
    assert package.entry_point == "train.py"
    assert package.size_bytes == sum((source / f).stat().st_size for f in package.files)
    assert package.sha256 == hashlib.sha256(package.data).hexdigest()
    with tarfile.open(fileobj=io.BytesIO(package.data), mode="r:gz") as archive:
        assert archive.extractfile("model/net.py").read() == b"LAYERS = 3\n"  # type: ignore[union-attr]


def test_package_headers_carry_nothing_of_the_machine(source: Path) -> None:
    package = package_source_dir(source, "train.py")
    # RFC 1952: bytes 4-7 are MTIME, byte 3 holds the flags (FNAME = 0x08).
    assert package.data[4:8] == b"\0\0\0\0"
    assert package.data[3] & 0x08 == 0
    infos = members(package.data)
    assert [i.name for i in infos] == list(package.files)
    assert all(i.isreg() and i.mtime == 0 and i.uid == 0 and i.gid == 0 for i in infos)
    assert all(i.uname == "" and i.gname == "" for i in infos)
    assert {i.name: i.mode for i in infos}["run.sh"] == 0o755
    assert {i.mode for i in infos if i.name != "run.sh"} == {0o644}


def test_package_is_byte_for_byte_deterministic(source: Path, tmp_path: Path) -> None:
    first = package_source_dir(source, "train.py")
    assert package_source_dir(source, "train.py").data == first.data
    for path in source.rglob("*"):
        os.utime(path, (1_700_000_000, 1_700_000_000), follow_symlinks=False)
    (source / "train.py").chmod(0o600)  # only the execute bit counts
    copy = shutil.copytree(source, tmp_path / "elsewhere" / "copy", symlinks=True)
    again = package_source_dir(copy, "train.py")
    assert again.data == first.data
    assert again.sha256 == first.sha256


def test_a_changed_file_changes_the_hash(source: Path) -> None:
    before = package_source_dir(source, "train.py").sha256
    (source / "model" / "net.py").write_text("LAYERS = 4\n")
    assert package_source_dir(source, "train.py").sha256 != before


# --------------------------------------------------------------------------------------------------
# .gpuignore
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "is_dir", "matches"),
    [
        ("*.ckpt", "model.ckpt", False, True),
        ("*.ckpt", "runs/a/model.ckpt", False, True),  # no slash: any depth
        ("*.ckpt", "runs/a", True, False),
        ("/build", "build", True, True),  # leading slash: the top only
        ("/build", "src/build", True, False),
        ("src/gen", "src/gen", True, True),  # a slash in the middle anchors too
        ("src/gen", "lib/src/gen", True, False),
        ("logs/", "logs", True, True),  # trailing slash: folders only
        ("logs/", "logs", False, False),
        ("logs/", "a/logs", True, True),
        ("data?.csv", "data1.csv", False, True),
        ("data?.csv", "data12.csv", False, False),
        ("data?.csv", "data/.csv", False, False),  # ? never matches /
        ("*.txt", "a/b.txt", False, True),
        ("a*/b.txt", "a/x/b.txt", False, False),  # * never matches /
        ("**/gen/*.py", "gen/x.py", False, True),  # leading **/: every folder, the top included
        ("**/gen/*.py", "a/b/gen/x.py", False, True),
        ("data/**", "data/x/y.bin", False, True),  # trailing /**: everything inside
        ("data/**", "data", True, False),
        ("a/**/b", "a/b", True, True),  # /**/: zero or more folders
        ("a/**/b", "a/x/y/b", True, True),
        ("a/**/b", "xa/b", True, False),
        ("\\#notes", "#notes", False, True),  # backslash: the next character literally
        ("\\!x", "!x", False, True),
        ("\\*", "*", False, True),
        ("\\*", "a", False, False),
        ("name  ", "name", False, True),  # trailing spaces dropped
    ],
)
def test_ignore_pattern_semantics(pattern: str, path: str, is_dir: bool, matches: bool) -> None:
    (rule,) = parse_ignore_rules(pattern)
    assert rule.matches(path, is_dir) is matches


def test_ignore_rules_skip_comments_and_blank_lines_and_read_negation() -> None:
    rules = parse_ignore_rules("# checkpoints\n\n*.ckpt\n!best.ckpt\n   \n")
    assert [(r.pattern, r.negate, r.source) for r in rules] == [
        ("*.ckpt", False, ".gpuignore:3"),
        ("!best.ckpt", True, ".gpuignore:4"),
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[Bb]uild/", r"\.gpuignore:1: '\[Bb\]uild/': character classes \(\[\.\.\.\]\) are not supported"),
        ("ok\n!\n", r"\.gpuignore:2: '!' matches nothing"),
        ("/", r"\.gpuignore:1: '/' matches nothing"),
        ("trailing\\", r"may not end with a lone backslash"),
    ],
)
def test_unsupported_ignore_patterns_are_refused(text: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as caught:
        parse_ignore_rules(text)
    assert caught.value.where == "code package"


def test_gpuignore_excludes_reincludes_and_anchors(source: Path) -> None:
    write(
        source,
        {
            ".gpuignore": (
                "# big things\n"
                "*.ckpt\n"
                "!best.ckpt\n"
                "/build/\n"
                "data/**\n"
                "!data/labels.json\n"
                "cache/\n"
                "!cache/keep.txt\n"
                "*.pyc\n"
                "!keep.pyc\n"
            ),
            "last.ckpt": "x",
            "best.ckpt": "x",
            "runs/1/last.ckpt": "x",
            "build/out.bin": "x",
            "model/build/helper.py": "",  # /build/ is anchored: this one stays
            "data/train/a.bin": "x",
            "data/labels.json": "{}",
            "cache/keep.txt": "x",  # inside an excluded folder: cannot be re-included (as in git)
            "keep.pyc": b"\0",  # a built-in exclusion re-included by a later rule
        },
    )
    files = package_source_dir(source, "train.py").files
    assert "best.ckpt" in files and "data/labels.json" in files and "model/build/helper.py" in files
    assert "keep.pyc" in files and ".gpuignore" in files
    for left_out in ("last.ckpt", "runs/1/last.ckpt", "build/out.bin", "data/train/a.bin", "cache/keep.txt"):
        assert left_out not in files
    assert "model/stale.pyc" not in files


# --------------------------------------------------------------------------------------------------
# Entry point, links and size
# --------------------------------------------------------------------------------------------------


def test_a_missing_entry_point_is_named_with_the_top_level_scripts(source: Path) -> None:
    write(source, {"evaluate.py": ""})
    with pytest.raises(ValidationError) as caught:
        package_source_dir(source, "trian.py")
    assert caught.value.where == "code package"
    assert caught.value.detail == (
        f"entry_point='trian.py' is not a file in {source}; allowed: a .py file inside it; "
        "top-level .py files: evaluate.py, train.py"
    )


def test_an_ignored_entry_point_names_the_rule_that_drops_it(source: Path) -> None:
    write(source, {".gpuignore": "scripts/\n", "scripts/train.py": ""})
    with pytest.raises(ValidationError, match=r"entry_point='scripts/train.py' is excluded from the package by "):
        package_source_dir(source, "scripts/train.py")
    with pytest.raises(ValidationError, match=r"by \.gpuignore:1 'scripts/'; top-level \.py files: train\.py$"):
        package_source_dir(source, "scripts/train.py")


@pytest.mark.parametrize("entry_point", ["../train.py", "/abs/train.py", "train.sh", ""])
def test_an_entry_point_outside_the_folder_or_not_python_is_refused(source: Path, entry_point: str) -> None:
    with pytest.raises(ValidationError, match=rf"entry_point={re.escape(repr(entry_point))} is not allowed"):
        package_source_dir(source, entry_point)


def test_a_nested_entry_point_is_normalized(source: Path) -> None:
    assert package_source_dir(source, "model/./net.py").entry_point == "model/net.py"


def test_a_missing_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"source_dir='.*/nope' is not a folder"):
        package_source_dir(tmp_path / "nope", "train.py")


def test_a_symbolic_link_is_refused_by_name(source: Path, tmp_path: Path) -> None:
    outside = write(tmp_path / "outside", {"secret.txt": "x"})
    (source / "model" / "shared").symlink_to(outside)
    with pytest.raises(ValidationError) as caught:
        package_source_dir(source, "train.py")
    assert caught.value.detail.startswith(f"model/shared is a symbolic link (-> {outside}); the code package")
    assert "exclude it in .gpuignore" in caught.value.detail


def test_an_ignored_symbolic_link_is_left_out(source: Path, tmp_path: Path) -> None:
    (source / "data.bin").symlink_to(tmp_path)  # a linked folder: matches a folder rule
    (source / "venv").rename(tmp_path / "real-venv")
    (source / "venv").symlink_to(tmp_path / "real-venv")  # built-in venv/ rule
    write(source, {".gpuignore": "data.bin/\n"})
    files = package_source_dir(source, "train.py").files
    assert not [f for f in files if f.startswith(("venv", "data.bin"))]


def test_the_size_limit_names_the_total_the_limit_and_the_largest_files(source: Path) -> None:
    write(source, {f"data/part-{i}.bin": b"x" * (1000 * (i + 1)) for i in range(6)})
    total = package_source_dir(source, "train.py").size_bytes
    assert total > 21_000
    with pytest.raises(ValidationError) as caught:
        package_source_dir(source, "train.py", max_bytes=20_000)
    detail = caught.value.detail
    assert detail.startswith(f"{source} holds {total / 1024:.1f} KiB ({total} bytes) of files, more than the limit")
    assert "limit of 19.5 KiB (20000 bytes)" in detail
    assert (
        "largest: data/part-5.bin (5.9 KiB), data/part-4.bin (4.9 KiB), data/part-3.bin (3.9 KiB), "
        "data/part-2.bin (2.9 KiB), data/part-1.bin (2.0 KiB)."
    ) in detail
    assert "part-0.bin" not in detail
    assert f"exclude what the job does not need in {source / '.gpuignore'}" in detail
    assert "as an input channel" in detail
    assert MAX_SOURCE_BYTES == 100 * 1024 * 1024


# --------------------------------------------------------------------------------------------------
# Content addressing and the cache
# --------------------------------------------------------------------------------------------------


def test_the_s3_key_is_the_content_address(source: Path) -> None:
    package = package_source_dir(source, "train.py")
    assert code_s3_key("gpu-dev", package) == f"code/gpu-dev/{package.sha256}/sourcedir.tar.gz"
    assert CODE_ARCHIVE_NAME == "sourcedir.tar.gz"


@pytest.mark.parametrize("prefix", ["", "/gpu", "gpu/", "a//b", "a/../b", "gpu dev"])
def test_a_bad_key_prefix_is_refused(source: Path, prefix: str) -> None:
    with pytest.raises(ValidationError, match=rf"prefix={re.escape(repr(prefix))} is not allowed"):
        code_s3_key(prefix, package_source_dir(source, "train.py"))


def test_ensure_source_package_writes_once_per_content(source: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    path, package = ensure_source_package(source, "train.py", cache_dir=cache)
    assert path == cache / package.sha256[:32] / CODE_ARCHIVE_NAME
    assert path.read_bytes() == package.data
    written = path.stat().st_mtime_ns
    again, _ = ensure_source_package(source, "train.py", cache_dir=cache)
    assert again == path and again.stat().st_mtime_ns == written


# --------------------------------------------------------------------------------------------------
# The launcher zipapp
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def runtime(tmp_path: Path) -> tuple[Path, Path]:
    """A small runtime folder (a stand-in bootstrap) and a wheels folder."""
    runtime_dir = write(
        tmp_path / "runtime",
        {
            "gpu_train/__init__.py": "",
            "gpu_train/bootstrap.py": (
                "import sys, zipfile\n"
                "from gpu_train.models import resnet\n"
                "names = zipfile.ZipFile(sys.argv[0]).namelist()\n"
                "print(resnet.NAME, sorted(n for n in names if n.startswith('wheels/')), sys.argv[1:])\n"
            ),
            "gpu_train/models/__init__.py": "",
            "gpu_train/models/resnet.py": "NAME = 'resnet'\n",
            "gpu_train/models/labels.json": "{}",
            "gpu_train/__pycache__/bootstrap.cpython-311.pyc": b"\0",
            "gpu_train/models/__pycache__/resnet.cpython-311.pyc": b"\0",
            "gpu_train/.DS_Store": b"\0",
            "requirements.txt": "xxhash==4.1.0\n",
        },
    )
    wheels_dir = write(
        tmp_path / "vendor",
        {"b_pkg-1.0-py3-none-any.whl": b"PK-b", "a_pkg-2.0-py3-none-any.whl": b"PK-a", "SHA256SUMS": ""},
    )
    return runtime_dir, wheels_dir


def test_driver_holds_bootstrap_runtime_and_wheels(runtime: tuple[Path, Path]) -> None:
    runtime_dir, wheels_dir = runtime
    name, data = build_driver(runtime_dir, wheels_dir)
    assert name == DRIVER_NAME == "gpu_train_driver.pyz"
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.namelist() == [
        "__main__.py",
        "gpu_train/__init__.py",
        "gpu_train/bootstrap.py",
        "gpu_train/models/__init__.py",
        "gpu_train/models/labels.json",
        "gpu_train/models/resnet.py",
        "wheels/a_pkg-2.0-py3-none-any.whl",
        "wheels/b_pkg-1.0-py3-none-any.whl",
    ]
    assert archive.read("__main__.py") == (runtime_dir / "gpu_train" / "bootstrap.py").read_bytes()
    assert archive.read("wheels/a_pkg-2.0-py3-none-any.whl") == b"PK-a"
    assert {(i.date_time, i.compress_type) for i in archive.infolist()} == {((1980, 1, 1, 0, 0, 0), zipfile.ZIP_STORED)}


def test_driver_is_deterministic(runtime: tuple[Path, Path], tmp_path: Path) -> None:
    runtime_dir, wheels_dir = runtime
    _, first = build_driver(runtime_dir, wheels_dir)
    for path in [*runtime_dir.rglob("*"), *wheels_dir.iterdir()]:
        os.utime(path, (1_700_000_000, 1_700_000_000))
    assert build_driver(runtime_dir, wheels_dir)[1] == first
    cache = tmp_path / "cache"
    path = ensure_driver(runtime_dir, wheels_dir, cache)
    assert path == cache / hashlib.sha256(first).hexdigest()[:32] / DRIVER_NAME
    assert path.read_bytes() == first


def test_driver_runs_as_a_zipapp(runtime: tuple[Path, Path], tmp_path: Path) -> None:
    runtime_dir, wheels_dir = runtime
    driver = ensure_driver(runtime_dir, wheels_dir, tmp_path / "cache")
    result = subprocess.run(
        [sys.executable, str(driver), "launch", "--x"], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    expected = "resnet ['wheels/a_pkg-2.0-py3-none-any.whl', 'wheels/b_pkg-1.0-py3-none-any.whl'] ['launch', '--x']"
    assert result.stdout.strip() == expected


def test_driver_without_bootstrap_or_with_a_bad_wheel_name_is_refused(runtime: tuple[Path, Path]) -> None:
    runtime_dir, wheels_dir = runtime
    (wheels_dir / "notawheel.whl").write_bytes(b"")
    with pytest.raises(ValidationError, match=r"notawheel\.whl is not a wheel file name; allowed: a wheel file"):
        build_driver(runtime_dir, wheels_dir)
    (runtime_dir / "gpu_train" / "bootstrap.py").unlink()
    with pytest.raises(ValidationError, match=r"the launcher's entry .*/gpu_train/bootstrap\.py does not exist"):
        build_driver(runtime_dir, wheels_dir)


def _shipped_runtime_files(package_dir: Path) -> list[str]:
    """The files of the gpu_train package the launcher must carry, walked here independently of the library."""
    found = []
    for folder, dirs, files in os.walk(package_dir):
        dirs[:] = [d for d in dirs if d != "__pycache__" and not d.startswith(".")]
        for name in files:
            if not name.startswith(".") and not name.endswith((".pyc", ".pyo")):
                found.append((Path(folder) / name).relative_to(package_dir.parent).as_posix())
    return sorted(found)


def test_the_platform_driver_carries_the_runtime_and_answers_help(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    driver = ensure_driver(cache_dir=cache)
    data = driver.read_bytes()
    # written once per content, at <cache>/<first 32 hex digits of its SHA-256>/gpu_train_driver.pyz
    assert driver == cache / hashlib.sha256(data).hexdigest()[:32] / DRIVER_NAME
    assert ensure_driver(cache_dir=cache) == driver
    assert build_driver() == (DRIVER_NAME, data)  # the same bytes on every build
    archive = zipfile.ZipFile(driver)
    names = archive.namelist()
    runtime_files = _shipped_runtime_files(BOOTSTRAP.parent)
    wheels = sorted(p.name for p in DEFAULT_WHEELS_DIR.glob("*.whl"))
    # exactly: the bootstrap as __main__.py, then the runtime package, then the vendored wheels, in that order
    assert names == ["__main__.py", *runtime_files, *(f"wheels/{w}" for w in wheels)]
    assert {"gpu_train/__init__.py", "gpu_train/bootstrap.py", "gpu_train/entrypoint.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert archive.read("__main__.py") == BOOTSTRAP.read_bytes()
    for name in runtime_files:
        assert archive.read(name) == (DEFAULT_RUNTIME_DIR / name).read_bytes(), name
    # the vendored wheels are the ones SHA256SUMS pins, byte for byte
    sums = dict(line.split()[::-1] for line in (DEFAULT_WHEELS_DIR / "SHA256SUMS").read_text().splitlines() if line)
    assert sorted(sums) == wheels
    for wheel in wheels:
        assert hashlib.sha256(archive.read(f"wheels/{wheel}")).hexdigest() == sums[wheel], wheel
    for info in archive.infolist():
        assert (info.compress_type, info.date_time, info.external_attr >> 16) == (
            zipfile.ZIP_STORED,
            (1980, 1, 1, 0, 0, 0),
            0o100644,
        ), info.filename
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"COLUMNS": "100"}  # argparse's width
    result = subprocess.run(
        [sys.executable, str(driver), "--help"], capture_output=True, text=True, check=False, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr
    # (a first run in a fresh environment also says which vendored wheels it unpacked)
    assert "usage: gpu_train [-h] [{train,launch,gpu-check,shard}]" in result.stdout.splitlines(), result.stdout
    assert "GPU training runtime (SageMaker contract)" in result.stdout


# --------------------------------------------------------------------------------------------------
# Where the runtime is found: the installed library's copy, else the checkout's containers/training
# --------------------------------------------------------------------------------------------------


def test_the_packaged_runtime_wins_then_the_checkout_then_the_packaged_path(tmp_path: Path) -> None:
    packaged, repository = tmp_path / "site" / "_runtime" / "training", tmp_path / "containers" / "training"
    assert resolve_runtime_dir(packaged, repository) == packaged  # neither: the installed library's path
    repository.mkdir(parents=True)
    assert resolve_runtime_dir(packaged, repository) == repository
    packaged.mkdir(parents=True)
    assert resolve_runtime_dir(packaged, repository) == packaged


def test_the_checkout_reads_containers_training_and_holds_no_packaged_copy() -> None:
    """In this checkout (an editable install) the runtime is the repository's; a build never writes the copy
    into the source tree (constructs/setup.py writes it into the build folder)."""
    assert REPOSITORY_RUNTIME_DIR == ROOT / "containers" / "training"
    assert PACKAGED_RUNTIME_DIR == ROOT / "constructs" / "gpu_constructs" / "_runtime" / "training"
    assert not PACKAGED_RUNTIME_DIR.parent.exists()
    assert DEFAULT_RUNTIME_DIR == REPOSITORY_RUNTIME_DIR
    assert (DEFAULT_WHEELS_DIR, DEFAULT_CODE_DIR) == (
        DEFAULT_RUNTIME_DIR / "vendor",
        DEFAULT_RUNTIME_DIR / "default_code",
    )


_INSTALLED_PROBE = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from gpu_constructs.errors import ValidationError
from gpu_constructs.training_spec import code_package as c
cache = Path(sys.argv[2])
out = {"runtime": str(c.DEFAULT_RUNTIME_DIR), "code": str(c.DEFAULT_CODE_DIR), "results": []}
calls = (
    lambda: c.ensure_driver(cache_dir=cache),
    lambda: c.ensure_source_package(c.DEFAULT_CODE_DIR, "train.py", cache_dir=cache)[0],
)
for call in calls:
    try:
        out["results"].append(call().name)
    except ValidationError as exc:
        out["results"].append(str(exc))
print(json.dumps(out))
"""


def _probe_installed(site: Path, cache: Path) -> dict[str, Any]:
    """Import code_package from a copy of the library in ``site`` (a fresh interpreter: the paths are resolved at
    import) and call ensure_driver() and ensure_source_package(DEFAULT_CODE_DIR) on the defaults."""
    proc = subprocess.run(
        [sys.executable, "-I", "-c", _INSTALLED_PROBE, str(site), str(cache)],
        capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def test_an_installed_library_uses_its_copy_or_names_both_places(tmp_path: Path) -> None:
    """A copy of the library outside any checkout (as in site-packages): without a runtime copy, both defaults
    fail with an error naming the installed copy's path and the checkout's; with one, they use it."""
    tmp_path = tmp_path.resolve()  # the library resolves its own path
    site = tmp_path / "venv" / "site-packages"
    library = ROOT / "constructs" / "gpu_constructs"
    shutil.copytree(library, site / "gpu_constructs", ignore=shutil.ignore_patterns("__pycache__"))
    packaged = site / "gpu_constructs" / "_runtime" / "training"
    missing = _probe_installed(site, tmp_path / "cache")
    assert missing["runtime"] == str(packaged)
    assert missing["code"] == str(packaged / "default_code")
    named = re.escape(str(packaged))
    checkout = re.escape(str(site.parent / "containers" / "training"))  # where a checkout would have it
    both = rf"{named} \(the installed library's copy\) and {checkout} \(a checkout of the repository\)"
    driver_error, code_error = missing["results"]
    assert re.match(rf"code package: the runtime folder {named} does not exist: .*{both}", driver_error)
    assert re.match(
        rf"code package: the built-in training code folder {named}/default_code does not exist: .*{both}", code_error
    )
    assert 'pip install "./constructs"' in driver_error
    for part in ("gpu_train", "default_code", "vendor"):
        shutil.copytree(REPOSITORY_RUNTIME_DIR / part, packaged / part, ignore=shutil.ignore_patterns("__pycache__"))
    found = _probe_installed(site, tmp_path / "cache")
    assert found["runtime"] == str(packaged)
    assert found["results"] == [DRIVER_NAME, CODE_ARCHIVE_NAME]


# --------------------------------------------------------------------------------------------------
# The vendored runtime wheels
# --------------------------------------------------------------------------------------------------


def _pins() -> dict[str, str]:
    pins = {}
    for line in (DEFAULT_RUNTIME_DIR / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "_", name).lower()] = version
    return pins


def test_vendored_wheels_match_their_sha256sums() -> None:
    sums = {}
    for line in (DEFAULT_WHEELS_DIR / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split(maxsplit=1)
        sums[name.lstrip("*")] = digest
    on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in DEFAULT_WHEELS_DIR.glob("*.whl")}
    assert on_disk == sums


def test_vendored_wheels_are_the_pinned_versions_for_every_dlc_python() -> None:
    wheels = sorted(p.name for p in DEFAULT_WHEELS_DIR.glob("*.whl"))
    pins = _pins()
    assert set(pins) == {"xxhash", "nvidia_ml_py"}
    found: dict[str, set[str]] = {}
    for name in wheels:
        dist, version, python, _abi, platform = name[: -len(".whl")].split("-")
        assert version == pins[dist], f"{name}: containers/training/requirements.txt pins {dist}=={pins[dist]}"
        found.setdefault(dist, set()).add(python)
        assert platform == "any" or "manylinux_2_17_x86_64" in platform.split("."), name
    assert found == {"xxhash": {"cp310", "cp311", "cp312"}, "nvidia_ml_py": {"py3"}}


# --------------------------------------------------------------------------------------------------
# Upload (gpuctl)
# --------------------------------------------------------------------------------------------------


@mock_aws
def test_upload_puts_the_package_once_with_the_kms_key(source: Path) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="code-bucket")
    key_id = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["KeyId"]
    package = package_source_dir(source, "train.py")
    key = code_s3_key("gpu-dev", package)
    lines: list[str] = []
    assert upload_package(s3, "code-bucket", key, package.data, key_id, progress=lines.append) is True
    head = s3.head_object(Bucket="code-bucket", Key=key)
    assert head["ServerSideEncryption"] == "aws:kms"
    assert key_id in head["SSEKMSKeyId"]
    assert s3.get_object(Bucket="code-bucket", Key=key)["Body"].read() == package.data
    assert upload_package(s3, "code-bucket", key, package.data, key_id, progress=lines.append) is False
    assert lines == [
        f"uploading the code package ({len(package.data) / 1024:.1f} KiB) to s3://code-bucket/{key}",
        f"code package s3://code-bucket/{key} is already there (same content); not uploaded again",
    ]
    assert gzip.decompress(s3.get_object(Bucket="code-bucket", Key=key)["Body"].read())[:9] == b"model/__i"


@mock_aws
def test_upload_to_a_missing_bucket_is_explained() -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    with pytest.raises(AwsProblem, match=r"ListObjectsV2 failed: NoSuchBucket: The specified bucket"):
        upload_package(s3, "no-such-bucket", "code/x/sourcedir.tar.gz", b"x", None, progress=lambda _: None)


class _Forbidden:
    def list_objects_v2(self, **_: Any) -> None:
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "ListObjectsV2")

    def put_object(self, **_: Any) -> None:  # pragma: no cover - never reached
        raise AssertionError("no upload after a refused listing")


def test_upload_explains_a_refused_listing() -> None:
    with pytest.raises(AwsProblem) as caught:
        upload_package(_Forbidden(), "bucket", "code/p/abc/sourcedir.tar.gz", b"x", "key", progress=lambda _: None)
    assert caught.value.code == "AccessDenied"
    assert "S3 refused ListObjectsV2 of s3://bucket/code/p/abc/sourcedir.tar.gz (AccessDenied)." in str(caught.value)
    assert "s3://bucket/code/p/" in str(caught.value)


@mock_aws
def test_a_package_whose_key_is_a_prefix_of_another_counts_as_missing() -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="code-bucket")
    s3.put_object(Bucket="code-bucket", Key="code/p/abc/sourcedir.tar.gz.old", Body=b"y")
    assert upload_package(s3, "code-bucket", "code/p/abc/sourcedir.tar.gz", b"x", None, progress=lambda _: None)


def test_the_built_in_code_folder_packages_with_the_default_entry_point(tmp_path: Path) -> None:
    train = DEFAULT_CODE_DIR / DEFAULT_ENTRY_POINT
    assert DEFAULT_ENTRY_POINT == "train.py"
    package = package_source_dir(DEFAULT_CODE_DIR, DEFAULT_ENTRY_POINT)
    assert package.files == ("train.py",)
    assert package.entry_point == "train.py"
    assert package.size_bytes == train.stat().st_size
    assert package.size_bytes < MAX_SOURCE_BYTES
    assert package.sha256 == hashlib.sha256(package.data).hexdigest()
    assert package_source_dir(DEFAULT_CODE_DIR, DEFAULT_ENTRY_POINT).data == package.data  # deterministic
    # the gzip header carries no time and no file name; the one member has fixed metadata and the file's bytes
    assert package.data[:2] == b"\x1f\x8b" and package.data[4:8] == b"\0\0\0\0"
    assert not package.data[3] & 0x08  # FNAME flag off
    with tarfile.open(fileobj=io.BytesIO(package.data), mode="r:gz") as archive:
        (member,) = archive.getmembers()
        assert (member.name, member.mode, member.mtime, member.uid, member.gid, member.uname, member.gname) == (
            "train.py",
            0o644,
            0,
            0,
            0,
            "",
            "",
        )
        extracted = archive.extractfile(member)
        assert extracted is not None and extracted.read() == train.read_bytes()
    assert code_s3_key("gpu-dev", package) == f"code/gpu-dev/{package.sha256}/sourcedir.tar.gz"
    path, again = ensure_source_package(DEFAULT_CODE_DIR, DEFAULT_ENTRY_POINT, cache_dir=tmp_path)
    assert path == tmp_path / package.sha256[:32] / CODE_ARCHIVE_NAME
    assert path.read_bytes() == package.data and again == package
