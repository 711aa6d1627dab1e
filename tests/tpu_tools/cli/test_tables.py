"""Tables a person can read at 80 columns (tpu_tools/cli/tables.py): every row's name tells it apart from
the others, and the kind, bound and status words are never cut. The hotspot table is rendered from a real
report of a two-layer Flax linen transformer (its ids are Flax module paths: Transformer.blocks_0.linear)."""

from __future__ import annotations

import textwrap

import pytest
import rich.console
from rich.console import Console
from rich.table import Table

from maxkernel.tpu_tools.cli import render, tables
from maxkernel.tpu_tools.cli.model import _region_names, render_hotspots

TRANSFORMER = """
import flax.linen as nn
import jax
import jax.numpy as jnp

SIZES = {"small": {"batch": 1, "seq": 128, "dim": 256}}
CONFIG = {"name": "flax_transformer", "dtype": "bfloat16", "atol": 2e-2, "rtol": 2e-2}


class Attention(nn.Module):
    @nn.compact
    def __call__(self, x):
        q = nn.Dense(x.shape[-1], use_bias=False, dtype=jnp.bfloat16, name="query_proj")(x)
        k = nn.Dense(x.shape[-1], use_bias=False, dtype=jnp.bfloat16, name="key_proj")(x)
        p = jax.nn.softmax(jnp.einsum("bqd,bkd->bqk", q, k).astype(jnp.float32), axis=-1)
        return nn.Dense(x.shape[-1], use_bias=False, dtype=jnp.bfloat16, name="output_proj")(p.astype(x.dtype) @ x)


class Block(nn.Module):
    hidden: int

    @nn.compact
    def __call__(self, x):
        x = x + Attention(name="self_attention")(nn.RMSNorm(dtype=jnp.bfloat16, name="pre_attention_norm")(x))
        h = nn.Dense(self.hidden, dtype=jnp.bfloat16, name="gating_einsum")(x)
        return x + nn.Dense(x.shape[-1], dtype=jnp.bfloat16, name="linear")(nn.gelu(h))


class Transformer(nn.Module):
    @nn.compact
    def __call__(self, x):
        return Block(1024, name="blocks_1")(Block(512, name="blocks_0")(x))


def create_inputs(dtype=None, *, key=None, size="small"):
    d = SIZES[size]
    kx, kp = jax.random.split(jax.random.key(0) if key is None else key)
    x = jax.random.normal(kx, (d["batch"], d["seq"], d["dim"]), jnp.bfloat16)
    return x, Transformer().init(kp, x)


def workload(x, params):
    return Transformer().apply(params, x)
"""


@pytest.fixture(scope="module")
def transformer(tmp_path_factory):
    from maxkernel.tpu_tools.model.hotspots import find_hotspots

    path = tmp_path_factory.mktemp("model") / "transformer_model.py"
    path.write_text(textwrap.dedent(TRANSFORMER))
    return find_hotspots(str(path), "tpu-v6e", "small")


def _name_column(text: str, header: str, next_header: str, n: int) -> list[tuple[str, str]]:
    """(name, first line) of the `n` rows of the table printed in `text`. The name column is every character
    left of where `next_header` starts in the header line, and a table line has the two-space gap there; a
    row's first line has text in the last column (a number or a short word: it never wraps), the lines
    below it carry the rest of a folded name (or of another folded cell)."""
    lines = text.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith(header) and next_header in ln)
    end = lines[head].index(next_header)
    last = len(lines[head].rstrip()) - len(lines[head].split()[-1])
    rows: list[list[str]] = []
    for ln in lines[head + 2 :]:  # past the rule under the header
        if ln[end - 2 : end] != "  ":
            break  # prose below the table
        if ln[last:].strip():
            if len(rows) == n:
                break
            rows.append([ln[:end].rstrip(), ln])
        elif rows:
            rows[-1][0] += ln[:end].strip()
    return [(name, first) for name, first in rows]


