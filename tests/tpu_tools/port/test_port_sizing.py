"""Ports fit the host: size globals found and scaled, the footprint measured on the meta device, one line
and exit 2 when no size fits, the host guard on a JAX reference (fast: nothing big is allocated)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from maxkernel.tpu_tools.port.sizing import _halve, footprint_at, plan_sizes, scalable, size_globals  # noqa: E402
from maxkernel.tpu_tools.problem.memory import TooBig, guard_reference  # noqa: E402

KB = Path(__file__).parent / "kernelbench"


def test_size_globals_are_the_ints_the_input_functions_read():
    text = (KB / "max_pool_1d.py").read_text()
    found = size_globals(text)
    assert found == {
        "batch_size": 64, "features": 192, "sequence_length": 65536, "kernel_size": 8, "stride": 1,
        "padding": 4, "dilation": 3,
    }  # fmt: skip
    # structural names and small integers are never scaled
    assert scalable(found) == ["batch_size", "features", "sequence_length"]
    derived = "a = 4096\nb = a * 2\nunused = 999\ndef get_inputs():\n    return [b]\n"
    assert size_globals(derived) == {"a": 4096}  # a read through b; b follows a when a is scaled


def test_halving_keeps_the_alignment():
    assert _halve(393216) == 196608  # 3 * 2**17: stays a multiple of 128
    assert _halve(4095) == 2047  # odd: no alignment to keep
    assert _halve(384) == 128  # 3 * 128 -> the largest multiple of 128 below half
    assert _halve(128) == 64 and _halve(4) == 2 and _halve(2) == 2  # a power of two halves down to 2


def test_footprint_counts_the_peak_without_allocating():
    path = KB / "activation_hardtanh_leaky.py"
    fp = footprint_at(path, path.read_text(), {"batch_size": 4096, "features": 393216})
    elems = 4096 * 393216
    assert fp.inputs == 4 * elems and fp.outputs == 4 * elems and fp.params == 0
    # leaky_relu's output is alive while hardtanh writes its own: two activations at the peak
    assert fp.peak == 2 * 4 * elems
    assert fp.largest == elems
    assert fp.check_bytes() > 20 * (1 << 30)  # the source's own shape: far more than a 24 GB host's share


def test_plan_scales_every_global_until_the_check_fits():
    path = KB / "causal_attention_mingpt.py"
    budget = 2 << 30
    plan = plan_sizes(path, path.read_text(), runs=4, budget_bytes=budget)
    assert plan.full == {"batch_size": 128, "context": 1024, "seq_len": 512, "width": 768}
    assert plan.check_name == "check"
    fp = plan.footprints["check"]
    assert fp.check_bytes() <= budget and fp.check_seconds(4) <= plan.budget_seconds
    for name in plan.names:  # every global scaled down, none above the source's
        assert plan.small[name] <= plan.check[name] <= plan.full[name]
    assert plan.check["seq_len"] <= plan.check["context"]  # no two globals cross


def test_a_loss_is_checked_at_a_size_that_holds_every_intermediate():
    """A scalar output (a mean loss) concentrates: over seeds it barely moves, so a constant passes the scalar
    alone; the check then compares every intermediate, and the plan sizes the check for that."""
    path = KB / "hinge_loss.py"
    # the check alone fits at 4096 x 4096 (1.9 GiB); with its intermediates it needs 2.3
    budget = int(2.1 * (1 << 30))
    plan = plan_sizes(path, path.read_text(), runs=3, budget_bytes=budget)
    fp = plan.footprints["check"]
    assert fp.scalar_outputs and fp.locate_bytes() <= budget
    assert plan.check == {"batch_size": 2048, "features": 2048}
    big = footprint_at(path, path.read_text(), {"batch_size": 4096, "features": 4096})
    assert big.check_bytes() <= budget < big.locate_bytes()
    assert not footprint_at(KB / "max_pool_1d.py", (KB / "max_pool_1d.py").read_text(), {}).scalar_outputs


def test_plan_refuses_in_one_line_with_the_numbers():
    path = KB / "hinge_loss.py"
    with pytest.raises(TooBig) as e:
        plan_sizes(path, path.read_text(), runs=4, budget_bytes=1 << 20)
    msg = str(e.value)
    assert "no check size fits the host" in msg and "MiB" in msg and "not run" in msg
    assert "\n" not in msg


def test_cli_refuses_with_exit_2_when_nothing_fits(tmp_path):
    env = dict(os.environ, MAXKERNEL_MEMORY_SHARE="0.001")
    cmd = [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "port", str(KB / "log_softmax_rows.py")]
    proc = subprocess.run(cmd + ["--out", str(tmp_path / "p.py")], capture_output=True, text=True, env=env)
    err = proc.stderr.strip()
    assert proc.returncode == 2, err
    assert len(err.splitlines()) == 1 and "no check size fits the host" in err, err
    assert "Traceback" not in err and not (tmp_path / "p.py").exists()


class _HugeReference:
    """A JAX reference whose inputs at 'full' are 64 GiB (only their shapes are ever made)."""

    class info:  # noqa: N801 - the attribute the guard names
        name = "huge"

    @staticmethod
    def create_inputs(size, seed):
        import jax.numpy as jnp

        n = 1 << 16 if size == "full" else 64
        return (jnp.ones((n, n // 4 * 1024 if size == "full" else n), jnp.float32),)

    @staticmethod
    def workload(x):
        return x * 2


def test_reference_guard_refuses_before_inputs_exist():
    from maxkernel.tpu_tools.problem.memory import fits_host
    from maxkernel.tpu_tools.reports import ReferenceSide

    guard_reference(_HugeReference, "small")  # fits: nothing raised
    with pytest.raises(TooBig, match="the reference 'huge' at size 'full' needs about"):
        guard_reference(_HugeReference, "full")
    side = ReferenceSide(ok=True, size="full")
    assert not fits_host(_HugeReference, side)
    assert side.failure.kind == "usage_error" and "not run" in side.failure.summary


HUGE_REFERENCE = """
import jax
import jax.numpy as jnp

