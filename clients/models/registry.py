"""Model specs (what `--model` takes) -> Model instances.

    offline            the built-in offline model (maxkernel.clients.offline), no key needed
    gemini-<version>   Gemini via google-genai, e.g. gemini-2.5-pro
    openai:<model>     any OpenAI-compatible endpoint, e.g. openai:gpt-5, or openai:qwen3 with OPENAI_BASE_URL

Provider modules are imported only when asked for, so a missing optional extra only matters to the
spec that needs it.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

from maxkernel.clients.models.base import Model, ModelConfigError

DEFAULT_GEMINI_MODEL = "gemini-2.5-pro"
OFFLINE_MODULE = "maxkernel.clients.offline.model"
SPEC_HELP = "use 'offline', 'gemini-<version>' (e.g. gemini-2.5-pro) or 'openai:<model>'"


def _offline_model(**kwargs: Any) -> Model:
    try:
        module = importlib.import_module(OFFLINE_MODULE)
    except ModuleNotFoundError as error:
        if error.name not in (OFFLINE_MODULE, OFFLINE_MODULE.rpartition(".")[0]):
            raise  # the offline model exists but one of its own imports is missing: show that
        raise ModelConfigError(
            f"the offline model is not available in this install ({OFFLINE_MODULE} not found): "
            f"use --model {DEFAULT_GEMINI_MODEL} with GEMINI_API_KEY, or --model openai:<model>"
        ) from error
    model_cls = getattr(module, "OfflineModel", None)
    if model_cls is None:
        raise ModelConfigError(f"{OFFLINE_MODULE} defines no OfflineModel class")
    return model_cls(**kwargs)


def get_model(spec: str, **kwargs: Any) -> Model:
    """Build the model named by `spec`; kwargs go to the provider (api_key, base_url, client, ...)."""
    spec = spec.strip()
    if spec == "offline":
        return _offline_model(**kwargs)
    if spec.startswith("gemini-"):
        from maxkernel.clients.models.gemini import GeminiModel

        return GeminiModel(spec, **kwargs)
    if spec.startswith("openai:"):
        model_id = spec.removeprefix("openai:").strip()
        if not model_id:
            raise ModelConfigError(f"{spec!r} names no model: write openai:<model>, e.g. openai:gpt-5")
        from maxkernel.clients.models.openai_compat import OpenAICompatModel

        return OpenAICompatModel(model_id, **kwargs)
    raise ModelConfigError(f"unknown model {spec!r}: {SPEC_HELP}")


def default_model_spec(env: Mapping[str, str] | None = None) -> str:
    """A Gemini model when Gemini credentials are configured, else "offline"."""
    from maxkernel.clients.models.gemini import gemini_api_key, vertex_requested

    env = os.environ if env is None else env
    if gemini_api_key(env) or vertex_requested(env):
        return DEFAULT_GEMINI_MODEL
    return "offline"


MODEL_DEFAULT_TEXT = "gemini if GEMINI_API_KEY (or Vertex) is set, else offline"


def add_model(p: Any, what: str = "") -> None:
    """`--model`, one meaning and one default in every orchestrator verb (auto, search, suite)."""
    p.add_argument(
        "--model",
        help=f"offline, gemini-<version> or openai:<model>{what} (default: {MODEL_DEFAULT_TEXT})",
    )


def build_model(spec: str) -> Model:
    """The model behind `--model`, with transient-failure retries (tests replace this function)."""
    from maxkernel.clients.models.retry import with_retries

    return with_retries(get_model(spec))
