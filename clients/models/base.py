"""The one model interface the loops talk to: messages in, a response with usage and cost out.

Every provider (Gemini, OpenAI-compatible, the offline model, the test fakes) implements a single
async method, `request`, so the Auto loop and graph search never know which one they hold.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant"]


class Message(BaseModel):
    """One turn of a conversation. System messages are instructions, not turns."""

    model_config = ConfigDict(frozen=True)

    role: Role
    text: str

    @classmethod
    def system(cls, text: str) -> Message:
        return cls(role="system", text=text)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls(role="user", text=text)

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls(role="assistant", text=text)


class ModelSettings(BaseModel):
    """Sampling and transport knobs; None means the provider's default."""

    model_config = ConfigDict(frozen=True)

    temperature: float | None = Field(default=None, ge=0.0)
    max_output_tokens: int | None = Field(default=None, gt=0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    stop_sequences: tuple[str, ...] = ()
    seed: int | None = None
    timeout_s: float | None = Field(default=None, gt=0.0)


class Usage(BaseModel):
    """Billed tokens. `output_tokens` includes any thinking/reasoning tokens (they are billed as output)."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class ModelResponse(BaseModel):
    """A reply. `cost_usd` is None when the price is unknown (never a guess); `finish_reason` is raw."""

    model_config = ConfigDict(frozen=True)

    text: str
    usage: Usage = Usage()
    model: str
    cost_usd: float | None = None
    finish_reason: str | None = None


class ModelConfigError(Exception):
    """The caller's setup is wrong (missing key, unknown model, missing extra); the message says the fix."""


class TransientModelError(Exception):
    """The provider failed in a way that may pass (rate limit, 5xx, timeout, dropped connection): retry."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ModelError(Exception):
    """The provider refused or failed permanently for this request; retrying will not help."""


def split_system(messages: Sequence[Message]) -> tuple[str | None, list[Message]]:
    """Join system messages into one instruction and return it with the remaining turns.

    Raises ValueError when there is no user/assistant turn: every provider needs one.
    """
    system = "\n\n".join(m.text for m in messages if m.role == "system")
    turns = [m for m in messages if m.role != "system"]
    if not turns:
        raise ValueError("a model request needs at least one user message, got only system messages")
    return (system or None), turns


class Model(ABC):
    """A chat model. Subclasses set `name` and implement `request`; nothing else is required."""

    name: str

    @abstractmethod
    async def request(
        self, messages: Sequence[Message], settings: ModelSettings | None = None
    ) -> ModelResponse:
        """Send the conversation and return the reply.

        Raises ModelConfigError, TransientModelError or ModelError; nothing provider-specific leaks.
        """

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
