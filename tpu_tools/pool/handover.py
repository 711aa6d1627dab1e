"""Arrays between evaluation processes as plain files: the judge and the judged share data, never code.

    save_arrays(dir, "inputs_0", arrays)            -> writes inputs_0.json + inputs_0.<i>.npy
    load_arrays(dir, "inputs_0", expect=specs)      -> list[np.ndarray] (bfloat16 & co. restored by name)
    specs_of(arrays) / save_specs(path, specs) / load_specs(path)   shapes + dtypes as JSON (ArraySpec)
    as_jax(arrays)                                  -> jax arrays with the recorded dtypes

Files are `.npy` read with `allow_pickle=False` (no object arrays, no code); dtypes numpy lacks
(bfloat16, float8_*, int4) travel as same-width unsigned bits and are restored from the manifest. The
reader trusts nothing it did not write: names must be plain files inside the folder (no links, no
`..`), and the shapes and dtypes must match the manifest and, when given, the expected specs.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from maxkernel.tpu_tools.reports import ArraySpec

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
MAX_ARRAYS = 256


class HandoverError(ValueError):
    """A handed-over file is missing, malformed, or not what was announced."""


def _np_dtype(name: str) -> np.dtype:
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes  # jax's own dependency: bfloat16, float8_*, int4

        try:
            return np.dtype(getattr(ml_dtypes, name))
        except AttributeError:
            raise HandoverError(f"unknown dtype {name!r}") from None


def _is_native(dtype: np.dtype) -> bool:
    """numpy can save and load it without pickle and without extension types."""
    return dtype.kind in "biufc" and dtype.type.__module__ == "numpy"


def _bits(nbytes: int) -> np.dtype:
    return np.dtype({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[nbytes])


def dtype_name(x) -> str:
    """'bfloat16', 'float32', ... of an array or a dtype."""
    return str(np.dtype(getattr(x, "dtype", x)).name)


def specs_of(arrays: Sequence) -> list[ArraySpec]:
    return [ArraySpec(shape=[int(d) for d in x.shape], dtype=dtype_name(x)) for x in arrays]


def save_arrays(folder: str | Path, name: str, arrays: Sequence) -> None:
    """Write each array as `<name>.<i>.npy` and a manifest `<name>.json` listing dtype and shape."""
    if not _NAME.match(name):
        raise HandoverError(f"bad handover name {name!r}")
    folder = Path(folder)
    entries = []
    for i, x in enumerate(arrays):
        arr = np.asarray(x)
        dtype = arr.dtype
        stored = arr if _is_native(dtype) else arr.view(_bits(dtype.itemsize))
        file = f"{name}.{i}.npy"
        np.save(folder / file, np.asarray(stored, order="C"), allow_pickle=False)
        entries.append({"file": file, "dtype": dtype_name(arr), "shape": list(arr.shape)})
    (folder / f"{name}.json").write_text(json.dumps({"arrays": entries}))


def _plain_file(folder: Path, file: object) -> Path:
    if not isinstance(file, str) or not _NAME.match(file) or file in (".", ".."):
        raise HandoverError(f"bad file name in manifest: {file!r}")
    path = folder / file
    if os.path.islink(path) or not path.is_file():
        raise HandoverError(f"{file} is not a plain file")
    return path


def load_arrays(folder: str | Path, name: str, expect: Sequence[ArraySpec] | None = None) -> list[np.ndarray]:
    """Read what `save_arrays` wrote; every mismatch with the manifest or `expect` is a HandoverError."""
    folder = Path(folder)
    manifest = _plain_file(folder, f"{name}.json")
    try:
        entries = json.loads(manifest.read_text())["arrays"]
    except (ValueError, KeyError, TypeError) as e:
        raise HandoverError(f"{name}.json is not a handover manifest: {e}") from None
    if not isinstance(entries, list) or len(entries) > MAX_ARRAYS:
        raise HandoverError(f"{name}.json lists no arrays or too many")
    if expect is not None and len(entries) != len(expect):
        raise HandoverError(f"{name}: {len(entries)} arrays, expected {len(expect)}")
    out = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise HandoverError(f"{name}.json entry {i} is not an object")
        path = _plain_file(folder, entry.get("file"))
        dtype = _np_dtype(str(entry.get("dtype")))
        shape = entry.get("shape")
        try:
            raw = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as e:
            raise HandoverError(f"{path.name}: {e}") from None
        arr = raw if _is_native(dtype) else raw.view(dtype) if raw.dtype == _bits(dtype.itemsize) else None
        if arr is None or arr.dtype != dtype or list(arr.shape) != shape:
            got = f"{raw.dtype}{list(raw.shape)}"
            raise HandoverError(f"{path.name} holds {got}, the manifest says {dtype_name(dtype)}{shape}")
        if expect is not None:
            want = expect[i]
            if list(want.shape) != list(arr.shape) or want.dtype != dtype_name(arr):
                raise HandoverError(
                    f"{name} array {i} is {dtype_name(arr)}{list(arr.shape)}, expected {want.dtype}{want.shape}"
                )
        out.append(arr)
    return out


def save_specs(path: str | Path, specs: Sequence[ArraySpec]) -> None:
    Path(path).write_text(json.dumps([s.model_dump(mode="json") for s in specs]))


def load_specs(path: str | Path) -> list[ArraySpec]:
    try:
        return [ArraySpec.model_validate(s) for s in json.loads(Path(path).read_text())]
    except (ValueError, TypeError) as e:
        raise HandoverError(f"{path}: not a list of array specs: {e}") from None


def as_jax(arrays: Sequence[np.ndarray]) -> list:
    """Device arrays with the recorded dtypes (bfloat16 stays bfloat16)."""
    import jax.numpy as jnp

    return [jnp.asarray(a) for a in arrays]
