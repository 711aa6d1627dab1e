"""`openai:<model>` for any OpenAI-compatible chat-completions endpoint.

api.openai.com by default; OPENAI_BASE_URL points it at vLLM, ollama, llama.cpp,
OpenRouter, ... Local servers need no real key. Needs the optional extra: pip install "maxkernel[openai]".
The SDK's own retries are off (max_retries=0); wrap the model in `with_retries` instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import urlparse

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

try:
    import openai
except ImportError:  # the extra is optional; say how to get it when someone asks for openai:<model>
    openai = None  # type: ignore[assignment]

INSTALL_HINT = 'the openai:<model> provider needs the openai package: pip install "maxkernel[openai]"'
OFFICIAL_HOST = "api.openai.com"
LOCAL_PLACEHOLDER_KEY = "not-needed"  # the SDK insists on some key; local servers ignore it


def is_official(base_url: str | None) -> bool:
    return base_url is None or urlparse(base_url).hostname == OFFICIAL_HOST


def _retry_after_s(headers: Any) -> float | None:
    try:
        return float(headers.get("retry-after"))
    except (AttributeError, TypeError, ValueError):
        return None


def map_openai_error(error: Exception, model: str) -> Exception:
    """openai SDK error -> our exception that says what to do."""
    if isinstance(error, openai.APIConnectionError):  # includes APITimeoutError
        return TransientModelError(f"{model}: {type(error).__name__}: {error}")
    if isinstance(error, openai.APIStatusError):
        code, detail = error.status_code, f"{error.status_code}: {error.message}"
        if code in (408, 409, 429) or code >= 500:
            return TransientModelError(
                f"{model}: {detail}", retry_after_s=_retry_after_s(error.response.headers)
            )
        if code in (401, 403):
            return ModelConfigError(
                f"{model}: credentials rejected ({detail}): check OPENAI_API_KEY and OPENAI_BASE_URL, "
                "or use --model offline"
            )
        if code == 404:
            return ModelError(
                f"{model}: not found at this endpoint ({detail}): check the model name and base URL"
            )
        return ModelError(f"{model}: {detail}")
    return ModelError(f"{model}: {type(error).__name__}: {error}")


class OpenAICompatModel(Model):
    """A chat-completions model. `model_id` is what the endpoint knows ("gpt-5", "qwen3:8b"); `name` is the spec."""

    def __init__(
        self,
        model_name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens_param: Literal["max_tokens", "max_completion_tokens"] | None = None,
        env: Mapping[str, str] | None = None,
        client: Any = None,
    ) -> None:
        if openai is None:
            raise ModelConfigError(INSTALL_HINT)
        env = os.environ if env is None else env
        self.model_id = model_name.removeprefix("openai:")
        self.name = f"openai:{self.model_id}"
        self.base_url = base_url or env.get("OPENAI_BASE_URL") or None
        self.official = is_official(self.base_url)
        # OpenAI's newer models reject max_tokens; local servers reliably accept it.
        self.max_tokens_param = max_tokens_param or (
            "max_completion_tokens" if self.official else "max_tokens"
        )
        if client is None:
            api_key = api_key or env.get("OPENAI_API_KEY")
            if not api_key:
                if self.official:
                    raise ModelConfigError(
                        "no OPENAI_API_KEY set: export it (or set OPENAI_BASE_URL to a local "
                        "server), or use --model offline"
                    )
                api_key = LOCAL_PLACEHOLDER_KEY
            client = openai.AsyncOpenAI(api_key=api_key, base_url=self.base_url, max_retries=0)
        self.client = client

    def _request_kwargs(self, settings: ModelSettings) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        if settings.temperature is not None:
            kwargs["temperature"] = settings.temperature
        if settings.top_p is not None:
            kwargs["top_p"] = settings.top_p
        if settings.max_output_tokens is not None:
            kwargs[self.max_tokens_param] = settings.max_output_tokens
        if settings.stop_sequences:
            kwargs["stop"] = list(settings.stop_sequences)
        if settings.seed is not None:
            kwargs["seed"] = settings.seed
        if settings.timeout_s is not None:
            kwargs["timeout"] = settings.timeout_s
        return kwargs

    async def request(
        self, messages: Sequence[Message], settings: ModelSettings | None = None
    ) -> ModelResponse:
        split_system(messages)  # same validation as every provider; OpenAI takes system turns inline
        try:
            completion = await self.client.chat.completions.create(
                model=self.model_id,
                messages=[{"role": m.role, "content": m.text} for m in messages],
                **self._request_kwargs(settings or ModelSettings()),
            )
        except openai.OpenAIError as error:
            raise map_openai_error(error, self.name) from error
        if not completion.choices:
            raise ModelError(f"{self.name}: the endpoint returned no choices")
        choice = completion.choices[0]
        usage = (
            Usage(
                input_tokens=completion.usage.prompt_tokens, output_tokens=completion.usage.completion_tokens
            )
            if completion.usage is not None
            else None
        )
        # Table prices are OpenAI's own; other endpoints (local, routers) charge differently or nothing.
        cost = cost_usd(self.model_id, usage) if usage is not None and self.official else None
        return ModelResponse(
            text=choice.message.content or "",
            usage=usage or Usage(),
            model=completion.model or self.model_id,
            cost_usd=cost,
            finish_reason=choice.finish_reason,
        )
