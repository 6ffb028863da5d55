"""The one mechanism for retiring a public name (gpu_constructs.deprecation)."""

from __future__ import annotations

import dataclasses

import pytest

from gpu_constructs.deprecation import (
    deprecated_attributes,
    deprecated_class_alias,
    renamed_keywords,
    warn_deprecated,
)
from gpu_constructs.errors import ValidationError


def test_a_warning_names_the_old_and_the_new() -> None:
    with pytest.warns(DeprecationWarning, match=r"old_thing is deprecated .*; use new_thing"):
        warn_deprecated("old_thing", "new_thing")


def test_renamed_keywords_map_old_to_new_and_refuse_both() -> None:
    with pytest.warns(DeprecationWarning, match=r"GpuFleet\(volume_gib=\.\.\.\) is deprecated.*use volume_size="):
        assert renamed_keywords("GpuFleet", {"volume_gib": 100, "x": 1}, {"volume_gib": "volume_size"}) == {
            "volume_size": 100,
            "x": 1,
        }
    assert renamed_keywords("GpuFleet", {"x": 1}, {"volume_gib": "volume_size"}) == {"x": 1}
    with pytest.raises(ValidationError, match="'volume_gib' and 'volume_size' are the same setting"):
        renamed_keywords("GpuFleet", {"volume_gib": 1, "volume_size": 2}, {"volume_gib": "volume_size"})


def test_deprecated_module_attributes_warn_and_others_are_missing() -> None:
    getattr_ = deprecated_attributes("pkg.mod", {"OLD": ("pkg.mod.NEW", lambda: 42)})
    with pytest.warns(DeprecationWarning, match=r"pkg\.mod\.OLD is deprecated.*use pkg\.mod\.NEW"):
        assert getattr_("OLD") == 42
    with pytest.raises(AttributeError, match="has no attribute 'OTHER'"):
        getattr_("OTHER")


def test_a_deprecated_class_alias_is_the_new_class_and_warns() -> None:
    @dataclasses.dataclass(frozen=True)
    class Alarms:
        threshold_percent: float = 5

    Old = deprecated_class_alias("AlarmThresholds", Alarms)
    with pytest.warns(DeprecationWarning, match=r"AlarmThresholds is deprecated.*use .*Alarms"):
        old = Old(threshold_percent=7)
    assert isinstance(old, Alarms) and old.threshold_percent == 7 and Old.__name__ == "AlarmThresholds"


def test_a_class_alias_takes_and_reads_renamed_fields() -> None:
    @dataclasses.dataclass(frozen=True)
    class Alarms:
        busy_percent: float = 80

    Old = deprecated_class_alias("Thresholds", Alarms, {"busy_pct": "busy_percent"})
    with (
        pytest.warns(DeprecationWarning, match=r"\.Thresholds is deprecated.*use .*\.Alarms"),
        pytest.warns(DeprecationWarning, match=r"Thresholds\(busy_pct=\.\.\.\) is deprecated.*use busy_percent="),
    ):
        old = Old(busy_pct=70)
    assert old.busy_percent == 70
    with pytest.warns(DeprecationWarning, match=r"Thresholds\.busy_pct is deprecated.*use Thresholds\.busy_percent"):
        assert old.busy_pct == 70
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ValidationError, match="'busy_pct' and 'busy_percent' are the same setting"),
    ):
        Old(busy_pct=70, busy_percent=60)


@pytest.mark.parametrize("old", sorted(__import__("gpu_constructs").MOVED_MODULES))
def test_a_moved_module_is_importable_at_its_former_path_as_the_same_module(old: str) -> None:
    """The root modules grouped into sub-packages (catalog, file systems, notebook, OIDC, packaging) keep their
    former import paths for one release: the same module object, with a warning naming the new path."""
    import importlib
    import subprocess
    import sys

    from gpu_constructs import MOVED_MODULES

    new = MOVED_MODULES[old]
    code = (
        "import importlib, sys, warnings\n"
        "warnings.simplefilter('error')\n"
        f"new = importlib.import_module({new!r})\n"
        "try:\n"
        f"    importlib.import_module({old!r})\n"
        "except DeprecationWarning as warning:\n"
        "    print(warning)\n"
        "warnings.simplefilter('ignore')\n"
        f"old = importlib.import_module({old!r})\n"
        f"assert old is new and new.__spec__.name == {new!r}, (old, new)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"the module {old} is deprecated" in done.stdout and f"use {new}" in done.stdout
    assert importlib.util.find_spec(new) is not None
