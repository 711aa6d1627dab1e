"""Arrays handed between processes as files: dtypes numpy lacks survive, a tampered manifest is refused."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

from maxkernel.tpu_tools.pool.handover import (
    HandoverError,
    as_jax,
    load_arrays,
    load_specs,
    save_arrays,
    save_specs,
    specs_of,
)


def test_round_trip_keeps_dtypes_and_shapes(tmp_path):
    arrays = [
        jnp.arange(6, dtype=jnp.bfloat16).reshape(2, 3),
        np.arange(4, dtype=np.int32),
        np.float32(3.5),
        np.array([True, False]),
    ]
    save_arrays(tmp_path, "inputs_0", arrays)
    specs = specs_of(arrays)
    assert [s.dtype for s in specs] == ["bfloat16", "int32", "float32", "bool"]
    back = load_arrays(tmp_path, "inputs_0", expect=specs)
    assert specs_of(back) == specs
    assert np.array_equal(back[0].astype(np.float32), np.arange(6, dtype=np.float32).reshape(2, 3))
    assert as_jax(back)[0].dtype == jnp.bfloat16
    save_specs(tmp_path / "specs.json", specs)
    assert load_specs(tmp_path / "specs.json") == specs


def test_a_manifest_that_lies_or_escapes_is_refused(tmp_path):
    save_arrays(tmp_path, "out", [np.ones((2, 2), np.float32)])
    with pytest.raises(HandoverError, match="expected"):
        load_arrays(tmp_path, "out", expect=specs_of([np.ones((3, 2), np.float32)]))
    manifest = tmp_path / "out.json"
    entry = json.loads(manifest.read_text())
    entry["arrays"][0]["file"] = "../etc/passwd"
    manifest.write_text(json.dumps(entry))
    with pytest.raises(HandoverError, match="bad file name"):
        load_arrays(tmp_path, "out")
    (tmp_path / "link.npy").symlink_to(tmp_path / "out.0.npy")
    entry["arrays"][0]["file"] = "link.npy"
    manifest.write_text(json.dumps(entry))
    with pytest.raises(HandoverError, match="not a plain file"):
        load_arrays(tmp_path, "out")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    entry["arrays"][0] = {"file": "obj.npy", "dtype": "float32", "shape": [1]}
    manifest.write_text(json.dumps(entry))
    with pytest.raises(HandoverError):
        load_arrays(tmp_path, "out")
