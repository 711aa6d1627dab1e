"""The example index: built from the installed jax, searched by text / reference / error, user folders."""

from __future__ import annotations

import math
from importlib.metadata import version
from pathlib import Path

import pytest

from maxkernel.tpu_tools.examples.index import ExampleError, ExampleIndex, jax_ops_dir
from maxkernel.tpu_tools.examples.parse import parse_kernels

RAGGED = "jax.ragged_paged_attention.kernel.ragged_paged_attention_kernel"
# A real tpu-v6e compile error (tests/kernels/vmem_1gib.py), as the compile report's message carries it.
VMEM_ERROR = (
    "compile failed: VMEM exhausted: asked 1,073,741,824 bytes of VMEM, capacity 134,217,728\n"
    "jax.errors.JaxRuntimeError: RESOURCE_EXHAUSTED: Allocation (size=1073741824) would exceed memory "
    "(size=134217728) :: #allocation3 [shape = 'f32[16384,16384]{1,0:T(8,128)}', space=vmem, "
    "size = 0x40000000, scoped, tag = 'scratch operand'] :: workload.1"
)
USER_KERNEL = """
raise SystemExit("indexing must parse this file, never run it")

import functools
import jax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


def zebra_softplus_kernel(x_ref, o_ref, *, beta):
    o_ref[...] = jax.numpy.log1p(jax.numpy.exp(beta * x_ref[...])) / beta


def zebra_softplus(x):
    kernel = functools.partial(zebra_softplus_kernel, beta=2.0)
    return pl.pallas_call(
        kernel,
        grid=(x.shape[0] // 8,),
        in_specs=[pl.BlockSpec((8, 128), lambda i: (i, 0))],
        out_specs=pl.BlockSpec((8, 128), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        compiler_params=pltpu.CompilerParams(vmem_limit_bytes=32 << 20),
    )(x)
"""


@pytest.fixture(scope="module")
def index(tmp_path_factory) -> ExampleIndex:
    return ExampleIndex.open(cache=tmp_path_factory.mktemp("cache"))


def test_index_builds_from_the_installed_jax(index):
    ops = jax_ops_dir()
    assert index.info.jax_version == version("jax")
    assert index.info.by_source["jax"] >= 10 and index.info.by_source["jaxbench"] >= 4
    jax_entries = [index.get(i) for i in index.ids() if i.startswith("jax.")]
    assert all(Path(e.path).is_relative_to(ops) and e.version == version("jax") for e in jax_entries)
    ids = set(index.ids())
    for want in (RAGGED, "jax.megablox.gmm.kernel", "jax.matmul.matmul_kernel", "jax.all_gather.ag_kernel"):
        assert want in ids
    mm = index.get("jax.matmul.matmul_kernel")
    assert {"jnp.dot", "pl.program_id", "pl.when"} <= set(mm.primitives) and "matmul" in mm.what
    assert "grid=" in mm.pattern and "dimension_semantics" in mm.pattern
    assert "def matmul_kernel" in mm.kernel_source and "pallas_call" in mm.call_source
    assert "remote DMA" in index.get("jax.all_gather.ag_kernel").what
    gmm = index.get("jax.megablox.gmm.kernel")
    assert "scalar_prefetch" in gmm.features and "grouped matmul" in gmm.what


def test_index_is_built_once_and_cached(index):
    again = ExampleIndex.open(cache=index.path.parent)
    assert again.path == index.path and index.path.stat().st_mtime_ns == again.path.stat().st_mtime_ns


def test_ragged_paged_attention_finds_jaxs_kernel(index):
    r = index.search("ragged paged attention")
    top = r.hits[0]
    assert top.id == RAGGED and top.source == "jax" and top.version == version("jax")
    assert top.uri == f"maxkernel://examples/{RAGGED}" and "def ragged_paged_attention_kernel" in top.excerpt


def test_a_task_reference_finds_its_family_and_not_its_own_reference(index):
    from maxkernel.jaxbench.registry import task_path

    src = task_path("8p_GEMM").read_text()
    r = index.search(reference_source=src, kinds=("kernel",), exclude_tasks=("8p_GEMM",))
    assert r.mode == "task" and all("matmul" in h.what for h in r.hits)
    assert "jaxbench.8p_GEMM._matmul_kernel" not in [h.id for h in r.hits]
    # jax's matmul or one of our other matmul-family references (the retrieval benchmark's rule)
    assert any(h.id == "jax.matmul.matmul_kernel" or h.id.startswith("jaxbench.") for h in r.hits)


def test_a_vmem_error_finds_the_vmem_section_and_kernels_that_raise_the_limit(index):
    r = index.search(error=VMEM_ERROR)
    assert r.mode == "error" and "vmem" in r.error_families
    assert "block_shape" not in r.error_families  # the T(8,128) layout in the message is not a block error
    assert r.hits[0].id == "guide.vmem-budgets"
    kernels = [h for h in r.hits if h.kind == "kernel" and "vmem_limit_bytes" in h.features]
    assert kernels and all("vmem_limit_bytes=" in h.excerpt for h in kernels)  # the excerpt shows the fix


def test_excerpts_stay_within_the_budget(index):
    for budget in (300, 1000, 4000):
        r = index.search("flash attention softmax", k=3, budget_tokens=budget)
        assert r.used_tokens <= budget and len(r.hits) == 3
        for h in r.hits:
            assert h.excerpt_tokens == math.ceil(len(h.excerpt) / 4)
    small = index.search("flash attention", k=1, budget_tokens=300).hits[0]
    assert small.truncated and small.uri in small.excerpt  # says where the rest is