def _at_80(monkeypatch) -> Console:
    console = Console(width=80, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    return console


def test_flax_region_ids_tell_rows_apart_at_80_columns(transformer, monkeypatch):
    console = _at_80(monkeypatch)
    render_hotspots(transformer)
    text = console.export_text()
    assert max(len(ln) for ln in text.splitlines()) <= 80
    rows = _name_column(text, "region", "kind", len(transformer.regions))
    prefix = tables.common_prefix(_region_names(transformer))
    assert prefix == "Transformer." and f"region ids without their common prefix {prefix}" in text
    assert len(rows) == len(transformer.regions)
    names = [name for name, _ in rows]
    assert len(set(names)) == len(names), names  # every row is told apart by what it shows
    for (name, first), c in zip(rows, transformer.regions, strict=True):
        assert name == tables.shorten(c.region.id, prefix)  # the whole distinguishing tail, nothing cut
        words = first.split()
        assert c.region.kind in words, first  # the kind whole, never "matmul_ep…"
        assert ("fused" if not c.fusions and c.fused_into else c.bound) in words, first
    for c in transformer.regions:  # what a fused region is fused into, below the table, by the same names
        if not c.fusions and c.fused_into:
            into = ", ".join(tables.shorten(n, prefix) for n in c.fused_into)
            line = f"{tables.shorten(c.region.id, prefix)}: fused into {into}"
            assert "".join(line.split()) in "".join(text.split())  # (a long id folds onto more lines)


def test_the_row_check_catches_the_old_table_that_cut_every_id(transformer):
    """The check above can fail: rich's default table at 80 columns, as `hotspots` printed it before,
    shows every region as 'Trans…'."""
    console = Console(width=80, record=True, color_system=None)
    t = Table(show_edge=False)
    for col in (
        "region",
        "kind",
        "×",
        "µs each",
        "µs total",
        "share",
        "bound",
        "headroom",
        "GFLOP",
        "HBM MiB",
    ):
        t.add_column(col)
    for c in transformer.regions:
        t.add_row(c.region.id, c.region.kind, str(c.region.count), *["1.234"] * 3, c.bound, "1.00x", "0", "0")
    console.print(t)
    rows = _name_column(console.export_text().replace("│", " ").replace("┃", " "), " region", "kind", 99)
    assert len(rows) == len(transformer.regions)
    assert len({name for name, _ in rows}) < len(rows), rows  # told apart by nothing but their order


def test_a_wide_terminal_shows_the_full_ids_and_every_column(transformer, monkeypatch):
    console = Console(width=400, record=True, color_system=None)
    monkeypatch.setattr(render, "console", console)
    render_hotspots(transformer)
    text = console.export_text()
    assert "common prefix" not in text and "GFLOP" in text
    assert [name for name, _ in _name_column(text, "region", "kind", len(transformer.regions))] == [
        c.region.id for c in transformer.regions
    ]


def test_suite_tasks_named_like_model_regions_tell_rows_apart_at_80_columns(monkeypatch):
    from maxkernel.clients.suite import report
    from maxkernel.tpu_tools.profile.scoreboard import TaskRow, score

    tasks = [
        "gemma2.Transformer.layer_0.attn",
        "gemma2.Transformer.layer_0.mlp.gating_einsum",
        "gemma2.Transformer.layer_1.attn~2",
        "gemma2.Transformer.layer_1.mlp.linear",
    ]
    rows = [
        TaskRow(task=t, status="done", correct=i % 2 == 0, tier="estimate", estimate_tier="llo",
                kernel_time_us=100.0 + i, baseline_time_us=150.0, speedup_vs_baseline=1.5 - 0.1 * i)
        for i, t in enumerate(tasks)
    ]  # fmt: skip
    console = Console(width=80, record=True, color_system=None)
    monkeypatch.setattr(rich.console, "Console", lambda **kw: console)  # print_table's stderr console
    report.print_table(rows, score(rows))
    text = console.export_text()
    assert max(len(ln) for ln in text.splitlines()) <= 80
    shown = _name_column(text, "task", "status", len(rows))
    assert [name for name, _ in shown] == [t.removeprefix("gemma2.Transformer.") for t in tasks]
    assert "tasks without their common prefix gemma2.Transformer." in text
    for (_, first), r in zip(shown, rows, strict=True):
        assert first.split()[1:4] == ["done", "yes" if r.correct else "no", "est./llo"], first


@pytest.mark.parametrize(
    "names, prefix",
    [
        (
            ["Transformer/blocks_0/attn/q", "Transformer/blocks_0/attn/k", "Transformer/blocks_1/mlp"],
            "Transformer/",
        ),
        (["Transformer/blocks_0/attn/q", "Transformer/blocks_0/attn/k"], "Transformer/blocks_0/attn/"),
        (
            ["Block.norm", "Block.mlp.down", "Block", "Block.attn"],
            "Block.",
        ),  # a parent scope beside its children
        (["blocks_10.attn", "blocks_1.attn"], ""),  # never half a component: blocks_1 vs blocks_10
        (["norm.1", "norm.2", "matmul.3"], ""),
        (["a.b", "a.b", "a.c"], "a."),  # repeated names count once
        (["only.one"], ""),
    ],
)
def test_the_common_prefix_is_whole_components_and_keeps_names_apart(names, prefix):
    assert tables.common_prefix(names) == prefix
    shown = [tables.shorten(n, prefix) for n in dict.fromkeys(names)]
    assert len(set(shown)) == len(shown)


def test_the_task_table_names_every_task_whole_at_80_columns(monkeypatch):
    from maxkernel.tpu_tools.problem.tasks import list_tasks

    tasks = list_tasks()
    console = _at_80(monkeypatch)
    render.render_tasks(tasks)
    text = console.export_text()
    assert max(len(ln) for ln in text.splitlines()) <= 80
    assert "the full and small sizes' dims left out" in text  # said, not silently dropped
    rows = _name_column(text, "id", "model", len(tasks))
    assert [name for name, _ in rows] == [t.id for t in tasks]  # 1p_Flash_Attention, not 1p_Flas…
    assert [first.split()[-1] for _, first in rows] == [str(t.mesh_devices or 1) for t in tasks]


def test_a_folded_name_breaks_after_its_separators_not_inside_a_word():
    from maxkernel.tpu_tools.cli.tables import wrap_at_parts

    name = "blocks.{0,1}.recurrent_block.rg_lru.recurrence"
    lines = wrap_at_parts(name, 21).split("\n")
    assert lines == ["blocks.{0,1}.", "recurrent_block.", "rg_lru.recurrence"]
    assert "".join(lines) == name and all(len(line) <= 21 for line in lines)
    assert wrap_at_parts("a/b", 80) == "a/b"
    assert wrap_at_parts("layer_{0-3}.{pre_attention_norm,post_attention_norm,+2}", 21).split("\n") == [
        "layer_{0-3}.",
        "{pre_attention_norm,",
        "post_attention_norm,",
        "+2}",
    ]
    # a part longer than the line stays whole on its own line (the table folds it)
    assert wrap_at_parts("x.averyveryverylongpart.y", 8).split("\n") == ["x.", "averyveryverylongpart.", "y"]
