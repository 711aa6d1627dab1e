"""The OS sandbox, tried as an adversary would: each test runs a kernel from tests/kernels/sandbox/ that
attempts one escape and raises what it found ("SANDBOX-REPORT {json}"), and checks from the host side
that the escape failed. Tests that need a sandbox skip, with the reason, where the kernel forbids one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from conftest_paths import KERNELS, PLUS_ONE_REF

from maxkernel.tpu_tools.judge.evaluate import Evaluator
from maxkernel.tpu_tools.pool import sandbox, sandbox_linux
from maxkernel.tpu_tools.pool.workers import JobSpec, WorkerPool
from tests.tpu_tools.pool.test_pool import host_pids_running, wait_for_host_pids

SANDBOX_KERNELS = KERNELS / "sandbox"
BIN = Path(sys.executable).parent
SERVER, CLI = str(BIN / "maxkernel-server"), str(BIN / "maxkernel")


@pytest.fixture(scope="module")
def tier() -> str:
    decision = sandbox.detect()
    if decision.tier == "none":
        pytest.skip(f"no OS sandbox on this host: {decision.note}")
    return decision.tier


@pytest.fixture(scope="module")
def evaluator(tier):
    with WorkerPool(max_workers=2) as pool:
        pool.warm_up()
        yield Evaluator(pool, timeout_s=60)


def kernel_with(name: str, where: Path, **constants: object) -> Path:
    """A copy of a sandbox kernel with its module constants filled in (ports, paths, markers)."""
    text = (SANDBOX_KERNELS / f"{name}.py").read_text()
    for key, value in constants.items():
        text, n = re.subn(rf"^{key} = .*$", f"{key} = {value!r}", text, count=1, flags=re.M)
        assert n == 1, f"{name}.py has no constant {key}"
    path = where / f"{name}.py"
    path.write_text(text)
    return path


def findings(report) -> dict:
    """The kernel's raised report, read back from the verdict."""
    assert report.failure is not None and report.failure.kind == "python_error", report.failure
    return findings_in(report.failure.model_dump())


def findings_in(failure: dict) -> dict:
    """The same, from a verdict's JSON (the summary is one short line; the message holds all of it)."""
    match = re.search(r"SANDBOX-REPORT (\{.*\})", failure["message"] + "\n" + failure["summary"])
    assert match, failure
    return json.loads(match.group(1))


def run_kernel(evaluator: Evaluator, path: Path):
    return evaluator.validate(str(path), PLUS_ONE_REF, "cpu", "small", seeds=1, allow_plain_jax=True)


