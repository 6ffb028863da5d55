"""Script mode through ``gpuctl train --synth --local`` from the synthesized dev app: a crashing script's own words
in the failure, and both common script styles (SageMaker-example ``torch.multiprocessing.spawn`` and torchrun's
``LOCAL_RANK``) on two emulated hosts, unchanged."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpuctl.cli import main


@pytest.fixture(scope="module")
def outdir(synth: Any) -> Path:
    return Path(synth("dev").outdir)


@pytest.fixture()
def offline_cpu(no_aws: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No AWS client may be made (``no_aws``), and the jobs run on the CPU (gloo) on any host."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def _source(tmp_path: Path, script: str) -> Path:
    source = tmp_path / "src"
    source.mkdir()
    (source / "train.py").write_text(script)
    return source


CRASHING = """import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
args = parser.parse_args()
if args.lr <= 0:
    raise ValueError(f"learning rate must be positive, got {args.lr}")
"""


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (["-p", "lr=-1"], "ValueError: learning rate must be positive, got -1.0"),
        (["-p", "lr=0.1", "-p", "momentum=0.9"], "error: unrecognized arguments: --momentum 0.9"),
    ],
)
def test_a_crashing_script_says_why_in_its_own_words(
    outdir: Path,
    offline_cpu: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    overrides: list[str],
    words: str,
) -> None:
    """The failure (SageMaker's FailureReason; here the host's line) carries the script's last words: the
    traceback's last line, or argparse's message, not only "train.py exited with code N"."""
    source = _source(tmp_path, CRASHING)
    argv = ["train", "--synth", str(outdir), "--source-dir", str(source), *overrides, "--local"]
    assert main([*argv, "--output", str(tmp_path / "out")]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("algo-1: exit"))
    assert line.startswith("algo-1: exit ") and not line.startswith("algo-1: exit 0")
    assert words in line


#: SageMaker's PyTorch examples: hosts from SM_HOSTS, one process started per GPU (here one, on the CPU) with
#: torch.multiprocessing.spawn, the rendezvous address set by the script itself.
SPAWN_STYLE = """import json, os
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(local_rank, hosts, host_rank):
    dist.init_process_group("gloo", rank=host_rank + local_rank, world_size=len(hosts))
    total = torch.ones(1)
    dist.all_reduce(total)
    if dist.get_rank() == 0:
        with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as out:
            json.dump({"style": "spawn", "world": dist.get_world_size(), "sum": total.item(), "hosts": hosts}, out)
    dist.destroy_process_group()


if __name__ == "__main__":
    hosts = json.loads(os.environ["SM_HOSTS"])
    os.environ.setdefault("MASTER_ADDR", hosts[0])
    os.environ.setdefault("MASTER_PORT", "29500")
    mp.spawn(worker, args=(hosts, hosts.index(os.environ["SM_CURRENT_HOST"])), nprocs=1)
"""

#: torchrun's style: the process's rank and the rendezvous from the environment torchrun sets.
TORCHRUN_STYLE = """import json, os
import torch
import torch.distributed as dist

local_rank = int(os.environ["LOCAL_RANK"])
dist.init_process_group("gloo")
total = torch.ones(1)
dist.all_reduce(total)
if dist.get_rank() == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "seen.json"), "w") as out:
        json.dump({"style": "torchrun", "world": dist.get_world_size(), "sum": total.item(),
                   "local_rank": local_rank}, out)
dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (SPAWN_STYLE, {"style": "spawn", "world": 2, "sum": 2.0, "hosts": ["algo-1", "algo-2"]}),
        (TORCHRUN_STYLE, {"style": "torchrun", "world": 2, "sum": 2.0, "local_rank": 0}),
    ],
    ids=["spawn", "torchrun"],
)
def test_both_script_styles_run_unchanged_on_two_emulated_hosts(
    outdir: Path,
    offline_cpu: None,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    script: str,
    expected: dict[str, Any],
) -> None:
    """``--distribution auto`` (the default) picks the runner from the script's style: the spawn style runs once
    per host, the torchrun style under torchrun; both meet over gloo across the two hosts."""
    source = _source(tmp_path, script)
    out = tmp_path / "out"
    argv = ["train", "--synth", str(outdir), "--source-dir", str(source), "--instance-count", "2", "--local"]
    assert main([*argv, "--output", str(out)]) == 0, capsys.readouterr()
    printed = capsys.readouterr().out
    assert "algo-1: exit 0" in printed and "algo-2: exit 0" in printed
    with tarfile.open(out / "model.tar.gz") as archive:
        member = archive.extractfile("seen.json")
        assert member is not None
        assert json.loads(member.read()) == expected
