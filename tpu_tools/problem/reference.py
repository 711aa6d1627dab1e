"""Load references (JaxBench ids, maxkernel modules, JAXBench-style files, MaxKernel task dirs).

Everything here imports user code, so it runs inside a pool child, never in the server process.
"""

from __future__ import annotations

import hashlib
import inspect
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from maxkernel.tpu_tools.errors import (
    ReferenceFailure,
    ReferenceLoadError,
    UnusableCaseError,
    UsageError,
)
from maxkernel.tpu_tools.hardware.mesh import mesh_of
from maxkernel.tpu_tools.problem import chip_program, config_reference
from maxkernel.tpu_tools.problem.source import (
    ReferenceInfo,
    ReferenceKind,
    import_file,
    missing_package,
    user_frame_line,
)

if TYPE_CHECKING:
    from maxkernel.tpu_tools.problem.input_cases import InputCase


@dataclass
class Reference:
    """A loaded reference workload with one uniform calling convention."""

    info: ReferenceInfo
    workload: Callable[..., Any]
    _create: Callable[[str, int | None], tuple]
    _flops: Callable[[str], int | None] = field(default=lambda size: None)
    config: dict = field(default_factory=dict)
    # maxkernel-format only: build inputs for a size dict that is not one of SIZES (extra input cases)
    _create_sized: Callable[[dict, int | None], tuple] | None = None
    sizes_table: dict[str, dict] = field(default_factory=dict)
    _derived: Any = None  # the derived check size, once computed
    absent_inputs: list[int] = field(default_factory=list)  # None inputs left out (config_reference.absent)
    derive_seed: int | None = None  # validate's seed offset: the derived size is drawn from it

    @property
    def pallas(self) -> bool:
        """Its source calls Pallas TPU kernels: traced as the target, run interpreted (chip_program.py)."""
        return self.info.pallas

    def per_device_flops(self, size: str) -> float | None:
        """The flops one chip does: all of get_flops, or a 1/N share over an N-device MESH."""
        flops = self.get_flops(size)
        mesh = self.info.mesh
        return mesh.share(flops) if mesh is not None else flops

    def create_inputs(
        self, size: str = "small", seed: int | None = None, case: InputCase | None = None
    ) -> tuple:
        """The inputs for (size, seed), or for an extra input case built over that size.

        A case with size overrides needs a seedable maxkernel-format reference (UnusableCaseError,
        a UsageError, otherwise); its distribution reshapes the float inputs deterministically from `seed`.
        """
        from maxkernel.tpu_tools.problem.sizes import synthetic

        if synthetic(size) and size not in self.info.sizes:
            if self._create_sized is None:
                raise UsageError(f"reference {self.info.name!r}: {self.derived_size().describe()}")
            dims = self.check_size(size).dims  # the derived or unaligned size, or one precise error
            table = self.sizes_table | {size: dims}
            if case is None:
                return self._create_sized(dims, seed)
        elif size not in self.info.sizes:
            raise UsageError(f"reference {self.info.name!r} has no size {size!r}; it has {self.info.sizes}")
        else:
            table = self.sizes_table
            if case is None:
                return self._create(size, seed)
        from maxkernel.tpu_tools.problem.input_cases import merged_size, transform_inputs

        if case.sizes or case.grow:
            if self._create_sized is None:
                raise UnusableCaseError(
                    f"{case.describe()}: this reference has fixed inputs; size overrides need a "
                    "maxkernel-format reference"
                )
            case = case.model_copy(update={"base": size})
            inputs = self._create_sized(merged_size(table, case), seed)
        elif synthetic(size) and size not in self.info.sizes:
            inputs = self._create_sized(table[size], seed)  # type: ignore[misc]
        else:
            inputs = self._create(size, seed)
        return transform_inputs(inputs, case, seed)

    def default_size(self) -> tuple[str, str]:
        """(size, why): the target size by default: the production size (`full`, else the largest)."""
        from maxkernel.tpu_tools.problem.sizes import production_size

        return production_size(self.info.sizes, self.input_elements)

    def input_elements(self, size: str) -> int:
        """How many elements the inputs at `size` hold (shapes only: nothing is allocated)."""
        import math

        import jax

        return sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(self.input_shapes(size)))

    def elements_at(self, dims: dict) -> int:
        """Input + output elements at a size dict; raises where the reference refuses that shape (over a
        MESH, also where an input does not split over the mesh's devices: the device count stays fixed)."""
        import math

        import jax

        if self._create_sized is None:
            raise UsageError("a reference with fixed inputs has no other sizes")
        inputs = jax.eval_shape(lambda: self._create_sized(dims, 0))  # type: ignore[misc]
        if self.info.mesh is not None:
            from maxkernel.tpu_tools.hardware.mesh import shape_problem

            if (problem := shape_problem(self.info.mesh, jax.tree_util.tree_leaves(inputs))) is not None:
                raise ValueError(f"the MESH: {problem}")
        outputs = jax.eval_shape(self.workload, *inputs)
        return sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves((inputs, outputs)))

    def derived_size(self):
        """The derived intermediate check size (problem/sizes.py), computed once per load."""
        from maxkernel.tpu_tools.problem.sizes import DerivedSize, derive_size, smallest_size

        if self._derived is None:
            if self._create_sized is None:
                self._derived = DerivedSize(
                    base=self.info.sizes[0],
                    ok=False,
                    why="the reference has fixed inputs (one size, no SIZES table to grow from)",
                )
            else:
                base = smallest_size(self.info.sizes, self.input_elements)
                target = self.default_size()[0]  # the alignment kept is the one small and the target share
                table = self.sizes_table
                if self.info.kind == "jaxbench-config":  # named configs are sizes to pick, not a scale:
                    table = {n: table[n] for n in (base, target)}  # the derived size grows small toward full
                self._derived = derive_size(table, self.elements_at, base, target, draw=self.derive_seed)
        return self._derived

    def check_size(self, name: str):
        """The CheckSize for a name: a SIZES entry, or the derived size (UsageError when unknown)."""
        from maxkernel.tpu_tools.problem.sizes import DERIVED, GROWN, UNALIGNED, CheckSize

        if name in self.info.sizes:
            return CheckSize(name=name, dims=dict(self.sizes_table.get(name, {})))
        if name == DERIVED:
            derived = self.derived_size()
            if not derived.ok:
                raise UsageError(f"reference {self.info.name!r}: {derived.describe()}")
            return CheckSize(name=name, dims=dict(derived.dims), derived=derived)
        if name == UNALIGNED:
            unaligned = self.derived_size().unaligned
            if unaligned is None or not unaligned.ok:
                why = unaligned.describe() if unaligned else self.derived_size().describe()
                raise UsageError(f"reference {self.info.name!r}: {why}")
            return CheckSize(name=name, dims=dict(unaligned.dims))
        if name.startswith(f"{UNALIGNED}:"):
            unaligned = self.derived_size().unaligned
            dim = name.split(":", 1)[1]
            if unaligned is None or dim not in unaligned.alone:
                raise UsageError(f"reference {self.info.name!r}: no {name!r} size (no {dim!r} moved alone)")
            return CheckSize(name=name, dims=dict(unaligned.alone[dim]))
        if name.startswith(f"{GROWN}:"):
            derived = self.derived_size()
            dim = name.split(":", 1)[1]
            if dim not in derived.grown_alone:
                raise UsageError(f"reference {self.info.name!r}: no {name!r} size (no {dim!r} grown alone)")
            return CheckSize(name=name, dims=dict(derived.grown_alone[dim]))
        if name == GROWN:
            derived = self.derived_size()
            if not derived.ok or derived.grown_dims is None:
                why = derived.grown_why or derived.describe()
                raise UsageError(f"reference {self.info.name!r}: no {GROWN!r} size: {why}")
            return CheckSize(name=name, dims=dict(derived.grown_dims))
        raise UsageError(
            f"reference {self.info.name!r} has no size {name!r}; it has {self.info.sizes} "
            f"(and {DERIVED!r}, the derived intermediate size, and {UNALIGNED!r}, off the alignment "
            "small and the target share)"
        )

    def default_check_sizes(self) -> tuple[list[str], list[str]]:
        """(names, notes): `small` (else the smallest size) plus the derived size where one exists."""
        from maxkernel.tpu_tools.problem.sizes import DERIVED, smallest_size

        names = [smallest_size(self.info.sizes, self.input_elements)]
        # a derived size written by its author (an extracted region: the model's derived size)
        if DERIVED in self.info.sizes:
            return names + [DERIVED], []
        derived = self.derived_size()
        notes = []
        if derived.ok:
            names.append(DERIVED)
        else:
            notes.append(derived.describe())
        return names, notes

    def input_shapes(self, size: str = "small", case: InputCase | None = None) -> tuple:
        """ShapeDtypeStructs of the inputs without allocating them (full production sizes are cheap)."""
        import jax

        if size not in self.info.sizes and case is None:
            self.check_size(size)  # the derived size, or one precise error
        return jax.eval_shape(lambda: self.create_inputs(size, 0, case))

    def get_flops(self, size: str) -> int | None:
        return self._flops(size)


