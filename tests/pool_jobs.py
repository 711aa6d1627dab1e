"""Tiny job functions for tests/tpu_tools/pool/test_pool.py; imported by name inside pool children."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from maxkernel.tpu_tools.pool.workers import report_progress


def _start_ticks() -> int:
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: start time since boot


def ok(x: int = 1) -> dict:
    report_progress("started")
    report_progress("computed")
    # pid alone does not name a process across PID namespaces (a sandboxed job is PID 2 of its own)
    return {"y": x * 2, "pid": os.getpid(), "pgid": os.getpgid(0), "proc": [os.getpid(), _start_ticks()]}


def sleep(seconds: float = 1.0) -> dict:
    start = time.time()
    time.sleep(seconds)
    return {"start": start, "end": time.time()}


def spin() -> dict:
    while True:
        pass


def segfault() -> dict:
    print("about to segfault", file=sys.stderr, flush=True)
    os.kill(os.getpid(), signal.SIGSEGV)
    return {}


def allocate(gigabytes: float = 30.0) -> dict:
    import numpy as np

    a = np.ones(int(gigabytes * (1 << 30)), dtype=np.uint8)
    return {"n": int(a.size)}


def exit_with(code: int = 3) -> dict:
    sys.exit(code)


def hard_exit(code: int = 4) -> dict:
    os._exit(code)


def fail(text: str = "bad block shape") -> dict:
    raise ValueError(text)


def not_a_dict() -> list:
    return [1, 2]


def spawn_grandchild(marker: str = "300.0") -> dict:
    """A grandchild the host can find by its command line (`sleep <marker>`): pids differ in a sandbox."""
    child = subprocess.Popen(["sleep", marker])
    report_progress(f"grandchild {child.pid}")
    time.sleep(300)
    return {}


def env(names: list[str]) -> dict:
    import jax

    return {"env": {n: os.environ.get(n) for n in names}, "jax_platforms": jax.config.jax_platforms}


def jax_jit() -> dict:
    import jax
    import jax.numpy as jnp

    report_progress("jit")
    y = jax.jit(lambda x: jnp.sum(x * 2.0))(jnp.arange(8.0))
    return {"sum": float(y), "backend": jax.default_backend()}


def tpu_compile() -> dict:
    """A real Mosaic compile of a small Pallas matmul for v6e with compile-only devices (libtpu)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import pallas as pl
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    topo = topologies.get_topology_desc("v6e:2x2", "tpu")
    report_progress("topology")

    def kernel(x_ref, y_ref, o_ref):
        o_ref[...] = jnp.dot(x_ref[...], y_ref[...])

    def matmul(x, y):
        return pl.pallas_call(
            kernel,
            out_shape=jax.ShapeDtypeStruct((256, 256), jnp.float32),
            grid=(2, 2),
            in_specs=[
                pl.BlockSpec((128, 256), lambda i, j: (i, 0)),
                pl.BlockSpec((256, 128), lambda i, j: (0, j)),
            ],
            out_specs=pl.BlockSpec((128, 128), lambda i, j: (i, j)),
        )(x, y)

    sharding = NamedSharding(Mesh(np.array(topo.devices[:1]), ("x",)), PartitionSpec())
    arg = jax.ShapeDtypeStruct((256, 256), jnp.float32, sharding=sharding)
    compiled = jax.jit(matmul).trace(arg, arg).lower().compile()
    return {"device_kind": topo.devices[0].device_kind, "text_len": len(compiled.as_text() or "")}


def allocate_and_hold(gigabytes: float = 1.0, hold_s: float = 10.0) -> dict:
    import numpy as np

    a = np.ones(int(gigabytes * (1 << 30)), dtype=np.uint8)  # touched: resident, not just reserved
    report_progress("allocated")
    time.sleep(hold_s)
    return {"n": int(a.size)}


def device_probe(device: str) -> dict:
    """What the device-owning worker's sandbox shows it: the device node, network, root, lock, secrets."""
    import socket

    out: dict = {}
    with open(device) as f:
        out["device"] = f.read()
    try:
        socket.create_connection(("127.0.0.1", 22), timeout=2).close()
        out["connect"] = "connected"
    except OSError as e:
        out["connect"] = f"OSError: {e}"
    try:
        with open("/maxkernel-device-probe", "w") as f:
            f.write("x")
        out["write_root"] = "wrote"
    except OSError as e:
        out["write_root"] = f"OSError: {e}"
    out["lockfile"] = os.path.exists("/tmp/libtpu_lockfile")
    out["secrets"] = [k for k in os.environ if "TOKEN" in k or "KEY" in k]
    return out


def write_host_settings() -> dict:
    """A root job without capabilities still passes uid checks: try the host's sysctls and sysrq."""
    out = {}
    for path, value in (("/proc/sys/vm/overcommit_ratio", "50"), ("/proc/sysrq-trigger", "h")):
        try:
            with open(path, "w") as f:
                f.write(value)
            out[path] = "wrote"
        except OSError as e:
            out[path] = f"OSError: {e.strerror}"
    return out


def cpu_device_count() -> dict:
    """How many CPU devices this child's jax backend started with (JobSpec.host_devices)."""
    import jax

    return {"devices": len(jax.devices("cpu"))}


def read_paths(paths: list[str]) -> dict:
    """What this job can read of each path. The paths come without their leading '/': a path named in a
    job's arguments is shown to it as an input, and the question is what the job sees without that."""
    out = {}
    for rel in paths:
        path = "/" + rel
        try:
            if os.path.isdir(path):
                out[rel] = f"dir of {len(os.listdir(path))}"
            else:
                with open(path, "rb") as f:
                    out[rel] = f"{len(f.read())} bytes"
        except OSError as e:
            out[rel] = type(e).__name__
    return out
