"""Provider adapters without the internet: a fake google-genai client at the boundary, and the real
google-genai / openai SDKs talking to a tiny HTTP server on 127.0.0.1."""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from google.genai import errors as genai_errors
from google.genai import types

from maxkernel.clients.models import (
    Message,
    ModelConfigError,
    ModelError,
    ModelSettings,
    TransientModelError,
    get_model,
)
from maxkernel.clients.models.gemini import GeminiModel

CHAT = [
    Message.system("You write Pallas kernels."),
    Message.user("tile this matmul"),
    Message.assistant("which block sizes?"),
    Message.user("256x512"),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- a local HTTP server speaking whatever JSON a test scripts -----------------------------------

Reply = tuple[int, dict[str, str], dict[str, Any]]


class LocalServer:
    def __init__(self, reply: Callable[[str, dict[str, Any]], Reply]) -> None:
        self.reply = reply
        self.requests: list[tuple[str, dict[str, str], dict[str, Any]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802  (http.server's naming)
                body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))) or b"{}")
                server.requests.append((self.path, dict(self.headers), body))
                status, headers, payload = server.reply(self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> LocalServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[str, dict[str, Any]], Reply]], LocalServer]]:
    servers: list[LocalServer] = []

    def start(reply: Callable[[str, dict[str, Any]], Reply]) -> LocalServer:
        servers.append(LocalServer(reply).__enter__())
        return servers[-1]

    yield start
    for server in servers:
        server.__exit__()


# --- Gemini with a fake client at the SDK boundary -----------------------------------------------


class FakeGenaiModels:
    def __init__(self, outcome: types.GenerateContentResponse | Exception) -> None:
        self.outcome, self.calls = outcome, []

    async def generate_content(
        self, *, model: str, contents: list[types.Content], config: types.GenerateContentConfig
    ) -> types.GenerateContentResponse:
        self.calls.append(SimpleNamespace(model=model, contents=contents, config=config))
        if isinstance(self.outcome, Exception):
            raise self.outcome
        return self.outcome


def fake_client(outcome: types.GenerateContentResponse | Exception) -> SimpleNamespace:
    return SimpleNamespace(aio=SimpleNamespace(models=FakeGenaiModels(outcome)))


def gemini_reply(**overrides: Any) -> types.GenerateContentResponse:
    fields: dict[str, Any] = dict(
        candidates=[
            types.Candidate(
                content=types.Content(
                    role="model",
                    parts=[
                        types.Part(text="thinking about tiles", thought=True),
                        types.Part(text="def kernel(): ..."),
                    ],
                ),
                finish_reason=types.FinishReason.STOP,
            )
        ],
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1200,
            candidates_token_count=300,
            thoughts_token_count=500,
            total_token_count=2000,
        ),
        model_version="gemini-2.5-pro",
    )
    return types.GenerateContentResponse(**(fields | overrides))


@pytest.mark.anyio
async def test_gemini_maps_the_conversation_settings_and_response() -> None:
    client = fake_client(gemini_reply())
    model = GeminiModel("gemini-2.5-pro", client=client)
    settings = ModelSettings(temperature=0.3, max_output_tokens=4096, stop_sequences=("```\n",), timeout_s=60)
    response = await model.request(CHAT, settings)

    call = client.aio.models.calls[0]
    assert call.model == "gemini-2.5-pro"
    assert [(c.role, c.parts[0].text) for c in call.contents] == [
        ("user", "tile this matmul"),
        ("model", "which block sizes?"),
        ("user", "256x512"),
    ]
    assert call.config.system_instruction == "You write Pallas kernels."
    assert (call.config.temperature, call.config.max_output_tokens) == (0.3, 4096)
    assert call.config.stop_sequences == ["```\n"] and call.config.http_options.timeout == 60_000

    assert response.text == "def kernel(): ..."  # the thought part is not the answer
    assert (response.usage.input_tokens, response.usage.output_tokens) == (
        1200,
        800,
    )  # thoughts billed as output
    assert response.cost_usd == pytest.approx((1200 * 1.25 + 800 * 10.0) / 1e6)
    assert (response.model, response.finish_reason) == ("gemini-2.5-pro", "STOP")