def present(path: str | Path, *, folder: bool = False) -> bool:
    """Whether `path` names something here (with `folder`, a directory); False for a name the OS refuses to
    look up (ENAMETOOLONG: a list of task ids given as one), which then goes on to be read as an id."""
    try:
        return Path(path).is_dir() if folder else Path(path).exists()
    except OSError:
        return False


def _resolve_reference_path(spec: str) -> tuple[Path, str | None]:
    """A JaxBench id or a path; returns (path, task_id or None)."""
    path = Path(spec).expanduser()
    if present(path):
        return path.resolve(), None
    from maxkernel.jaxbench import registry

    try:
        task_id = registry.resolve_id(spec)
    except registry.UnknownTaskError as e:
        if any(c in spec for c in "/\\") or spec.endswith(".py"):
            raise ReferenceLoadError(f"reference file not found: {spec}") from None
        try:  # a model reference (jaxbench/models): a whole layer, named by its id
            return registry.model_path(spec), None
        except registry.UnknownTaskError:
            raise ReferenceLoadError(str(e)) from None
    return registry.task_path(task_id), task_id


def load_reference(spec: str) -> Reference:
    """Load a reference from a JaxBench id, a module file, or a MaxKernel task directory."""
    path, task_id = _resolve_reference_path(spec)
    if path.is_dir():
        if (path / "kernel_task.yaml").exists():
            return _load_maxkernel_task_dir(path)
        if (path / "__init__.py").exists():
            path = path / "__init__.py"
        else:
            raise ReferenceLoadError(f"{path} is a directory without kernel_task.yaml or __init__.py")
    try:
        module, sha = import_file(path, "reference")
    except Exception as e:
        line = user_frame_line(e.__traceback__, path)
        where = f" (line {line})" if line else ""
        if (missing := missing_package(e)) is not None:
            raise ReferenceLoadError(f"reference {path}{where}: {missing}") from None
        raise ReferenceFailure(
            f"reference {path} failed to import{where}: {type(e).__name__}: {e}",
            line=line,
            detail=reference_traceback(e, path),
        ) from None
    return _from_module(module, path, task_id, sha)