def descendants(root: int) -> set[int]:
    """Every live process under `root` on the host (bwrap, forkserver, resource tracker, jobs)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, stack = set(), [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in out:
                out.add(child)
                stack.append(child)
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_all_gone(pids: set[int], timeout_s: float = 15.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while (left := {p for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


# ---- one escape per test -------------------------------------------------------------------------------
def test_tcp_connect_to_a_local_listener_fails_and_nothing_arrives(evaluator, tmp_path):
    received: list[bytes] = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.settimeout(0.2)
        stop = threading.Event()

        def accept() -> None:
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                with conn:
                    received.append(conn.recv(100) or b"<connected>")

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        port = listener.getsockname()[1]
        found = findings(run_kernel(evaluator, kernel_with("net_connect", tmp_path, PORT=port)))
        stop.set()
        thread.join(2)
    assert found.keys() == {"127.0.0.1", "localhost"}
    assert all(
        v != "connected" and v.startswith(("OSError", "ConnectionRefused", "gaierror"))
        for v in found.values()
    ), found
    assert received == []


def test_writes_to_home_and_to_a_temp_dir_outside_scratch_fail(evaluator, tmp_path):
    tag = f"maxkernel-sandbox-probe-{uuid.uuid4().hex[:8]}"
    outside = tmp_path / "outside"
    outside.mkdir()
    path = kernel_with(
        "write_outside", tmp_path, TAG=tag, HOST_DIR=str(outside), WORKSPACE=str(SANDBOX_KERNELS)
    )
    landed = [Path.home() / tag, outside / tag, Path("/tmp") / tag, SANDBOX_KERNELS / tag]
    try:
        found = findings(run_kernel(evaluator, path))
        assert "Read-only file system" in found["home"], found
        assert found["host_dir"].startswith(("FileNotFoundError", "OSError")), found  # not even visible
        assert "Read-only file system" in found["workspace"], found
        assert found["tmp"] == "wrote"  # its private /tmp, gone with it
        assert [p for p in landed if p.exists()] == []
    finally:
        for p in landed:
            p.unlink(missing_ok=True)


def test_environment_shows_no_token_even_when_the_server_has_one(tier, tmp_path):
    mark = f"sandbox-secret-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "MAXKERNEL_TOKEN": f"{mark}-token", "GEMINI_API_KEY": f"{mark}-gemini"}
    env["HTTPS_PROXY"] = f"http://{mark}-proxy:3128"
    path = kernel_with("env_secrets", tmp_path, MARK=mark)
    out = subprocess.run(
        [
            CLI,
            "validate",
            str(path),
            "--reference",
            PLUS_ONE_REF,
            "--seeds",
            "1",
            "--allow-plain-jax",
            "--json",
            "--check-size",
            "small",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert report["environment"]["sandbox"]["tier"] == tier
    assert "SANDBOX-REPORT" in report["failure"]["summary"]  # the kernel ran and reported
    assert mark not in out.stdout + out.stderr
    found = findings_in(report["failure"])
    assert set(found) == {"visible_pids"}, found  # no secret-looking variable at all
    assert found["visible_pids"] == ["1", "2"]  # its init and itself: no ancestor's /proc


@pytest.mark.slow  # ~10 s: a real stdio server
@pytest.mark.anyio
async def test_the_servers_token_file_cannot_be_read(tier, tmp_path):
    from mcp import Client, StdioServerParameters

    # Outside /tmp, where the read-only root would show it if nothing hid it.
    secret_dir = Path.home() / ".cache" / f"maxkernel-test-{uuid.uuid4().hex[:8]}"
    secret_dir.mkdir(parents=True)
    token = f"tok-{uuid.uuid4().hex}"
    (secret_dir / "token").write_text(token)
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(PLUS_ONE_REF, ws / "ref.py")
    source = kernel_with("token_file", tmp_path, TOKEN_PATH=str(secret_dir / "token")).read_text()
    args = ["--workspace", str(ws), "--max-workers", "1", "--token-file", str(secret_dir / "token")]
    try:
        async with Client(
            StdioServerParameters(command=SERVER, args=args, env=dict(os.environ)), mode="legacy"
        ) as c:
            r = await c.call_tool(
                "validate_kernel",
                {"kernel_source": source, "reference": "ref.py", "seeds": 1, "allow_plain_jax": True},
            )
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)
    text = r.content[0].text
    assert token not in text
    found = findings_in(r.structured_content["failure"])
    assert not any("--token-file" in line for line in found["cmdlines"].values()), found
    assert list(found["reads"]) == [str(secret_dir / "token")]
    assert not found["reads"][str(secret_dir / "token")].startswith("tok-")


def test_a_pth_written_into_site_packages_fails(evaluator, tmp_path):
    tag = f"maxkernel_sandbox_probe_{uuid.uuid4().hex[:8]}"
    found = findings(run_kernel(evaluator, kernel_with("plant_pth", tmp_path, TAG=tag)))
    venv_site = next(Path(sys.prefix).glob("lib/python*/site-packages"))
    assert str(venv_site / f"{tag}.pth") in found, found
    try:
        assert all(v.startswith(("OSError", "PermissionError")) for v in found.values()), found
        assert not (venv_site / f"{tag}.pth").exists()
    finally:
        for p in found:
            Path(p).unlink(missing_ok=True)


def test_a_setsid_grandchild_is_gone_after_the_verdict(evaluator, tmp_path):
    mark = f"3600.{uuid.uuid4().int % 10**9}"
    report = run_kernel(evaluator, kernel_with("setsid_grandchild", tmp_path, MARK=mark))
    try:
        # The in-process guard saw the ctypes call (tampered) but could not stop the spawn ...
        assert report.failure is not None and report.failure.kind == "tampered", report.failure
        assert "ctypes" in report.failure.summary
        assert host_pids_running(["sleep", mark]) == []  # ... the PID namespace took it down with the job
    finally:
        for pid in host_pids_running(["sleep", mark]):
            os.kill(pid, signal.SIGKILL)


# ---- the server's pool dies with it; a client that leaves takes its job along --------------------------
class RawStdioServer:
    """maxkernel-server over stdio, spoken to in plain JSON-RPC lines, so the test holds its pid."""

    def __init__(self, ws: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [SERVER, "--workspace", str(ws), "--max-workers", "1"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self._id = 0

    def request(self, method: str, params: dict) -> int:
        self._id += 1
        self.send({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params})
        return self._id

    def send(self, message: dict) -> None:
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def reply(self, id_: int) -> dict:
        while True:
            line = self.proc.stdout.readline()
            assert line, f"server closed stdout: {self.proc.stderr.read().decode()[-2000:]}"
            message = json.loads(line)
            if message.get("id") == id_:
                return message

    def start_hanging_job(self, tmp_path: Path, mark: str) -> set[int]:
        """Initialize, call validate_kernel on a kernel that spawns `sleep <mark>` and spins; return the
        server's whole process tree once the job runs."""
        init = self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "0"},
            },
        )
        self.reply(init)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        source = kernel_with("spawn_and_hang", tmp_path, MARK=mark).read_text()
        self.request(
            "tools/call",
            {
                "name": "validate_kernel",
                "arguments": {
                    "kernel_source": source,
                    "reference": "ref.py",
                    "seeds": 1,
                    "allow_plain_jax": True,
                },
            },
        )
        assert wait_for_host_pids(["sleep", mark], timeout_s=120), "the job never started"
        time.sleep(0.3)
        return descendants(self.proc.pid)


