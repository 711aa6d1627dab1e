"""Tables a person can read at 80 columns: names that tell rows apart, words that are never cut.

rich shrinks every column of a table too wide for the terminal and cuts each cell with an ellipsis, so at 80
columns a model's region ids all printed as "Trans…" and its kinds and bounds were cut too. Here a table
is built twice at most: with full names when it fits, else with the part of each name that differs (the
common prefix of the column's values dropped and said once above the table), and the name column folds
onto more lines rather than cut what is left. Word columns (a kind, a bound, a status) keep their longest
word whole; numbers never wrap.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

_PARTS = re.compile(r"[^/.]+|[/.]")  # a scope path's components and the separators between them


def common_prefix(names: Sequence[str]) -> str:
    """The longest run of whole leading components (split at '/' and '.') that every name shares, ending in
    its separator, such that the names stay distinct without it; "" when there is none. A name that is the
    run itself (a parent scope: "Block" beside "Block.attn") does not stop it."""
    names = list(dict.fromkeys(names))
    if len(names) < 2:
        return ""
    first = _PARTS.findall(names[0])
    cuts = ["".join(first[: k + 1]) for k, part in enumerate(first) if part in "/."]
    for prefix in reversed(cuts):
        stem = prefix[:-1]
        if all((n.startswith(prefix) and len(n) > len(prefix)) or n == stem for n in names):
            if len({shorten(n, prefix) for n in names}) == len(names):
                return prefix
    return ""


def shorten(name: str, prefix: str) -> str:
    """`name` without `prefix`; a name that is the prefix itself (a parent scope: "Block" beside
    "Block.attn") stays whole."""
    return name[len(prefix) :] if prefix and name.startswith(prefix) and len(name) > len(prefix) else name


NAME_MIN = 16  # the name column's width below which a table drops its optional columns instead


def natural_width(console: Console, table: Table) -> int:
    """The width `table` takes with no column shrunk or folded."""
    return table.__rich_measure__(console, console.options.update_width(10_000)).maximum


def fits(console: Console, table: Table, shown: Sequence[str]) -> bool:
    """Whether `table` prints at the console's width with every column but the names at its natural width
    and the names (`shown`, folding) given NAME_MIN columns or their full length if less."""
    longest = max((cell_len(s) for s in shown), default=0)
    return natural_width(console, table) - longest + min(longest, NAME_MIN) <= console.width


def add_name_column(table: Table, header: str) -> None:
    """The column of names: it takes the width left over and folds a long name onto more lines."""
    table.add_column(header, overflow="fold", ratio=1, min_width=8)


def add_word_column(table: Table, header: str, words: Iterable[str]) -> None:
    """A column of short words or phrases (a kind, a bound, "fused into"): exactly as wide as the longest of
    `words`, so none is ever cut and the width left goes to the names; longer text in it wraps."""
    width = max([cell_len(str(w)) for w in words] + [cell_len(line) for line in header.splitlines()] or [1])
    table.add_column(header, min_width=width, max_width=width, overflow="fold")


def add_number_column(table: Table, header: str) -> None:
    table.add_column(header, justify="right", no_wrap=True)


def new_table() -> Table:
    """A table with one space of padding and one rule between columns, no outer edge: 80 columns go far."""
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True)


def print_named(
    console: Console,
    build: Callable[[Callable[[str], str], bool], Table],
    names: Sequence[str],
    what: str = "names",
    optional: str = "",
) -> tuple[Callable[[str], str], bool]:
    """Print the table `build(name, full)` makes, where `name(n)` is how a full name `n` shows in its cells
    and `full` keeps the optional columns: with full names when nothing has to fold; else the names without
    the column's common prefix (said above the table), and, when the names would still get fewer than
    NAME_MIN columns, without the optional columns (`optional` names them, said above the table too).
    Returns the `name` and `full` it printed with, for lines the caller prints after the table."""
    table = build(lambda s: s, True)
    if natural_width(console, table) <= console.width:
        console.print(table)
        return (lambda s: s), True
    prefix = common_prefix(names)
    short = [shorten(n, prefix) for n in names]
    name, full = (lambda s: shorten(s, prefix)), True
    table = build(name, full) if prefix else table
    said = [f"{what} without their common prefix {prefix}"] if prefix else []
    if optional and not fits(console, table, short):
        full = False
        table = build(name, full)
        said.append(f"{optional} left out")
    if said:
        console.print(f"{'; '.join(said)} (all of it: --json or a wider terminal)", markup=False)
    shown = [name(n) for n in names]
    longest = max((cell_len(x) for x in shown), default=0)
    width = console.width - (natural_width(console, table) - longest)
    if 8 <= width < longest:  # the names fold: at their separators, not inside a word
        table = build(lambda s: wrap_at_parts(name(s), width), full)
    console.print(table)
    return name, full


def wrap_at_parts(name: str, width: int) -> str:
    """`name` on lines of at most `width` cells, broken after a '/', '.' or ',' (a part longer than a line
    is left for the table to fold)."""
    parts = re.findall(r"[^/.,]*[/.,]|[^/.,]+$", name)
    lines, line = [], ""
    for part in parts:
        if line and cell_len(line + part) > width:
            lines.append(line)
            line = ""
        line += part
    return "\n".join([*lines, line]) if line else "\n".join(lines)
