"""A Mosaic kernel that XLA emitted (lax.ragged_dot's grouped matmul), read back as a pallas_call.

XLA lowers some ops to Mosaic kernels of its own: a `tpu_custom_call` whose backend config carries the
kernel's MLIR (base64). Its grid (`iteration_bounds`), its windows (`window_params`: the block each
step DMAs), their index functions and its dimension semantics are all in that text, so the kernel can be
costed exactly as a user's pallas_call is (call_estimate.estimate_call: blocks fetched when their index
changes, the compiler's bundles per step, megacore). Costing it as the roofline of its declared flops and
bytes hid what the chip really runs: XLA's f32 ragged dot on v5e uses 128-wide output windows and pads K.

Index functions are evaluated by a small interpreter of the integer `arith` ops they use; one that reads
a scalar-prefetch table (`memref.load`) raises UnknownIndexError, and the block schedule then charges a
fetch every step (an upper bound, said so in the estimate's notes).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from maxkernel.tpu_tools.cost.block_schedule import itemsize
from maxkernel.tpu_tools.cost.hlo_text import HloInstruction
from maxkernel.tpu_tools.problem.pallas_info import (
    BlockInfo,
    CostEstimateInfo,
    PallasCallInfo,
    UnknownIndexError,
)

__all__ = ["MlirIndexMap", "declared_cost", "kernel_call"]

_DYNAMIC = -(2**63)  # iteration_bounds' marker of an axis known only at run time
_DTYPES = {"bf16": "bfloat16", "f32": "float32", "f16": "float16", "i32": "int32", "i8": "int8", "i16": "int16",
           "ui8": "uint8", "ui32": "uint32", "i1": "bool", "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2"}  # fmt: skip
_FUNC = re.compile(
    r"func\.func\s+(?:private\s+)?@(\w+)\((.*?)\)\s*(?:->\s*\(?[^{]*?\)?\s*)?(attributes\s*\{.*?\})?\s*\{\n",
    re.S,
)
_ARG = re.compile(r"%(arg\d+):\s*(i32|index|memref<([^>]*)>)")
_BINOPS = {"arith.addi": np.add, "arith.subi": np.subtract, "arith.muli": np.multiply,
           "arith.maxsi": np.maximum, "arith.minsi": np.minimum}  # fmt: skip


def _mosaic_body(cfg: dict) -> str | None:
    """The kernel's MLIR text from its backend config (base64), or None when it is bytecode or absent."""
    body = ((cfg.get("custom_call_config") or {}).get("body") if isinstance(cfg, dict) else None) or ""
    try:
        raw = base64.b64decode(body)
        return raw.decode() if raw.lstrip().startswith(b"module") else None
    except (ValueError, UnicodeDecodeError):
        return None


def declared_cost(cfg: dict) -> CostEstimateInfo | None:
    """The `cost_estimate` a Mosaic custom call declares in its backend config (XLA fills it for its own
    kernels), or None when absent or unreadable."""
    est = ((cfg.get("custom_call_config") or {}).get("cost_estimate") or {}) if isinstance(cfg, dict) else {}
    try:
        return CostEstimateInfo(
            flops=int(float(est.get("flops") or 0)),
            transcendentals=int(float(est.get("transcendentals") or 0)),
            bytes_accessed=int(float(est.get("bytes_accessed") or 0)),
        )
    except (TypeError, ValueError):
        return None


def _memref(spec: str) -> tuple[tuple[int, ...], str] | None:
    """'128x4096xbf16, #tpu.memory_space<vmem>' -> ((128, 4096), 'bfloat16')."""
    parts = spec.split(",")[0].strip().split("x")
    dims = []
    while parts and parts[0].isdigit():
        dims.append(int(parts.pop(0)))
    if not parts or not parts[0]:
        return None
    name = "x".join(parts)
    return tuple(dims), _DTYPES.get(name, name)


class _Func:
    """One func.func: its arguments, attributes and body lines."""

    def __init__(self, name: str, args: str, attrs: str, body: str) -> None:
        self.name, self.attrs, self.body = name, attrs or "", body
        self.args = [(a, _memref(mem) if mem else None) for a, _, mem in _ARG.findall(args)]


def _funcs(text: str) -> dict[str, _Func]:
    out: dict[str, _Func] = {}
    heads = list(_FUNC.finditer(text))
    for i, h in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        out[h.group(1)] = _Func(h.group(1), h.group(2), h.group(3) or "", text[h.end() : end])
    return out