CONFIG = {"name": "huge_matmul"}
SIZES = {"full": {"m": 131072, "k": 131072, "n": 256}, "small": {"m": 131072, "k": 131072, "n": 256}}


def create_inputs(dtype=None, *, key=None, size="full"):
    d = SIZES[size]
    key = jax.random.key(0) if key is None else key
    ka, kb = jax.random.split(key)
    return (jax.random.normal(ka, (d["m"], d["k"]), jnp.float32),
            jax.random.normal(kb, (d["k"], d["n"]), jnp.float32))


def workload(a, b):
    return a @ b
"""


@pytest.mark.slow
def test_validate_refuses_a_reference_too_big_for_the_host(tmp_path):
    """64 GiB of inputs at the check size: a usage error with the numbers, before any input exists."""
    ref = tmp_path / "huge_reference.py"
    ref.write_text(HUGE_REFERENCE)
    kernel = Path(__file__).parents[3] / "examples" / "matmul_kernel.py"
    cmd = [
        sys.executable,
        "-m",
        "maxkernel.tpu_tools.cli.main",
        "validate",
        str(kernel),
        "--reference",
        str(ref),
    ]
    proc = subprocess.run(cmd + ["--target", "cpu", "--check-size", "small"], capture_output=True, text=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-2000:]
    assert "the reference 'huge_matmul' at size 'small' needs about" in out and "not run" in out, out[-2000:]


def test_shapes_are_written_from_the_size_globals():
    from maxkernel.tpu_tools.port.write import _fit

    sizes = {"full": {"n": 32, "h": 512, "w": 512}, "small": {"n": 8, "h": 32, "w": 32}}
    used: set[str] = set()
    dims = [_fit({"full": a, "small": b}, sizes, used) for a, b in ((32, 8), (3, 3), (512, 32), (512, 32))]
    assert dims == ['d["n"]', "3", 'd["h"]', 'd["w"]']  # height and width stay two globals
    assert _fit({"full": 1536, "small": 96}, sizes) == '3 * d["h"]'
    assert _fit({"full": 16, "small": 4}, sizes) == 'd["n"] // 2'
    assert _fit({"full": 7, "small": 5}, sizes) is None  # no expression: the port keeps a per-size table
