"""The OS sandbox around every evaluation: which tier this host allows, what each tier enforces, and the
launch plans (bwrap argv, environment) as data.

Threat model. A job runs code we did not write (whatever an LLM or an HTTP client sends). It may try to
reach the network, read secrets (environment, the server's --token-file via /proc/<ancestor>/cmdline),
read the reference or expected outputs, write outside its scratch (~, /tmp, the workspace, the venv: a
.pth planted in site-packages runs in every later evaluation), leave processes behind (setsid +
double fork), or talk to other jobs. It may not escape the kernel: we rely on Linux namespaces, mount
flags and dropped capabilities, not on a VM. Out of scope: kernel exploits, side channels, resource
exhaustion beyond the pool's timeout / memory cap / tmpfs sizes, and the job's own pipe (it may send
any message; the judge's checks, not the sandbox, decide what a result is worth).

The runtime (the interpreter, the venv, every sys.path entry and our package's own folders:
`runtime_paths`) and the inputs the parent names in a job's arguments (a kernel file under /tmp) stay
visible read-only wherever they are, /tmp included, the inputs with their directory; hidden paths under
them are still masked; the home directory's credential stores (~/.ssh, ~/.aws, ~/.config/gcloud, ...) and the
server's --token-file are masked in every job, besides the job's own hide_paths. /proc/sys is read-only
(sysctl writes are checked by uid alone, and a job may run as a capability-less root).

Tiers, best first (forced with MAXKERNEL_SANDBOX=bwrap|namespaces|none):
- bwrap: the jax-preloaded forkserver runs under bubblewrap (read-only root, new network/IPC/UTS
  namespaces, clean environment, dies with the server). Each forked job then gets its own PID, mount,
  network, IPC and UTS namespaces, a private /tmp, only its scratch writable, its hidden paths masked,
  a fresh /proc, and no capabilities (`sandbox_linux.enter_job`). The forkserver keeps CAP_SYS_ADMIN
  inside bwrap only to build those per-job views; jobs drop it before any job code runs.
- namespaces: no bwrap, but the kernel allows namespaces: the forkserver builds the same process-level
  view itself (`sandbox_linux.enter_forkserver_namespaces`), jobs as above.
- none: nothing isolates the job beyond its process, timeout and memory cap; every verdict says so.

The device-owning worker (a TPU host) is long-lived and runs jobs one after another, so it gets the
process-level sandbox only (bwrap: own PID namespace, no network, read-only root, private /tmp with
libtpu's lock and logs bound in, the device nodes) and per-job hiding is not enforced there.
"""

from __future__ import annotations

import functools
import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from maxkernel.tpu_tools.pool.sandbox_linux import job_environment

Tier = Literal["bwrap", "namespaces", "none"]
Lane = Literal["forked", "device"]
TIERS: tuple[str, ...] = ("bwrap", "namespaces", "none")
ROLE_ENV = "MAXKERNEL_SANDBOX_ROLE"  # tells the sandboxed interpreter its role; removed on start
PROBE_TIMEOUT_S = 20.0
LINUX = Path(__file__).with_name("sandbox_linux.py")

ENFORCED_JOB = [
    "network: own namespace, loopback only and down",
    "filesystem read-only except the job's scratch dir (workspace and venv included)",
    "private /tmp, /var/tmp, /dev/shm, /run",
    "minimal environment (no tokens, keys, MAXKERNEL_* or proxies)",
    "own PID namespace: nothing it starts outlives it",
    "dies with its parent (server -> forkserver -> job)",
    "fresh /proc: no ancestor's command line or environment",
    "hide_paths masked, and the home's credential stores and the server's token file",
    "no capabilities, no_new_privs; /proc/sys read-only",
]
ENFORCED_DEVICE = [
    "network: own namespace",
    "filesystem read-only except the scratch root and trace root",
    "private /tmp (libtpu's lock and logs bound in)",
    "minimal environment (no tokens, keys, MAXKERNEL_* or proxies)",
    "own PID namespace (bwrap tier)",
    "dies with its parent",
]


