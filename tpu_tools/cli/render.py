"""Human-readable rendering of reports (rich). The JSON form is the model itself."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from maxkernel.tpu_tools.hardware.chips import ChipSpec
from maxkernel.tpu_tools.reports import CompileReport, Failure, ValidationReport


class _Console(Console):
    """rich exits 1 silently when stdout's reader goes away (`maxkernel chips | head -1`); raise instead, so
    the CLI says so in one line with exit 2 like every other closed pipe (cli_args.quiet_broken_pipe)."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError("stdout closed")


console = _Console()


# The summary says all of it, built from the interpreter's own numbers: its traceback (jax's frames only)
# stays in --json's failure.message.
_SUMMARY_SAYS_IT = {"usage_error", "revisited_output_block", "out_of_bounds"}


def _failure(f: Failure) -> None:
    console.print(f"[bold red]✗ {f.kind}[/]: {f.summary}")
    if f.kind in _SUMMARY_SAYS_IT or f.cause_kind in _SUMMARY_SAYS_IT:
        if f.message and f.kind != "usage_error":
            console.print(Text("(the interpreter's traceback: --json, failure.message)", style="dim"))
        return
    if f.message:
        tail = f.message.strip().splitlines()[-6:]
        console.print(Text("\n".join(tail), style="dim"), highlight=False)


def _dims(d: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in d.items())


def profile_trace_text(text: str, ops: list | None, *, candidate_traced: bool) -> str:
    """A profile's trace summary whose hint is about the candidate only.

    The profile traces the reference next to the candidate (HLO modules jit_reference / jit_candidate),
    and only the reference when the candidate did not run natively (a Pallas kernel without its chip),
    so the summary's generic hint can name an op of the reference. The hint line is rebuilt here."""
    cand = [o for o in ops or [] if "candidate" in getattr(o, "module", "")]
    if not candidate_traced:
        hint = "hint: none for the kernel: the trace holds only the reference (the candidate did not run natively)"
    elif not cand:
        hint = "hint: none: the candidate's ops are not among the top ops listed (raise --top in `maxkernel trace`)"
    else:
        top = max(cand, key=lambda o: o.self_us)
        total = sum(o.self_us for o in cand) or 1.0
        hint = (
            f"hint: in the candidate, {top.name} takes {100 * top.self_us / total:.0f}% of its listed op time"
        )
    return "\n".join(hint if line.startswith("hint: ") else line for line in text.splitlines())


def render_compile(r: CompileReport) -> None:
    head = "[bold green]✓ compiled[/]" if r.ok else "[bold red]✗ did not compile[/]"
    console.print(f"{head} {r.kernel_path} for [bold]{r.target}[/] (size {r.size}) with {r.compiler}")
    if r.compiler_note:
        console.print(f"  {r.compiler_note}")
    stages = [(n, getattr(r.times, f"{n}_ms")) for n in ("trace", "lower", "compile")]
    if any(ms is not None for _, ms in stages):
        console.print("  " + ", ".join(f"{n} {ms:.1f} ms" for n, ms in stages if ms is not None))
    if r.output:
        console.print(f"  output: {', '.join(f'{o.dtype}{o.shape}' for o in r.output)}")
    for call in r.pallas_calls:
        blocks = ", ".join(str(b.get("block_shape")) for b in call.get("inputs", []))
        console.print(
            f"  pallas_call {call.get('kernel_name') or call.get('name')}: grid {call.get('grid')} in-blocks {blocks}"
        )
    if r.memory:
        console.print(
            "  memory: " + ", ".join(f"{k.removesuffix('_in_bytes')}={v:,}" for k, v in r.memory.items())
        )
    for w in r.warnings:
        console.print(f"  [yellow]warning[/]: {w}")
    if r.failure:
        _failure(r.failure)