def reference_traceback(exc: BaseException, path: Path, limit: int = 4000) -> str:
    """The reference's own frames and the error line (capped): evidence without jax's internals."""
    frames = [
        f"  {Path(f.filename).name}:{f.lineno} in {f.name}: {(f.line or '').strip()}"
        for f in traceback.extract_tb(exc.__traceback__)
        if Path(f.filename).resolve().parent == path.resolve().parent
    ]
    text = "\n".join([*frames[-8:], f"{type(exc).__name__}: {exc}"])
    return text[:limit]


def reference_failure(exc: BaseException, path: Path, what: str) -> ReferenceFailure:
    """A reference that breaks on its own: `reference_error` naming the reference's line."""
    line = user_frame_line(exc.__traceback__, path)
    where = f" at line {line}" if line else ""
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    return ReferenceFailure(
        f"the reference fails on its own in {what}{where}: {type(exc).__name__}: {first}",
        line=line,
        detail=reference_traceback(exc, path),
    )


def _typed_or_int_key(create_inputs: Callable[..., Any]) -> Callable[[int | None], Any]:
    """The key a reference's create_inputs takes: a typed `jax.random.key(seed)`, or an int for old files.

    A file written for int seeds (`jax.random.key(key)` inside) fails on a typed key; the first call tells.
    """
    style: dict[str, str] = {}

    def call(seed: int | None, **kwargs) -> Any:
        import jax

        if seed is None:
            return create_inputs(key=None, **kwargs)
        if style.get("key") == "int":
            return create_inputs(key=seed, **kwargs)
        try:
            out = create_inputs(key=jax.random.key(seed), **kwargs)
            style["key"] = "typed"
            return out
        except Exception:
            if style.get("key") == "typed":
                raise
            out = create_inputs(key=seed, **kwargs)  # the typed key's error is chained, for evidence
            style["key"] = "int"
            return out

    return call