def test_a_users_folder_is_indexed_parsed_not_run(tmp_path):
    d = tmp_path / "mine"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "softplus.py").write_text(USER_KERNEL)
    (d / "broken.py").write_text("def (:\n  pallas_call")  # does not parse: skipped
    (d / "plain.py").write_text("x = 1\n")
    ix = ExampleIndex.open([d], cache=tmp_path / "cache")
    assert ix.info.by_source.get("user") == 1 and ix.info.user_dirs == [str(d.resolve())]
    top = ix.search("zebra softplus").hits[0]
    assert top.id == "user.mine.sub.softplus.zebra_softplus_kernel" and top.source == "user"
    e = ix.get(top.id)
    assert (
        e.wrapper == "zebra_softplus"
        and "vmem_limit_bytes" in e.features
        and "pl.BlockSpec" not in e.primitives
    )
    # an edit is seen on the next open: the cache key covers the folder's files
    (d / "sub" / "softplus.py").write_text(USER_KERNEL.replace("zebra", "okapi"))
    ix2 = ExampleIndex.open([d], cache=tmp_path / "cache")
    assert ix2.path != ix.path and ix2.search("okapi softplus").hits[0].name == "okapi_softplus_kernel"


def test_bad_requests_are_one_precise_error(index, tmp_path):
    with pytest.raises(ExampleError, match="examples folder not found"):
        ExampleIndex.open([tmp_path / "nope"], cache=tmp_path)
    with pytest.raises(ExampleError, match="no example 'jax.nope'"):
        index.get("jax.nope")
    assert index.search("").hits == []


def test_parser_follows_partials_aliases_and_dispatchers():
    src = """
from jax.experimental import pallas as pl
import jax.numpy as jnp

def _tiled(x_ref, o_ref):
    o_ref[...] = jnp.exp(x_ref[...])

def _one(x_ref, o_ref):
    o_ref[...] = x_ref[...]

def _kernel(x_ref, o_ref):
    body = _tiled if x_ref.shape[0] > 8 else _one
    body(x_ref, o_ref)

def run(x, small):
    k = _kernel
    return pl.pallas_call(k, out_shape=x)(x)
"""
    (k,) = parse_kernels(src)
    assert k.kernel == "_kernel" and k.wrapper == "run" and "jnp.exp" in k.primitives
    assert "def _tiled" in k.helper_source
    assert parse_kernels("x = pl.pallas_call") == [] and parse_kernels("def (") == []


def test_query_text_cannot_break_the_fts_syntax(index):
    for nasty in ['"', "*", "NEAR(", 'a" OR "b', "AND", "-", "flash) OR (x"]:
        index.search(nasty, primitives=[nasty], operator=nasty, error=nasty)  # no sqlite3.OperationalError
    assert index.search(primitives=["jnp.einsum", 'x"; DROP']).hits


def test_a_clear_best_match_is_shown_alone_with_the_whole_budget(index):
    from maxkernel.jaxbench.registry import task_path

    src = task_path("11p_Megablox_GMM").read_text()
    every = index.search(reference_source=src, kinds=("kernel",), k=3, budget_tokens=1500)
    clear = index.search(
        reference_source=src, kinds=("kernel",), k=3, budget_tokens=1500, min_score_ratio=0.4
    )
    # jax's gmm leads; our 14p grouped-matmul reference is the one other kernel close enough to keep
    assert [h.id for h in clear.hits][0] == "jax.megablox.gmm.kernel" and len(every.hits) == 3
    assert len(clear.hits) < len(every.hits)
    assert clear.hits[0].excerpt_tokens > every.hits[0].excerpt_tokens  # it got the dropped ones' share
    assert every.hits[0].excerpt_tokens > every.hits[2].excerpt_tokens  # the best gets the largest share


def _cli(*args: str, cache: Path) -> tuple[int, str, str]:
    import os
    import subprocess
    import sys

    env = {**os.environ, "MAXKERNEL_CACHE_DIR": str(cache)}
    p = subprocess.run(
        [sys.executable, "-m", "maxkernel.tpu_tools.cli.main", "examples", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    return p.returncode, p.stdout, p.stderr


@pytest.mark.slow  # five CLI subprocesses
def test_cli_examples_exit_codes_and_json(tmp_path):
    import json

    rc, out, err = _cli("ragged", "paged", "attention", "--json", "-k", "2", cache=tmp_path)
    assert rc == 0, err
    data = json.loads(out)
    assert data["hits"][0]["id"] == RAGGED and data["used_tokens"] <= data["budget_tokens"] == 2000
    rc, out, _ = _cli("--show", "jax.matmul.matmul_kernel", cache=tmp_path)
    assert rc == 0 and "def matmul_kernel" in out
    rc, out, err = _cli("--examples", str(tmp_path / "nope"), "x", cache=tmp_path)
    assert rc == 2 and err.strip().count("\n") == 0 and "examples folder not found" in err and not out
    rc, _, err = _cli(cache=tmp_path)
    assert rc == 2 and "give a QUERY" in err
    rc, out, _ = _cli("zzqqxx", cache=tmp_path)
    assert rc == 1 and out.startswith("0 example(s)")


def test_server_refuses_a_missing_examples_folder(tmp_path, capsys):
    from maxkernel.server.main import main

    assert main(["--examples", str(tmp_path / "nope")]) == 2
    assert "--examples folder not found" in capsys.readouterr().err


def test_an_unwritable_cache_is_one_precise_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ExampleError, match="set MAXKERNEL_CACHE_DIR"):
        ExampleIndex.open(cache=blocker / "cache")
