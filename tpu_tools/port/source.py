"""Load a PyTorch source: the Model class, its init arguments and example inputs, run once on CPU.

Everything here runs the user's torch code, so the CLI calls it in its own process and the MCP tool in a
child. A Triton source runs in Triton's interpreter (TRITON_INTERPRET=1, set before triton is imported).
"""

from __future__ import annotations

import ast
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from maxkernel.tpu_tools.errors import MaxkernelError, UsageError
from maxkernel.tpu_tools.problem.source import import_file, user_frame_line

# functions, in the order looked for, that make example inputs (KernelBench's get_inputs first)
INPUT_FUNCTIONS = ("get_inputs", "example_inputs", "get_example_inputs", "make_inputs", "inputs")
# aten ops that draw random numbers: a forward calling one cannot be checked against a port
RANDOM_OPS = {
    "rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
    "bernoulli_", "normal", "normal_", "uniform_", "exponential_", "multinomial", "native_dropout",
    "poisson", "cauchy_", "geometric_", "log_normal_", "random_",
}  # fmt: skip


class SourceFailure(MaxkernelError):
    """The source breaks on its own (import, Model(...), get_inputs, forward): `source_error`, its line."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        super().__init__(message)
        self.line = line


@dataclass
class TorchSource:
    """A loaded source: the module built (eval mode) and its example inputs, with what one run showed."""

    path: Path
    sha256: str
    kind: str  # kernelbench | module | triton
    module: ModuleType
    model: Any  # torch.nn.Module, eval mode
    init_args: list
    inputs: list  # get_inputs() as returned: tensors and plain values
    triton_kernels: list[str] = field(default_factory=list)
    in_place_ops: list[str] = field(default_factory=list)  # 'aten.relu_ (line 12)'
    random_ops: list[str] = field(default_factory=list)
    dtypes: set[str] = field(default_factory=set)  # dtypes at the boundary: inputs, parameters, outputs
    # per get_inputs() position: its values pooled over several calls (the range the port draws from)
    input_samples: dict[int, Any] = field(default_factory=dict)

    @property
    def tensor_positions(self) -> list[int]:
        import torch

        return [i for i, x in enumerate(self.inputs) if isinstance(x, torch.Tensor)]


def _fail(e: BaseException, path: Path, what: str) -> SourceFailure:
    line = user_frame_line(e.__traceback__, path)
    where = f" at line {line}" if line else ""
    first = (str(e).strip().splitlines() or [""])[0][:300]
    return SourceFailure(
        f"the source fails on its own in {what}{where}: {type(e).__name__}: {first}", line=line
    )


def _triton_kernels(text: str) -> list[str]:
    """Names of the functions decorated @triton.jit / @triton.autotune in the source text."""
    names = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef):
            for d in node.decorator_list:
                if "triton" in ast.unparse(d):
                    names.append(node.name)
                    break
    return names


def model_class(module: ModuleType, path: Path):
    import torch

    cls = getattr(module, "Model", None)
    if isinstance(cls, type) and issubclass(cls, torch.nn.Module):
        return cls, True
    mine = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, torch.nn.Module) and v.__module__ == module.__name__
    ]
    if len(mine) == 1:
        return mine[0], False
    found = ", ".join(c.__name__ for c in mine) or "none"
    raise UsageError(f"{path}: no Model: define class Model(nn.Module) (nn.Module classes found: {found})")


def _run_recording(source: TorchSource, seed: int) -> None:
    """One eager forward under a dispatch mode: which aten ops run in place or draw random numbers."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    path = source.path

    def line_of() -> str:
        import traceback

        for f in reversed(traceback.extract_stack()):
            if Path(f.filename).resolve() == path.resolve():
                return f" (line {f.lineno})"
        return ""

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in RANDOM_OPS or (name == "dropout" and args and len(args) > 2 and args[2]):
                source.random_ops.append(f"aten.{name}{line_of()}")
            elif func._schema.is_mutable and name.endswith("_") and name not in ("copy_", "set_"):
                source.in_place_ops.append(f"aten.{name}{line_of()}")
            return func(*args, **(kwargs or {}))

    torch.manual_seed(seed)
    with torch.no_grad(), Recorder():
        out = source.model(*source.inputs)
    # the dtypes at the boundary (inputs, parameters, outputs): what the port must narrow
    boundary = [
        *source.inputs,
        *source.model.parameters(),
        *(out if isinstance(out, tuple | list) else [out]),
    ]
    source.dtypes = {str(t.dtype).removeprefix("torch.") for t in boundary if isinstance(t, torch.Tensor)}
    source.in_place_ops = list(dict.fromkeys(source.in_place_ops))
    source.random_ops = list(dict.fromkeys(source.random_ops))


