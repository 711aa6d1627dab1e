"""No repeated work in one Auto run: the same kernel bytes asked the same question get the earlier verdict.

A model often proposes a kernel it already proposed (the offline model's second iteration, a debugger
that undoes its fix, an autotuned config equal to the kernel it tunes). `CachedServer` wraps the first
server's compile/validate/profile: the key is (tool, SHA-256 of the source, reference, target, size,
seeds, case), so only a byte-identical kernel hits. Validation seeds are fresh for every attempt, so the
seed offset is not part of the key: the kernel already passed (or failed) on fresh inputs once. A hit is
marked in the report (`cache_hit`); verdicts that may be transient (timeout, oom, cancelled, internal
error) are never cached. The cache lives in the run directory, so a resumed run keeps it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any

from maxkernel.clients.run_store import RunStore

CACHE_FILE = "eval_cache.json"
TRANSIENT = frozenset({"timeout", "oom", "cancelled", "internal_error"})


def cache_key(tool: str, source: str, **question: Any) -> str:
    digest = hashlib.sha256(source.encode()).hexdigest()
    return hashlib.sha256(json.dumps([tool, digest, question], sort_keys=True).encode()).hexdigest()


class RunEvalCache:
    """The run's verdicts by key, persisted as `eval_cache.json` after each new entry."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        path = store.path(CACHE_FILE)
        self.entries: dict[str, dict] = json.loads(path.read_text()) if path.is_file() else {}
        self.hits = 0

    async def get_or_call(
        self, key: str, label: str, call: Callable[[], Awaitable[dict]], on_hit: Callable[[str], None]
    ) -> dict:
        hit = self.entries.get(key)
        if hit is not None:
            self.hits += 1
            on_hit(f"cache hit: {label}: the same kernel bytes were judged before ({hit['first']})")
            return {**hit["report"], "cache_hit": {"first": hit["first"]}}
        report = await call()
        kind = ((report or {}).get("failure") or {}).get("kind")
        if isinstance(report, dict) and kind not in TRANSIENT:
            self.entries[key] = {"report": report, "first": label}
            self.store.write_json(CACHE_FILE, self.entries)
        return report


class CachedServer:
    """A KernelServerClient whose compile/validate/profile consult the run's cache first."""

    def __init__(
        self, server: Any, cache: RunEvalCache, where: Callable[[], str], note: Callable[[str], None]
    ):
        self._server, self._cache, self._where, self._note = server, cache, where, note

    def __getattr__(self, name: str) -> Any:
        return getattr(self._server, name)

    async def compile_kernel(self, source: str, reference: str, target: str, size: str | None, **kw: Any):
        key = cache_key("compile", source, reference=reference, target=target, size=size, **kw)
        call = lambda: self._server.compile_kernel(source, reference, target, size, **kw)  # noqa: E731
        return await self._cache.get_or_call(key, f"compile in {self._where()}", call, self._note)

    async def validate_kernel(
        self,
        source: str,
        reference: str,
        target: str,
        size: str | None,
        *,
        seed_offset: int | None = None,
        **kw: Any,
    ):
        # None: the server draws fresh seeds (a kernel cannot predict them); a fixed 0 here made every Auto
        # validation and extra case run seeds 0.. (a reference's default key), whatever its callers asked
        key = cache_key("validate", source, reference=reference, target=target, size=size, **kw)
        call = lambda: self._server.validate_kernel(  # noqa: E731
            source, reference, target, size, seed_offset=seed_offset, **kw
        )
        what = "extra case " + str((kw.get("case") or {}).get("name", "")) if kw.get("case") else "validate"
        return await self._cache.get_or_call(key, f"{what} in {self._where()}", call, self._note)

    async def profile_kernel(self, source: str, reference: str, target: str, size: str | None, **kw: Any):
        key = cache_key("profile", source, reference=reference, target=target, size=size, **kw)
        call = lambda: self._server.profile_kernel(source, reference, target, size, **kw)  # noqa: E731
        return await self._cache.get_or_call(key, f"profile in {self._where()}", call, self._note)
