"""The traced program in a prompt: written once into the task text by the Auto loop, read back by models.

The section is a heading and one compact JSON block (the server's `describe_reference` result), so an
LLM reads the reference's shapes and ops and the offline model rebuilds the program exactly.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

HEADING = "## Traced program (describe_reference)"
MAX_CHARS = 200_000  # a larger program is summarised by its census only
_RE = re.compile(re.escape(HEADING) + r"[^\n]*\n(?:[^\n`]*\n)?```json\n(.*?)\n```", re.S)


def lists_equations(program: dict[str, Any]) -> bool:
    """Whether `program`'s section lists its equations (a larger one is summarised by its census only)."""
    return len(json.dumps(program, separators=(",", ":"))) <= MAX_CHARS


def smaller_size(program: dict[str, Any]) -> str | None:
    """The traced size (of `program`'s variants) with the fewest input elements, when it has fewer than
    `program`'s own: where a program is too large to list, the same reference traced there may not be
    (7p: one block per sequence slot, 56 at full, 7 at small)."""
    from maxkernel.tpu_tools.problem.sizes import DERIVED

    def elements(inputs: list[dict[str, Any]]) -> int:
        return sum(math.prod(t["shape"]) for t in inputs)

    named = {
        k: v["inputs"] for k, v in (program.get("variants") or {}).items() if ":" not in k and k != DERIVED
    }  # the reference's own sizes, not the judge's generated ones
    if not named:
        return None
    best = min(named, key=lambda k: elements(named[k]))
    return best if elements(named[best]) < elements(program.get("inputs", [])) else None


def program_section(program: dict[str, Any]) -> str:
    """The task-text section for `program` (inputs, equations, outputs, census)."""
    text = json.dumps(program, separators=(",", ":"))
    if len(text) > MAX_CHARS:
        brief = {
            k: program.get(k)
            for k in ("reference", "size", "inputs", "out_specs", "census", "unrenderable", "mesh", "notes")
        }
        brief["note"] = f"{len(program.get('equations', []))} equations, too many to list"
        text = json.dumps(brief, separators=(",", ":"))
    return (
        f"{HEADING}\nThe reference's workload traced with jax.make_jaxpr at size {program.get('size')!r}: "
        f"input specs, every equation (primitive, operands, output shapes, parameters) and a census.\n"
        f"```json\n{text}\n```"
    )


def find_program(text: str) -> dict[str, Any] | None:
    """The last complete program section in `text` (None if there is none or it lists no equations)."""
    found = _RE.findall(text)
    if not found:
        return None
    try:
        program = json.loads(found[-1])
    except ValueError:
        return None
    return program if isinstance(program, dict) and "equations" in program else None
