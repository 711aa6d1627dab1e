"""Working test models (not mocks): a scripted function model and a reply queue.

They behave like real providers: they return `ModelResponse`s with plausible usage (word counts) and
zero cost, raise the same exceptions, and keep the conversations they were sent for assertions.
"""

from __future__ import annotations

import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence

from maxkernel.clients.models.base import Message, Model, ModelError, ModelResponse, ModelSettings, Usage

Reply = str | ModelResponse
ReplyFn = Callable[[list[Message], ModelSettings], Reply | Awaitable[Reply]]


def count_words(text: str) -> int:
    """A stand-in token count: whitespace-separated words."""
    return len(text.split())


def _to_response(reply: Reply, name: str, messages: Sequence[Message]) -> ModelResponse:
    if isinstance(reply, ModelResponse):
        return reply
    if not isinstance(reply, str):
        raise TypeError(f"a fake model reply must be str or ModelResponse, got {type(reply).__name__}")
    usage = Usage(
        input_tokens=sum(count_words(m.text) for m in messages),
        output_tokens=count_words(reply),
    )
    return ModelResponse(text=reply, usage=usage, model=name, cost_usd=0.0, finish_reason="stop")


class FunctionModel(Model):
    """Replies with `fn(messages, settings)`; fn may be sync or async and return str or ModelResponse.

    Raising from fn (e.g. TransientModelError) is how a test scripts a provider failure.
    """

    def __init__(self, fn: ReplyFn, *, name: str = "function") -> None:
        self.fn = fn
        self.name = name
        self.requests: list[tuple[list[Message], ModelSettings]] = []

    async def request(
        self, messages: Sequence[Message], settings: ModelSettings | None = None
    ) -> ModelResponse:
        conversation, settings = list(messages), settings or ModelSettings()
        self.requests.append((conversation, settings))
        reply = self.fn(conversation, settings)
        if inspect.isawaitable(reply):
            reply = await reply
        return _to_response(reply, self.name, conversation)


class QueueExhausted(ModelError):
    """A QueueModel was asked for more replies than were enqueued (a test bug, so never retried)."""


class QueueModel(Model):
    """Replies in order from `enqueue([...])`. An enqueued exception is raised instead of replying."""

    def __init__(self, replies: Iterable[Reply | Exception] = (), *, name: str = "queue") -> None:
        self.name = name
        self._queue: deque[Reply | Exception] = deque()
        self.requests: list[tuple[list[Message], ModelSettings]] = []
        self.enqueue(replies)

    def enqueue(self, replies: Iterable[Reply | Exception]) -> None:
        if isinstance(replies, str | ModelResponse):
            raise TypeError("enqueue takes a list of replies, e.g. enqueue(['first', 'second'])")
        self._queue.extend(replies)

    @property
    def remaining(self) -> int:
        return len(self._queue)

    async def request(
        self, messages: Sequence[Message], settings: ModelSettings | None = None
    ) -> ModelResponse:
        conversation = list(messages)
        self.requests.append((conversation, settings or ModelSettings()))
        if not self._queue:
            raise QueueExhausted(
                f"QueueModel {self.name!r} has no replies left after {len(self.requests) - 1} request(s): "
                "enqueue([...]) more replies before this call"
            )
        reply = self._queue.popleft()
        if isinstance(reply, Exception):
            raise reply
        return _to_response(reply, self.name, conversation)
