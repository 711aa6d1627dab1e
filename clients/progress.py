"""Terminal progress for the Auto loop: one line per finished step (iteration, stage, best, spend), and
below them one live line (iterations done/total, best so far, ETA) that a terminal redraws.

The step lines read the same in a terminal, a CI log and a pipe; the live line is the at-a-glance view.
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

    def close(self) -> None: ...


class NullReporter:
    def step(self, iteration: int, iterations: int, stage: str, detail: str, best: str, spend: str) -> None:
        pass

    def tool(self, tool: str, message: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class RichReporter:
    """Writes to a rich Console on stderr; tool heartbeats at most every `tool_every_s` seconds."""

    def __init__(self, console=None, *, tool_every_s: float = 10.0, live: bool = True) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True, highlight=False)
        self.tool_every_s = tool_every_s
        self._last_tool = 0.0
        self._live_wanted = live
        self._live = None

    def _live_line(self, iterations: int):
        if self._live is None and self._live_wanted:
            from maxkernel.tpu_tools.cli.live import LiveLine

            self._live = LiveLine("auto", total=iterations, console=self.console)
            self._live.start()
        return self._live

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def step(self, iteration: int, iterations: int, stage: str, detail: str, best: str, spend: str) -> None:
        from rich.markup import escape

        self.console.print(
            f"[bold]iter {iteration}/{iterations}[/bold] [cyan]{stage:<9}[/cyan] {escape(detail)}"
            f"  [dim]| best: {escape(best)} | {escape(spend)}[/dim]"
        )
        live = self._live_line(iterations)
        if live is not None:
            done = iteration if detail.startswith("iteration ended") else iteration - 1
            live.update(
                done=min(done, iterations), total=iterations, best=best, detail=f"#{iteration} {stage}"
            )

    def tool(self, tool: str, message: str) -> None:
        now = time.monotonic()
        if now - self._last_tool >= self.tool_every_s:
            self._last_tool = now
            from rich.markup import escape

            self.console.print(f"[dim]  {tool}: {escape(message)}[/dim]")

    def note(self, text: str) -> None:
        self.console.print(text, markup=False)
