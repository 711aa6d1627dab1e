"""Terminal progress for the Auto loop: one line per finished step (iteration, stage, best, spend).

Lines rather than a live panel, so the output reads the same in a terminal, a CI log and a pipe.
Progress goes to stderr; `--json` keeps stdout for the summary alone.
"""

from __future__ import annotations

import time
from typing import Protocol


class Reporter(Protocol):
    def step(
        self, iteration: int, iterations: int, stage: str, detail: str, best: str, spend: str
    ) -> None: ...

    def tool(self, tool: str, message: str) -> None: ...

    def note(self, text: str) -> None: ...


class NullReporter:
    def step(self, iteration: int, iterations: int, stage: str, detail: str, best: str, spend: str) -> None:
        pass

    def tool(self, tool: str, message: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass


class RichReporter:
    """Writes to a rich Console on stderr; tool heartbeats at most every `tool_every_s` seconds."""

    def __init__(self, console=None, *, tool_every_s: float = 10.0) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True, highlight=False)
        self.tool_every_s = tool_every_s
        self._last_tool = 0.0

    def step(self, iteration: int, iterations: int, stage: str, detail: str, best: str, spend: str) -> None:
        from rich.markup import escape

        self.console.print(
            f"[bold]iter {iteration}/{iterations}[/bold] [cyan]{stage:<9}[/cyan] {escape(detail)}"
            f"  [dim]| best: {escape(best)} | {escape(spend)}[/dim]"
        )

    def tool(self, tool: str, message: str) -> None:
        now = time.monotonic()
        if now - self._last_tool >= self.tool_every_s:
            self._last_tool = now
            from rich.markup import escape

            self.console.print(f"[dim]  {tool}: {escape(message)}[/dim]")

    def note(self, text: str) -> None:
        self.console.print(text, markup=False)
