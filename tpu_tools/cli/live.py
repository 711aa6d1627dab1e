"""One live progress line for long work (bench, search, the Auto loop): done/total, best so far, ETA.

A rich Progress on stderr, so stdout keeps `--json` alone. Lines printed through `print` scroll above
it. In a pipe or CI log rich does not redraw; the final state is printed once when the work ends.
"""

from __future__ import annotations

from typing import Any


class LiveLine:
    """`with LiveLine("search", total=40) as live: live.update(done=3, best="12.1 us", detail="n7")`."""

    def __init__(self, label: str, total: int | None, *, console: Any = None, disable: bool = False) -> None:
        from rich.console import Console
        from rich.progress import (
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.console = console or Console(stderr=True, highlight=False)
        self.disable = disable
        self._progress = Progress(
            TextColumn("[bold]{task.description}[/bold]"),
            MofNCompleteColumn(),
            TextColumn("best: {task.fields[best]}"),
            TextColumn("[dim]{task.fields[detail]}[/dim]"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(compact=True),
            console=self.console,
            disable=disable,
            transient=False,
        )
        self._task = self._progress.add_task(label, total=total, best="none yet", detail="")
        self._started = False

    def __enter__(self) -> LiveLine:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if not self._started:
            self._progress.start()
            self._started = True

    def stop(self) -> None:
        if self._started:
            self._progress.stop()
            self._started = False

    def update(
        self,
        *,
        done: int | None = None,
        total: int | None = None,
        best: str | None = None,
        detail: str | None = None,
        advance: int = 0,
    ) -> None:
        fields: dict[str, Any] = {}
        if best is not None:
            fields["best"] = _clip(best, 30)
        if detail is not None:
            fields["detail"] = _clip(detail, 16)
        self._progress.update(self._task, completed=done, total=total, advance=advance or None, **fields)

    @property
    def done(self) -> int:
        return int(self._progress.tasks[0].completed)

    def print(self, text: str, **kwargs: Any) -> None:
        """A line above the live one (or a plain line when disabled)."""
        self.console.print(text, **kwargs)


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
