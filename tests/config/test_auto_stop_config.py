"""``training.auto_stop``, ``fleets.groups[].auto_stop`` and ``fleets.notebooks[].auto_stop``: on by default in dev,
explicit in prod, and every bad value fails with the key, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks.config import CONFIG_DIR, ConfigError, load_config
from stacks.config.auto_stop import NotebookAutoStopConfig, TrainingAutoStopConfig

DEV = yaml.safe_load((CONFIG_DIR / "dev.yaml").read_text())


def _load(tmp_path: Path, change: Any) -> Any:
    data = yaml.safe_load(yaml.safe_dump(DEV))
    change(data)
    (tmp_path / "dev.yaml").write_text(yaml.safe_dump(data))
    return load_config("dev", config_dir=tmp_path)


def test_dev_is_on_by_default_and_prod_says_so_explicitly() -> None:
    dev, prod = load_config("dev"), load_config("prod")
    assert not dev.is_production and prod.is_production
    assert dev.training.auto_stop.enabled is None and dev.training.auto_stop.active(dev.is_production)
    assert dev.training.auto_stop.idle_minutes == 30
    assert all(g.auto_stop.active(False) for g in dev.fleets.groups)
    assert [n.auto_stop.max_session_minutes for n in dev.fleets.notebooks] == [480]
    assert prod.training.auto_stop.enabled is True and prod.training.auto_stop.idle_minutes == 60
    assert [g.auto_stop.enabled for g in prod.fleets.groups] == [True]


def test_null_means_off_in_production_and_false_turns_it_off() -> None:
    assert TrainingAutoStopConfig().active(production=True) is False
    assert TrainingAutoStopConfig(enabled=False).active(production=False) is False
    assert NotebookAutoStopConfig(enabled=True).active(production=True) is True


def test_turned_off_in_dev(tmp_path: Path) -> None:
    config = _load(tmp_path, lambda d: d["training"].update(auto_stop={"enabled": False}))
    assert not config.training.auto_stop.active(config.is_production)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["training"].update(auto_stop={"idle_minutes": 7}),
         r"training\.auto_stop\.idle_minutes.*allowed: a multiple of 5 minutes from 10 to 1440"),
        (lambda d: d["training"].update(auto_stop={"idle_minutes": 5}), r"training\.auto_stop\.idle_minutes"),
        (lambda d: d["training"].update(auto_stop={"idle_minutes": 1445}), r"training\.auto_stop\.idle_minutes"),
        (lambda d: d["training"].update(auto_stop={"gpu_idle_percent": 0}),
         r"training\.auto_stop\.gpu_idle_percent.*allowed: > 0 and <= 100"),
        (lambda d: d["training"].update(auto_stop={"idle_after": 30}), r"training\.auto_stop\.idle_after"),
        (lambda d: d["fleets"]["notebooks"][0].update(auto_stop={"max_session_minutes": 30}),
         r"auto_stop\.max_session_minutes.*allowed: whole minutes from 60 \(1 hour\) to 10080 \(7 days\)"),
        (lambda d: d["fleets"]["groups"][0].update(auto_stop={"enabled": "sometimes"}), r"auto_stop\.enabled"),
        (lambda d: d["fleets"]["groups"][0].update(auto_stop={"idle_minutes": 30}),
         r"auto_stop\.idle_minutes"),  # a group's idle period is its alarm's (idle_minutes of the group)
    ],
)  # fmt: skip
def test_bad_auto_stop_values(tmp_path: Path, change: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        _load(tmp_path, change)