@pytest.fixture
def ws(tmp_path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(PLUS_ONE_REF, ws / "ref.py")
    return ws


@pytest.mark.slow  # ~10 s: a real stdio server
def test_kill_9_of_the_server_leaves_no_pool_process(tier, ws, tmp_path):
    mark = f"3600.{uuid.uuid4().int % 10**9}"
    server = RawStdioServer(ws, dict(os.environ))
    try:
        tree = server.start_hanging_job(tmp_path, mark)
        # bwrap + forkserver + resource tracker (+ its bwrap) + the job's relay, init and job + sleep
        assert len(tree) >= 5, tree
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait(10)
        assert wait_all_gone(tree) == set()
        assert host_pids_running(["sleep", mark]) == []
    finally:
        server.proc.kill()
        for pid in host_pids_running(["sleep", mark]):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # ~10 s: a real stdio server
def test_a_stdio_client_that_disconnects_cancels_its_job(tier, ws, tmp_path):
    mark = f"3600.{uuid.uuid4().int % 10**9}"
    server = RawStdioServer(ws, dict(os.environ))
    try:
        tree = server.start_hanging_job(tmp_path, mark)
        server.proc.stdin.close()  # the client goes away without cancelling
        assert server.proc.wait(30) == 0
        assert wait_all_gone(tree) == set()
        assert host_pids_running(["sleep", mark]) == []
        assert b"stdio client disconnected" in server.proc.stderr.read()
    finally:
        server.proc.kill()
        for pid in host_pids_running(["sleep", mark]):
            os.kill(pid, signal.SIGKILL)


HTTP_CLIENT = """
import sys, anyio, httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

async def main():
    async with httpx2.AsyncClient(timeout=600) as http:
        transport = streamable_http_client(sys.argv[1], http_client=http)
        async with Client(transport, mode=sys.argv[2]) as c:
            args = {"kernel_path": sys.argv[3], "reference": "ref.py", "seeds": 1, "allow_plain_jax": True}
            await c.call_tool("validate_kernel", args)

anyio.run(main)
"""


@pytest.mark.slow  # ~15 s: a real HTTP server and client
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_an_http_client_that_disconnects_cancels_its_job(tier, ws, tmp_path, mode):
    mark = f"3600.{uuid.uuid4().int % 10**9}"
    kernel_with("spawn_and_hang", ws, MARK=mark)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [SERVER, "--transport", "http", "--port", str(port), "--workspace", str(ws), "--max-workers", "1"]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    client = None
    try:
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline and server.poll() is None, "server did not start"
            time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        client = subprocess.Popen([sys.executable, "-c", HTTP_CLIENT, url, mode, "spawn_and_hang.py"])
        sleeper = wait_for_host_pids(["sleep", mark], timeout_s=120)
        assert sleeper, "the job never started"
        client.kill()  # gone without a cancel
        client.wait(10)
        assert wait_all_gone(set(sleeper)) == set()  # its job's PID namespace is gone: the job was cancelled
        assert server.poll() is None  # the server stays up for everyone else
    finally:
        if client is not None:
            client.kill()
        server.kill()
        server.wait(10)
        for pid in host_pids_running(["sleep", mark]):
            os.kill(pid, signal.SIGKILL)


# ---- the unsandboxed fallback says so; --require-sandbox refuses -------------------------------------
def test_the_unsandboxed_fallback_labels_its_verdicts():
    env = {**os.environ, "MAXKERNEL_SANDBOX": "none"}
    kernel = str(SANDBOX_KERNELS / "plus_one_plain.py")
    argv = [
        CLI,
        "validate",
        kernel,
        "--reference",
        PLUS_ONE_REF,
        "--seeds",
        "1",
        "--allow-plain-jax",
        "--check-size",
        "small",
    ]
    out = subprocess.run([*argv, "--json"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is True
    assert report["environment"]["sandbox"]["tier"] == "none"
    assert (
        "network: own namespace, loopback only and down" in report["environment"]["sandbox"]["not_enforced"]
    )
    assert any(w.startswith("sandbox: none") for w in report["warnings"]), report["warnings"]
    refused = subprocess.run(
        [*argv, "--require-sandbox"], capture_output=True, text=True, env=env, timeout=60
    )
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        "maxkernel: refusing to run unsandboxed (--require-sandbox): forced by MAXKERNEL_SANDBOX=none"
    ]


def test_the_server_prints_its_tier_and_refuses_when_a_sandbox_is_required(tmp_path):
    env = {**os.environ, "MAXKERNEL_SANDBOX": "none"}
    refused = subprocess.run(
        [SERVER, "--workspace", str(tmp_path), "--require-sandbox"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "maxkernel-server: --require-sandbox: no OS sandbox here: forced by MAXKERNEL_SANDBOX=none"
    )
    started = subprocess.run(
        [SERVER, "--workspace", str(tmp_path)], input="", capture_output=True, text=True, env=env, timeout=60
    )
    assert started.returncode == 0
    assert "maxkernel-server: sandbox: none - evaluations run UNSANDBOXED" in started.stderr


def test_the_namespaces_tier_blocks_the_same_escapes(tmp_path):
    """Without bwrap: the forkserver builds its own namespaces (CI runs this where they are allowed)."""
    try:
        sandbox._detect.cache_clear()
        decision = sandbox._detect("namespaces")
    except sandbox.SandboxUnavailable as e:
        pytest.skip(str(e))
    finally:
        sandbox._detect.cache_clear()
    assert decision.tier == "namespaces"
    tag = f"maxkernel-sandbox-probe-{uuid.uuid4().hex[:8]}"
    outside = tmp_path / "outside"
    outside.mkdir()
    path = kernel_with(
        "write_outside", tmp_path, TAG=tag, HOST_DIR=str(outside), WORKSPACE=str(SANDBOX_KERNELS)
    )
    env = {**os.environ, "MAXKERNEL_SANDBOX": "namespaces", "GEMINI_API_KEY": "sandbox-secret-ns"}
    argv = [
        CLI,
        "validate",
        str(path),
        "--reference",
        PLUS_ONE_REF,
        "--seeds",
        "1",
        "--allow-plain-jax",
        "--json",
    ]
    try:
        out = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
        report = json.loads(out.stdout)
        assert report["environment"]["sandbox"]["tier"] == "namespaces"
        found = findings_in(report["failure"])
        assert "Read-only file system" in found["home"], found
        # the source tree is read-only; a checkout under /tmp is not there at all (the job's /tmp is private)
        hidden = SANDBOX_KERNELS.resolve().is_relative_to("/tmp")
        want = "FileNotFoundError" if hidden else "OSError: Read-only file system"
        assert found["workspace"].startswith(want), found
        assert found["host_dir"].startswith(("FileNotFoundError", "OSError")), found
        assert not any(p.exists() for p in (Path.home() / tag, outside / tag, SANDBOX_KERNELS / tag))
    finally:
        for p in (Path.home() / tag, outside / tag, SANDBOX_KERNELS / tag):
            p.unlink(missing_ok=True)


# ---- plans as data (no privileges needed) -------------------------------------------------------------
def test_job_mount_plan_binds_scratch_and_inputs_and_masks_hidden_paths():
    present = {"/tmp/job/scratch", "/tmp/k.py", "/tmp/ws/cands/k.py", "/tmp/ws/cands/ref.py"}
    present |= {"/opt/ref/reference.py", "/opt/tasks", "/tmp/other/ref.py"}
    dirs = {"/tmp/job/scratch", "/opt/tasks", "/tmp/ws/cands"}
    plan = sandbox_linux.job_mount_plan(
        "/tmp/job/scratch",
        ["/opt/ref/reference.py", "/opt/tasks", "/tmp/other/ref.py", "/tmp/ws/cands/ref.py", "/opt/missing"],
        1 << 30,
        ["/tmp/k.py", "/tmp/ws/cands/k.py", "/tmp", "/tmp/job", "/tmp/other/ref.py", "/usr/lib/x.py"],
        exists=lambda p: p in present,
        isdir=lambda p: p in dirs,
    )
    ops = [(op.kind, op.target) for op in plan]
    assert ops == [
        ("tmpfs", "/tmp"),
        ("tmpfs", "/var/tmp"),
        ("tmpfs", "/dev/shm"),
        ("tmpfs", "/run"),
        ("touch", "/tmp/k.py"),  # its directory is /tmp itself: only the file is shown
        ("bind_ro", "/tmp/k.py"),
        ("mkdir", "/tmp/ws/cands"),  # a kernel's directory, read-only: its helpers import from beside it
        ("bind_ro", "/tmp/ws/cands"),
        ("mkdir", "/tmp/job/scratch"),  # never /tmp, the scratch's parent, or a hidden input
        ("bind_rw", "/tmp/job/scratch"),
        ("mask_file", "/opt/ref/reference.py"),
        ("mask_dir", "/opt/tasks"),  # /tmp/other/ref.py is simply not in the job's view
        ("mask_file", "/tmp/ws/cands/ref.py"),  # hidden inside a shown directory: masked
        ("proc", "/proc"),
    ]
    assert plan[0].options == f"mode=1777,size={1 << 30}"


def test_job_mount_plan_shows_a_runtime_under_tmp_and_still_masks_what_is_hidden_in_it():
    """A clone and its venv in a `mktemp -d`: bound back read-only whole, the reference and the task
    sources inside still masked, /tmp itself never shown, and nothing shown twice."""
    clone = "/tmp/tmp.x/mk"
    present = {clone, f"{clone}/.venv", f"{clone}/tpu_tools", f"{clone}/jaxbench/tasks", "/usr/lib/python3"}
    present |= {f"{clone}/examples/ref.py", f"{clone}/examples/k.py", "/tmp/s/job", "/tmp/lib.zip"}
    dirs = {p for p in present if not p.endswith((".py", ".zip"))}
    plan = sandbox_linux.job_mount_plan(
        "/tmp/s/job",
        [f"{clone}/examples/ref.py", f"{clone}/jaxbench/tasks"],
        1 << 20,
        [f"{clone}/examples/k.py"],
        runtime=[f"{clone}/tpu_tools", clone, f"{clone}/.venv", "/usr/lib/python3", "/tmp", "/tmp/lib.zip"],
        exists=lambda p: p in present,
        isdir=lambda p: p in dirs,
    )
    ops = [(op.kind, op.target) for op in plan if op.kind != "tmpfs"]
    assert ops == [
        ("touch", "/tmp/lib.zip"),  # a zip on sys.path: the file itself
        ("bind_ro", "/tmp/lib.zip"),
        ("mkdir", clone),  # its subfolders, the venv and the kernel's folder are inside: bound once
        ("bind_ro", clone),
        ("mkdir", "/tmp/s/job"),
        ("bind_rw", "/tmp/s/job"),
        ("mask_file", f"{clone}/examples/ref.py"),  # hidden inside a shown runtime folder: masked
        ("mask_dir", f"{clone}/jaxbench/tasks"),
        ("proc", "/proc"),
    ]
    assert all(op.source in (None, op.target) for op in plan)


def test_job_mount_plan_covers_other_jobs_scratch_inside_a_shown_runtime_folder():
    """TMPDIR inside the clone: the clone is shown, but the scratch's parent (where every job's scratch
    lives) gets a fresh tmpfs first, so a job sees only its own scratch."""
    present = {"/tmp/c", "/tmp/c/tmp/root/job-1", "/tmp/c/tmp/root"}
    plan = sandbox_linux.job_mount_plan(
        "/tmp/c/tmp/root/job-1", [], 1 << 20, runtime=["/tmp/c"], exists=present.__contains__, isdir=bool
    )
    ops = [(op.kind, op.target) for op in plan[4:]]
    assert ops == [
        ("mkdir", "/tmp/c"),
        ("bind_ro", "/tmp/c"),
        ("tmpfs", "/tmp/c/tmp/root"),
        ("mkdir", "/tmp/c/tmp/root/job-1"),
        ("bind_rw", "/tmp/c/tmp/root/job-1"),
        ("proc", "/proc"),
    ]
    # a runtime folder that is the scratch's own parent is not shown: covering it would hide it all
    plan = sandbox_linux.job_mount_plan(
        "/tmp/c/job-1", [], 1 << 20, runtime=["/tmp/c"], exists=lambda p: True, isdir=bool
    )
    assert [(op.kind, op.target) for op in plan[4:]] == [
        ("mkdir", "/tmp/c/job-1"),
        ("bind_rw", "/tmp/c/job-1"),
        ("proc", "/proc"),
    ]


def test_runtime_paths_name_the_interpreter_the_venv_and_our_package():
    paths = sandbox.runtime_paths()
    assert os.path.dirname(os.path.realpath(sys.executable)) in paths
    assert os.path.realpath(sys.prefix) in paths
    assert str(Path(sandbox.__file__).resolve().parents[1]) in paths  # tpu_tools, however it was installed
    assert all(os.path.isabs(p) and os.path.exists(p) for p in paths)


def test_device_worker_bwrap_plan_binds_a_runtime_under_tmp(monkeypatch):
    argv = sandbox.device_bwrap_argv(
        "bwrap",
        {},
        "/tmp/c",
        uid=0,
        writable=["/tmp/s"],
        devices=[],
        readable=["/usr/lib", "/tmp/c/.venv", "/tmp/c", "/tmp", "/tmp/s/x"],
    )
    binds = [(argv[i], argv[i + 1]) for i in range(len(argv) - 1) if argv[i] in ("--ro-bind", "--bind")]
    assert ("--ro-bind", "/tmp/c") in binds and ("--ro-bind", "/tmp/c/.venv") in binds
    assert ("--ro-bind", "/tmp") not in binds and ("--ro-bind", "/tmp/s/x") not in binds
    assert argv.index("--tmpfs") < argv.index("/tmp/c")  # bound after /tmp is made private
    assert sandbox.visible_cwd("/tmp/c/sub", ["/tmp/c"]) == "/tmp/c/sub"
    assert sandbox.visible_cwd("/tmp/elsewhere", ["/tmp/c", "/tmp"]) == "/"
    assert sandbox.visible_cwd("/work", []) == "/work"


def test_device_worker_bwrap_plan_binds_devices_lock_and_logs(monkeypatch):
    monkeypatch.setenv("MAXKERNEL_SANDBOX_DEVICES", "/fake/accel0=/dev/accel0:/fake/vfio=/dev/vfio")
    devices = sandbox.device_paths()
    assert devices == [("/fake/accel0", "/dev/accel0"), ("/fake/vfio", "/dev/vfio")]
    argv = sandbox.device_bwrap_argv(
        "bwrap", {"PATH": "/usr/bin"}, "/", uid=0, writable=["/tmp/s"], devices=devices, libtpu_lock="/tmp/l"
    )
    pairs = {(argv[i], argv[i + 1], argv[i + 2]) for i in range(len(argv) - 2)}
    assert ("--dev-bind", "/fake/accel0", "/dev/accel0") in pairs
    assert ("--dev-bind", "/fake/vfio", "/dev/vfio") in pairs
    assert ("--bind", "/tmp/l", "/tmp/libtpu_lockfile") in pairs
    assert ("--bind", "/tmp/tpu_logs", "/tmp/tpu_logs") in pairs
    assert ("--bind", "/tmp/s", "/tmp/s") in pairs
    assert {"--unshare-pid", "--unshare-net", "--die-with-parent", "--clearenv"} <= set(argv)
    assert argv[argv.index("--tmpfs") + 1] == "/tmp"
    monkeypatch.delenv("MAXKERNEL_SANDBOX_DEVICES")
    assert all(p.startswith(("/dev/accel", "/dev/vfio")) for p, _ in sandbox.device_paths())


def test_job_environment_keeps_jax_settings_and_drops_secrets():
    env = sandbox.job_environment(
        {
            "PATH": "/bin",
            "JAX_PLATFORMS": "cpu",
            "TPU_WORKER_HOSTNAMES": "localhost",
            "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
            "LIBTPU_INIT_ARGS": "--xla_tpu_x",
            "MAXKERNEL_TOKEN": "t",
            "GEMINI_API_KEY": "k",
            "TPU_API_KEY": "k",
            "HTTPS_PROXY": "p",
            "XLA_PROXY": "p",
            "AWS_SECRET_ACCESS_KEY": "s",
            "HOME": "/root",
        }
    )
    assert env == {
        "PATH": "/bin",
        "LANG": "C.UTF-8",
        "JAX_PLATFORMS": "cpu",
        "TPU_WORKER_HOSTNAMES": "localhost",
        "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",
        "LIBTPU_INIT_ARGS": "--xla_tpu_x",
    }


@pytest.mark.slow  # ~10 s: a device worker start (a spawned interpreter importing jax)
def test_device_worker_runs_sandboxed_with_a_fake_device_bound(tier, tmp_path, monkeypatch):
    if tier != "bwrap":
        pytest.skip("the device worker's process-level sandbox needs bwrap")
    fake = tmp_path / "accel0"
    fake.write_text("fake accelerator")
    monkeypatch.setenv("MAXKERNEL_SANDBOX_DEVICES", f"{fake}=/dev/accel0")
    with WorkerPool(max_workers=1, device_owner=True) as pool:
        out = pool.run(
            JobSpec(fn="pool_jobs:device_probe", kwargs={"device": "/dev/accel0"}, needs_device=True)
        )
    assert out.status == "ok", out
    assert out.sandbox.lane == "device" and out.sandbox.tier == "bwrap"
    assert out.result["device"] == "fake accelerator"
    assert out.result["connect"].startswith("OSError")  # no network
    assert out.result["write_root"].startswith("OSError")  # read-only root
    assert out.result["lockfile"] is True  # libtpu's host lock is bound into its private /tmp
    assert out.result["secrets"] == []


def test_a_job_cannot_change_the_hosts_kernel_settings(evaluator):
    before = Path("/proc/sys/vm/overcommit_ratio").read_text()
    out = evaluator.pool.run(JobSpec(fn="pool_jobs:write_host_settings"))
    assert out.status == "ok", out
    assert out.result["/proc/sys/vm/overcommit_ratio"] == "OSError: Read-only file system", out.result
    assert out.result["/proc/sysrq-trigger"] != "wrote", out.result  # read-only, or absent on this kernel
    assert Path("/proc/sys/vm/overcommit_ratio").read_text() == before