@pytest.mark.anyio
async def test_gemini_without_usage_reports_unknown_cost_and_empty_text_on_max_tokens() -> None:
    reply = gemini_reply(
        candidates=[types.Candidate(finish_reason=types.FinishReason.MAX_TOKENS)], usage_metadata=None
    )
    response = await GeminiModel("gemini-2.5-pro", client=fake_client(reply)).request(CHAT)
    assert (response.text, response.finish_reason, response.cost_usd) == ("", "MAX_TOKENS", None)


@pytest.mark.anyio
async def test_gemini_blocked_prompt_is_a_permanent_error() -> None:
    reply = gemini_reply(
        candidates=None, prompt_feedback=types.GenerateContentResponsePromptFeedback(block_reason="SAFETY")
    )
    with pytest.raises(ModelError, match="prompt blocked"):
        await GeminiModel("gemini-2.5-pro", client=fake_client(reply)).request(CHAT)


def _api_error(
    cls: type[genai_errors.APIError], code: int, status: str, **extra: Any
) -> genai_errors.APIError:
    return cls(code, {"error": {"code": code, "message": f"{status} happened", "status": status, **extra}})


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("error", "expected", "match"),
    [
        (_api_error(genai_errors.ClientError, 429, "RESOURCE_EXHAUSTED"), TransientModelError, "429"),
        (_api_error(genai_errors.ServerError, 503, "UNAVAILABLE"), TransientModelError, "503"),
        (_api_error(genai_errors.ServerError, 500, "INTERNAL"), TransientModelError, "500"),
        (_api_error(genai_errors.ClientError, 400, "INVALID_ARGUMENT"), ModelError, "400 INVALID_ARGUMENT"),
        (_api_error(genai_errors.ClientError, 404, "NOT_FOUND"), ModelError, "model not found"),
        (_api_error(genai_errors.ClientError, 403, "PERMISSION_DENIED"), ModelConfigError, "GEMINI_API_KEY"),
        (TimeoutError("read timed out"), TransientModelError, "TimeoutError"),
    ],
)
async def test_gemini_errors_map_to_retry_or_stop(error: Exception, expected: type, match: str) -> None:
    with pytest.raises(expected, match=match):
        await GeminiModel("gemini-2.5-pro", client=fake_client(error)).request(CHAT)


@pytest.mark.anyio
async def test_gemini_rate_limit_carries_the_servers_retry_delay() -> None:
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "37s"}
    error = _api_error(genai_errors.ClientError, 429, "RESOURCE_EXHAUSTED", details=[retry_info])
    with pytest.raises(TransientModelError) as caught:
        await GeminiModel("gemini-2.5-pro", client=fake_client(error)).request(CHAT)
    assert caught.value.retry_after_s == 37.0


@pytest.mark.anyio
async def test_gemini_refuses_a_conversation_without_a_user_turn() -> None:
    with pytest.raises(ValueError, match="at least one user message"):
        await GeminiModel("gemini-2.5-pro", client=fake_client(gemini_reply())).request(
            [Message.system("hi")]
        )


# --- Gemini: the real google-genai SDK against a local server ------------------------------------


