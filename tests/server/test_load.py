"""Load: 8 concurrent validate_kernel calls from 2 clients on a pool of 2; a hanging kernel times out alone."""

from __future__ import annotations

import shutil
import threading
import time

import anyio
import pytest
from conftest_paths import PLUS_ONE_REF
from mcp import Client

from maxkernel.server.app import build_server
from maxkernel.tpu_tools.pool.jobs import JobOutcome
from maxkernel.tpu_tools.pool.workers import WorkerPool

PLUS_ONE = """
import jax
from jax.experimental import pallas as pl


def _kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + {inc}  # [16, 128]


def workload(x):
    return pl.pallas_call(_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
"""
HANG = "def workload(x):\n    while True:\n        pass\n"
HANG_TIMEOUT_S = 8.0


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.slow
@pytest.mark.anyio
async def test_eight_concurrent_validations_from_two_clients(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(PLUS_ONE_REF, ws / "ref.py")
    # Distinct sources (1.0, 1.0 + 0.0, ...) so each call saves and validates its own file.
    sources = [PLUS_ONE.format(inc="1.0" + " + 0.0" * i) for i in range(7)]
    done: dict[str, tuple[float, dict]] = {}
    ran: dict[str, float] = {}
    ended: list[tuple[float, JobOutcome]] = []  # (monotonic end, outcome) of every job the pool ran

    class WatchedPool(WorkerPool):
        """Notes when each job ends, to see what the other slot did while the hang held one."""

        def submit(self, spec, on_progress=None):
            handle = super().submit(spec, on_progress)

            def note_end() -> None:
                outcome = handle.wait()
                ended.append((time.monotonic(), outcome))

            threading.Thread(target=note_end, daemon=True).start()
            return handle

    with WatchedPool(max_workers=2) as pool:
        server = build_server(ws, pool=pool)
        started = time.monotonic()
        async with Client(server) as c1, Client(server) as c2, anyio.create_task_group() as tg:

            async def call(name, client, args):
                async def on_progress(progress, total, message):
                    if "seed" in message:  # a child process is running this call's kernel
                        ran.setdefault(name, time.monotonic() - started)

                r = await client.call_tool(
                    "validate_kernel",
                    {"reference": "ref.py", "seeds": 1, **args},
                    progress_callback=on_progress,
                )
                assert not r.is_error, r.content[0].text
                done[name] = (time.monotonic() - started, r.structured_content)

            tg.start_soon(call, "hang", c1, {"kernel_source": HANG, "timeout_s": HANG_TIMEOUT_S})
            await anyio.sleep(0.2)  # the hang takes a slot first
            for i, src in enumerate(sources):
                tg.start_soon(call, f"good{i}", (c1, c2)[i % 2], {"kernel_source": src})
    assert len(done) == 8
    hang_t, hang = done.pop("hang")
    assert hang["ok"] is False and hang["failure"]["kind"] == "timeout"
    assert all(rep["ok"] for _, rep in done.values()), {k: v[1]["failure"] for k, v in done.items()}
    assert len({rep["kernel_path"] for _, rep in done.values()}) == 7
    assert hang_t >= HANG_TIMEOUT_S
    # The other slot kept working while the hang held one: whole jobs of the good kernels ran inside the
    # hang's job. (Validation compiles at the target size first, so the hang holds its slot in that
    # compile, and the good kernels' first jobs are their compiles, not yet the seeds their validation runs.)
    [(hang_end, hang_job)] = [(t, o) for t, o in ended if o.status == "timeout"]  # the hang's one job
    hang_start = hang_end - hang_job.duration_s
    inside = [o for t, o in ended if o.status == "ok" and t - o.duration_s >= hang_start and t <= hang_end]
    assert len(inside) >= 2, [(round(t - hang_start, 1), o.status, o.duration_s) for t, o in ended]
    print(
        f"hang timed out at {hang_t:.1f}s, {len(inside)} good jobs ran inside its own; good validations ran "
        f"seeds from {sorted(round(t, 1) for t in ran.values())}"
    )
    print(f"good calls done at {sorted(round(t, 1) for t, _ in done.values())}")
