"""Retrying wrapper: exponential backoff with jitter, for TransientModelError only.

Providers are built with their own SDK retries off, so retries are counted in exactly one place.
Permanent errors (ModelError, ModelConfigError, anything else) pass through on the first attempt.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable, Sequence

import anyio

from maxkernel.clients.models.base import Message, Model, ModelResponse, ModelSettings, TransientModelError

log = logging.getLogger(__name__)


class RetryingModel(Model):
    """Calls `model` up to `attempts` times while it raises TransientModelError."""

    def __init__(
        self,
        model: Model,
        *,
        attempts: int = 5,
        base_delay: float = 1.0,
        max_delay: float = 30.0,
        sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts={attempts} should be at least 1")
        if base_delay < 0 or max_delay < 0:
            raise ValueError(f"delays should be >= 0, got base_delay={base_delay}, max_delay={max_delay}")
        self.model, self.attempts, self.base_delay, self.max_delay = model, attempts, base_delay, max_delay
        self.sleep, self.rng = sleep, rng
        self.name = model.name

    def delay_s(self, retry: int, retry_after_s: float | None = None) -> float:
        """Seconds to wait before retry number `retry` (0-based).

        Exponential with "equal jitter" (half fixed, half random, so waits never collapse to zero),
        at least the provider's Retry-After when it sent one, and never more than max_delay.
        """
        backoff = min(self.max_delay, self.base_delay * 2**retry)
        delay = backoff / 2 + self.rng() * backoff / 2
        if retry_after_s is not None:
            delay = max(delay, retry_after_s)
        return min(delay, self.max_delay)

    async def request(
        self, messages: Sequence[Message], settings: ModelSettings | None = None
    ) -> ModelResponse:
        for attempt in range(self.attempts):
            try:
                return await self.model.request(messages, settings)
            except TransientModelError as error:
                if attempt == self.attempts - 1:
                    raise TransientModelError(
                        f"{self.name}: still failing after {self.attempts} attempts: {error}",
                        retry_after_s=error.retry_after_s,
                    ) from error
                delay = self.delay_s(attempt, error.retry_after_s)
                log.info(
                    "%s: %s; retry %d/%d in %.1fs", self.name, error, attempt + 1, self.attempts - 1, delay
                )
                await self.sleep(delay)
        raise AssertionError("unreachable")  # the loop returns or raises


def with_retries(
    model: Model,
    attempts: int = 5,
    base_delay: float = 1.0,
    max_delay: float = 30.0,
    *,
    sleep: Callable[[float], Awaitable[object]] = anyio.sleep,
    rng: Callable[[], float] = random.random,
) -> RetryingModel:
    """Wrap `model` so transient failures are retried with backoff; `sleep`/`rng` are for tests."""
    return RetryingModel(
        model, attempts=attempts, base_delay=base_delay, max_delay=max_delay, sleep=sleep, rng=rng
    )
