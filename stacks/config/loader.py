"""Read ``config/<env>.yaml`` into an :class:`EnvConfig`; errors name the file, key, value and what is allowed.

Besides each file on its own, the files of one config directory are checked together: no two may share a
``resource_prefix`` (:func:`check_unique_prefixes`), which is what a copied file that kept its original's
prefix would do.
"""

from __future__ import annotations

import functools
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from stacks.config._base import CONFIG_DIR, DEFAULT_ENV, ENV_NAME_RE, ConfigError, available_envs
from stacks.config.env import EnvConfig


def _format_error(path: Path, exc: ValidationError, raw: dict[str, Any]) -> str:
    lines = [f"{path}: invalid configuration"]
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        value: Any = raw
        for part in err["loc"]:
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list | tuple) and isinstance(part, int) and part < len(value):
                value = value[int(part)]
            else:
                value = err.get("input")
                break
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            parent = _model_at(err["loc"][:-1])
            allowed = ", ".join(parent.model_fields) if parent else "see the config reference"
            msg = f"unknown key (typo?); allowed keys here: {allowed}"
        if isinstance(value, dict) and err["type"] != "extra_forbidden":
            # A rule across several keys: the message names the keys and values itself.
            lines.append(f"  {loc}: {msg}" if loc != "<root>" else f"  {msg}")
        else:
            lines.append(f"  {loc}: {value!r}: {msg}")
    return "\n".join(lines)


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = EnvConfig
    for part in loc:
        field = model.model_fields.get(str(part))
        if field is None or not isinstance(field.annotation, type) or not issubclass(field.annotation, BaseModel):
            return None
        model = field.annotation
    return model


def load_config(env_name: str = DEFAULT_ENV, config_dir: Path = CONFIG_DIR) -> EnvConfig:
    """Load and validate ``config/<env_name>.yaml``; raise :class:`ConfigError` on any problem, including another
    file of ``config_dir`` with the same ``resource_prefix`` (:func:`check_unique_prefixes`)."""
    if not ENV_NAME_RE.fullmatch(env_name or ""):
        raise ConfigError(
            f"env={env_name!r} is not a valid environment name; allowed: {', '.join(available_envs(config_dir))}"
        )
    path = config_dir / f"{env_name}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"env={env_name!r}: no file {path}; allowed environments: {', '.join(available_envs(config_dir))}"
        )
    check_unique_prefixes(config_dir)
    return parse_config(path.read_text(), path, env_name)


def parse_config(text: str, path: Path, env_name: str | None = None) -> EnvConfig:
    """Parse YAML ``text`` (read from ``path``) into an :class:`EnvConfig`."""
    _check_indentation(text, path)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: top level must be a mapping of keys to values, got {type(raw).__name__}")
    # YAML gives lists; the model stores tuples (immutable). Convert before strict validation.
    data = _lists_to_tuples(raw)
    try:
        config = EnvConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(path, exc, raw)) from None
    expected = env_name or path.stem
    if config.env_name != expected:
        original = path.parent / f"{config.env_name}.yaml"
        hint = ""
        if original.is_file() and original.resolve() != path.resolve():
            hint = (
                f" ({_shown(path)} looks like a copy of {_shown(original)}: set env_name: {expected} and give it "
                "a resource_prefix of its own)"
            )
        raise ConfigError(
            f"{path}: env_name: {config.env_name!r} does not match the file name; allowed: {expected!r}{hint}"
        )
    return config


# -- the files of one config directory together ---------------------------------------------------------------

#: PyYAML's safe loader, the libyaml one when PyYAML was built with it (the same documents, several times faster).
_SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

#: What ``resource_prefix`` must look like (the field's pattern in :class:`EnvConfig`).
_PREFIX_RE = re.compile(r"[a-z][a-z0-9-]{0,11}")


@dataclass(frozen=True)
class _EnvFile:
    """The two keys of one environment file that say whose stacks it synthesizes, as written in the file."""

    path: Path
    env_name: object  # as written: None when the key is missing
    prefix: str  # resource_prefix, or the model's default when the key is missing

    @property
    def stem(self) -> str:
        return self.path.stem


def _env_files(config_dir: Path) -> list[_EnvFile]:
    """Every environment file of ``config_dir`` whose prefix can be read; a file that cannot be read is left to
    its own load, which reports it."""
    found = []
    for path in sorted(config_dir.glob("*.yaml")):
        if not ENV_NAME_RE.fullmatch(path.stem):
            continue
        try:
            keys = _identity_keys(path.read_text())
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if keys is not None:
            found.append(_EnvFile(path=path, env_name=keys[0], prefix=keys[1]))
    return found