def _from_module(module: ModuleType, path: Path, task_id: str | None, sha: str) -> Reference:
    missing = [n for n in ("create_inputs",) if not hasattr(module, n)]
    workload = getattr(module, "workload", None) or getattr(module, "computation", None)
    if workload is None:
        missing.append("workload")
    if missing:
        raise ReferenceLoadError(f"reference {path} lacks {', '.join(missing)}")
    config = dict(getattr(module, "CONFIG", {}) or {})
    sizes_table = getattr(module, "SIZES", None)
    params = inspect.signature(module.create_inputs).parameters
    seedable = "key" in params and "size" in params and isinstance(sizes_table, dict)
    name = task_id or config.get("name") or path.stem
    notes: list[str] = []
    if seedable:
        sizes = list(sizes_table)
        keyed = _typed_or_int_key(module.create_inputs)

        def create(size: str, seed: int | None) -> tuple:
            out = keyed(seed, dtype=None, size=size)
            return tuple(out) if isinstance(out, list | tuple) else (out,)

        def create_sized(dims: dict, seed: int | None) -> tuple:
            # create_inputs reads SIZES[size]: lend it the case's dict under a private name, then take it back
            name = "__maxkernel_case__"
            dims = dict(dims)
            dtype = dims.get("dtype")  # a dtype override reaches modules that read the argument, not the dict
            sizes_table[name] = dims
            try:
                out = keyed(seed, dtype=dtype, size=name)
                return tuple(out) if isinstance(out, list | tuple) else (out,)
            finally:
                sizes_table.pop(name, None)

        kind: ReferenceKind = "maxkernel"
    elif (style := config_reference.style_of(module)) is not None and (
        configured := _from_config_module(module, path, task_id, sha, style)
    ) is not None:
        return configured
    else:
        sizes = ["full"]
        notes.append(
            "JAXBench-style reference: one fixed seed and one size ('full'); seeds cannot vary inputs"
        )

        def create(size: str, seed: int | None) -> tuple:
            out = module.create_inputs(**({"dtype": _bf16()} if "dtype" in params else {}))
            return tuple(out) if isinstance(out, list | tuple) else (out,)

        kind = "jaxbench-style"
    get_flops = getattr(module, "get_flops", None)

    def flops(size: str) -> int | None:
        if get_flops is None:
            return None
        try:
            return int(get_flops(size) if "size" in inspect.signature(get_flops).parameters else get_flops())
        except TypeError:
            return int(get_flops())

    try:
        mesh = mesh_of(module)
    except UsageError as e:  # the reference's own mistake, not the caller's flag
        raise ReferenceLoadError(f"reference {path}: {e}") from None
    if mesh is not None:
        notes.append(f"multi-chip: runs on a mesh {mesh.describe()}")
    info = ReferenceInfo(
        name=str(name),
        path=str(path),
        kind=kind,
        sha256=sha,
        sizes=sizes,
        seedable=seedable,
        atol=config.get("atol"),
        rtol=config.get("rtol"),
        notes=notes,
        mesh=mesh,
    )
    pallas = chip_program.uses_pallas(path.read_text(errors="replace"))
    info.pallas = pallas
    return Reference(
        info=info,
        workload=chip_program.as_chip_program(workload) if pallas else workload,
        _create=create,
        _flops=flops,
        config=config,
        _create_sized=create_sized if seedable else None,
        sizes_table=dict(sizes_table) if seedable else {},
    )


