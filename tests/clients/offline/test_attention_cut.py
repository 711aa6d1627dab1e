"""An attention block with its projections: every contraction a kernel (stages.attention_cut, staged.py).

DeepSeek-V3's MLA (3p) is five projections, RoPE, a causal attention and an output projection. One fused
kernel of it holds every weight of a row block (7168 x 1536, 1536 x 24576, ... at bf16): nothing fits at
full, and the flash template takes only the attention itself. Cut, the attention between its two
contractions is a flash kernel, each projection its own k-tiled matmul kernel, and RoPE, slices and
reshapes are plain-JAX glue written from the input shapes (`sh`), so the module runs at every size. The
adversary: a mask that is not exactly causal (a sliding window) must not become a causal flash stage.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from maxkernel.clients.offline.first_kernel import first_kernel
from maxkernel.clients.offline.model import _rest_template, program_template
from maxkernel.clients.offline.stages import attention_cut
from maxkernel.clients.offline.templates.staged import _is_flash
from maxkernel.tpu_tools.hardware.chips import get_chip
from maxkernel.tpu_tools.problem.program import describe

TASKS = Path(__file__).resolve().parents[3] / "jaxbench" / "tasks"
MLA = TASKS / "3p_MLA_Attention.py"
BLOCK = """
import jax
import jax.numpy as jnp

SIZES = {"full": {"b": 2, "s": 2048, "e": 1024, "h": 8}, "small": {"b": 1, "s": 256, "e": 256, "h": 2}}


def create_inputs(dtype=None, *, key=None, size="full"):
    s = SIZES[size] if isinstance(size, str) else size
    key = jax.random.key(0 if key is None else key) if not isinstance(key, jax.Array) else key
    ks = jax.random.split(key, 5)
    x = jax.random.normal(ks[0], (s["b"], s["s"], s["e"]), jnp.float32).astype(jnp.bfloat16)
    w = lambda k, shape: (jax.random.normal(k, shape, jnp.float32) * 0.02).astype(jnp.bfloat16)
    e, hd = s["e"], s["h"] * 128
    return x, w(ks[1], (e, hd)), w(ks[2], (e, hd)), w(ks[3], (e, hd)), w(ks[4], (hd, e))


def workload(x, wq, wk, wv, wo):
    b, s, _ = x.shape
    h = wq.shape[1] // 128
    q, k, v = ((x @ w).reshape(b, s, h, 128) for w in (wq, wk, wv))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (128**-0.5)
    i = jnp.arange(s)
    scores = jnp.where(KEEP, scores, -1e9)
    o = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v)
    return o.reshape(b, s, h * 128) @ wo
