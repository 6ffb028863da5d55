"""Read ``config/<env>.yaml`` into an :class:`EnvConfig`; errors name the file, key, value and what is allowed."""

from __future__ import annotations

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
    """Load and validate ``config/<env_name>.yaml``; raise :class:`ConfigError` on any problem."""
    if not ENV_NAME_RE.fullmatch(env_name or ""):
        raise ConfigError(
            f"env={env_name!r} is not a valid environment name; allowed: {', '.join(available_envs(config_dir))}"
        )
    path = config_dir / f"{env_name}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"env={env_name!r}: no file {path}; allowed environments: {', '.join(available_envs(config_dir))}"
        )
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
        raise ConfigError(f"{path}: env_name: {config.env_name!r} does not match the file name; allowed: {expected!r}")
    return config


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
