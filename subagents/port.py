"""The port_to_jax prompt: how to write a JAX reference from a PyTorch/Triton source (checked by `port`)."""

from __future__ import annotations

from importlib import resources
from string import Template


def render_port_prompt(source_text: str, source_path: str) -> str:
    """The prompt text for one source (its text inline, the format and the check to run)."""
    template = resources.files("maxkernel.subagents").joinpath("prompts", "port_to_jax.md").read_text("utf-8")
    return Template(template).substitute(source_text=source_text.rstrip(), source_path=source_path)
