"""Gemini models (`gemini-*`) through google-genai, with the Developer API key or Vertex AI.

Credentials: GEMINI_API_KEY (or GOOGLE_API_KEY), or Vertex AI with GOOGLE_GENAI_USE_VERTEXAI=true,
GOOGLE_CLOUD_PROJECT, GOOGLE_CLOUD_LOCATION and application-default credentials. google-genai's own
retries stay off (its default); wrap the model in `with_retries` instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from google import genai
from google.auth import exceptions as auth_errors
from google.genai import errors as genai_errors
from google.genai import types

from maxkernel.clients.models.base import (
    Message,
    Model,
    ModelConfigError,
    ModelError,
    ModelResponse,
    ModelSettings,
    TransientModelError,
    Usage,
    split_system,
)
from maxkernel.clients.models.pricing import cost_usd

_TRUE = ("1", "true")  # what google-genai itself accepts


def _transport_errors() -> tuple[type[BaseException], ...]:
    """Connection-level failures worth retrying, from whichever HTTP stacks are installed."""
    found: list[type[BaseException]] = [TimeoutError, ConnectionError, auth_errors.TransportError]
    for module_name, attr in (
        ("httpx2", "TransportError"),
        ("httpx", "TransportError"),
        ("aiohttp", "ClientConnectionError"),
    ):
        try:
            module = __import__(module_name)
        except ImportError:
            continue
        found.append(getattr(module, attr))
    return tuple(found)


def vertex_requested(env: Mapping[str, str]) -> bool:
    """True when the environment selects Vertex AI (google-genai's own switches)."""
    flag = env.get("GOOGLE_GENAI_USE_ENTERPRISE") or env.get("GOOGLE_GENAI_USE_VERTEXAI") or ""
    return flag.strip().lower() in _TRUE


def gemini_api_key(env: Mapping[str, str]) -> str | None:
    return env.get("GEMINI_API_KEY") or env.get("GOOGLE_API_KEY") or None


def make_client(
    *,
    api_key: str | None = None,
    vertexai: bool | None = None,
    project: str | None = None,
    location: str | None = None,
    base_url: str | None = None,
    env: Mapping[str, str] | None = None,
) -> genai.Client:
    """Build a google-genai client from arguments, falling back to the environment. No network."""
    env = os.environ if env is None else env
    http_options = types.HttpOptions(base_url=base_url) if base_url else None
    use_vertex = vertex_requested(env) if vertexai is None else vertexai
    try:
        if use_vertex:
            project = project or env.get("GOOGLE_CLOUD_PROJECT")
            location = location or env.get("GOOGLE_CLOUD_LOCATION")
            if not project:
                raise ModelConfigError(
                    "Vertex AI is selected (GOOGLE_GENAI_USE_VERTEXAI) but no GOOGLE_CLOUD_PROJECT is set: "
                    "export it (and GOOGLE_CLOUD_LOCATION), or use --model offline"
                )
            return genai.Client(vertexai=True, project=project, location=location, http_options=http_options)
        api_key = api_key or gemini_api_key(env)
        if not api_key:
            raise ModelConfigError("no GEMINI_API_KEY set: export it, or use --model offline")
        return genai.Client(vertexai=False, api_key=api_key, http_options=http_options)
    except auth_errors.DefaultCredentialsError as error:
        raise ModelConfigError(
            f"Vertex AI credentials not found ({error}): run `gcloud auth application-default login`, "
            "or set GEMINI_API_KEY, or use --model offline"
        ) from error


def _retry_after_s(error: genai_errors.APIError) -> float | None:
    """The server's suggested wait: a Retry-After header or a google.rpc.RetryInfo detail ("37s")."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is not None:
        try:
            return float(headers.get("retry-after"))
        except (TypeError, ValueError):
            pass
    body = error.details.get("error", error.details) if isinstance(error.details, dict) else {}
    for detail in body.get("details", []) if isinstance(body, dict) else []:
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        if isinstance(delay, str) and delay.endswith("s"):
            try:
                return float(delay[:-1])
            except ValueError:
                pass
    return None


def map_api_error(error: genai_errors.APIError, model: str) -> Exception:
    """google-genai APIError -> our exception that says what to do."""
    code, detail = error.code or 0, f"{error.code} {error.status}: {error.message}"
    if code in (408, 429) or code >= 500:
        return TransientModelError(f"{model}: {detail}", retry_after_s=_retry_after_s(error))
    if code in (401, 403) or "API key" in str(error.message):
        return ModelConfigError(
            f"{model}: credentials rejected ({detail}): check GEMINI_API_KEY or your Vertex AI project "
            "access, or use --model offline"
        )
    if code == 404:
        return ModelError(f"{model}: model not found ({detail}): check the name, e.g. gemini-2.5-pro")
    return ModelError(f"{model}: {detail}")


def to_contents(turns: Sequence[Message]) -> list[types.Content]:
    """Our turns -> Gemini contents (Gemini calls the assistant 'model')."""
    return [
        types.Content(role="model" if m.role == "assistant" else "user", parts=[types.Part(text=m.text)])
        for m in turns
    ]


def to_config(system: str | None, settings: ModelSettings) -> types.GenerateContentConfig:
    return types.GenerateContentConfig(
        system_instruction=system,
        temperature=settings.temperature,
        max_output_tokens=settings.max_output_tokens,
        top_p=settings.top_p,
        stop_sequences=list(settings.stop_sequences) or None,
        seed=settings.seed,
        http_options=(
            types.HttpOptions(timeout=int(settings.timeout_s * 1000)) if settings.timeout_s else None
        ),
    )


def to_usage(metadata: types.GenerateContentResponseUsageMetadata | None) -> Usage | None:
    """Billed tokens: the prompt (+ tool prompts) in; candidates + thoughts out."""
    if metadata is None:
        return None
    return Usage(
        input_tokens=(metadata.prompt_token_count or 0) + (metadata.tool_use_prompt_token_count or 0),
        output_tokens=(metadata.candidates_token_count or 0) + (metadata.thoughts_token_count or 0),
    )


def to_response(response: types.GenerateContentResponse, model: str) -> ModelResponse:
    feedback = response.prompt_feedback
    if not response.candidates and feedback is not None and feedback.block_reason is not None:
        reason = getattr(feedback.block_reason, "value", feedback.block_reason)
        raise ModelError(
            f"{model}: prompt blocked ({reason}): {feedback.block_reason_message or ''}".rstrip(": ")
        )
    finish = response.candidates[0].finish_reason if response.candidates else None
    usage = to_usage(response.usage_metadata)
    return ModelResponse(
        text=response.text or "",
        usage=usage or Usage(),
        model=response.model_version or model,
        cost_usd=cost_usd(model, usage) if usage is not None else None,  # unknown usage -> unknown cost
        finish_reason=getattr(finish, "value", finish),
    )


class GeminiModel(Model):
    """A `gemini-*` model. Pass `client` to supply your own google-genai client (tests do)."""

    def __init__(self, model_name: str, *, client: Any = None, **client_kwargs: Any) -> None:
        self.name = model_name.removeprefix("models/")
        self.client = client if client is not None else make_client(**client_kwargs)
        self._transport_errors = _transport_errors()

    async def request(
        self, messages: Sequence[Message], settings: ModelSettings | None = None
    ) -> ModelResponse:
        system, turns = split_system(messages)
        try:
            response = await self.client.aio.models.generate_content(
                model=self.name,
                contents=to_contents(turns),
                config=to_config(system, settings or ModelSettings()),
            )
        except genai_errors.APIError as error:
            raise map_api_error(error, self.name) from error
        except (auth_errors.DefaultCredentialsError, auth_errors.RefreshError) as error:
            raise ModelConfigError(
                f"{self.name}: Google credentials failed ({error}): run `gcloud auth application-default "
                "login` or set GEMINI_API_KEY, or use --model offline"
            ) from error
        except self._transport_errors as error:
            raise TransientModelError(f"{self.name}: {type(error).__name__}: {error}") from error
        return to_response(response, self.name)