class MlirIndexMap:
    """An index function of the kernel (`@lhs_transform_indices`), evaluated over grid points with numpy.

    Duck-types pallas_info.IndexMap for block_schedule. Ops beyond integer arith raise UnknownIndexError
    (the block is then charged a fetch every step)."""

    def __init__(self, fn: _Func, grid_rank: int) -> None:
        self.fn, self.grid_rank = fn, grid_rank
        self.uses_scalar_prefetch = "memref.load" in fn.body

    def evaluate(self, points: np.ndarray, scalar_prefetch: Sequence[Any] | None = None) -> np.ndarray:
        points = np.asarray(points, dtype=np.int64).reshape(-1, self.grid_rank)
        env: dict[str, Any] = {
            self.fn.args[d][0]: points[:, d] for d in range(min(self.grid_rank, len(self.fn.args)))
        }
        for line in self.fn.body.splitlines():
            line = line.split("//")[0].strip()
            if not line or line == "}":
                continue
            if line.startswith("return"):
                names = re.findall(r"%(\w+)", line.split(":")[0])
                if not all(n in env for n in names):
                    raise UnknownIndexError(f"{self.fn.name}: returns a value it cannot evaluate")
                cols = [np.broadcast_to(np.asarray(env[n], np.int64), (points.shape[0],)) for n in names]
                return np.stack(cols, axis=1) if cols else np.zeros((points.shape[0], 0), np.int64)
            m = re.match(r"%(\w+)\s*=\s*([\w.]+)\s*(.*)", line)
            if not m:
                raise UnknownIndexError(f"{self.fn.name}: {line[:60]!r} not understood")
            out, op, rest = m.groups()
            ops = re.findall(r"%(\w+)", rest.split(":")[0])
            if op == "arith.constant":
                c = re.match(r"(-?\d+)", rest)
                if not c:
                    raise UnknownIndexError(f"{self.fn.name}: a non-integer constant")
                env[out] = np.int64(int(c.group(1)))
            elif op == "arith.index_cast" and ops and ops[0] in env:
                env[out] = env[ops[0]]
            elif op in _BINOPS and len(ops) == 2 and all(o in env for o in ops):
                env[out] = _BINOPS[op](env[ops[0]], env[ops[1]])
            elif op in ("arith.divsi", "arith.remsi") and len(ops) == 2 and all(o in env for o in ops):
                a, b = np.asarray(env[ops[0]]), np.asarray(env[ops[1]])
                q = np.where(b != 0, np.trunc(a / np.where(b != 0, b, 1)), 0).astype(np.int64)
                env[out] = q if op == "arith.divsi" else a - q * b
            elif op == "memref.load":
                raise UnknownIndexError(f"{self.fn.name}: reads a scalar-prefetch table")
            else:
                raise UnknownIndexError(f"{self.fn.name}: {op} not evaluated")
        raise UnknownIndexError(f"{self.fn.name}: no return")


def _i64_array(attrs: str, key: str) -> list[int] | None:
    m = re.search(key + r"\s*=\s*array<i64(?::\s*([-\d,\s]*))?>", attrs)
    if not m:
        return None
    return [int(x) for x in (m.group(1) or "").split(",") if x.strip()]


def kernel_call(ins: HloInstruction, table: dict[str, HloInstruction]) -> PallasCallInfo | None:
    """The Mosaic custom call `ins` as a PallasCallInfo (grid, windows, index maps), or None if unreadable."""
    if ins.opcode != "custom-call" or 'custom_call_target="tpu_custom_call"' not in ins.attrs:
        return None
    cfg = ins.backend_config()
    text = _mosaic_body(cfg)
    if text is None:
        return None
    funcs = _funcs(text)
    main = funcs.get("main")
    if main is None:
        return None
    bounds = _i64_array(main.attrs, "iteration_bounds")
    windows = re.findall(r"\{([^{}]*window_bounds\s*=\s*array<i64:[^>]*>[^{}]*)\}", main.attrs)
    if bounds is None or not windows:
        return None
    n_prefetch = int(m.group(1)) if (m := re.search(r"scalar_prefetch\s*=\s*(\d+)", main.attrs)) else 0
    n_scratch = int(m.group(1)) if (m := re.search(r"scratch_operands\s*=\s*(\d+)", main.attrs)) else 0
    sems = tuple(re.findall(r"#tpu\.dimension_semantics<(\w+)>", main.attrs)) or None
    rank = len(bounds)
    args = main.args
    prefetch = args[rank : rank + n_prefetch]
    windowed = args[rank + n_prefetch : len(args) - n_scratch]
    if len(windowed) != len(windows) or any(a[1] is None for a in windowed + prefetch):
        return None
    out_shapes = [s for s in ins.shapes if s.dims is not None]
    n_out = len(out_shapes)
    n_in = len(windows) - n_out
    operands = [table[o].shapes[0] for o in ins.operands if o in table and table[o].shapes]
    if n_in < 0 or len(operands) < n_in:
        return None
    arrays = [*(s.dims for s in operands[len(operands) - n_in :]), *(s.dims for s in out_shapes)]
    blocks: list[BlockInfo] = []
    maps: list[MlirIndexMap | None] = []
    for i, (w, (_, mem), arr) in enumerate(zip(windows, windowed, arrays, strict=True)):
        shape, dtype = mem  # type: ignore[misc]
        fname = re.search(r"transform_indices\s*=\s*@(\w+)", w)
        fn = funcs.get(fname.group(1)) if fname else None
        imap = MlirIndexMap(fn, rank) if fn is not None else None
        maps.append(imap)
        role = "input" if i < n_in else "output"
        blocks.append(
            BlockInfo(
                role=role,
                position=i if i < n_in else i - n_in,
                origin=f"operand {i}" if i < n_in else f"output {i - n_in}",
                array_shape=tuple(arr),
                dtype=dtype,
                block_shape=tuple(shape),
                block_dims=tuple("blocked" for _ in shape),
                memory_space="vmem",
                pipelined=True,
                has_index_map=imap is not None,
                uses_scalar_prefetch=bool(imap and imap.uses_scalar_prefetch),
                block_bytes=int(np.prod(shape)) * itemsize(dtype),
                buffer_count=1 if "pipeline_mode<synchronous>" in w else None,
            )
        )
    if any(m is None for m in maps):
        return None
    ce = declared_cost(cfg)
    call = PallasCallInfo(
        kernel_name=ins.name,
        path=ins.op_name or ins.name,
        grid=tuple(None if b == _DYNAMIC or b < 0 else b for b in bounds),
        num_scalar_prefetch=n_prefetch,
        scalar_prefetch_shapes=[a[1][0] for a in prefetch],  # type: ignore[index]
        dimension_semantics=sems,
        inputs=blocks[:n_in],
        outputs=blocks[n_in:],
        scratch=[],
        cost_estimate=ce if ce and ce.flops > 0 else None,
        interpret=False,
    )
    call._index_maps = maps  # type: ignore[assignment]
    return call
