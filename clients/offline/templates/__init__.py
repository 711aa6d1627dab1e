"""Pallas TPU kernel templates the offline model (and `autotune_kernel`) fills in.

A template is source text with `${name}` placeholders: tunables (block sizes, grid order, buffer
count, accumulator dtype) and fixed parameters (the operator's epilogue, the VMEM limit). Each family
knows its task dims, which configs are legal at those dims, its VMEM need, and a rough cost used only
to order proposals (the static estimate from tpu_tools is the verdict).

The registry below holds the operator templates. The families written from a reference's traced program
(fused, matmul_epilogue, flash_program, paged_attention, grouped_matmul, mlp_chain, mlp_two_pass, batched_matmul,
recurrence) are built per program by clients/offline/model.py's `program_template`, from the class
classify.py gives it.
"""

from __future__ import annotations

from maxkernel.clients.offline.templates.base import (  # noqa: F401 - the package's public names
    CONFIG_MARKER,
    DEFAULT_VMEM_LIMIT_BYTES,
    Config,
    Dims,
    MiB,
    Template,
    UnknownTemplateError,
    config_key,
    config_text,
    divides,
    parse_config_text,
)


def _registry() -> dict[str, Template]:
    from maxkernel.clients.offline.templates.elementwise import ELEMENTWISE
    from maxkernel.clients.offline.templates.flash import FLASH
    from maxkernel.clients.offline.templates.matmul import MATMUL
    from maxkernel.clients.offline.templates.rowwise import ROWWISE

    return {t.name: t for t in (MATMUL, ROWWISE, FLASH, ELEMENTWISE)}


TEMPLATES: dict[str, Template] = {}


def templates() -> dict[str, Template]:
    if not TEMPLATES:
        TEMPLATES.update(_registry())
    return TEMPLATES


def template_for(operator_or_task: str) -> Template:
    """The template serving an operator (`dense_matmul`) or a task id (`8p_GEMM`, `8p`)."""
    operator = operator_of(operator_or_task)
    for t in templates().values():
        if operator in t.operators:
            return t
    raise UnknownTemplateError(
        f"offline model has no template for operator {operator}; use an LLM model (--model gemini-2.5-pro)"
    )


def operator_of(operator_or_task: str) -> str:
    """The operator name of a task id, or the argument itself when it names no task."""
    from maxkernel.jaxbench.registry import UnknownTaskError, load_task, resolve_id

    try:
        return str(load_task(resolve_id(operator_or_task)).CONFIG["operator"])
    except (UnknownTaskError, KeyError, ValueError):
        return operator_or_task
