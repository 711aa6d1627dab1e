"""`OfflineModel`: a template-driven autotuner behind the LLM interface (no network, cost 0).

It reads the conversation like a model would: the system prompt names the role, the user prompt
names the task and carries feedback (estimates, compile errors, validation verdicts). It answers in
each role's reply format (subagents/parse.py). Across calls it keeps one walk per task: every config
proposed, its estimate and verdict; the planner moves greedily through the template's neighbourhood
of the best config so far and never proposes a config twice. Kernels carry an
`# offline-config: template=... k=v ...` marker, so feedback can be tied back to the config it is about.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from maxkernel.clients.models.base import Message, Model, ModelError, ModelResponse, ModelSettings, Usage
from maxkernel.clients.offline.baseline import baseline_template, recognised_tasks, reference_source
from maxkernel.clients.offline.program_text import find_program
from maxkernel.clients.offline.templates import (
    DEFAULT_VMEM_LIMIT_BYTES,
    Config,
    Dims,
    Template,
    UnknownTemplateError,
    config_key,
    config_text,
    parse_config_text,
    template_for,
)
from maxkernel.clients.offline.utilization_moves import Utilization, advice, move_rank, parse_utilization

ROLE_RE = re.compile(r"You are the (planner|implementer|debugger|tester|profile analyst|autotuner)\b", re.I)
_ROLE_BY_HEADING = {
    "# Plan a Pallas": "planner",
    "# Debug a failing": "debugger",
    "# Implement": "implementer",
}
ESTIMATE_RE = re.compile(r'"?estimated_time_us"?\s*[:=]\s*([0-9][0-9.eE+-]*)')
BOUND_RE = re.compile(r'"bound"\s*:\s*"(compute|memory|overhead)"|\b(compute|memory|overhead)-bound\b')
VMEM_RE = re.compile(r"VMEM: (\d+) bytes")
# The chip facts' numerics line (subagents/render.py NUMERICS_CPU): the kernel is checked at the host CPU's.
HOST_NUMERICS_RE = re.compile(r"Numerics: the host CPU computes every f32 dot in f32")
# The chip facts' vector-unit line (subagents/render.py BF16_VPU_*): whether bf16 epilogues run natively.
BF16_VPU_RE = re.compile(r"- Vector unit: (bf16 elementwise math is native|no bf16 arithmetic)")
SIZE_RE = re.compile(r"""\bsize["']?\s*[:=]\s*["']?(small|full)\b""")
OPERATOR_RE = re.compile(r"""\boperator["']?\s*[:=]\s*["']?([A-Za-z_]\w*)""")
FEEDBACK_HEADINGS = (
    "## Current kernel",
    "## Feedback",
    "## Previous version",
    "## Failing kernel",
    "## Kernel",
)
GUIDE_HEADING = "## Reference: Pallas on TPU"
PY_BLOCK_RE = re.compile(r"```python\n.*?\n```", re.S)
TASK_SHORT_RE = re.compile(r"\b(\d{1,2}[pk])(?:_\w+)?\b")


class NoTemplateFits(ModelError):
    """The traced reference uses ops no offline template can re-emit; the run should stop, not retry."""


def _words(text: str) -> int:
    return len(text.split())


def classify_error(text: str) -> str | None:
    """vmem | layout | buffering | mismatch | other, or None when the text reports no failure."""
    low = text.lower()
    if re.search(
        r"vmem[_ ]?(oom|exhausted)|exceed\w* (the )?(scoped )?vmem|out of (scoped )?vmem|vmem.*exceed", low
    ):
        return "vmem"
    if "buffering are supported" in low or "buffered(" in low and "error" in low:
        return "buffering"
    if re.search(r"\(8, ?128\)|divisible by|block shape|block_shape|lowering_error", low):
        return "layout"
    if re.search(r"mismatch|wrong_result|not close|max_abs_err|validation failed|allclose|nan_or_inf", low):
        return "mismatch"
    if re.search(r'"ok":\s*false|error|exception|failed|traceback', low):
        return "other"
    return None


@dataclass
class Record:
    config: Config
    estimate_us: float | None = None
    status: str = "proposed"  # proposed | failed | valid


@dataclass
class Walk:
    """One task's search: the template, its dims per size, and every config seen."""

    template: Template
    operator: str
    dims: dict[str, Dims]
    records: dict[str, Record] = field(default_factory=dict)
    last: Config | None = None
    failed_fixes: set[str] = field(default_factory=set)
    space: dict[str, list[Any]] = field(default_factory=dict)
    utilization: Utilization | None = None  # the compiler's latest view (utilization_moves.py)
    self_ingested: bool = False  # a baseline group's walk: its feedback is attached by _baseline_walk

    def legal(self, cfg: Config) -> bool:
        return self.template.legal(cfg, list(self.dims.values()))

    def record(self, cfg: Config) -> Record:
        return self.records.setdefault(config_key(cfg), Record(dict(cfg)))

    def best(self) -> Config | None:
        scored = [r for r in self.records.values() if r.status != "failed" and r.estimate_us is not None]
        if scored:
            return min(scored, key=lambda r: r.estimate_us or 0.0).config
        good = [r for r in self.records.values() if r.status == "valid"]
        return good[-1].config if good else None

    def known_good(self) -> Config | None:
        good = [r for r in self.records.values() if r.status == "valid"]
        if not good:
            return None
        return min(good, key=lambda r: r.estimate_us if r.estimate_us is not None else math.inf).config

    def cost(self, cfg: Config, size: str) -> float:
        dims = self.dims.get(size) or next(iter(self.dims.values()))
        return self.template.cost_us(cfg, dims)

    def fingerprint(self, cfg: Config, size: str) -> tuple:
        """What the config does at `size` (its rough cost and VMEM need), blind to clamped block sizes."""
        dims = self.dims.get(size) or next(iter(self.dims.values()))
        other = tuple(sorted((k, v) for k, v in cfg.items() if not k.startswith("block")))
        return round(self.template.cost_us(cfg, dims), 9), self.template.vmem_bytes(cfg, dims), other

    def snap(self, cfg: Config) -> Config:
        """The legal config closest to `cfg` (blocks compared on a log scale)."""
        merged = {**self.template.initial, **{k: v for k, v in cfg.items() if k in self.template.tunables}}
        if self.legal(merged):
            return merged

        def distance(c: Config) -> float:
            d = 0.0
            for k, v in merged.items():
                w = c[k]
                if isinstance(v, int) and isinstance(w, int) and v > 0 and w > 0:
                    d += abs(math.log2(w / v)) + (0.01 if w > v else 0.0)  # prefer smaller on ties
                elif v != w:
                    d += 1.0
            return d

        def score(c: Config) -> tuple[int, float]:
            return sum(len(self.template.check(c, d)) for d in self.dims.values()), distance(c)

        # One pass over a plain template's configs; a composite's illegal parts are mended one per pass
        # (its configs change one part at a time, and each part's rules are its own).
        cur = merged
        for _ in range(max(1, len(self.template.parts))):
            cur = min(self.template.configs(around=cur), key=score)
            if self.legal(cur):
                return cur
        raise UnknownTemplateError(f"template {self.template.name} has no legal config for these sizes")

    def neighbours(self, cfg: Config) -> list[Config]:
        out = []
        if not self.space:  # steps move between legal values only (256 cannot tile N=896, 1024 clamps to it)
            self.space = self.template.space(list(self.dims.values()))
        for k, vals in self.space.items():
            i = vals.index(cfg[k]) if cfg[k] in vals else 0
            for j in (i - 1, i + 1):
                if 0 <= j < len(vals):
                    out.append({**cfg, k: vals[j]})
        return out

    def untried(self, cands: list[Config]) -> list[Config]:
        return [c for c in cands if config_key(c) not in self.records and self.legal(c)]

    def next_config(self, size: str) -> tuple[Config, str]:
        """The next proposal and why; the first one is the template's conservative config."""
        if not self.records:
            if self.template.name == "baseline":
                return dict(self.template.initial), (
                    "first proposal: the baseline as brought, its own tuned parameters (every later proposal "
                    "must beat it; if none does, the baseline is kept)"
                )
            return self.snap(self.template.initial), "first proposal: the template's conservative config"
        base = self.best() or self.last or self.template.initial
        near = self.untried(self.neighbours(base))
        # Blocks are clamped to the dims, so two configs can be the same kernel at this size: try new ones first.
        seen = {self.fingerprint(r.config, size) for r in self.records.values()}

        def rank(c: Config) -> tuple[bool, int, float]:
            return self.fingerprint(c, size) in seen, move_rank(base, c, self.utilization), self.cost(c, size)

        if near:
            hint = advice(self.utilization) if self.utilization else None
            return min(near, key=rank), "greedy step: the cheapest untried neighbour" + (
                f" ({hint})" if hint else ""
            )
        rest = self.untried(self.template.configs(around=base))
        if rest:
            return min(rest, key=rank), "neighbourhood exhausted: best untried config"
        return base, "search exhausted: every legal config was tried; this is the best seen"


@dataclass
class Prompt:
    role: str
    text: str  # the latest user message
    conversation: str  # every user message, oldest first


def _role_of(messages: Sequence[Message]) -> str | None:
    system = "\n".join(m.text for m in messages if m.role == "system")
    if m := ROLE_RE.search(system):
        return m.group(1).lower().replace(" ", "_")
    last = next((m.text for m in reversed(messages) if m.role == "user"), "")
    if m := ROLE_RE.search(last):
        return m.group(1).lower().replace(" ", "_")
    for heading, role in _ROLE_BY_HEADING.items():
        if heading in last:
            return role
    return None


TASK_ID_FIELD_RE = re.compile(r'"id":\s*"([^"]+)"')


def _task_of(text: str) -> tuple[str | None, str | None]:
    """(task id, operator) named in the prompt, either may be None.

    The task's own `"id"` wins; else the task id named first in the text. A prompt also quotes other
    tasks (retrieved examples: 1p's flash kernel in 7p's prompt), so the registry's order never decides."""
    from maxkernel.jaxbench.registry import UnknownTaskError, list_task_ids, load_task, resolve_id

    own = TASK_ID_FIELD_RE.search(text)
    if own:
        try:
            tid = resolve_id(own.group(1))
            return tid, str(load_task(tid).CONFIG["operator"])
        except UnknownTaskError:
            pass
    named = [(i, tid) for tid in list_task_ids() if (i := text.find(tid)) >= 0]
    if named:
        tid = min(named)[1]
        return tid, str(load_task(tid).CONFIG["operator"])
    for short in TASK_SHORT_RE.findall(text):
        try:
            tid = resolve_id(short)
        except UnknownTaskError:
            continue
        return tid, str(load_task(tid).CONFIG["operator"])
    m = OPERATOR_RE.search(text)
    return None, (m.group(1) if m else None)


class OfflineModel(Model):
    """Answers every subagent role from kernel templates; see the module docstring."""

    def __init__(self, name: str = "offline", **_: Any) -> None:
        self.name = name
        self.walks: dict[str, Walk] = {}

    async def request(
        self, messages: Sequence[Message], settings: ModelSettings | None = None
    ) -> ModelResponse:
        conversation = list(messages)
        text, finish = self.reply(conversation)
        usage = Usage(input_tokens=sum(_words(m.text) for m in conversation), output_tokens=_words(text))
        return ModelResponse(text=text, usage=usage, model=self.name, cost_usd=0.0, finish_reason=finish)

    # ---- the reply --------------------------------------------------------------------------------
    def reply(self, messages: Sequence[Message]) -> tuple[str, str]:
        """(reply text, finish reason): 'stop', or 'unsupported' when no template fits the task."""
        users = [m.text for m in messages if m.role == "user"]
        if not users:
            return "The offline model needs a user message naming a JaxBench task.", "unsupported"
        role = _role_of(messages)
        prompt = Prompt(role=role or "", text=users[-1], conversation="\n\n".join(users))
        if (util := parse_utilization(prompt.text)) is not None:
            try:
                self._walk(prompt).utilization = util
            except UnknownTemplateError:
                pass
        if role == "tester":
            return self._tester(), "stop"
        if role == "profile_analyst":
            return self._analyst(prompt.text), "stop"
        try:
            walk = self._walk(prompt)
        except UnknownTemplateError as e:
            return str(e), "unsupported"
        if not walk.self_ingested:
            self._ingest(walk, prompt.text)
        size = (m.group(1) if (m := SIZE_RE.search(prompt.text)) else "small") if len(walk.dims) > 1 else ""
        size = size if size in walk.dims else next(iter(walk.dims))
        vmem_limit = self._vmem_limit(prompt.text)
        if role == "planner":
            return self._planner(walk, size), "stop"
        if role == "implementer":
            return self._implementer(walk, prompt.text, size, vmem_limit), "stop"
        if role == "debugger":
            return self._debugger(walk, prompt.text, vmem_limit), "stop"
        if role == "autotuner":
            return self._autotuner(walk, vmem_limit), "stop"
        return (
            "The offline model could not tell which role it is playing: the system prompt should say "
            "'You are the planner|implementer|debugger|tester|profile analyst|autotuner'.",
            "unsupported",
        )

    def _walk(self, prompt: Prompt) -> Walk:
        if (walk := self._baseline_walk(prompt)) is not None:
            return walk
        program = find_program(prompt.text) or find_program(prompt.conversation)
        if program is not None:
            if HOST_NUMERICS_RE.search(
                prompt.conversation
            ):  # f32 dots stay f32 (else as the TPU computes them)
                program = {**program, "numerics": "cpu"}
            if m := BF16_VPU_RE.search(prompt.conversation):  # the templates write epilogues for this chip
                program = {**program, "bf16_vpu": m.group(1).startswith("bf16")}
            return self._program_walk(program)
        tid, operator = _task_of(prompt.text.split("## Chip", 1)[0])
        if tid is None and operator is None:
            tid, operator = _task_of(prompt.conversation)
        if operator is None:
            raise UnknownTemplateError(
                "offline model found no JaxBench task id or operator in the prompt; name the task "
                "(e.g. 8p_GEMM) or use an LLM model (--model gemini-2.5-pro)"
            )
        template = template_for(operator)
        key = tid or operator
        if key not in self.walks:
            if tid is None:
                raise UnknownTemplateError(
                    f"offline model needs the task id to size operator {operator}; name the JaxBench task "
                    "(e.g. 8p_GEMM) or use an LLM model (--model gemini-2.5-pro)"
                )
            from maxkernel.jaxbench.registry import load_task

            sizes = load_task(tid).SIZES
            dims = {s: template.dims_of(d) for s, d in sizes.items()}
            self.walks[key] = Walk(template=template, operator=operator, dims=dims)
        return self.walks[key]

    def _baseline_walk(self, prompt: Prompt) -> Walk | None:
        """A Pallas reference (the kernel the user brought): its own file is the first kernel, then its own
        tuned parameters are walked (baseline.py), and where a JaxBench task states the same computation in
        plain JAX (same inputs and outputs at the target size) our template for it is offered once; after
        that the walk whose best estimate is lower goes on. Other roles follow the kernel's config marker.
        None for any other reference."""
        source = reference_source(prompt.conversation)
        if source is None:
            return None
        key = "baseline:" + hashlib.sha256(source.encode()).hexdigest()[:16]
        if key not in self.walks:
            template = baseline_template(source)
            if template is None:
                return None
            self.walks[key] = Walk(template=template, operator="program", dims={"full": {}})
            program = find_program(prompt.conversation)
            for tid in recognised_tasks(program) if program else []:
                try:  # a walk of its own (not the task's shared program walk): its feedback is ingested here
                    template, target, dims = program_template(_task_program(tid))
                    self.walks[key + ":ours"] = Walk(
                        template=template, operator="program", dims={target: dims}
                    )
                    break
                except Exception:  # noqa: BLE001 - no template of ours for it: the baseline walk alone
                    continue
        walks = [self.walks[key]] + ([self.walks[key + ":ours"]] if key + ":ours" in self.walks else [])
        # the planner's prompt carries the last iteration's feedback: text before any config marker is about
        # the walk chosen last time, the other walk takes only what follows its own markers; a debugger's
        # failing kernel is its own walk's (reply() leaves these walks to this)
        prev = self.walks.get(key + ":chosen", walks[0])
        for w in walks:
            w.self_ingested = True
            if prompt.role == "planner":
                self._ingest(w, prompt.text, own_last=w is prev)
        if prompt.role != "planner":  # the kernel or plan in hand names its template
            text = prompt.text
            if prompt.role == "implementer":  # the plan's marker, not the previous version's
                text = text.split("## Plan to implement", 1)[-1]
                for heading in ("## Previous version", "## Feedback", "## Rules for the module"):
                    text = text.split(heading, 1)[0]
            found = parse_config_text(text)
            named = [w for w in walks if found and w.template.name == found[0]]
            chosen = named[0] if named else prev
            if prompt.role == "debugger":
                self._ingest(chosen, prompt.text)
            return chosen
        if not walks[0].records or len(walks) == 1:
            chosen = walks[0]
        elif not walks[1].records:
            chosen = walks[1]
        else:
            chosen = min(walks, key=_best_estimate)
        self.walks[key + ":chosen"] = chosen
        return chosen

    def _program_walk(self, program: dict[str, Any]) -> Walk:
        """The walk of a traced program: its class picks the template, its shapes size it."""
        key = "program:" + hashlib.sha256(json.dumps(program, sort_keys=True).encode()).hexdigest()[:16]
        if key in self.walks:
            return self.walks[key]
        template, target, dims = program_template(program)
        self.walks[key] = Walk(template=template, operator="program", dims={target: dims})
        return self.walks[key]

    @staticmethod
    def _vmem_limit(text: str) -> int:
        m = VMEM_RE.search(text)
        return min(DEFAULT_VMEM_LIMIT_BYTES, int(m.group(1)) * 3 // 4) if m else DEFAULT_VMEM_LIMIT_BYTES

    def _ingest(self, walk: Walk, text: str, own_last: bool = True) -> None:
        """Attach each estimate / verdict in `text` to the config whose marker precedes it (`own_last`: text
        before any marker is about the walk's last config).

        Only the kernel and feedback sections are read: the embedded Pallas guide talks about errors too.
        """
        starts = [i for h in FEEDBACK_HEADINGS if (i := text.find(h)) >= 0]
        if starts:
            text = text[min(starts) :]
        elif GUIDE_HEADING in text:
            return
        parts = re.split(r"(?=offline-config: template=)", text)
        for i, part in enumerate(parts):
            found = parse_config_text(part) if i or part.startswith("offline-config") else None
            if found is None and i == 0:
                cfg = walk.last if own_last else None
            elif found is not None and found[0] == walk.template.name:
                cfg = walk.snap(found[1]) if set(found[1]) == set(walk.template.tunables) else None
            else:
                cfg = None
            if cfg is None:
                continue
            if i:  # the part opens inside the kernel's code block: drop the rest of the code
                part = part.split("\n```", 1)[-1]
            part = PY_BLOCK_RE.sub("", part)  # kernels mention errors (raise ValueError) too
            estimates = ESTIMATE_RE.findall(part)
            rec = walk.record(cfg) if (estimates or classify_error(part)) else None
            if rec is None:
                continue
            if estimates:
                rec.estimate_us = float(estimates[-1])
            if re.search(r"validation passed|\"validate_ok\":\s*true|all seeds match", part, re.I):
                rec.status = "valid"
            elif classify_error(part) is not None:
                rec.status = "failed"

    # ---- roles ------------------------------------------------------------------------------------
    def _plan_json(self, walk: Walk, cfg: Config, why: str, size: str) -> dict[str, Any]:
        t = walk.template
        dims = walk.dims[size]
        blocks = {k: int(v) for k, v in cfg.items() if k.startswith("block")}
        cost = t.cost_us(cfg, dims)
        bound = "memory" if t.name in ("rowwise", "elementwise") else "compute"
        if self._overhead_heavy(t, cfg, dims):
            bound = "overhead"
        best = walk.best()
        best_rec = walk.records.get(config_key(best)) if best else None
        seen = (
            f"best so far {config_text(t.name, best)} at {best_rec.estimate_us:.3g} us (estimate)"
            if (best_rec and best_rec.estimate_us is not None)
            else "no estimate seen yet"
        )
        return {
            "strategy": f"{t.name} template; {why}. offline-config: {config_text(t.name, cfg)}",
            "block_sizes": blocks,
            "grid_order": t.grid_axes(cfg),
            "dimension_semantics": t.semantics(cfg),
            "accumulator_dtype": str(cfg.get("acc_dtype", "float32")),
            "expected_bound": bound,
            "vmem_bytes_estimate": int(t.vmem_bytes(cfg, dims)),
            "risks": [
                f"{len(walk.records)} configs tried so far; blocks larger than a dim are clamped to it"
            ],
            "rationale": f"{why}; rough model {cost:.3g} us at the {size} size; {seen}",
            "template": t.name,
            "config": cfg,
        }

    @staticmethod
    def _overhead_heavy(t: Template, cfg: Config, dims: Dims) -> bool:
        base = t.cost_us({**cfg, **dict.fromkeys([k for k in cfg if k.startswith("block")], 1 << 20)}, dims)
        return t.cost_us(cfg, dims) > 2 * base

    def _planner(self, walk: Walk, size: str) -> str:
        cfg, why = walk.next_config(size)
        walk.record(cfg)
        walk.last = cfg
        plan = self._plan_json(walk, cfg, why, size)
        return f"Offline planner ({walk.template.name} template): {why}.\n\n```json\n{json.dumps(plan, indent=2)}\n```\n"

    def _config_from_plan(self, walk: Walk, text: str) -> Config | None:
        found = parse_config_text(text)
        if found and found[0] == walk.template.name:
            return walk.snap(found[1])
        m = re.search(r'"block_sizes"\s*:\s*(\{[^{}]*\})', text)
        if not m:
            return None
        try:
            blocks = {k: int(v) for k, v in json.loads(m.group(1)).items()}
        except (ValueError, TypeError):
            return None
        cfg = {k: v for k, v in blocks.items() if k in walk.template.tunables}
        order = re.search(r'"grid_order"\s*:\s*\[([^\]]*)\]', text)
        if order and "grid_order" in walk.template.tunables:
            cfg["grid_order"] = "".join(re.findall(r'"(\w)\w*"', order.group(1)))
            if cfg["grid_order"] not in walk.template.tunables["grid_order"]:
                cfg.pop("grid_order")
        return walk.snap(cfg) if cfg else None

    def _implementer(self, walk: Walk, text: str, size: str, vmem_limit: int) -> str:
        plan_part = text.split("## Plan to implement", 1)[-1]
        for heading in ("## Previous version", "## Feedback", "## Rules for the module"):
            plan_part = plan_part.split(heading, 1)[0]
        cfg = self._config_from_plan(walk, plan_part)
        why = "the plan's config"
        if cfg is None:
            cfg, why = walk.next_config(size)
        walk.record(cfg)
        walk.last = cfg
        source = walk.template.render(cfg, walk.operator, vmem_limit)
        notes = {
            "notes": f"rendered the offline {walk.template.name} template with {why}: {config_text(walk.template.name, cfg)}"
        }
        return f"```python\n{source.rstrip()}\n```\n\n```json\n{json.dumps(notes)}\n```\n"

    def _debugger(self, walk: Walk, text: str, vmem_limit: int) -> str:
        kernel = text.split("## Verdict")[0]
        found = parse_config_text(kernel)
        verdict = text.split("## Verdict", 1)[-1]
        history = (
            verdict.split("Previously failed fixes", 1)[-1] if "Previously failed fixes" in verdict else ""
        )
        for line in history.splitlines():
            if (f := parse_config_text(line)) and f[0] == walk.template.name:
                walk.failed_fixes.add(config_key(walk.snap(f[1])))
        cfg = (
            walk.snap(found[1])
            if found and found[0] == walk.template.name
            else (walk.last or walk.template.initial)
        )
        walk.record(cfg).status = "failed"
        kind = classify_error(verdict.split("Previously failed fixes")[0]) or "other"
        fix, cause = self._fix(walk, cfg, kind)
        walk.record(fix)
        walk.last = fix
        walk.failed_fixes.add(config_key(fix))  # a fix is tried once; a later failure must move on
        error_class = {
            "vmem": "vmem_oom",
            "layout": "block_shape",
            "mismatch": "wrong_result",
            "buffering": "lowering",
        }
        diag = {
            "cause": cause,
            "error_class": error_class.get(kind, "other"),
            "fix_summary": f"re-rendered the {walk.template.name} template -> offline-config: "
            f"{config_text(walk.template.name, fix)}",
        }
        source = walk.template.render(fix, walk.operator, vmem_limit)
        return f"```python\n{source.rstrip()}\n```\n\n```json\n{json.dumps(diag, indent=2)}\n```\n"

    def _fix(self, walk: Walk, cfg: Config, kind: str) -> tuple[Config, str]:
        t = walk.template
        dims = max(walk.dims.values(), key=lambda d: sum(d.values()))
        blocks = sorted(
            (k for k in cfg if k.startswith("block")),
            key=lambda k: -min(int(cfg[k]), max(dims.values())),
        )
        cands: list[tuple[Config, str]] = []
        if kind == "vmem":
            for k in blocks:
                cands.append(
                    ({**cfg, k: max(8, int(cfg[k]) // 2)}, f"VMEM exhausted: halved the largest block {k}")
                )
            if "buffers" in cfg:
                cands.append(({**cfg, "buffers": 1}, "VMEM exhausted: single-buffered the inputs"))
        elif kind == "buffering":
            cands.append(
                ({**cfg, "buffers": 2}, "this Mosaic supports only 1 or 2 buffers: back to double buffering")
            )
        elif kind == "layout":
            cands.append(
                (
                    walk.snap(cfg),
                    "block shape breaks the (8,128) rule or divisibility: snapped to legal multiples",
                )
            )
        good = walk.known_good()
        if good is not None:
            cands.append((good, "fell back to the last config that validated"))
        cands.append((t.initial, "fell back to the template's conservative config"))
        for c, why in cands:
            c = walk.snap(c)
            key = config_key(c)
            if (
                key != config_key(cfg)
                and key not in walk.failed_fixes
                and (walk.records.get(key) is None or walk.records[key].status != "failed")
            ):
                return c, why
        for c in walk.untried(walk.template.configs(around=walk.best() or cfg)):
            return c, "every targeted fix was already tried: moved to an untried legal config"
        return walk.snap(t.initial), "no untried config left: the conservative config"

    def _autotuner(self, walk: Walk, vmem_limit: int) -> str:
        t = walk.template
        fitting = t.space(list(walk.dims.values()), vmem_limit)  # none fits: the legal space, the tool prunes
        tunables = fitting if all(fitting.values()) else t.space(list(walk.dims.values()))
        swept = ""
        if t.parts:  # the parts' product is no sweep: the costliest kernel's tunables, the others held
            base = walk.snap(walk.best() or t.initial)
            part = max(
                t.parts, key=lambda p: p.template.cost_us({k: base[n] for k, n in p.keys.items()}, p.dims)
            )
            tunables = {k: (v if k in part.keys.values() else [base[k]]) for k, v in tunables.items()}
            swept = f" (swept: the costliest kernel's {', '.join(part.keys.values())}; the others held)"
        space = {
            "tunables": tunables,
            "constraints": list(t.constraints),
            "objective": "estimated_time_us (static estimate) to prune, then median_ms on the chip" + swept,
        }
        source = t.placeholder_source(walk.operator, vmem_limit)
        return (
            f"Search space of the offline {t.name} template; the placeholder source below is what "
            f"autotune_kernel takes.\n\n```python\n{source.rstrip()}\n```\n\n```json\n{json.dumps(space, indent=2)}\n```\n"
        )

    @staticmethod
    def _tester() -> str:
        cases = {
            "cases": [
                {"name": "default_normal", "distribution": "normal", "why": "the task's own distribution"},
                {
                    "name": "mixed_sign_large",
                    "distribution": "mixed_sign",
                    "scale": 4.0,
                    "why": "cancellation in f32 accumulators",
                },
                {
                    "name": "small_magnitude",
                    "distribution": "small_magnitude",
                    "why": "denormal-adjacent values, rounding order",
                },
            ]
        }
        return f"```json\n{json.dumps(cases, indent=2)}\n```\n"

    @staticmethod
    def _analyst(text: str) -> str:
        bounds = [a or b for a, b in BOUND_RE.findall(text)]
        bound = bounds[-1] if bounds else "unknown"
        evidence = [f"estimated_time_us = {v}" for v in ESTIMATE_RE.findall(text)[-1:]]
        evidence += [f"bound = {bound}"] if bounds else []
        evidence += [f"median_ms = {v}" for v in re.findall(r'"median_ms"\s*:\s*([0-9.eE+-]+)', text)[-1:]]
        util = parse_utilization(text)
        evidence += util.evidence() if util else []
        moves = {
            "overhead": "grow the blocks: fewer grid steps amortise the ~0.35 us per-step cost",
            "memory": "grow the tiles that are re-fetched (fewer passes over HBM) or fuse neighbouring ops",
            "compute": "keep tiles multiples of the MXU (256 on v6e) and operands in bf16 with f32 accumulation",
            "unknown": "run estimate_kernel or profile_kernel to get a bound before changing the kernel",
        }
        out = {
            "bottleneck": bound,
            "evidence": evidence or ["no estimate or profile numbers in the prompt"],
            "next_move": (advice(util) if util else None) or moves[bound],
        }
        return f"```json\n{json.dumps(out, indent=2)}\n```\n"


def _task_program(task_id: str) -> dict[str, Any]:
    """A JaxBench task's traced program, as the task text carries it (for a recognised baseline)."""
    from maxkernel.clients.offline.program_text import lists_equations, smaller_size
    from maxkernel.tpu_tools.problem.program import describe

    program = describe(task_id, None).model_dump(mode="json")
    if not lists_equations(program) and (smaller := smaller_size(program)) is not None:
        program = describe(task_id, smaller).model_dump(mode="json")
    return program


def _best_estimate(walk: Walk) -> float:
    best = walk.best()
    rec = walk.records.get(config_key(best)) if best else None
    return rec.estimate_us if rec and rec.estimate_us is not None else math.inf


def _rest_template(program: dict[str, Any]) -> tuple[Template, str, dict[str, int]]:
    """program_template for one stage of a program written in stages (what follows a convolution in
    conv_split, a stage of a program cut at its batched contraction in staged): no template is a
    ValueError there."""
    try:
        return program_template(program)
    except NoTemplateFits as e:
        raise ValueError(str(e)) from None


def _one_block(template: Template) -> bool:
    """Whether the template is the fused program in one grid step (its rows not tiled)."""
    return dict(template.tunables) == {"block_rows": (1,)}


def program_template(program: dict[str, Any]) -> tuple[Template, str, dict[str, int]]:
    """(the template, the target size's name, its dims) for a traced program: its class picks the
    template, its shapes at the target size size it. NoTemplateFits when no template fits."""
    from maxkernel.clients.offline.classify import classify
    from maxkernel.clients.offline.dims import Symbolic, program_at
    from maxkernel.clients.offline.fold import fold_constant_conds
    from maxkernel.clients.offline.rows import analyse
    from maxkernel.clients.offline.templates.fused import BLOCK_NAMES, build
    from maxkernel.clients.offline.templates.op_dispatch import build as build_op_family

    program = fold_constant_conds(program)  # a cond on a constant is its branch (Gemma 2's key positions)
    try:  # pooling, convolution, scans, arg-reductions: their own kernels (templates/op_families.py)
        family = build_op_family(program, _rest_template)
        family_miss = ""
    except ValueError as e:
        family, family_miss = None, f"; {e}"
    if family is not None:
        return family
    found = classify(program)
    if found.kind == "none":
        # one attention block per sequence slot scatter-added into zeros (vLLM's ragged paged attention):
        # a structure that changes with the batch layout, served by one kernel reading the layout as values
        from maxkernel.clients.offline.templates.ragged_paged import build as build_ragged

        ragged = build_ragged(program)
        if ragged is not None:
            return ragged
        # a contraction reading a value made from the inputs alone (a transposed conv's input dilated with
        # zeros and padded): that preparation as plain-JAX glue, the rest by its own template
        from maxkernel.clients.offline.templates.staged import build_prep

        try:
            prepped = build_prep(program, _rest_template)
        except ValueError as e:
            prepped, family_miss = None, f"{family_miss}; with its operands' preparation as glue: {e}"
        if prepped is not None:
            return prepped
        # equations no Pallas TPU body lowers as traced (sort, scatter-add, a top_k too wide for rounds):
        # left to XLA as plain-JAX glue, the rest in kernels by their own templates
        from maxkernel.clients.offline.templates.staged import build_held

        try:
            held = build_held(program, _rest_template)
        except ValueError as e:
            held, family_miss = None, f"{family_miss}; with them left to XLA: {e}"
        if held is not None:
            return held
        raise NoTemplateFits(
            f"offline model: no template fits this reference (ops: {', '.join(found.unsupported)}{family_miss}); "
            "use --model gemini-2.5-pro (or another LLM) or write a first kernel yourself"
        )
    if found.kind == "recurrence":  # a scan over time: its own family, built from the whole program
        from maxkernel.clients.offline.templates.recurrence import build as build_recurrence

        try:
            return build_recurrence(program)
        except ValueError as e:
            raise NoTemplateFits(f"offline model: no template fits this reference ({e})") from None
    if found.kind == "matmul":  # [B, S, K] x [K, N]: the 2-D templates on the rows merged, then wrapped
        from maxkernel.clients.offline.leading import collapse, wrap

        twin = collapse(program)
        if twin is not None:
            try:
                t, target, dims = program_template(twin)
            except NoTemplateFits:
                t = None
            # the twin's k-tiled (or structured) template; its row-tiled fallback is no better than ours
            if t is not None and not set(t.tunables) <= set(BLOCK_NAMES):
                return dataclasses.replace(t, source=wrap(t.source, twin)), target, dims
    sym = Symbolic(program)  # the kernel is written for the target size, from shapes read at trace time
    plan = analyse(program_at(program, sym.target))  # which axes tile: decided at the target
    try:
        template = build(program, plan, found.kind, sym)
    except ValueError as e:
        template, miss = None, e
    if not plan.tiled and (template is None or _one_block(template)):
        # rows mix and no structured template took it: cut at a batched contraction (stages.py) when
        # there is one, rather than one block holding everything (17p: VMEM exhausted at full)
        from maxkernel.clients.offline.templates.staged import build as build_staged

        try:
            staged = build_staged(program, _rest_template)
        except ValueError:
            staged = None
        if staged is not None:
            return staged
    if found.kind == "attention" and (template is None or template.name == "attention"):
        # no flash kernel took it whole (the fused template holds every score and weight of a row block):
        # an attention block with its projections (MLA) is cut, the attention a flash kernel, each other
        # contraction its own matmul kernel, RoPE and the layout between them glue (staged.build_attention)
        from maxkernel.clients.offline.templates.staged import build_attention

        try:
            chained = build_attention(program, _rest_template)
        except ValueError as e:
            chained, miss = None, e
        if chained is not None:
            return chained
    if template is None or set(template.tunables) <= set(BLOCK_NAMES):
        # the program in one body would hold a scan no Pallas TPU body lowers (cumsum): cut around it, the
        # scan by its family's kernel (or XLA), the rest by the templates their classes pick
        from maxkernel.clients.offline.templates.staged import build_held

        try:
            held = build_held(program, _rest_template)
        except ValueError as e:
            held = None
            if template is None:
                miss = f"{miss}; with its scans cut apart: {e}"
        if held is not None:
            return held
    if template is None:
        raise NoTemplateFits(f"offline model: no template fits this reference ({miss})") from None
    return template, sym.target, {"R": plan.rows}