"""
CAUSAL = "i[:, None] >= i[None, :]"
WINDOW = "(i[:, None] >= i[None, :]) & (i[:, None] - i[None, :] < 64)"


def _program(path: Path) -> dict:
    return describe(str(path)).model_dump(mode="json")


def _block(tmp_path: Path, keep: str) -> dict:
    path = tmp_path / "block_ref.py"
    path.write_text(BLOCK.replace("KEEP", keep))
    return _program(path)


def test_mla_is_cut_into_projection_kernels_a_flash_attention_and_glue():
    program = _program(MLA)
    stages = attention_cut(program, _is_flash(_rest_template))
    roles = [s.role for s in stages]
    assert roles.count("attention") == 1 and roles.count("matmul") == 6  # q down/up, kv down, k up, v up, out
    attn = stages[roles.index("attention")]
    dots = [e for e in attn.program["equations"] if e["primitive"] == "dot_general"]
    assert len(dots) == 2 and len(attn.program["input_names"]) == 3  # q, k (RoPE'd, concatenated), v
    assert all(len(s.program["equations"]) == 1 for s in stages if s.role == "matmul")
    t, target, _ = program_template(program)
    assert t.name == "staged" and target == "full"
    assert t.source.count("`flash_program` template") == 1 and t.source.count("`matmul` template") == 6
    glue = [line for line in t.source.split("def workload(")[-1].splitlines() if "_workload(" not in line]
    # the glue is written from the input shapes: no size that only the full trace has (7168, 24576, 2048)
    assert not [line for line in glue if re.search(r"\b(7168|24576|16384|2048)\b", line)]
    assert any("sh[0][1]" in line for line in glue)


def test_a_projected_causal_block_is_cut_and_a_sliding_window_is_not_made_causal(tmp_path):
    causal = _block(tmp_path, CAUSAL)
    stages = attention_cut(causal, _is_flash(_rest_template))
    assert [s.role for s in stages].count("attention") == 1
    assert [s.role for s in stages].count("matmul") == 4
    window = _block(tmp_path, WINDOW)
    assert attention_cut(window, _is_flash(_rest_template)) is None  # the flash template refuses the window
    source = first_kernel(window, get_chip("tpu-v6e"))
    assert "flash_program" not in source


def test_plain_attention_alone_is_not_cut():
    one = _program(TASKS / "1p_Flash_Attention" / "__init__.py")
    assert attention_cut(one, _is_flash(_rest_template)) is None  # two contractions, both the attention's


@pytest.mark.slow  # the judge at small and derived (seven kernels interpreted) and a compile of each at full
def test_mla_first_kernel_validates_and_compiles_at_full(tmp_path):
    from maxkernel.tpu_tools.judge.evaluate import Evaluator
    from maxkernel.tpu_tools.pool.workers import WorkerPool

    kernel = tmp_path / "mla.py"
    kernel.write_text(first_kernel(_program(MLA), get_chip("tpu-v6e")))
    with WorkerPool(max_workers=1) as pool:
        report = Evaluator(pool, timeout_s=1500).validate(str(kernel), str(MLA), "tpu-v6e", "full", seeds=2)
    assert report.ok, report.failure and report.failure.summary
    validated = [c.size for c in report.checks if c.what == "validate" and c.ok]
    assert validated[:2] == [
        "small",
        "derived",
    ]  # then grown sizes, where the full program's k walks need them


def test_a_cut_stage_takes_k_blocks_a_check_size_walks_and_a_whole_matmul_keeps_its_deep_ones():
    from maxkernel.clients.offline.templates.batched_matmul import k_checkable

    # 3p's q_down: K is 512 and 1024 at the check sizes, 7168 at full; the judge's grown sizes did not
    # reach a 1024-deep block's k walk there, so a cut stage needs a check size with two k steps
    assert not k_checkable(1024, 7168, [512, 1024], strict=True) and k_checkable(
        512, 7168, [512, 1024], strict=True
    )
    assert k_checkable(2048, 8192, [256, 512])  # 8p, a whole program: its K grown alone reaches the k walk
    source = first_kernel(_program(MLA), get_chip("tpu-v6e"))
    assert "block_s1_k=512 " in source


def test_the_seven_kernels_are_tuned_side_by_side_never_as_their_product():
    """3p's composite has 20 tunables, 4e15 configs in product: listing them was the search's (and a
    second Auto iteration's) out-of-memory kill. Its parts are independent, so the space, the walk's
    configs, a snap and the autotuner's sweep stay each part's own."""
    import math
    import resource

    from maxkernel.clients.offline.model import OfflineModel, Walk
    from maxkernel.tpu_tools.cost.autotune import MAX_SPACE

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tpl, _, dims = program_template(_program(MLA))
    assert len(tpl.parts) == 7 and math.prod(len(v) for v in tpl.tunables.values()) > 10**15
    space = tpl.space([dims])
    for p in tpl.parts:  # side by side: each part's legal values, under its names in the composite
        assert {p.keys[k]: v for k, v in p.template.space([p.dims]).items()}.items() <= space.items()
    configs = tpl.configs()
    assert len(configs) == 1 + sum(len(p.template.configs()) - 1 for p in tpl.parts)
    walk = Walk(tpl, "program", {"full": dims})
    bad = {**tpl.initial, "block_s1_rows": 3, "block_s2_k": 7}  # two parts illegal at once
    assert not walk.legal(bad)
    mended = walk.snap(bad)
    assert walk.legal(mended) and {k for k in mended if mended[k] != tpl.initial[k]} <= {
        "block_s1_rows",
        "block_s2_k",
    }
    walk.record(tpl.initial).estimate_us, walk.last = 100.0, tpl.initial
    nxt, why = walk.next_config("full")
    assert walk.legal(nxt) and nxt != tpl.initial, why
    text = OfflineModel()._autotuner(walk, 64 << 20)
    swept = json.loads(text.rsplit("```json", 1)[1].split("```", 1)[0])["tunables"]
    varied = {k for k, v in swept.items() if len(v) > 1}
    assert varied and any(varied <= set(p.keys.values()) for p in tpl.parts)
    assert math.prod(len(v) for v in swept.values()) <= MAX_SPACE
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss < 1 << 20  # KiB: under 1 GiB more