def _from_config_module(
    module: ModuleType, path: Path, task_id: str | None, sha: str, style: config_reference.Style
) -> Reference | None:
    """A CONFIG-driven file (upstream JaxBench level 2, config_reference.py), read unmodified: every named
    config a size, `full` the default, `small` derived by shrinking; seeds fold into the file's own draw."""
    import jax

    workload = getattr(module, "workload", None) or module.computation
    table, default = config_reference.named_sizes(module, style)
    params = inspect.signature(module.create_inputs).parameters
    dtype = _bf16() if "dtype" in params else None
    pallas = chip_program.uses_pallas(path.read_text(errors="replace"))
    configs_of: dict[tuple, dict] = {}  # input signature -> the dims they were built at
    absent: list[int] = []  # positions create_inputs fills with None (config_reference.absent)

    def create_sized(dims: dict, seed: int | None) -> tuple:
        d = dict(dims)
        inputs = config_reference.create_at(module, style, d, seed, d.pop("dtype", dtype))
        absent[:] = config_reference.absent(inputs)
        inputs = tuple(x for x in inputs if x is not None)
        configs_of[config_reference.signature(jax.tree_util.tree_leaves(inputs))] = dict(dims)
        return inputs

    def config_workload(*args):
        # the few files whose workload reads CONFIG (1p's head_dim) see the size their inputs were built at
        dims = configs_of.get(config_reference.signature(jax.tree_util.tree_leaves(args)))
        full = config_reference.with_absent(args, absent)
        if dims is None:
            return workload(*full)
        with config_reference.config_as(module, style, dims):
            return workload(*full)

    run = chip_program.as_chip_program(config_workload) if pallas else config_workload
    tuned = config_reference.tuned_values(module)

    def probe(dims: dict) -> int:
        import math

        inputs = jax.eval_shape(lambda: create_sized(dims, 0))
        jax.eval_shape(run, *inputs)  # the workload must trace at these dims
        return sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(inputs))

    def shapes_of(dims: dict) -> list:
        leaves = jax.tree_util.tree_leaves(jax.eval_shape(lambda: create_sized(dims, 0)))
        return [(x.shape, x.dtype) for x in leaves]

    if style != "listed" and not config_reference.sizes_anything(table["full"], shapes_of):
        return None  # its inputs do not follow CONFIG (shapes written in create_inputs): fixed inputs

    notes = [
        f"JAXBench level-2 style ({style}): sizes are its named configs; 'full' is {default!r}"
        + (" (the first listed: the file names no default)" if style == "listed" else " (its default CONFIG)")
    ]
    try:
        small, small_notes = config_reference.shrink(table["full"], tuned, probe, shapes_of)
    except Exception as e:  # noqa: BLE001 - the default config itself does not trace: said, small is full
        small, small_notes = (
            dict(table["full"]),
            [f"no smaller size: the default config fails to trace ({type(e).__name__}: {e})"[:400]],
        )
    table = {config_reference.SMALL: small, **table}
    notes += small_notes
    config = dict(module.CONFIG)
    get_flops = getattr(module, "get_flops", None)

    def flops(size: str) -> int | None:
        if get_flops is None:
            return None
        try:
            if "config" in inspect.signature(get_flops).parameters and style == "configs":
                return int(get_flops(config=dict(table[size])))
            with config_reference.config_as(module, style, table[size]):
                return int(get_flops())
        except Exception:  # noqa: BLE001 - a get_flops that breaks costs the estimate its flop count
            return None

    info = ReferenceInfo(
        name=str(
            task_id or (path.parent.name if path.name == "baseline.py" else config.get("name") or path.stem)
        ),
        path=str(path),
        kind="jaxbench-config",
        sha256=sha,
        sizes=list(table),
        seedable=True,
        atol=config.get("atol", table["full"].get("atol")),
        rtol=config.get("rtol", table["full"].get("rtol")),
        notes=notes,
        pallas=pallas,
    )
    return Reference(
        info=info,
        workload=run,
        _create=lambda size, seed: create_sized(table[size], seed),
        _flops=flops,
        config=config,
        _create_sized=create_sized,
        sizes_table=table,
        absent_inputs=absent,
    )


