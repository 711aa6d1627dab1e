"""The traced program in a prompt: written once into the task text by the Auto loop, read back by models.

The section is a heading and one compact JSON block (the server's `describe_reference` result), so an
LLM reads the reference's shapes and ops and the offline model rebuilds the program exactly.
"""

from __future__ import annotations

import json
import re
from typing import Any

HEADING = "## Traced program (describe_reference)"
MAX_CHARS = 200_000  # a larger program is summarised by its census only
_RE = re.compile(re.escape(HEADING) + r"[^\n]*\n(?:[^\n`]*\n)?```json\n(.*?)\n```", re.S)


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
