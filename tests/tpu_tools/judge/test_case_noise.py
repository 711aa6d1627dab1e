"""An ill-conditioned input case widens its tolerance by the reference's own movement, and no further.

The tester's `mixed_sign` case at scale 4 feeds a bf16 MLP hidden values near 1e6 (one bf16 ulp: 4096)
whose down-projection cancels: the answer is a small difference of huge rounded terms. A kernel that
sums the up-projection in another valid order rounds some hidden values one ulp apart and is off by
thousands where the answer is small, which the task's atol=0.01 called wrong (Llama's MLP at full). The
judge now moves every input by one ulp, sees the reference itself move that much, and widens the case's
atol by twice that movement. The adversary: a kernel that drops an eighth of the hidden units must still
fail the same case, and a well-conditioned case keeps the task's tolerance.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool.workers import WorkerPool
from maxkernel.tpu_tools.problem.input_cases import InputCase

REFERENCE = """
import jax
import jax.numpy as jnp

CONFIG = {"atol": 0.01, "rtol": 0.01}
SIZES = {"small": {"m": 64, "e": 256, "h": 512}}


def create_inputs(dtype=None, *, key=None, size="small"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    k = jax.random.split(key, 3)
    f = lambda kk, shape, sc: (jax.random.normal(kk, shape) * sc).astype(jnp.bfloat16)
    return f(k[0], (s["m"], s["e"]), 1.0), f(k[1], (s["e"], s["h"]), 1.0), f(k[2], (s["h"], s["e"]), 0.05)


def workload(x, w1, w2):
    h = jnp.dot(x, w1, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
    h = h * jax.nn.sigmoid(h)
    return jnp.dot(h, w2, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
"""

# The same computation, the up-projection summed in two halves (another valid f32 order).
HONEST = """
import jax
import jax.numpy as jnp


def workload(x, w1, w2):
    k = x.shape[1] // 2
    lo = jnp.dot(x[:, :k], w1[:k], preferred_element_type=jnp.float32)
    hi = jnp.dot(x[:, k:], w1[k:], preferred_element_type=jnp.float32)
    h = (hi + lo).astype(jnp.bfloat16)
    h = h * jax.nn.sigmoid(h)
    return jnp.dot(h, w2, preferred_element_type=jnp.float32).astype(jnp.bfloat16)
"""

DROPS = HONEST.replace(
    "    h = h * jax.nn.sigmoid(h)\n",
    "    h = h * jax.nn.sigmoid(h)\n    h = h.at[:, -h.shape[1] // 8 :].set(0)\n",
)
# four real validations with a second reference run each (~27 s of CPU): the end-to-end tier, `make test-slow`
pytestmark = pytest.mark.slow
CANCELLING = InputCase(name="mixed_sign_large", distribution="mixed_sign", scale=4.0)
PLAIN = InputCase(
    name="uniform_small", distribution="uniform", scale=0.1
)  # outputs ~0.06: bf16 ulps far below atol


@pytest.fixture(scope="module")
def evaluator():
    with WorkerPool(max_workers=1) as pool:
        yield Evaluator(pool, timeout_s=300)


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    ref, honest, drops = tmp_path / "ref.py", tmp_path / "honest.py", tmp_path / "drops.py"
    ref.write_text(REFERENCE)
    honest.write_text(HONEST)
    drops.write_text(DROPS)
    return ref, honest, drops


def test_the_cancelling_case_widens_by_the_references_own_movement_and_still_catches_a_wrong_kernel(
    tmp_path, evaluator
):
    ref, honest, drops = _files(tmp_path)
    ok = evaluator.validate(
        str(honest), str(ref), "cpu", "small", seeds=2, case=CANCELLING, allow_plain_jax=True
    )
    assert ok.ok, ok.failure and ok.failure.summary
    assert ok.tolerance.atol > 1.0 and "one ulp away the reference itself moves" in ok.tolerance.source
    bad = evaluator.validate(
        str(drops), str(ref), "cpu", "small", seeds=2, case=CANCELLING, allow_plain_jax=True
    )
    assert not bad.ok and bad.failure.kind == "output_mismatch", bad.failure


def test_a_well_conditioned_case_keeps_the_tasks_tolerance(tmp_path, evaluator):
    ref, honest, drops = _files(tmp_path)
    ok = evaluator.validate(str(honest), str(ref), "cpu", "small", seeds=2, case=PLAIN, allow_plain_jax=True)
    assert ok.ok and ok.tolerance.atol == 0.01 and ok.tolerance.source == "reference CONFIG"
    bad = evaluator.validate(str(drops), str(ref), "cpu", "small", seeds=2, case=PLAIN, allow_plain_jax=True)
    assert not bad.ok and bad.failure.kind == "output_mismatch"


def test_a_rescaled_seed_widens_alone_and_still_catches_a_wrong_kernel(tmp_path, evaluator):
    # Seeds 100..102: the reference's own draw, channel_scales and heavy_tails (input_regimes.py). The
    # outlier channels make the same MLP ill-conditioned at bf16 (the reference moves by ~5 under a one-ulp
    # nudge at seed 101): those seeds get their own widened atol, the reference's own draw keeps 0.01.
    ref, honest, drops = _files(tmp_path)
    ok = evaluator.validate(
        str(honest), str(ref), "cpu", "small", seeds=3, seed_offset=100, allow_plain_jax=True
    )
    assert ok.ok, ok.failure and ok.failure.summary
    assert ok.tolerance.atol == 0.01 and ok.per_seed[0].tolerance is None
    widened = {s.seed: s.tolerance for s in ok.per_seed if s.tolerance is not None}
    assert 101 in widened and widened[101].atol > 1.0
    assert "101's channel_scales inputs" in widened[101].source
    bad = evaluator.validate(
        str(drops), str(ref), "cpu", "small", seeds=3, seed_offset=100, allow_plain_jax=True
    )
    assert not bad.ok and all(not s.ok for s in bad.per_seed), bad.failure
