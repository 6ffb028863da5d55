"""One way to retire a public name: it keeps working for one release, and each use says what replaces it.

A renamed class, function, module attribute or keyword argument stays available for one minor release; every use
warns with a :class:`DeprecationWarning` that names the replacement (CHANGELOG.md lists what is deprecated). Giving a
deprecated keyword together with its replacement is an error, not a silent choice. CDK-free: config models and the
CLI use it too.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from gpu_constructs.errors import ValidationError


def warn_deprecated(old: str, replacement: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` (a dotted name, or ``Class(keyword=...)``) is deprecated in favour of ``replacement``.

    ``stacklevel`` 3 points at the caller of the function that calls this (the user's line)."""
    warnings.warn(
        f"{old} is deprecated and will be removed in the next minor release; use {replacement}",
        DeprecationWarning,
        stacklevel=stacklevel,
    )


def renamed_keywords(
    where: str, keywords: dict[str, Any], renames: Mapping[str, str], *, stacklevel: int = 4
) -> dict[str, Any]:
    """``keywords`` with each deprecated name of ``renames`` (old -> new) replaced by its new name, warning once
    per deprecated name used. A value given under both names raises :class:`ValidationError` naming both.

    ``stacklevel`` 4 points at the caller of the function that calls this; a construct's ``__init__`` passes 5,
    because jsii's constructor call sits between it and the user's line."""
    out = dict(keywords)
    for old, new in renames.items():
        if old not in out:
            continue
        if new in out and out[new] is not None:
            raise ValidationError(where, f"{old!r} and {new!r} are the same setting; give only {new!r}")
        warn_deprecated(f"{where}({old}=...)", f"{new}=", stacklevel=stacklevel)
        out[new] = out.pop(old)
    return out


def deprecated_attributes(module: str, aliases: Mapping[str, tuple[str, Callable[[], Any]]]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` serving deprecated attributes: ``name -> (replacement, value factory)``.

    Use as ``__getattr__ = deprecated_attributes(__name__, {...})``; other unknown names raise AttributeError."""

    def __getattr__(name: str) -> Any:
        if name not in aliases:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        replacement, value = aliases[name]
        warn_deprecated(f"{module}.{name}", replacement)
        return value()

    return __getattr__


def deprecated_class_alias(old: str, new: type[Any], renamed_fields: Mapping[str, str] | None = None) -> type[Any]:
    """A subclass of ``new`` named ``old`` that warns when instantiated: a renamed value type keeps working
    (``isinstance`` checks against ``new`` still hold) for one release.

    ``renamed_fields`` (old -> new) are fields renamed with the class: the alias takes their old names as
    deprecated keywords (:func:`renamed_keywords`) and reads them as deprecated attributes, so code written
    against the old class runs unchanged."""
    renames = dict(renamed_fields or {})

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        warn_deprecated(f"{new.__module__}.{old}", f"{new.__module__}.{new.__name__}")
        new.__init__(self, *args, **renamed_keywords(old, kwargs, renames))

    namespace: dict[str, Any] = {"__init__": __init__, "__doc__": f"Deprecated: use :class:`{new.__name__}`."}
    for old_field, new_field in renames.items():
        namespace[old_field] = _renamed_attribute(old, old_field, new_field)
    return type(old, (new,), namespace)


def _renamed_attribute(owner: str, old: str, new: str) -> property:
    """A read-only attribute ``old`` of class ``owner`` that warns and returns attribute ``new``."""

    def get(self: Any) -> Any:
        warn_deprecated(f"{owner}.{old}", f"{owner}.{new}")
        return getattr(self, new)

    return property(get, doc=f"Deprecated: use ``{new}``.")


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a module under its former dotted name: the module at its new name, warning once per import."""

    def __init__(self, moved: Mapping[str, str]) -> None:
        self.moved = dict(moved)
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.moved:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        warn_deprecated(f"the module {spec.name}", f"{self.moved[spec.name]} (the same module, moved)", stacklevel=5)
        module = importlib.import_module(self.moved[spec.name])
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run (the module is the one imported under its new name); the import system set its
        ``__spec__`` to the former name's, which is put back."""
        for old, new in self.moved.items():
            if new == module.__name__ and old in self._specs:
                module.__spec__ = self._specs.pop(old)


def moved_modules(moved: Mapping[str, str]) -> None:
    """Keep each former module path of ``moved`` (old dotted name -> new dotted name) importable for one release,
    as the very module at its new path (``import``, ``from ... import`` and ``mock.patch`` strings all work);
    each first import warns with the new path. Installed once by the package whose modules moved."""
    if not any(isinstance(finder, _MovedModuleFinder) and finder.moved == dict(moved) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder(moved))