@pytest.mark.anyio
async def test_gemini_through_the_real_sdk_over_http(serve: Callable[..., LocalServer]) -> None:
    def reply(path: str, body: dict[str, Any]) -> Reply:
        if body["contents"][-1]["parts"][0]["text"] == "overload":
            return (
                503,
                {"retry-after": "2"},
                {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}},
            )
        payload = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": [{"text": "pl.pallas_call(...)"}]},
                    "finishReason": "STOP",
                }
            ],
            "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 6, "thoughtsTokenCount": 4},
            "modelVersion": "gemini-2.5-flash",
        }
        return 200, {}, payload

    server = serve(reply)
    model = get_model("gemini-2.5-flash", api_key="test-key", base_url=server.url)
    response = await model.request(CHAT, ModelSettings(temperature=0.0, max_output_tokens=128))
    assert (response.text, response.usage.input_tokens, response.usage.output_tokens) == (
        "pl.pallas_call(...)",
        40,
        10,
    )
    assert response.cost_usd == pytest.approx((40 * 0.30 + 10 * 2.50) / 1e6)

    path, headers, body = server.requests[0]
    assert path.endswith("/models/gemini-2.5-flash:generateContent")
    assert {k.lower(): v for k, v in headers.items()}["x-goog-api-key"] == "test-key"
    assert body["systemInstruction"]["parts"][0]["text"] == "You write Pallas kernels."
    assert [c["role"] for c in body["contents"]] == ["user", "model", "user"]
    assert body["generationConfig"] == {"temperature": 0.0, "maxOutputTokens": 128}

    with pytest.raises(TransientModelError, match="503") as caught:
        await model.request([Message.user("overload")])
    assert caught.value.retry_after_s == 2.0


# --- OpenAI-compatible: the real openai SDK against a local server --------------------------------

needs_openai = pytest.mark.skipif(
    importlib.util.find_spec("openai") is None, reason="the openai extra is not installed"
)


def chat_completion(
    text: str, *, model: str = "qwen3", usage: dict[str, int] | None = None
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": usage or {"prompt_tokens": 31, "completion_tokens": 7, "total_tokens": 38},
    }


@needs_openai
@pytest.mark.anyio
async def test_openai_compat_talks_chat_completions_to_a_local_server(
    serve: Callable[..., LocalServer],
) -> None:
    server = serve(lambda path, body: (200, {}, chat_completion("out_ref[...] = x")))
    model = get_model("openai:qwen3", env={"OPENAI_BASE_URL": f"{server.url}/v1"})
    response = await model.request(CHAT, ModelSettings(temperature=0.1, max_output_tokens=64, seed=7))

    assert response.text == "out_ref[...] = x"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (31, 7)
    assert response.cost_usd is None  # a local endpoint: its price is not OpenAI's table
    assert (response.model, response.finish_reason) == ("qwen3", "stop")

    path, headers, body = server.requests[0]
    assert path == "/v1/chat/completions"
    assert {k.lower(): v for k, v in headers.items()}["authorization"] == "Bearer not-needed"
    assert body["model"] == "qwen3" and body["max_tokens"] == 64 and body["seed"] == 7
    assert body["messages"] == [{"role": m.role, "content": m.text} for m in CHAT]


@needs_openai
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "headers", "expected", "match"),
    [
        (429, {"retry-after": "3"}, TransientModelError, "429"),
        (500, {}, TransientModelError, "500"),
        (401, {}, ModelConfigError, "OPENAI_API_KEY"),
        (404, {}, ModelError, "not found at this endpoint"),
        (400, {}, ModelError, "400"),
    ],
)
async def test_openai_compat_errors_map_to_retry_or_stop(
    serve: Callable[..., LocalServer], status: int, headers: dict[str, str], expected: type, match: str
) -> None:
    server = serve(lambda path, body: (status, headers, {"error": {"message": "nope", "type": "x"}}))
    model = get_model("openai:qwen3", base_url=f"{server.url}/v1", api_key="k")
    with pytest.raises(expected, match=match) as caught:
        await model.request(CHAT)
    if status == 429:
        assert caught.value.retry_after_s == 3.0
    assert len(server.requests) == 1  # the SDK's own retries are off: with_retries owns them


@needs_openai
@pytest.mark.anyio
async def test_openai_compat_connection_refused_is_transient() -> None:
    model = get_model("openai:qwen3", base_url="http://127.0.0.1:9/v1", api_key="k")  # discard port: closed
    with pytest.raises(TransientModelError, match="APIConnectionError"):
        await model.request(CHAT)


@needs_openai
def test_openai_official_endpoint_prices_and_uses_max_completion_tokens() -> None:
    model = get_model("openai:gpt-5", api_key="k", env={})
    assert model.official and model.max_tokens_param == "max_completion_tokens"
