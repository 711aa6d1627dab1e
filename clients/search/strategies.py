"""The catalogue of ways to change a Pallas TPU kernel, each usable by a model and by a config template.

A strategy has a name, a one-line description, the instruction handed to the implementer, and a
concrete hook: the config keys it may change. A template-driven proposer (or the offline model) reads
the hook as "move one of these tunables to a neighbouring allowed value"; a language model reads the
instruction. Free text from the command line becomes a strategy whose hook may touch any key.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Config = dict[str, Any]
Space = Mapping[str, Sequence[Any]]  # allowed values per tunable, in a meaningful order (small -> large)


class Strategy(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    instruction: str = Field(description="what the implementer is asked to do")
    keys: tuple[str, ...] = Field(default=(), description="config keys the hook may change; () = any key")

    def applicable(self, config: Config, space: Space) -> list[str]:
        keys = [k for k in space if k in config and len(space[k]) > 1]
        return [k for k in keys if not self.keys or k in self.keys]

    def mutate(self, config: Config, space: Space, rng: random.Random) -> Config | None:
        """One concrete move: a changed copy of `config`, or None when the strategy does not apply."""
        keys = self.applicable(config, space)
        rng.shuffle(keys)
        for key in keys:
            values = list(space[key])
            i = values.index(config[key]) if config[key] in values else 0
            steps = [d for d in (-3, -2, -1, 1, 2, 3) if 0 <= i + d < len(values)]
            weights = [{1: 4, 2: 2, 3: 1}[abs(d)] for d in steps]  # mostly neighbours, sometimes a jump
            if steps:
                new = dict(config)
                new[key] = values[i + rng.choices(steps, weights)[0]]
                return new
        return None

    def prompt_line(self) -> str:
        """The instruction with a machine-readable tag the offline model maps back to this hook."""
        return f"[strategy: {self.name}] {self.instruction}"


def _s(name: str, description: str, instruction: str, *keys: str) -> Strategy:
    return Strategy(name=name, description=description, instruction=instruction, keys=keys)


CATALOGUE: dict[str, Strategy] = {
    s.name: s
    for s in [
        _s(
            "tiling",
            "Change block sizes (BlockSpec block_shape) to trade VMEM for fewer grid steps and better MXU fill.",
            "Change the block sizes: pick tiles that are multiples of (8, 128) (16 rows for bf16), fill the "
            "MXU, keep double-buffered inputs plus scratch under the scoped VMEM limit, and cut the number "
            "of grid steps where each step is too small to hide its ~0.35 us overhead.",
            "block_m",
            "block_n",
            "block_k",
            "block_rows",
            "block_cols",
            "block_q",
            "block_kv",
        ),
        _s(
            "grid_order",
            "Reorder the grid axes so the operand that would be re-fetched most stays resident.",
            "Reorder the grid so the reduction axis is innermost and marked 'arbitrary', and the operand "
            "with the largest re-fetch factor keeps the same block index across consecutive steps.",
            "grid_order",
        ),
        _s(
            "pipelining",
            "Change the pipelining depth (pipeline_mode=pl.Buffered(n)) of the streamed inputs.",
            "Change the pipelining depth of the streamed inputs with pipeline_mode=pl.Buffered(n) "
            "(2 is the default double buffering; 3 hides DMA jitter on memory-bound kernels) within VMEM.",
            "buffer_count",
            "buffers",
        ),
        _s(
            "scalar_prefetch",
            "Move index data to SMEM with PrefetchScalarGridSpec so index maps can read it.",
            "Use pltpu.PrefetchScalarGridSpec(num_scalar_prefetch=...) to put indices or sizes in SMEM and "
            "read them in the index maps, skipping blocks that do no work.",
            "scalar_prefetch",
        ),
        _s(
            "accumulator",
            "Move the accumulator between a f32 VMEM scratch and the output block.",
            "Accumulate in a float32 VMEM scratch (pltpu.VMEM) initialised under pl.when(k == 0) and written "
            "once on the last k step, or accumulate in the output block when it is already f32.",
            "accumulator",
            "acc_dtype",
        ),
        _s(
            "layout",
            "Change the data layout seen by the kernel (flatten leading dims, transpose to lane-major).",
            "Change the layout the kernel sees: flatten leading dimensions into rows, keep the last "
            "dimension lane-dense (a multiple of 128), transpose operands so loads are contiguous.",
            "layout",
        ),
        _s(
            "fusion",
            "Fuse neighbouring elementwise work (bias, activation, scaling, casts) into the kernel.",
            "Fuse the neighbouring elementwise work (bias add, activation, scaling, casts) into the kernel's "
            "epilogue so the intermediate never goes back to HBM.",
            "fuse",
        ),
        _s(
            "semantics",
            "Mark independent grid axes 'parallel' so they can be split across TensorCores.",
            "Set dimension_semantics: 'parallel' for independent output axes (megacore split), 'arbitrary' "
            "for reductions and any axis carrying state between steps.",
            "semantics",
        ),
        _s(
            "vmem_limit",
            "Raise or lower vmem_limit_bytes to allow bigger tiles or deeper pipelines.",
            "Set pltpu.CompilerParams(vmem_limit_bytes=...) to what the tiles need plus headroom, within the "
            "chip's physical VMEM, so larger tiles compile.",
            "vmem_limit_mib",
        ),
        _s(
            "algorithm",
            "An algorithmic rewrite: split-K, two-pass vs one-pass reductions, online softmax, recompute.",
            "Rewrite the algorithm: e.g. split the reduction (split-K) for more parallel steps, one-pass "
            "statistics instead of two, an online (streaming) reduction, or recompute instead of storing.",
            "algorithm",
        ),
    ]
}


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:40] or "custom"


def resolve(names: Sequence[str] | None) -> list[Strategy]:
    """Catalogue names as given (`--strategy tiling`), free text as a custom strategy; none -> all."""
    if not names:
        return list(CATALOGUE.values())
    out = []
    for n in names:
        key = n.strip().lower().replace("-", "_")
        if key in CATALOGUE:
            out.append(CATALOGUE[key])
        else:
            out.append(Strategy(name=f"custom:{slug(n)}", description=n.strip(), instruction=n.strip()))
    return out


def parse_tag(text: str) -> Strategy | None:
    """The strategy named by a `[strategy: NAME]` tag in a prompt (how the offline model finds the hook)."""
    m = re.search(r"\[strategy: ([^\]]+)\]", text)
    if not m:
        return None
    name = m.group(1).strip()
    return CATALOGUE.get(name) or Strategy(name=name, description=name, instruction=name)


def crossover(a: Config, b: Config, rng: random.Random) -> Config:
    """Combine two parents' ideas: each tunable from one parent or the other (at least one of each)."""
    keys = sorted(set(a) | set(b))
    diff = [k for k in keys if a.get(k) != b.get(k)]
    child = dict(a)
    if len(diff) < 2:
        return {**a, **{k: b[k] for k in diff if k in b}} if diff and rng.random() < 0.5 else child
    take = set(rng.sample(diff, rng.randint(1, len(diff) - 1)))
    for k in take:
        if k in b:
            child[k] = b[k]
    return child