def render_validation(r: ValidationReport) -> None:
    head = "[bold green]✓ correct[/]" if r.ok else "[bold red]✗ not validated[/]"
    console.print(
        f"{head} {r.kernel_path} vs {r.reference.name if r.reference else '?'} on {r.target} (size {r.size})"
    )
    if r.execution:
        console.print(f"  {r.execution}")
    if r.tolerance:
        console.print(
            f"  tolerance atol={r.tolerance.atol:g} rtol={r.tolerance.rtol:g} ({r.tolerance.source})"
        )
    if r.per_seed:
        table = Table("seed", "inputs", "ok", "max abs", "max rel", "mismatch", "worst index", "NaN")
        for s in r.per_seed:
            table.add_row(
                str(s.seed),
                s.inputs + ("*" if s.inputs_note else ""),
                "✓" if s.ok else "✗",
                f"{s.max_abs_err:.3g}",
                f"{s.max_rel_err:.3g}",
                f"{s.mismatch_fraction:.2%}",
                str(s.worst_index),
                str(s.nan_count),
            )
        console.print(table)
        for s in r.per_seed:
            if s.tolerance:
                console.print(
                    f"  seed {s.seed} tolerance atol={s.tolerance.atol:g} rtol={s.tolerance.rtol:g} ({s.tolerance.source})"
                )
    for note in r.reference.notes if r.reference else []:
        console.print(f"  note: {note}")
    if r.shape_contract:
        console.print(f"  shape contract: {r.shape_contract.finding}")
    for w in r.warnings:
        console.print(f"  [yellow]warning[/]: {w}")
    if r.failure:
        _failure(r.failure)


def render_chips(chips: list[ChipSpec]) -> None:
    """Every cell whole at 80 columns (the chip name is what a reader copies into --target): units live
    in the headers; the device kind string is in `--json`."""
    from rich import box

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("chip", "TCs", "VMEM\nMiB", "SMEM\nKiB", "HBM\nGB", "HBM\nGB/s", "bf16\nTFLOP/s"):
        table.add_column(name, no_wrap=True, justify="left" if name == "chip" else "right")
    table.add_column("int8\nTOP/s", no_wrap=True, justify="right")
    table.add_column("MXUs", no_wrap=True)
    for c in chips:
        table.add_row(
            c.name,
            str(c.tensorcores_per_chip),
            str(c.vmem_bytes >> 20),
            str(c.smem_bytes >> 10),
            f"{c.hbm_bytes / 1e9:.1f}",
            f"{c.hbm_gbps:,.0f}",
            f"{c.peak_bf16_tflops:,.1f}",
            f"{c.peak_int8_tops:,.0f}" if c.peak_int8_tops else "-",
            f"{c.num_mxus}×{c.mxu_shape[0]}x{c.mxu_shape[1]}",
        )
    console.print(table)
    console.print(f"[dim]per JAX device; source: {chips[0].source}[/]")
    native = ", ".join(c.name for c in chips if c.bf16_vpu) or "none of these"
    console.print(
        f"[dim]bf16 elementwise math on the vector unit: {native} (the others widen each bf16 op to f32)[/]"
    )


def render_tasks(tasks) -> None:
    """One row per task. Where the sizes' dims do not fit beside the rest (80 columns), they are left out
    and the line above the table says so (tpu_tools/cli/tables.py)."""
    from maxkernel.tpu_tools.cli import tables

    def build(name, full: bool) -> Table:
        table = tables.new_table()
        tables.add_name_column(table, "id")
        table.add_column("model", ratio=1, overflow="fold")
        table.add_column("operator", ratio=1, overflow="fold")
        if full:
            for header in ("full", "small"):  # a dim per line; a long one (7p's kv_lens tuple) folds
                table.add_column(header, max_width=32, overflow="fold")
        tables.add_word_column(table, "pallas ref", ["pallas ref"])
        tables.add_word_column(table, "chips", [str(t.mesh_devices or 1) for t in tasks])
        for t in tasks:
            dims = ["\n".join(_dims({k: v}) for k, v in d.items()) for d in (t.full, t.small)] if full else []
            table.add_row(name(t.id), t.model, t.operator, *dims, "✓" if t.has_pallas_reference else "",
                          str(t.mesh_devices or 1))  # fmt: skip
        return table

    tables.print_named(console, build, [t.id for t in tasks], "ids", "the full and small sizes' dims")
    multi = sum(1 for t in tasks if t.mesh_devices)
    console.print(f"{len(tasks) - multi} single-chip tasks" + (f", {multi} multi-chip" if multi else ""))
