"""Read typed outputs out of model text.

Models wrap JSON in prose and fences, put several code blocks in one reply, and leave trailing commas.
This module finds the JSON object (a ```json block, else a bare object in the prose) and the last
```python block, validates them into the role's output model, and otherwise raises one
`OutputParseError` that says what was missing, so the loop can ask again with that text.
"""

from __future__ import annotations

import json
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from maxkernel.subagents.outputs import source_fields
from maxkernel.subagents.roles import Role, get_role

M = TypeVar("M", bound=BaseModel)

# A fenced block: opening ``` (or ~~~) with an optional language tag, body, closing fence on its own line.
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.M | re.S)
_PY_TAGS = {"python", "py", "python3"}
_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


class OutputParseError(ValueError):
    """A model reply did not contain the output its role requires; the message says what to send."""

    def __init__(self, message: str, *, missing: list[str] | None = None):
        super().__init__(message)
        self.missing = missing or []


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every fenced block, in order; an unclosed last fence counts too."""
    blocks = [(m.group(2).lower(), m.group(3)) for m in _FENCE.finditer(text)]
    # A reply cut off mid-block leaves an unclosed fence: take its body to the end of the text.
    stripped = _FENCE.sub("", text)
    m = re.search(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*\n(.*)\Z", stripped, re.M | re.S)
    if m:
        blocks.append((m.group(2).lower(), m.group(3)))
    return blocks


def _loads_object(s: str) -> dict | None:
    for candidate in (s, _TRAILING_COMMA.sub(r"\1", s)):
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _bare_objects(text: str) -> list[dict]:
    """Every top-level JSON object embedded in prose, in order."""
    decoder = json.JSONDecoder()
    found, i = [], 0
    while (i := text.find("{", i)) != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            # Retry this object without trailing commas before giving up on this brace.
            close = _matching_brace(text, i)
            value = _loads_object(text[i : close + 1]) if close is not None else None
            end = close + 1 if value is not None else i + 1
        if isinstance(value, dict):
            found.append(value)
            i = end
        else:
            i += 1
    return found


def _matching_brace(text: str, start: int) -> int | None:
    depth, in_str, esc = 0, False, False
    for j in range(start, len(text)):
        ch = text[j]
        if in_str:
            esc = ch == "\\" and not esc
            if ch == '"' and not esc:
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return j
    return None


def extract_json(text: str) -> dict:
    """The reply's JSON object: the last ```json block that parses, else a fenced block of JSON,
    else the last bare object in the prose outside code blocks."""
    blocks = fenced_blocks(text)
    for tag in ("json", "jsonc", "json5"):
        for lang, body in reversed(blocks):
            if lang == tag and (obj := _loads_object(body.strip())) is not None:
                return obj
    for lang, body in reversed(blocks):
        if lang in ("", "text") and (obj := _loads_object(body.strip())) is not None:
            return obj
    prose = _FENCE.sub("", text)
    objects = _bare_objects(prose)
    if objects:
        return objects[-1]
    if any(lang in ("json", "jsonc", "json5") for lang, _ in blocks):
        raise OutputParseError(
            "the ```json block is not a valid JSON object: check quotes, commas and escapes",
            missing=["json"],
        )
    raise OutputParseError("no JSON object found: end the reply with one ```json block", missing=["json"])


def extract_python(text: str) -> str:
    """The source of the reply's last ```python block (or last untagged block that looks like Python)."""
    blocks = fenced_blocks(text)
    for lang, body in reversed(blocks):
        if lang in _PY_TAGS:
            return body.rstrip() + "\n"
    for lang, body in reversed(blocks):
        if lang == "" and re.search(r"^\s*(import |from \S+ import |def )", body, re.M):
            return body.rstrip() + "\n"
    raise OutputParseError(
        "no ```python block found: put the complete module in one ```python block", missing=["python"]
    )


def _describe_errors(err: ValidationError) -> tuple[str, list[str]]:
    missing, lines = [], []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(root)"
        if e["type"] == "missing":
            missing.append(loc)
            lines.append(f"missing field `{loc}`")
        else:
            lines.append(f"field `{loc}`: {e['msg']}")
    return "; ".join(lines), missing


def parse_output(target: type[M] | Role | str, text: str) -> M:
    """Validate a model reply into `target` (an output model, a Role, or a role name)."""
    if isinstance(target, str):
        target = get_role(target)
    model: type[BaseModel] = target.output if isinstance(target, Role) else target
    name = model.__name__
    code_fields = source_fields(model)
    other_fields = [
        f for f, info in model.model_fields.items() if f not in code_fields and info.is_required()
    ]

    data: dict[str, Any] = {}
    json_error: OutputParseError | None = None
    try:
        data = extract_json(text)
    except OutputParseError as e:
        json_error = e
    if json_error is not None and other_fields:
        raise OutputParseError(f"{name}: {json_error}", missing=json_error.missing)

    for field in code_fields:
        if not str(data.get(field) or "").strip():
            try:
                data[field] = extract_python(text)
            except OutputParseError as e:
                raise OutputParseError(f"{name}.{field}: {e}", missing=[field]) from None

    try:
        return model.model_validate(data)
    except ValidationError as e:
        detail, missing = _describe_errors(e)
        raise OutputParseError(f"{name} reply is invalid: {detail}", missing=missing) from None
