"""The model interface without providers: fakes, retries, ledger and budget, pricing, registry."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from maxkernel.clients.models import (
    PRICES,
    Budget,
    BudgetExceeded,
    FunctionModel,
    Ledger,
    Message,
    MeteredModel,
    ModelConfigError,
    ModelError,
    ModelResponse,
    ModelSettings,
    Price,
    QueueExhausted,
    QueueModel,
    TransientModelError,
    Usage,
    cost_usd,
    default_model_spec,
    get_model,
    with_retries,
)

CHAT = [Message.system("You write Pallas kernels."), Message.user("tile this matmul please")]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# --- fakes --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_function_model_replies_with_word_count_usage_and_zero_cost() -> None:
    model = FunctionModel(
        lambda messages, settings: f"got {len(messages)} messages at t={settings.temperature}"
    )
    response = await model.request(CHAT, ModelSettings(temperature=0.2))
    assert response.text == "got 2 messages at t=0.2"
    assert response.usage == Usage(input_tokens=4 + 4, output_tokens=5)
    assert response.cost_usd == 0.0 and response.model == "function"
    assert model.requests[0][0] == CHAT


@pytest.mark.anyio
async def test_function_model_accepts_async_functions_and_full_responses() -> None:
    async def reply(messages: list[Message], settings: ModelSettings) -> ModelResponse:
        return ModelResponse(text="ok", usage=Usage(input_tokens=7, output_tokens=1), model="scripted")

    response = await FunctionModel(reply).request(CHAT)
    assert (response.text, response.usage.total_tokens, response.model) == ("ok", 8, "scripted")


@pytest.mark.anyio
async def test_queue_model_replies_in_order_then_says_it_is_exhausted() -> None:
    model = QueueModel(["first"])
    model.enqueue([TransientModelError("429"), "second"])
    assert (await model.request(CHAT)).text == "first"
    with pytest.raises(TransientModelError):
        await model.request(CHAT)
    assert (await model.request(CHAT)).text == "second"
    with pytest.raises(QueueExhausted, match=r"no replies left after 3 request\(s\): enqueue"):
        await model.request(CHAT)
    assert isinstance(QueueExhausted("x"), ModelError)


def test_queue_model_enqueue_rejects_a_bare_string() -> None:
    with pytest.raises(TypeError, match="list of replies"):
        QueueModel().enqueue("oops")


# --- retries ------------------------------------------------------------------------------------


class Sleeps(list):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.mark.anyio
async def test_transient_errors_are_retried_with_exponential_backoff() -> None:
    inner = QueueModel(
        [TransientModelError("503"), TransientModelError("429"), TransientModelError("t/o"), "ok"]
    )
    sleeps = Sleeps()
    model = with_retries(inner, attempts=5, base_delay=1.0, max_delay=30, sleep=sleeps, rng=lambda: 1.0)
    assert (await model.request(CHAT)).text == "ok"
    assert sleeps == [1.0, 2.0, 4.0]
    assert model.name == "queue"


@pytest.mark.anyio
async def test_backoff_is_jittered_capped_and_respects_retry_after() -> None:
    model = with_retries(QueueModel(), base_delay=1.0, max_delay=30, rng=lambda: 0.0)
    assert [model.delay_s(i) for i in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 15.0]
    assert model.delay_s(0, retry_after_s=12.0) == 12.0
    assert model.delay_s(0, retry_after_s=600.0) == 30.0


@pytest.mark.anyio
async def test_permanent_errors_are_not_retried() -> None:
    inner = QueueModel([ModelError("400 bad request"), "never reached"])
    sleeps = Sleeps()
    with pytest.raises(ModelError, match="400"):
        await with_retries(inner, sleep=sleeps).request(CHAT)
    assert sleeps == [] and inner.remaining == 1


@pytest.mark.anyio
async def test_exhausted_attempts_raise_the_last_transient_error() -> None:
    inner = QueueModel([TransientModelError(f"429 #{i}", retry_after_s=2.0) for i in range(3)])
    sleeps = Sleeps()
    with pytest.raises(TransientModelError, match=r"still failing after 3 attempts: 429 #2") as caught:
        await with_retries(inner, attempts=3, sleep=sleeps, rng=lambda: 0.5).request(CHAT)
    assert len(sleeps) == 2 and caught.value.retry_after_s == 2.0


def test_with_retries_rejects_zero_attempts() -> None:
    with pytest.raises(ValueError, match="attempts=0"):
        with_retries(QueueModel(), attempts=0)


# --- ledger and budget --------------------------------------------------------------------------


def _response(model: str, inp: int, out: int, cost: float | None) -> ModelResponse:
    return ModelResponse(
        text="", usage=Usage(input_tokens=inp, output_tokens=out), model=model, cost_usd=cost
    )


def test_ledger_totals_and_json_round_trip() -> None:
    ledger = Ledger(started_at_s=1000.0)
    ledger.record("planner", _response("gemini-2.5-pro", 1000, 200, 0.003), latency_ms=850.0)
    ledger.record("coder", _response("gemini-2.5-pro", 3000, 900, 0.01275), latency_ms=2100.0)
    ledger.record("coder", _response("openai:qwen3", 500, 50, None), latency_ms=90.0)
    assert ledger.calls == 3
    assert ledger.total_usage == Usage(input_tokens=4500, output_tokens=1150)
    assert ledger.total_cost_usd == pytest.approx(0.01575)
    assert ledger.unpriced_calls == 1
    assert ledger.by_role()["coder"] == Usage(input_tokens=3500, output_tokens=950)
    again = Ledger.from_json(ledger.to_json())
    assert again == ledger and again.entries[2].cost_usd is None


@pytest.mark.parametrize(
    ("budget", "limit", "message"),
    [
        (Budget(max_usd=0.01), "max_usd", r"max_usd=\$0\.01 reached; spent so far: \$0\.0120, 3,000 tokens"),
        (Budget(max_tokens=3000), "max_tokens", r"max_tokens=3,000 reached; spent so far: \$0\.0120"),
        (Budget(max_minutes=5), "max_minutes", r"max_minutes=5 reached; .*, 6\.0 min, 1 calls"),
    ],
)
def test_budget_stops_on_each_limit_and_says_the_spend(budget: Budget, limit: str, message: str) -> None:
    ledger = Ledger(started_at_s=0.0)
    Budget(max_usd=1, max_tokens=10**6, max_minutes=60).check(ledger, now_s=0.0)  # fresh run: fine
    ledger.record("coder", _response("gemini-2.5-pro", 2000, 1000, 0.012), latency_ms=1.0)
    with pytest.raises(BudgetExceeded, match=message) as caught:
        budget.check(ledger, now_s=360.0)
    assert caught.value.limit == limit
    Budget().check(ledger, now_s=10**9)  # no limits: never stops


def test_budget_message_admits_unpriced_calls() -> None:
    ledger = Ledger(started_at_s=0.0)
    ledger.record("coder", _response("openai:local", 10, 10, None), latency_ms=1.0)
    with pytest.raises(BudgetExceeded, match="1 calls with unknown price not counted"):
        Budget(max_tokens=20).check(ledger, now_s=0.0)


@pytest.mark.anyio
async def test_metered_model_records_each_call_and_checks_the_budget_first() -> None:
    ticks = iter([0.0, 0.25, 1.0, 1.5])
    ledger = Ledger()
    inner = QueueModel(["one two three", "four five six"])
    model = MeteredModel(inner, ledger, role="coder", budget=Budget(max_tokens=20), clock=lambda: next(ticks))
    await model.request(CHAT)
    await model.request(CHAT)
    assert [e.latency_ms for e in ledger.entries] == [250.0, 500.0]
    assert ledger.total_usage.total_tokens == 22 and ledger.entries[0].role == "coder"
    with pytest.raises(BudgetExceeded, match="max_tokens=20"):
        await model.request(CHAT)
    assert len(inner.requests) == 2  # the third call never reached the model


# --- pricing ------------------------------------------------------------------------------------


def test_cost_is_tokens_times_price_per_million() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=100_000)
    assert cost_usd("gemini-2.5-flash", usage) == pytest.approx(0.30 + 0.25)
    assert cost_usd("models/gemini-2.5-flash", usage) == pytest.approx(0.55)


def test_long_prompts_use_the_long_context_price() -> None:
    price = PRICES["gemini-2.5-pro"]
    short, long = (
        Usage(input_tokens=200_000, output_tokens=1000),
        Usage(input_tokens=200_001, output_tokens=1000),
    )
    assert cost_usd("gemini-2.5-pro", short) == pytest.approx((200_000 * 1.25 + 1000 * 10.0) / 1e6)
    assert cost_usd("gemini-2.5-pro", long) == pytest.approx(
        (200_001 * price.long_input_usd_per_mtok + 1000 * price.long_output_usd_per_mtok) / 1e6
    )


def test_unknown_models_have_unknown_cost_never_a_neighbours_price() -> None:
    usage = Usage(input_tokens=10, output_tokens=10)
    assert cost_usd("gemini-2.5-flash-image-preview", usage) is None
    assert cost_usd("qwen3-coder", usage) is None
    assert cost_usd(
        "my-model", usage, table={"my-model": Price(input_usd_per_mtok=1, output_usd_per_mtok=2)}
    ) == (pytest.approx(30 / 1e6))


# --- registry -----------------------------------------------------------------------------------


def test_gemini_without_a_key_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "GEMINI_API_KEY",
        "GOOGLE_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GENAI_USE_ENTERPRISE",
    ):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ModelConfigError, match=r"^no GEMINI_API_KEY set: export it, or use --model offline$"):
        get_model("gemini-2.5-pro")


def test_vertex_without_a_project_says_how_to_fix_it() -> None:
    env = {"GOOGLE_GENAI_USE_VERTEXAI": "true"}
    with pytest.raises(ModelConfigError, match="no GOOGLE_CLOUD_PROJECT is set: export it .*--model offline"):
        get_model("gemini-2.5-pro", env=env)


def test_gemini_with_a_key_builds_a_real_client_without_network() -> None:
    model = get_model("gemini-2.5-flash", env={"GEMINI_API_KEY": "test-key"})
    assert model.name == "gemini-2.5-flash" and model.client.aio.models is not None


@pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="the openai extra is not installed")
def test_openai_needs_a_key_only_for_the_official_endpoint() -> None:
    with pytest.raises(ModelConfigError, match="no OPENAI_API_KEY set: export it .*--model offline"):
        get_model("openai:gpt-5", env={})
    local = get_model("openai:qwen3", env={"OPENAI_BASE_URL": "http://127.0.0.1:8000/v1"})
    assert local.name == "openai:qwen3" and local.model_id == "qwen3"
    with pytest.raises(ModelConfigError, match="openai:<model>"):
        get_model("openai:")


def test_openai_extra_missing_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    from maxkernel.clients.models import openai_compat

    monkeypatch.setattr(openai_compat, "openai", None)
    with pytest.raises(ModelConfigError, match=r'pip install "maxkernel\[openai\]"'):
        get_model("openai:gpt-5", api_key="k")


def test_unknown_spec_lists_the_valid_forms() -> None:
    with pytest.raises(ModelConfigError, match="unknown model 'claude': use 'offline', 'gemini-<version>'"):
        get_model("claude")


def test_offline_seam_loads_the_offline_model_lazily(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "maxkernel.clients.offline.model", None)  # as if not written yet
    with pytest.raises(ModelConfigError, match="offline model is not available"):
        get_model("offline")

    class OfflineModel(QueueModel):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(name="offline")
            self.kwargs = kwargs

    fake_module = types.ModuleType("maxkernel.clients.offline.model")
    fake_module.OfflineModel = OfflineModel
    monkeypatch.setitem(sys.modules, "maxkernel.clients.offline.model", fake_module)
    model = get_model("offline", seed=3)
    assert isinstance(model, OfflineModel) and model.kwargs == {"seed": 3}


@pytest.mark.parametrize(
    ("env", "spec"),
    [
        ({}, "offline"),
        ({"GEMINI_API_KEY": "k"}, "gemini-2.5-pro"),
        ({"GOOGLE_API_KEY": "k"}, "gemini-2.5-pro"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "True"}, "gemini-2.5-pro"),
        ({"GOOGLE_GENAI_USE_VERTEXAI": "false"}, "offline"),
    ],
)
def test_default_model_spec_follows_the_credentials(env: dict[str, str], spec: str) -> None:
    assert default_model_spec(env) == spec


def test_conftest_refuses_real_network() -> None:
    import socket

    with pytest.raises(RuntimeError, match="only loopback is allowed"):
        socket.create_connection(("generativelanguage.googleapis.com", 443), timeout=1)
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock,
        pytest.raises(RuntimeError, match="8.8.8.8"),
    ):
        sock.connect(("8.8.8.8", 443))
