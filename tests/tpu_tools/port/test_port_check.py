"""The port against its source on CPU: shipped problems port and match over fresh seeds; ports that drop a
bias, swap a transpose, zero or fix a weight, or skip a parameter are refused; a Triton source is run in
Triton's interpreter. Slow: each run imports torch, exports and jit-compiles (5-20 s)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from maxkernel.tpu_tools.port import aten  # noqa: E402
from maxkernel.tpu_tools.port.run import port_source  # noqa: E402

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
SHIPPED = sorted(p for p in (ROOT / "examples" / "torch").glob("*.py") if not p.stem.endswith("_port"))


def _cli(*args: str) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "port", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"},
    )
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, proc.stderr


def test_ten_problems_ship():
    assert len(SHIPPED) >= 10


@pytest.mark.parametrize("source", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_problem_ports_and_matches_its_source(source, tmp_path):
    out = tmp_path / f"{source.stem}_port.py"
    r = port_source(str(source), out=str(out), seeds=2)
    assert r.ok, r.summary
    assert r.status == "ported" and r.port_path in ("torch.export", "torch.export+decompositions")
    assert r.check.status == "match" and len(r.check.per_seed) == 3  # 2 seeds at full, 1 at small
    assert all(s.ok and not s.trivial_outputs_passing for s in r.check.per_seed)
    text = out.read_text()
    assert "import torch" not in text  # the port needs jax only
    # every parameter and float buffer the forward reads is an input drawn from the key: none is fixed
    import jax

    from maxkernel.tpu_tools.problem.reference import load_reference

    ref = load_reference(str(out))
    assert {"full", "small"} <= set(ref.info.sizes)
    a = ref.create_inputs("full", 1)
    b = ref.create_inputs("full", 2)
    for name, x, y in zip(
        ["input"] * (len(a) - len(r.check.source_params)) + r.check.source_params, a, b, strict=True
    ):
        assert not jax.numpy.array_equal(x, y), f"{name} does not vary with the seed"
        assert bool(jax.numpy.any(x != x.reshape(-1)[0])), f"{name} is one constant"


def test_hand_port_with_its_own_parameter_order_matches():
    rc, r, err = _cli(
        str(HERE / "sources/dense_relu.py"), "--check", str(HERE / "ports/dense_relu_by_hand.py")
    )
    assert rc == 0, err
    assert r["status"] == "checked" and r["port_path"] == "given"
    assert r["check"]["source_params"] == ["fc2.weight", "fc1.bias", "fc1.weight"]


@pytest.mark.parametrize(
    ("port", "status", "says"),
    [
        ("drops_bias.py", "mismatch", "in the port"),
        ("swaps_transpose.py", "mismatch", "in the port"),
        ("zeroes_weight.py", "mismatch", "is 0 in the port"),
        ("fixed_weight.py", "bad_port", "draws fc1.weight as one constant"),
        ("skips_param.py", "bad_port", "does not take the source's fc1.bias"),
        ("tiny_weight.py", "bad_port", "draws fc1.weight at std"),  # x @ W at 1e-7 hides a dropped matmul
        ("full_shape_only.py", "mismatch", "1/3 runs fail; 'small' seed"),  # right at full, wrong at small
    ],
)
def test_adversary_port_is_refused(port, status, says):
    rc, r, err = _cli(
        str(HERE / "sources/dense_relu.py"), "--check", str(HERE / "ports" / port), "--seeds", "2"
    )
    assert rc == 1, err
    assert r["status"] == "refused" and r["check"]["status"] == status
    assert says in r["summary"], r["summary"]


def test_triton_source_runs_in_the_interpreter_and_checks_a_port():
    src = str(HERE / "sources/triton_scale_add.py")
    rc, r, err = _cli(src, "--check", str(HERE / "ports/triton_scale_add_port.py"), "--seeds", "2")
    assert rc == 0, err
    assert r["source_kind"] == "triton" and r["check"]["status"] == "match"
    rc, r, err = _cli(src, "--check", str(HERE / "ports/triton_wrong_sign.py"), "--seeds", "2")
    assert rc == 1 and r["check"]["status"] == "mismatch", err


def test_a_wrong_translation_is_refused_naming_its_op(monkeypatch, tmp_path):
    """A translation bug (relu written as abs) is caught by the check, which names the op and its line."""
    monkeypatch.setitem(aten.OPS, "relu", lambda a: f"jnp.abs({a.r('self')})")
    r = port_source(str(HERE / "sources/dense_relu.py"), out=str(tmp_path / "p.py"), seeds=2)
    assert not r.ok and r.check.status == "mismatch"
    assert r.check.worst_op.startswith("aten.relu (line 14:"), r.check.worst_op
    assert "first op off: aten.relu" in r.summary


def test_weak_check_flags_a_source_whose_output_is_zero(tmp_path):
    src = tmp_path / "zero_src.py"
    src.write_text(
        "import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def forward(self, x):\n        return torch.relu(-torch.abs(x))\n\n\n"
        "def get_inputs():\n    return [torch.randn(8, 16)]\n\n\ndef get_init_inputs():\n    return []\n"
    )
    r = port_source(str(src), out=str(tmp_path / "p.py"), seeds=2)
    assert not r.ok and r.check.status == "weak_check", r.summary
    assert "zeros" in r.summary


def test_any_module_with_an_inputs_function_ports_and_says_what_changed(tmp_path):
    r = port_source(str(HERE / "sources/plain_module.py"), out=str(tmp_path / "p.py"), seeds=2)
    assert r.ok and r.source_kind == "module", r.summary
    changes = {c.kind: c.detail for c in r.changes}
    assert changes["in_place"].startswith("aten.mul_ (line ")
    assert changes["mode"].startswith("eval mode")
    assert r.check.per_seed_size == ["full", "full", "small"]