def _bf16():
    import jax.numpy as jnp

    return jnp.bfloat16


def _load_maxkernel_task_dir(path: Path) -> Reference:
    """MaxKernel task dir: kernel_task.yaml (input_gen_code, atol, rtol) + reference.py (computation)."""
    import yaml

    yaml_bytes = (path / "kernel_task.yaml").read_bytes()  # read once: hashed and parsed from these bytes
    try:
        task = yaml.safe_load(yaml_bytes.decode()) or {}
    except yaml.YAMLError as e:
        raise ReferenceLoadError(f"{path}/kernel_task.yaml is not valid YAML: {e}") from None
    ref_file = path / "reference.py"
    if not ref_file.exists():
        raise ReferenceLoadError(f"{path} has kernel_task.yaml but no reference.py")
    try:
        module, ref_sha = import_file(ref_file, "reference")
    except Exception as e:
        raise reference_failure(e, ref_file, "import") from None
    computation = getattr(module, "computation", None) or getattr(module, "workload", None)
    if computation is None:
        raise ReferenceLoadError(f"{ref_file} lacks computation")
    # input_gen_code is a fragment written beside reference.py: it sees the reference's own names
    # (its imports) and jax, jnp and np, which MaxKernel's tasks use without importing (often in a
    # default argument, evaluated when the code runs).
    import jax
    import jax.numpy as jnp
    import numpy as np

    namespace: dict[str, Any] = {"jax": jax, "jnp": jnp, "np": np}
    namespace.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
    code = task.get("input_gen_code")
    if code:
        try:
            exec(compile(code, str(path / "kernel_task.yaml:input_gen_code"), "exec"), namespace)
        except Exception as e:
            raise reference_failure(e, path / "kernel_task.yaml", "input_gen_code") from None
    get_inputs = namespace.get("get_inputs") or getattr(module, "get_inputs", None)
    if get_inputs is None:
        raise ReferenceLoadError(f"{path}: neither input_gen_code nor reference.py defines get_inputs()")
    static: dict[str, Any] = {"args": (), "kwargs": {}}

    def create(size: str, seed: int | None) -> tuple:
        out = get_inputs()
        # get_inputs() may return the arrays, or (dynamic_args, static_args); static args are bound, not traced.
        if (
            isinstance(out, tuple | list)
            and len(out) == 2
            and isinstance(out[0], tuple | list)
            and isinstance(out[1], tuple | list | dict)
        ):
            dynamic, stat = out
            static["args"], static["kwargs"] = (stat, {}) if isinstance(stat, tuple | list) else ((), stat)
            return tuple(dynamic)
        return tuple(out) if isinstance(out, tuple | list) else (out,)

    def workload(*inputs):
        return computation(*inputs, *static["args"], **static["kwargs"])

    info = ReferenceInfo(
        name=str(task.get("task_id") or path.name),
        path=str(path),
        kind="maxkernel-task-dir",
        sha256=hashlib.sha256(yaml_bytes + bytes.fromhex(ref_sha)).hexdigest(),
        sizes=["full"],
        seedable=False,
        atol=task.get("atol"),
        rtol=task.get("rtol"),
        notes=[
            "MaxKernel task dir: inputs come from get_inputs() with its fixed seed; seeds cannot vary inputs"
        ],
    )
    return Reference(info=info, workload=workload, _create=create, config=dict(task))