@functools.lru_cache(maxsize=64)
def _identity_keys(text: str) -> tuple[object, str] | None:
    """``(env_name, resource_prefix)`` of one file's text, None when there is no string prefix to compare.
    Cached per text: an app loads several configs, and each load checks the whole directory."""
    raw = yaml.load(text, Loader=_SAFE_LOADER)
    if not isinstance(raw, dict):
        return None
    prefix = raw.get("resource_prefix", EnvConfig.model_fields["resource_prefix"].default)
    return (raw.get("env_name"), prefix) if isinstance(prefix, str) else None


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is below it (``config/dev.yaml`` from the project root)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _owns(file: _EnvFile) -> bool:
    """The prefix names the file's environment (``gpu-dev`` for dev.yaml): the file it was probably copied from."""
    return file.prefix == file.stem or file.prefix.endswith(f"-{file.stem}")


def _new_prefix(file: _EnvFile, owner: _EnvFile | None, taken: set[str]) -> str | None:
    """A prefix for ``file`` that no file uses: the shared prefix with the owner's name swapped for this file's
    (``gpu-dev`` -> ``gpu-staging``), else the shared prefix plus this file's name, else its name alone."""
    base = file.prefix
    if owner is not None:
        base = base.removesuffix(owner.stem).rstrip("-")
    for candidate in (f"{base}-{file.stem}" if base else file.stem, file.stem):
        if _PREFIX_RE.fullmatch(candidate) and candidate not in taken:
            return candidate
    return None


def _copy_note(file: _EnvFile, by_stem: dict[str, _EnvFile]) -> str | None:
    """What to say when the file's env_name is not its file name (the sign of a copied file)."""
    if file.env_name == file.stem:
        return None
    note = f"{_shown(file.path)}: env_name is {file.env_name!r}, not {file.stem!r} (its file name)"
    original = by_stem.get(str(file.env_name)) if isinstance(file.env_name, str) else None
    if original is not None and original.path != file.path:
        note += f": it looks like a copy of {_shown(original.path)}"
    return f"{note}; set env_name: {file.stem} in {_shown(file.path)}"


def check_unique_prefixes(config_dir: Path = CONFIG_DIR) -> None:
    """Refuse two environment files in ``config_dir`` that give the same ``resource_prefix``.

    Stack names and named resources are ``<resource_prefix>-<name>`` (``gpu-dev-network``, endpoint
    ``gpu-dev-classifier``), so two environments with one prefix synthesize the same stack names. A stack name
    is unique per account and region (AWS CloudFormation User Guide, "Stack name": "must be unique in the Region
    in which you are creating the stack"), and ``cdk deploy`` of a stack whose name exists updates that stack:
    deploying one environment would replace the other's stacks and resources. This is exactly what a copied file
    does when only its ``env_name`` changes (``cp config/dev.yaml config/staging.yaml``).

    The :class:`ConfigError` names every file of the collision, the shared prefix, the prefix to set in each file
    that has to change (the files whose name the prefix does not carry), and any ``env_name`` that differs from
    its file name.
    """
    files = _env_files(config_dir)
    by_prefix: dict[str, list[_EnvFile]] = defaultdict(list)
    for file in files:
        by_prefix[file.prefix].append(file)
    clashes = {prefix: group for prefix, group in sorted(by_prefix.items()) if len(group) > 1}
    if not clashes:
        return
    by_stem = {file.stem: file for file in files}
    taken = {file.prefix for file in files}
    problems = []
    for prefix, group in clashes.items():
        owners = [file for file in group if _owns(file)]
        owner = owners[0] if len(owners) == 1 else None
        keep = owner or group[0]
        fixes = []
        for file in group:
            if file is keep:
                continue
            new = _new_prefix(file, owner, taken)
            if new is None:
                fixes.append(f"set resource_prefix in {_shown(file.path)} to a prefix no other file uses")
            else:
                taken.add(new)
                fixes.append(f"set resource_prefix: {new} in {_shown(file.path)}")
        shown = [_shown(file.path) for file in group]
        names = f"{', '.join(shown[:-1])} and {shown[-1]}"
        every = "both" if len(group) == 2 else f"all {len(group)}"
        lines = [
            f"{names} share resource_prefix: {prefix}: {every} would synthesize the stacks {prefix}-*, and deploying "
            "one environment would overwrite another's stacks and resources. Each environment file needs a "
            f"resource_prefix of its own ([a-z][a-z0-9-]{{0,11}}): {'; '.join(fixes)}"
        ]
        lines.extend(f"  {note}" for file in group if (note := _copy_note(file, by_stem)) is not None)
        problems.append("\n".join(lines))
    raise ConfigError("\n".join(problems))


def _check_indentation(text: str, path: Path) -> None:
    """Refuse tab indentation with a message that says what to do (PyYAML's own error names a 'token')."""
    for number, line in enumerate(text.splitlines(), start=1):
        indent = line[: len(line) - len(line.lstrip(" \t"))]
        if "\t" in indent and line.strip() and not line.lstrip().startswith("#"):
            raise ConfigError(
                f"{path}, line {number}: indented with a tab; YAML allows only spaces for indentation: "
                "indent with spaces (e.g. two per level)"
            )


def _lists_to_tuples(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _lists_to_tuples(v) for k, v in value.items()}
    if isinstance(value, list):
        return tuple(_lists_to_tuples(v) for v in value)
    return value