class SandboxInfo(BaseModel):
    """Which sandbox produced a verdict, and what it enforced (part of every verdict's evidence)."""

    tier: Tier
    lane: Lane = "forked"
    enforced: list[str] = Field(default_factory=list)
    not_enforced: list[str] = Field(default_factory=list)
    note: str = Field(default="", description="why this tier and not a better one; how to get one")


class SandboxUnavailable(RuntimeError):
    """--require-sandbox (or MAXKERNEL_REQUIRE_SANDBOX=1) and this host allows no sandbox."""


@dataclass(frozen=True)
class Decision:
    tier: Tier
    note: str = ""


# Masked in every job when present: where a home directory keeps credentials.
CREDENTIAL_STORES = (
    ".ssh",
    ".aws",
    ".azure",
    ".config/gcloud",
    ".config/gh",
    ".docker",
    ".kube",
    ".gnupg",
    ".netrc",
    ".git-credentials",
    ".pypirc",
    ".cache/huggingface",
    ".config/maxkernel",
)


def credential_paths() -> list[str]:
    home = os.path.expanduser("~")
    return [p for p in (os.path.join(home, s) for s in CREDENTIAL_STORES) if os.path.lexists(p)]


def info_for(decision: Decision, lane: Lane = "forked") -> SandboxInfo:
    if decision.tier == "none":
        return SandboxInfo(
            tier="none",
            lane=lane,
            enforced=["timeout and memory cap", "minimal os.environ in the job (its parents' stay readable)"],
            not_enforced=ENFORCED_JOB[:3] + ENFORCED_JOB[4:],
            note=decision.note,
        )
    if lane == "device":
        not_enforced = ["hide_paths (one long-lived process runs every device job)"]
        enforced = list(ENFORCED_DEVICE)
        if decision.tier == "namespaces":  # no bwrap: the device worker only gets a clean environment
            enforced = [ENFORCED_DEVICE[3], ENFORCED_DEVICE[5]]
            not_enforced += [e for e in ENFORCED_DEVICE if e not in enforced]
        return SandboxInfo(
            tier=decision.tier, lane=lane, enforced=enforced, not_enforced=not_enforced, note=decision.note
        )
    return SandboxInfo(tier=decision.tier, lane=lane, enforced=list(ENFORCED_JOB), note=decision.note)


# ---- detection ----------------------------------------------------------------------------------------
def userns_hint() -> str:
    """For a non-root user: what stops unprivileged user namespaces here, and the fix."""
    if os.getuid() == 0:
        return ""
    checks = (
        (
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1",
            "kernel.apparmor_restrict_unprivileged_userns=0",
        ),
        ("/proc/sys/kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone=1"),
        ("/proc/sys/user/max_user_namespaces", "0", "user.max_user_namespaces=15000"),
    )
    for path, bad, fix in checks:
        try:
            if Path(path).read_text().strip() == bad:
                return f"unprivileged user namespaces are off ({path} = {bad}): sudo sysctl -w {fix}"
        except OSError:
            continue
    return "user namespaces may be disabled for this user (a container without CAP_SYS_ADMIN?)"


def _run_probe(argv: list[str]) -> str | None:
    """None if the probe printed ok, else its first line of complaint."""
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=probe_env())
    except (OSError, subprocess.TimeoutExpired) as e:
        return str(e)
    if proc.returncode == 0 and proc.stdout.strip() == "ok":
        return None
    text = (proc.stderr.strip() or proc.stdout.strip() or f"exit {proc.returncode}").splitlines()
    return text[-1][:300] if text else f"exit {proc.returncode}"


def probe_env() -> dict[str, str]:
    return job_environment(os.environ)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def detect() -> Decision:
    """The best tier this host runs (probed once per process: ~0.1 s), or MAXKERNEL_SANDBOX's."""
    return _detect(os.environ.get("MAXKERNEL_SANDBOX", "").strip().lower() or None)