POOL_ELEMENTS = 1 << 16  # per call and input, an evenly strided sample (a KernelBench input can be GBs)


def _sample(x: Any) -> Any:
    flat = x.detach().flatten()
    step = max(1, flat.numel() // POOL_ELEMENTS)
    return flat[::step].clone()


def _pooled_inputs(inputs_fn: Any, first: list, seed: int, calls: int = 8) -> dict[int, Any]:
    """Each tensor input's values over `calls` calls of the inputs function (one call may not show the
    range: torch.randint(0, 4, (1,)) once is a single value), sampled: at most POOL_ELEMENTS a call."""
    import torch

    pooled = {i: [_sample(x)] for i, x in enumerate(first) if isinstance(x, torch.Tensor)}
    for k in range(1, calls):
        torch.manual_seed(seed + k)
        try:
            more = inputs_fn()
        except Exception:  # noqa: BLE001 - the first call worked; a flaky extra call only narrows the range
            break
        more = list(more) if isinstance(more, list | tuple) else [more]
        for i in pooled:
            if i < len(more) and isinstance(more[i], torch.Tensor):
                pooled[i].append(_sample(more[i]))
    return {i: torch.cat(v) for i, v in pooled.items()}


def load_source(spec: str, *, seed: int = 0, sizes: dict[str, int] | None = None) -> TorchSource:
    """Import the source, build Model(*get_init_inputs()) in eval mode and its example inputs, run it once.

    `sizes` replaces the source's size globals (port/sizing.py) before anything is built."""
    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"source file not found: {spec}")
    try:
        text = path.read_text(encoding="utf-8")
        ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError) as e:
        line = getattr(e, "lineno", None)
        raise SourceFailure(f"cannot read the source {spec}: {type(e).__name__}: {e}", line=line) from None
    kernels = _triton_kernels(text) if "triton" in text else []
    if kernels:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # CPU tensors, Triton's interpreter
    try:
        import torch
    except ImportError:
        raise UsageError('PyTorch is not installed: pip install "maxkernel[torch]" (see README)') from None
    try:
        if sizes:
            from maxkernel.tpu_tools.port.source_module import load_module

            module, sha = load_module(path, text, sizes), hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            module, sha = import_file(path, "source")
    except UsageError:
        raise
    except Exception as e:
        raise _fail(e, path, "import") from None
    cls, named_model = model_class(module, path)
    inputs_fn = next(
        (getattr(module, n) for n in INPUT_FUNCTIONS if callable(getattr(module, n, None))), None
    )
    if inputs_fn is None:
        raise UsageError(f"{path}: no inputs function: define get_inputs() returning the forward's arguments")
    init_fn = getattr(module, "get_init_inputs", None)
    kind = "triton" if kernels else ("kernelbench" if named_model and init_fn is not None else "module")
    torch.manual_seed(seed)
    try:
        init_args = list(init_fn()) if callable(init_fn) else []
    except Exception as e:
        raise _fail(e, path, "get_init_inputs()") from None
    try:
        model = cls(*init_args)
    except TypeError as e:
        raise UsageError(f"{path}: inputs cannot be built: {cls.__name__}(*get_init_inputs()): {e}") from None
    except Exception as e:
        raise _fail(e, path, f"{cls.__name__}(...)") from None
    model.eval()
    try:
        raw = inputs_fn()
    except Exception as e:
        raise _fail(e, path, f"{inputs_fn.__name__}()") from None
    inputs = list(raw) if isinstance(raw, list | tuple) else [raw]
    if not any(isinstance(x, torch.Tensor) for x in inputs):
        raise UsageError(f"{path}: inputs cannot be built: {inputs_fn.__name__}() returned no tensor")
    source = TorchSource(path, sha, kind, module, model, init_args, inputs, triton_kernels=kernels)
    source.input_samples = _pooled_inputs(inputs_fn, inputs, seed)
    try:
        _run_recording(source, seed)
    except TypeError as e:
        if "forward()" in str(e):
            raise UsageError(f"{path}: inputs cannot be built: {e}") from None
        raise _fail(e, path, "forward") from None
    except Exception as e:
        raise _fail(e, path, "forward") from None
    return source


def forward(source: TorchSource, inputs: list) -> list:
    """The source's outputs on these inputs, flattened to a list of CPU tensors."""
    import torch

    with torch.no_grad():
        out = source.model(*inputs)
    leaves = out if isinstance(out, list | tuple) else [out]
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def is_torch_source(path: str | Path) -> bool:
    """A PyTorch (or Triton) source rather than a JAX reference: by its text, without importing anything."""
    p = Path(path)
    if not p.is_file() or p.suffix != ".py":
        return False
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    imports_torch = any(s in text for s in ("import torch", "from torch"))
    return imports_torch and "nn.Module" in text and "def workload(" not in text
