"""Two or more templates' kernels in one module: each stage's body with its names prefixed.

A template that writes a program in stages (conv_split.py: a convolution, then what follows it;
staged.py: a program cut at its batched contraction) puts each stage's template source below one header
and glues them with a `workload` of its own. `stage` turns a template into such a body: its fixed
parameters filled, its tunables renamed so two stages' `block_rows` stay apart, every top-level name
prefixed so two stages' `_kernel`s and `workload`s share one module.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from string import Template as _StrTemplate

from maxkernel.clients.offline.templates.base import Template


def top_level(text: str) -> list[str]:
    """Names a module body defines at top level (constants, functions), placeholders read as 0."""
    tree = ast.parse(re.sub(r"\$\{\w+\}", "0", text))
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.append(node.name)
        elif isinstance(node, ast.Assign):
            out += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append(node.target.id)
    return out


def stage(template: Template, prefix: str, keys: Mapping[str, str]) -> tuple[str, list[str]]:
    """(the stage's body below its config marker, its import lines): fixed parameters filled, tunables
    renamed by `keys`, every top-level name prefixed so two stages share one module."""
    text = _StrTemplate(template.source).safe_substitute(template.fixed("program"))
    for old, new in keys.items():
        text = text.replace("${" + old + "}", "${" + new + "}")
    marker = "${config_marker}${config_json}\n"
    if marker not in text:
        raise ValueError(f"the {template.name} template has no config marker line")
    head, body = text.split(marker, 1)
    imports = [ln for ln in head.splitlines() if ln.startswith(("import ", "from "))]
    for name in top_level(body):
        new = (
            f"{prefix.upper()}_{name}"
            if name.isupper()
            else f"_{prefix}{name}"
            if name[0] == "_"
            else f"{prefix}_{name}"
        )
        body = re.sub(rf"(?<![\w.{{]){re.escape(name)}(?!\w)", new, body)
    # each stage's kernel named apart (`s3_offline_matmul`): the estimate pairs a call with its compiled
    # program by name where several stages' grids would pair either way (six matmul stages in 3p)
    body = re.sub(r'(\bname=")(offline_\w+")', rf"\g<1>{prefix}_\g<2>", body)
    return body, imports