@functools.cache
def _detect(forced: str | None) -> Decision:
    if forced is not None and forced not in TIERS:
        raise SandboxUnavailable(f"MAXKERNEL_SANDBOX should be one of {', '.join(TIERS)}, got {forced!r}")
    if not sys.platform.startswith("linux"):
        return Decision("none", f"no OS sandbox on {sys.platform}")
    if forced == "none":
        return Decision("none", "forced by MAXKERNEL_SANDBOX=none")
    notes = []
    if forced in (None, "bwrap"):
        exe = bwrap_path()
        if exe is None:
            notes.append("bwrap not installed (sudo apt-get install bubblewrap)")
        else:
            argv = forkserver_bwrap_argv(exe, probe_env(), "/", uid=os.getuid()) + ["-I", str(LINUX)]
            err = _run_probe(argv)
            if err is None:
                return Decision("bwrap")
            hint = userns_hint()
            notes.append(f"bwrap failed: {err}" + (f"; {hint}" if hint else ""))
        if forced == "bwrap":
            raise SandboxUnavailable("MAXKERNEL_SANDBOX=bwrap, but " + "; ".join(notes))
    err = _run_probe([sys.executable, "-I", str(LINUX), "--namespaces"])
    if err is None:
        return Decision("namespaces", "; ".join(notes))
    hint = userns_hint()
    notes.append(f"namespaces unavailable: {err}" + (f"; {hint}" if hint else ""))
    if forced == "namespaces":
        raise SandboxUnavailable("MAXKERNEL_SANDBOX=namespaces, but " + "; ".join(notes))
    return Decision("none", "; ".join(notes))


def require_sandbox_requested() -> bool:
    return os.environ.get("MAXKERNEL_REQUIRE_SANDBOX", "").strip().lower() in ("1", "true", "yes", "on")


def startup_line(decision: Decision) -> str:
    """One line for the server's start: the tier, and for none what is missing and how to fix it."""
    if decision.tier == "none":
        return (
            "sandbox: none - evaluations run UNSANDBOXED (network, filesystem, secrets reachable); "
            f"{decision.note or 'no OS sandbox here'}; --require-sandbox refuses instead"
        )
    extra = f" ({decision.note})" if decision.note else ""
    return f"sandbox: {decision.tier} - no network, read-only filesystem except scratch, own PID namespace{extra}"


# ---- launch plans (data) ------------------------------------------------------------------------------
def device_paths() -> list[tuple[str, str]]:
    """(host path, sandbox path) of the accelerator's device nodes; MAXKERNEL_SANDBOX_DEVICES="src[=dst]:..."
    replaces them (tests bind fake ones)."""
    raw = os.environ.get("MAXKERNEL_SANDBOX_DEVICES")
    if raw is not None:
        pairs = []
        for item in filter(None, raw.split(":")):
            src, _, dst = item.partition("=")
            pairs.append((src, dst or src))
        return pairs
    found = sorted(glob.glob("/dev/accel*")) + (["/dev/vfio"] if os.path.isdir("/dev/vfio") else [])
    return [(p, p) for p in found]


def _setenv(env: Mapping[str, str]) -> list[str]:
    out = ["--clearenv"]
    for k, v in sorted(env.items()):
        out += ["--setenv", k, v]
    return out


