"""The failure file (``/opt/ml/output/failure``, SageMaker's ``FailureReason``, at most 1024 characters:
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-output.html) carries the script's own
words for the first rank that failed:

* argparse's message for an unknown option, a traceback's last line for an exception, from the script's stderr;
* a 2-process torchrun job whose rank 1 is killed by SIGKILL while rank 0 waits in a collective names rank 1 and
  SIGKILL, not rank 0's "Connection reset by peer";
* the 1024-character cap keeps the end of the script's words (where the cause is);
* the rules (last words of a stderr, the first rank, the cap) on their own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_train import failure
from gpu_train.failure import MAX_CHARS, RankRecord

TRAINING_DIR = Path(__file__).resolve().parents[3] / "containers" / "training"


def _job(root: Path, script: str, hyperparameters: dict[str, str] | None = None) -> Path:
    config = root / "input" / "config"
    config.mkdir(parents=True)
    (config / "hyperparameters.json").write_text(json.dumps(hyperparameters or {}))
    (config / "inputdataconfig.json").write_text(json.dumps({"code": {"TrainingInputMode": "File"}}))
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    code = root / "input" / "data" / "code"
    code.mkdir(parents=True)
    (code / "train.py").write_text(script)
    return root


def _launch(root: Path, *args: str, timeout: float = 60, **extra: str) -> tuple[int, str, str]:
    """``python -m gpu_train launch --entry-point train.py ARGS``; returns (exit code, output, failure text)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "GPU_TRAIN_"))}
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in (str(TRAINING_DIR), env.get("PYTHONPATH", "")) if p),
        GPU_TRAIN_ROOT=str(root), SM_NUM_CPUS="1", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="", **extra,
    )  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "gpu_train", "launch", "--entry-point", "train.py", *args],
        cwd=str(TRAINING_DIR), env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    failure_file = root / "output" / "failure"
    text = failure_file.read_text().strip() if failure_file.exists() else ""
    return done.returncode, done.stdout + done.stderr, text


ARGPARSE_SCRIPT = """
import argparse
parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
parser.parse_args()
"""


def test_an_unknown_option_ends_with_argparses_message(tmp_path: Path) -> None:
    root = _job(tmp_path / "ml", ARGPARSE_SCRIPT, {"lr": "0.1", "momentum": "0.9"})
    code, output, text = _launch(root)
    assert code == 1, output
    assert text == (
        "train.py exited with code 2: usage: train.py [-h] [--lr LR] train.py: error: unrecognized arguments: "
        "--momentum 0.9"
    )
    assert "unrecognized arguments: --momentum 0.9" in output  # stderr still reaches the log


def test_an_exception_ends_with_its_message(tmp_path: Path) -> None:
    script = "def check(lr):\n    raise ValueError(f'lr {lr} is above 1: lower it')\ncheck(5)\n"
    code, output, text = _launch(_job(tmp_path / "ml", script))
    assert code == 1, output
    assert text == "ValueError: lr 5 is above 1: lower it"
    assert 'File "' in output and "in check" in output  # the whole traceback is in the log


def test_the_cap_keeps_the_end_of_the_scripts_words(tmp_path: Path) -> None:
    script = "raise RuntimeError('context ' * 300 + 'the actual cause: disk full')\n"
    code, output, text = _launch(_job(tmp_path / "ml", script))
    assert code == 1, output
    assert len(text) <= MAX_CHARS and len(text) > MAX_CHARS - 20
    assert text.endswith("context the actual cause: disk full") and "..." in text


KILLED_RANK_SCRIPT = """
import os, signal, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 1:
    time.sleep(0.5)  # rank 0 is in the all_reduce below by now
    os.kill(os.getpid(), signal.SIGKILL)  # what the kernel's out-of-memory killer does
dist.all_reduce(torch.ones(1))  # rank 0 waits here for rank 1, which never comes
"""


@pytest.mark.slow
def test_a_rank_killed_outright_is_named_not_the_survivors_connection_error(tmp_path: Path) -> None:
    root = _job(tmp_path / "ml", KILLED_RANK_SCRIPT, {"processes_per_host": "2"})
    code, output, text = _launch(root, timeout=120)
    assert code == 1, output
    assert text.startswith(
        "train.py rank 1 (of 2; local rank 1 on algo-1) was killed by SIGKILL (exit code -9), often the kernel's "
        "out-of-memory killer; see the job log"
    ), output
    assert "rank 0" not in text and "Connection" not in text and "gloo" not in text


# ------------------------------------------------------------------------------------------------ the rules

