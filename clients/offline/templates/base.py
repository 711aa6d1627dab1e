"""What every kernel template is: the Template record, its config marker and the block rule they share
(the families import this; the package's registry imports the families).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from string import Template as _StrTemplate
from typing import Any

Config = dict[str, Any]
Dims = dict[str, int]
MiB = 1 << 20
DEFAULT_VMEM_LIMIT_BYTES = 64 * MiB
CONFIG_MARKER = "# offline-config: "


class UnknownTemplateError(LookupError):
    """No template serves this operator or task; the message says what to do instead."""


@dataclass(frozen=True)
class Template:
    """One kernel family: its source text, search space and legality rules."""

    name: str
    operators: tuple[str, ...]
    source: str
    tunables: Mapping[str, tuple[Any, ...]]
    dims_of: Callable[[Mapping[str, Any]], Dims] = field(repr=False)
    problems: Callable[[Config, Dims], list[str]] = field(repr=False)
    vmem_bytes: Callable[[Config, Dims], int] = field(repr=False)
    cost_us: Callable[[Config, Dims], float] = field(repr=False)
    initial: Config = field(default_factory=dict)
    fixed: Callable[[str], dict[str, str]] = field(default=lambda op: {}, repr=False)
    constraints: tuple[str, ...] = ()
    grid_axes: Callable[[Config], list[str]] = field(default=lambda c: [], repr=False)
    semantics: Callable[[Config], list[str]] = field(default=lambda c: [], repr=False)
    # A composite's independent kernels (staged.compose): each part is checked at its own dims, so the
    # composite's space is the parts' spaces side by side, never their product (4e15 configs for 3p's seven).
    parts: tuple[Part, ...] = ()

    def check(self, config: Config, dims: Dims) -> list[str]:
        """Why `config` is illegal at `dims` (empty list: legal). Unknown or missing keys are errors."""
        out = [f"unknown tunable {k!r}" for k in config if k not in self.tunables]
        out += [f"missing tunable {k!r}" for k in self.tunables if k not in config]
        return out or self.problems(config, dims)

    def legal(self, config: Config, dims_list: list[Dims]) -> bool:
        return all(not self.check(config, d) for d in dims_list)

    def space(self, dims_list: list[Dims], vmem_limit: int | None = None) -> dict[str, list[Any]]:
        """Per tunable, the values that appear in at least one config legal at every dims (and, with
        `vmem_limit`, within it by the template's own VMEM count: a value no config can fit is no sweep
        point, only a compile that fails)."""
        if self.parts:  # legality and VMEM are each part's own, at its own dims (`dims_list` is not read)
            out: dict[str, list[Any]] = {}
            for p in self.parts:
                out.update({p.keys[k]: v for k, v in p.template.space([p.dims], vmem_limit).items()})
            return {k: out[k] for k in self.tunables}
        keep: dict[str, set] = {k: set() for k in self.tunables}
        for cfg in self.configs():
            if self.legal(cfg, dims_list) and (
                vmem_limit is None or all(self.vmem_bytes(cfg, d) <= vmem_limit for d in dims_list)
            ):
                for k, v in cfg.items():
                    keep[k].add(v)
        return {k: [v for v in vals if v in keep[k]] for k, vals in self.tunables.items()}

    def configs(self, around: Config | None = None) -> list[Config]:
        """Every config; for a composite, `around` (default: initial) with one part's config changed at a
        time: the parts are independent, so a walk tunes them one by one and never lists their product."""
        if not self.parts:
            keys = list(self.tunables)
            return [dict(zip(keys, v, strict=True)) for v in itertools.product(*self.tunables.values())]
        base = {**self.initial, **(around or {})}
        out = [dict(base)]
        for p in self.parts:
            for c in p.template.configs():
                moved = {**base, **{p.keys[k]: v for k, v in c.items()}}
                if moved != base:
                    out.append(moved)
        return out

    def params(self, operator: str, vmem_limit_bytes: int = DEFAULT_VMEM_LIMIT_BYTES) -> dict[str, str]:
        if operator not in self.operators:
            raise UnknownTemplateError(f"template {self.name!r} does not serve operator {operator!r}")
        return {
            "operator": operator,
            "config_marker": CONFIG_MARKER,
            "vmem_limit_bytes": str(int(vmem_limit_bytes)),
            **self.fixed(operator),
        }

    def placeholder_source(self, operator: str, vmem_limit_bytes: int = DEFAULT_VMEM_LIMIT_BYTES) -> str:
        """The source with fixed parameters filled and `${tunable}` placeholders left (autotune_kernel's input)."""
        text = _StrTemplate(self.source).safe_substitute(self.params(operator, vmem_limit_bytes))
        return text.replace("${config_json}", f"template={self.name} (generic: tunables are placeholders)")

    def render(self, config: Config, operator: str, vmem_limit_bytes: int = DEFAULT_VMEM_LIMIT_BYTES) -> str:
        """A complete candidate module for `config` (illegal keys raise ValueError)."""
        bad = [p for p in self.check(config, {}) if "tunable" in p]
        if bad:
            raise ValueError(f"{self.name}: {'; '.join(bad)}")
        values = {k: str(v) for k, v in config.items()}
        values["config_json"] = config_text(self.name, config)
        return _StrTemplate(self.source).substitute({**self.params(operator, vmem_limit_bytes), **values})


@dataclass(frozen=True)
class Part:
    """One kernel of a composite template: its own template, dims, and its tunables' names in the composite."""

    template: Template
    keys: Mapping[str, str]
    dims: Dims


def cheapest(*templates: Template | None, vmem_bytes: int = 40 * MiB) -> Template | None:
    """Of alternative templates for one program (None: one that does not serve it), the one whose
    cheapest config within `vmem_bytes` costs least by its own model; the models must share a unit
    (us on the same rough chip) and read the program's target from their closure, not from dims."""

    def best(t: Template) -> float:
        fits = [c for c in t.configs() if not t.check(c, {}) and t.vmem_bytes(c, {}) <= vmem_bytes]
        return min((t.cost_us(c, {}) for c in fits), default=float("inf"))

    found = [t for t in templates if t is not None]
    return min(found, key=best) if found else None


def config_key(config: Mapping[str, Any]) -> str:
    """Canonical text of a config, for sets and dict keys."""
    return json.dumps(dict(config), sort_keys=True)


def config_text(template: str, config: Mapping[str, Any]) -> str:
    """`template=matmul block_m=128 ...`: the marker the model reads back out of kernels and plans."""
    return " ".join([f"template={template}", *(f"{k}={v}" for k, v in config.items())])


def parse_config_text(text: str) -> tuple[str, Config] | None:
    """The (template, config) of the last marker in `text`, or None."""
    found = _MARKER_RE.findall(text)
    if not found:
        return None
    pairs = dict(p.split("=", 1) for p in found[-1].split())
    template = pairs.pop("template", "")
    return template, {k: int(v) if v.lstrip("-").isdigit() else v for k, v in pairs.items()}


_MARKER_RE = re.compile(r"offline-config: (template=\w+(?:[ \t]+\w+=[\w.]+)*)")


def divides(block: int, dim: int, align: int) -> str | None:
    """None when `block` (clamped to `dim`) tiles `dim` legally, else the reason."""
    b = min(block, dim)
    if dim % b:
        return f"{dim} is not divisible by block {b}"
    if b != dim and b % align:
        return f"block {b} is not a multiple of {align} (and not the full dim {dim})"
    return None