def forkserver_bwrap_argv(bwrap: str, env: Mapping[str, str], cwd: str, *, uid: int) -> list[str]:
    """bwrap around the forkserver. No --unshare-pid: the pool knows its jobs by the pids the forkserver
    reports, which must be the host's; each job gets its own PID namespace at fork instead. Host /tmp
    stays visible to the (trusted) forkserver so scratch dirs there can be bound into a job; every job
    covers /tmp with its own tmpfs."""
    argv = [bwrap, "--die-with-parent", "--new-session"]
    argv += ["--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if uid != 0:
        argv += ["--unshare-user", "--uid", str(uid), "--gid", str(os.getgid())]
    argv += ["--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP"]
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--bind", "/tmp", "/tmp"]
    argv += _setenv(env) + ["--chdir", cwd, "--", sys.executable]
    return argv


def device_bwrap_argv(
    bwrap: str,
    env: Mapping[str, str],
    cwd: str,
    *,
    uid: int,
    writable: list[str],
    devices: list[tuple[str, str]],
    readable: list[str] = (),
    libtpu_lock: str = "/tmp/libtpu_lockfile",
    libtpu_logs: str = "/tmp/tpu_logs",
) -> list[str]:
    """bwrap around the device-owning worker: its own PID namespace (the pool knows it by bwrap's pid),
    the device nodes, libtpu's host lock file (so two servers never open one chip) and log dir, and the
    runtime folders (`readable`) that its private /tmp would hide."""
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid"]
    argv += ["--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if uid != 0:
        argv += ["--unshare-user", "--uid", str(uid), "--gid", str(os.getgid())]
    argv += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    argv += ["--bind", libtpu_lock, "/tmp/libtpu_lockfile", "--bind", libtpu_logs, "/tmp/tpu_logs"]
    for path in sorted(set(readable), key=len):
        if _in_private_tmp(path) and not any(_within(path, w) for w in writable):
            argv += ["--ro-bind", path, path]
    for path in writable:
        argv += ["--bind", path, path]
    for src, dst in devices:
        argv += ["--dev-bind", src, dst]
    argv += _setenv(env) + ["--chdir", cwd, "--", sys.executable]
    return argv


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _in_private_tmp(path: str) -> bool:
    return path != "/tmp" and _within(path, "/tmp")


def visible_cwd(cwd: str, visible: list[str]) -> str:
    """`cwd` if the device worker will see it (its /tmp is private), else /."""
    if not _in_private_tmp(cwd) or any(_within(cwd, v) for v in visible if v != "/tmp"):
        return cwd
    return "/"


def runtime_paths() -> list[str]:
    """What every job must read to run at all, resolved: the interpreter's folder, its prefixes (the venv),
    every sys.path entry and the folders of our own package (an editable install maps them from outside
    sys.path). A job's private /tmp would otherwise hide any of these that live under /tmp (a clone in a
    `mktemp -d`), and every module the forkserver had not imported yet would fail to load."""
    raw = [os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
    raw += [sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix]
    raw += [p or os.getcwd() for p in sys.path]
    for name, module in list(sys.modules.items()):
        if name == "maxkernel" or name.startswith("maxkernel."):
            raw += list(getattr(module, "__path__", None) or [])
    out = {os.path.realpath(p) for p in raw if isinstance(p, str) and p}
    return sorted((p for p in out if os.path.exists(p)), key=len)


def write_launcher(argv: list[str], directory: str) -> str:
    """A tiny executable that runs `argv` + its own arguments: multiprocessing starts the forkserver /
    device worker through one executable path, so the sandbox goes in front of the interpreter here."""
    path = os.path.join(directory, f"python-{len(os.listdir(directory))}")
    with open(path, "w") as f:
        f.write("#!/bin/sh\nexec " + " ".join(shlex.quote(a) for a in argv) + ' "$@"\n')
    os.chmod(path, 0o700)
    return path


def env_launcher_argv(env: Mapping[str, str]) -> list[str]:
    """The namespaces tier's launcher: a clean environment, then the interpreter (which sandboxes itself)."""
    return ["/usr/bin/env", "-i", *(f"{k}={v}" for k, v in sorted(env.items())), sys.executable]


_scratch_root: str | None = None


def scratch_root() -> str:
    """This process's root for job scratch dirs (private, removed at exit); the device lane binds it."""
    global _scratch_root
    if _scratch_root is None or not os.path.isdir(_scratch_root):
        import atexit

        _scratch_root = tempfile.mkdtemp(prefix=f"maxkernel-scratch-{os.getpid()}-")
        atexit.register(shutil.rmtree, _scratch_root, ignore_errors=True)
    return _scratch_root


def make_scratch_dir(prefix: str = "job-") -> str:
    """A fresh scratch dir for one job, under `scratch_root()` (so every lane of every tier can bind it)."""
    return tempfile.mkdtemp(prefix=prefix, dir=scratch_root())
