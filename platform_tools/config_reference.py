"""Generate the configuration reference (docs/config-reference.md) from the config model.

``python -m platform_tools.config_reference docs/config-reference.md`` (``make config-reference``) writes
it; ``python -m platform_tools.config_reference --check docs/config-reference.md`` exits 1 when the file
differs from a fresh generation. Every field of :class:`stacks.config.EnvConfig` and of each nested section is listed
with its YAML path, type, default and description, so the reference cannot drift from the code.
"""

from __future__ import annotations

import argparse
import enum
import json
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from stacks.config import EnvConfig

DEFAULT_OUTPUT = Path(__file__).resolve().parent.parent / "docs" / "config-reference.md"


@dataclass
class Section:
    """One config model, documented once, with every YAML path it appears under."""

    model: type[BaseModel]
    paths: list[str] = field(default_factory=list)


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    """``X | None`` -> (X, True); anything else -> (tp, False)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)) and len(args) == 1:
            return args[0], True
    return tp, False


def _unannotated(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def nested_models(tp: Any) -> list[tuple[str, type[BaseModel]]]:
    """The models reachable from a field type, with the path suffix each sits under (``""``, ``[]``, ``.<key>``)."""
    tp, _ = _strip_optional(_unannotated(tp))
    if _is_model(tp):
        return [("", tp)]
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (tuple, list) and args and _is_model(_strip_optional(args[0])[0]):
        return [("[]", _strip_optional(args[0])[0])]
    if origin is dict and len(args) == 2 and _is_model(_strip_optional(args[1])[0]):
        return [(".<name>", _strip_optional(args[1])[0])]
    return []


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def type_name(tp: Any) -> str:
    """A reader's name for a field type: ``integer``, ``list of string``, ``"a" | "b"``, a section link."""
    tp = _unannotated(tp)
    inner, optional = _strip_optional(tp)
    if optional:
        return f"{type_name(inner)} or null"
    if _is_model(tp):
        return f"[{tp.__name__}](#{_anchor(tp)})"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        return " \\| ".join(f"`{json.dumps(a)}`" for a in args)
    if origin in (Union, types.UnionType):
        return " or ".join(type_name(a) for a in args)
    if origin in (tuple, list):
        return f"list of {type_name(args[0])}" if args else "list"
    if origin is dict:
        return f"map of {type_name(args[0])} to {type_name(args[1])}" if len(args) == 2 else "map"
    simple = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if tp in simple:
        return simple[tp]
    return getattr(tp, "__name__", str(tp))


def _yaml_value(value: Any) -> str:
    if isinstance(value, BaseModel):
        return json.dumps(value.model_dump(mode="json", exclude_unset=True), sort_keys=True)
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, list):  # a list of sections (training.readable_inputs): each entry spelled out
        value = [v.model_dump(mode="json") if isinstance(v, BaseModel) else v for v in value]
    if isinstance(value, enum.Enum):
        value = value.value
    return json.dumps(value, sort_keys=True)


def default_text(info: FieldInfo) -> str:
    """The default as YAML would spell it, ``required`` when there is none, or a pointer to the section."""
    if info.is_required():
        return "**required**"
    value = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
    if value is PydanticUndefined:
        return "**required**"
    if isinstance(value, BaseModel) and not value.model_dump(exclude_defaults=True):
        return "section defaults"
    return f"`{_yaml_value(value)}`"


def description_text(info: FieldInfo, tp: Any) -> str:
    text = info.description
    if not text:
        models = nested_models(tp)
        if models:
            text = _first_line(models[0][1].__doc__)
    return _cell(text or "")


def _first_line(doc: str | None) -> str:
    return (doc or "").strip().split("\n\n")[0].replace("\n", " ").strip()


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def collect_sections(root: type[BaseModel] = EnvConfig) -> list[Section]:
    """Every model reachable from ``root``, depth-first in field order, each once with all its paths."""
    sections: dict[type[BaseModel], Section] = {}

    def visit(model: type[BaseModel], path: str) -> None:
        section = sections.get(model)
        if section is None:
            section = sections[model] = Section(model)
            section.paths.append(path)
            for name, info in model.model_fields.items():
                for suffix, child in nested_models(info.annotation):
                    visit(child, f"{path}.{name}{suffix}" if path else f"{name}{suffix}")
        elif path not in section.paths:
            section.paths.append(path)

    visit(root, "")
    return list(sections.values())


def render(root: type[BaseModel] = EnvConfig) -> str:
    """The whole reference as Markdown (deterministic: no dates, field order as declared)."""
    sections = collect_sections(root)
    out = [
        "# Configuration reference",
        "",
        "<!-- Generated from the stacks/config package by `make config-reference`; do not edit by hand. -->",
        "",
        "One YAML file per environment, `config/<env>.yaml`, selected with `make synth ENV=<env>` or",
        "`cdk synth -c env=<env>`. The file is parsed into the frozen, strict model of `stacks/config/`",
        "before any construct is built: unknown keys are errors, and every error names the file, the key,",
        "the bad value and what is allowed. A key left out takes the default below.",
        "",
        "Sections:",
        "",
    ]
    for section in sections:
        where = ", ".join(f"`{p}`" for p in section.paths) if section.paths != [""] else "the top level"
        out.append(f"- [{section.model.__name__}](#{_anchor(section.model)}) — {where}")
    for section in sections:
        model = section.model
        where = ", ".join(f"`{p}`" for p in section.paths) if section.paths != [""] else "the top level of the file"
        out += ["", f"## {model.__name__}", ""]
        doc = _first_line(model.__doc__)
        if doc:
            out += [doc, ""]
        out += [f"Where: {where}.", "", "| key | type | default | description |", "| --- | --- | --- | --- |"]
        for name, info in model.model_fields.items():
            tp = info.annotation
            out.append(f"| `{name}` | {type_name(tp)} | {default_text(info)} | {description_text(info, tp)} |")
    out.append("")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", nargs="?", type=Path, default=DEFAULT_OUTPUT, help="Markdown file to write")
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from a fresh generation")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run `make config-reference`", file=sys.stderr)
            return 1
        print(f"{args.output} is up to date")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output} ({len(collect_sections())} sections)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