ARGPARSE_STDERR = ["usage: train.py [-h] [--lr LR]", "train.py: error: unrecognized arguments: --x 1", ""]
TRACEBACK_STDERR = [
    "some log line",
    "Traceback (most recent call last):",
    '  File "/c/train.py", line 3, in <module>',
    "    main()",
    "    ^^^^^^",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "[W1010 12:00:00.123456 ProcessGroupNCCL.cpp:1234] destroy_process_group() was not called",
]


@pytest.mark.parametrize(
    ("lines", "words"),
    [
        (ARGPARSE_STDERR, "usage: train.py [-h] [--lr LR] train.py: error: unrecognized arguments: --x 1"),
        (TRACEBACK_STDERR, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        ([f"line {i}" for i in range(9)], "line 4 line 5 line 6 line 7 line 8"),
        ([], ""),
    ],
    ids=["argparse", "traceback", "last-lines", "nothing"],
)
def test_last_words_of_a_stderr(lines: list[str], words: str) -> None:
    assert failure.last_words(lines) == words


def test_compose_keeps_the_head_and_the_end_of_the_words() -> None:
    text = failure.compose("train.py exited with code 1:", "x" * 3000 + " the cause")
    assert len(text) == MAX_CHARS
    assert text.startswith("train.py exited with code 1: ...xxx") and text.endswith("xxx the cause")
    assert failure.compose("head:", "short") == "head: short"


def _record(rank: int, at: float, code: int, words: str = "", stopped: bool = False) -> RankRecord:
    return RankRecord("train.py", code, at, rank=rank, world=4, local_rank=rank, host="algo-1", words=words,
                      stopped=stopped)  # fmt: skip


def test_the_first_failure_and_a_silent_death_just_after_it() -> None:
    reset = _record(0, 100.0, 1, "RuntimeError: [gloo] Connection reset by peer")
    killed = _record(1, 100.2, -9)
    assert failure.first_failure([reset, killed]) is killed  # its death caused the reset
    assert failure.first_failure([reset, _record(1, 100.0 + failure.SILENT_DEATH_WINDOW_S + 1, -9)]) is reset
    stopped = _record(2, 99.0, -15, stopped=True)  # torchrun stopped it after the others failed
    assert failure.first_failure([stopped, reset]) is reset
    assert failure.first_failure([stopped]) is stopped
    assert failure.first_failure([_record(0, 1.0, 0)]) is None
    text = failure.cause([reset, killed, stopped])
    assert text == (
        "train.py rank 1 (of 4; local rank 1 on algo-1) was killed by SIGKILL (exit code -9), often the kernel's "
        "out-of-memory killer; see the job log"
    )
    assert failure.cause([reset]) == "RuntimeError: [gloo] Connection reset by peer"  # its own line says it all
    exited = _record(2, 1.0, 3, "data/ is empty")
    expected = "train.py rank 2 (of 4; local rank 2 on algo-1) exited with code 3: data/ is empty"
    assert failure.cause([exited]) == expected


def test_records_round_trip_and_a_fresh_directory_per_launch(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    directory = failure.prepare_rank_dir(tmp_path / "output" / "failure", env)
    assert env[failure.RANK_DIR_ENV] == str(directory)
    record = _record(3, 5.0, 2, "train.py: error: bad")
    failure.write_record(directory, record)
    assert failure.read_records(directory) == [record]
    assert failure.prepare_rank_dir(tmp_path / "output" / "failure", env) == directory
    assert failure.read_records(directory) == []  # a new launch starts empty
    failure.write_record(directory, record)
    assert failure.take_records(tmp_path / "output" / "failure") == [record] and not directory.exists()
    other = failure.rank_dir(tmp_path / "host-2" / "output" / "failure")
    assert other != directory  # two emulated hosts on one machine keep theirs apart


def test_the_built_in_trainers_ranks_are_watched_and_report_to_their_runner(tmp_path: Path) -> None:
    """torchrun starts each rank of ``train`` through the script runner (a rank killed outright is recorded), and
    the trainer's own failure text goes to that runner rather than straight to the failure file."""
    from gpu_train import launcher, sagemaker

    cmd = launcher.torchrun_command(sagemaker.ResourceConfig(), 2)
    assert cmd[-4:] == ["-m", "gpu_train.script_runner", "-m", "gpu_train.worker"]
    failure_file = tmp_path / "output" / "failure"
    marker, report_file = failure.runner_files(os.getppid())
    assert not marker.exists()
    assert failure.report(failure_file, "DataError: corrupt shard") and failure_file.exists()  # no runner: the file
    failure_file.unlink()
    marker.touch()
    try:
        assert failure.report(failure_file, "DataError: corrupt shard")
        assert not failure.report(failure_file, "RuntimeError: later")  # the first report stays
        text, at = failure.read_report(report_file) or ("", 0.0)
        assert text == "DataError: corrupt shard" and at > 0 and not failure_file.exists()
    finally:
        marker.unlink()
        report_file.unlink()
