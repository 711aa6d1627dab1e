"""The Linux system calls behind the sandbox (ctypes: Python 3.11 has no os.unshare), and the per-job plan.

Runs inside the forkserver and its children, so it imports nothing of ours but the standard library.
`job_mount_plan` turns a job's scratch dir and hidden paths into data (a list of `MountOp`), which the
tests check without privileges; `enter_job` carries it out in a freshly forked child.

The per-job steps, in the child the forkserver forked:
  1. PR_SET_PDEATHSIG(SIGKILL): the job dies with the forkserver.
  2. unshare(pid | mount | net | ipc | uts): a network namespace with only a loopback that is down.
  3. Private propagation, fresh tmpfs over /tmp /var/tmp /dev/shm /run (sockets and leftovers of the
     host or of other jobs are gone), the job's scratch bound read-write (from an O_PATH descriptor
     taken before /tmp was covered), each hidden path masked (an empty read-only tmpfs over a
     directory, /dev/null over a file), a fresh /proc showing only this job's namespace.
  4. fork twice: the forked child stays outside as the pool's handle (a relay that ends as init
     ends), init is PID 1 of the new PID namespace, and the job runs as PID 2 under it (PID 1 ignores signals sent from inside its own
     namespace, which would change how a job that kills itself ends). When the job ends, init relays
     a death by signal over the job's pipe and exits; the kernel then kills whatever is left in the
     namespace (a setsid'd, double-forked grandchild included).
  5. In the job: every capability dropped (bounding set, ambient, effective/permitted/inheritable)
     and no_new_privs, so it cannot undo the mounts, remount, or regain privileges by exec.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
from dataclasses import dataclass

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18

PR_SET_PDEATHSIG = 1
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4

AT_RECURSIVE = 0x8000
MOUNT_ATTR_RDONLY = 0x1
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added after the syscall table unification)
SYS_CAPSET = {"x86_64": 126, "aarch64": 91}
LINUX_CAPABILITY_VERSION_3 = 0x20080522

PROC_READONLY = ("sys", "sysrq-trigger", "irq", "bus")
# Covered by a fresh tmpfs in every job: the host's and other jobs' files and sockets there are gone.
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run")

# What a job's environment keeps: what jax/libtpu/XLA read, locale and PATH. Never secrets.
_KEEP_NAMES = {
    "PATH",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "ALLOW_MULTIPLE_LIBTPU_LOAD",
    "MAXKERNEL_TRACE_DIR",
}
_KEEP_PREFIXES = ("JAX_", "XLA_", "TPU_", "LIBTPU_", "PJRT_", "TF_CPP_", "OMP_")
_SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSW", "CREDENTIAL", "AUTH", "COOKIE", "SESSION", "PROXY")


def job_environment(source) -> dict[str, str]:
    """The variables a job may see: jax/XLA/libtpu settings, PATH and locale; never a secret or proxy.
    (MAXKERNEL_TRACE_DIR is a directory name, kept so a profile job writes where its parent looks.)"""
    out = {}
    for name, value in source.items():
        if any(w in name.upper() for w in _SECRET_WORDS):
            continue
        if name in _KEEP_NAMES or name.startswith(_KEEP_PREFIXES):
            out[name] = value
    out.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    out.setdefault("LANG", "C.UTF-8")
    return out


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.syscall.restype = ctypes.c_long


class SandboxSetupError(OSError):
    """A sandbox step failed: the job must not run (fail closed)."""


def _check(ret: int, what: str) -> None:
    if ret != 0:
        e = ctypes.get_errno()
        raise SandboxSetupError(e, f"{what}: {os.strerror(e)}")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    ret = _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data))
    _check(ret, f"mount {source or fstype} on {target}")


def prctl(option: int, arg2: int = 0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg2), 0, 0, 0), f"prctl({option})")


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def make_tree_readonly(path: str = "/") -> None:
    """Every mount at and under `path` read-only (this mount namespace only)."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    ret = _libc.syscall(
        ctypes.c_long(SYS_MOUNT_SETATTR),
        ctypes.c_int(-100),  # AT_FDCWD
        path.encode(),
        ctypes.c_uint(AT_RECURSIVE),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )
    if ret == 0:
        return
    if ctypes.get_errno() != errno.ENOSYS:
        _check(ret, f"mount_setattr({path}, rdonly)")
    # Kernels before 5.12: remount each mount point read-only, deepest first (bind remounts change only
    # this namespace's mount flags, never the filesystem).
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4].replace("\\040", " ") for line in f]
    for point in sorted(set(points), key=len, reverse=True):
        if point == path or point.startswith(path.rstrip("/") + "/"):
            try:
                mount(None, point, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
            except SandboxSetupError as e:
                if e.errno not in (errno.EACCES, errno.EPERM, errno.ENOENT):
                    raise


def drop_privileges() -> None:
    """No capability left anywhere (bounding, ambient, effective, permitted, inheritable), no_new_privs."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except OSError:
        last = 40
    for cap in range(last + 1):
        ret = _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0)
        if ret != 0 and ctypes.get_errno() not in (errno.EINVAL,):
            _check(ret, f"drop capability {cap} from the bounding set")
    _libc.prctl(PR_CAP_AMBIENT, ctypes.c_ulong(PR_CAP_AMBIENT_CLEAR_ALL), 0, 0, 0)
    number = SYS_CAPSET.get(platform.machine())
    if number is None:
        raise SandboxSetupError(errno.ENOSYS, f"capset: unknown syscall number on {platform.machine()}")
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two cap_user_data_t: effective, permitted, inheritable = 0
    _check(_libc.syscall(ctypes.c_long(number), header, data), "capset(0)")
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def die_with_parent() -> None:
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


# ---- the per-job plan (data) ------------------------------------------------------------------------
@dataclass(frozen=True)
class MountOp:
    """One mount step of a job's sandbox; `kind` in tmpfs | mkdir | touch | bind_ro | bind_rw | mask_dir |
    mask_file | proc."""

    kind: str
    target: str
    source: str | None = None
    options: str | None = None


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def job_mount_plan(
    scratch_dir: str,
    hide_paths: tuple[str, ...] | list[str],
    tmp_size_bytes: int,
    inputs: tuple[str, ...] | list[str] = (),
    *,
    runtime: tuple[str, ...] | list[str] = (),
    exists=os.path.lexists,
    isdir=os.path.isdir,
) -> list[MountOp]:
    """The mounts that make one job's view: private dirs, the runtime and its inputs read-only, its
    scratch rw, hidden paths masked, a fresh /proc.

    `runtime` is what any job needs to read to run at all (`sandbox.runtime_paths`: the interpreter, the
    venv, every sys.path entry, our package's folders). Where one lies under a private dir (a clone or a
    venv in /tmp) it is bound back read-only, whole: the job sees it as it would anywhere else on the
    read-only root. A runtime folder that holds the job's scratch gets a fresh tmpfs over the scratch's
    parent (other jobs' scratch dirs are siblings); the scratch is then bound back read-write.

    `inputs` are files the parent named in the job's arguments that live under a private dir (a kernel
    in /tmp): they stay visible read-only with their directory (a kernel imports helpers from beside
    it), unless hidden. A hidden path under a private dir is already
    gone (fresh tmpfs) unless it lies inside the scratch or an input, so it is masked only where it would
    still be visible. Paths are resolved as the forkserver sees them.
    """
    scratch = os.path.realpath(scratch_dir)
    hidden = [os.path.realpath(p) for p in hide_paths]
    ops = [MountOp("tmpfs", d, options=f"mode=1777,size={tmp_size_bytes}") for d in PRIVATE_DIRS]
    shown: list[str] = []

    def allowed(path: str) -> bool:
        if not _under(path, PRIVATE_DIRS) or _under(path, (scratch,)) or path in PRIVATE_DIRS:
            return False
        # never a directory holding the scratch (or other jobs' scratch), nor a hidden path or one under it
        # (a hidden file inside a shown directory is masked below)
        return not _under(scratch, (path,)) and not _under(path, tuple(hidden))

    covers: list[str] = []
    for path in sorted({os.path.realpath(p) for p in runtime}, key=len):  # parents first
        if path in PRIVATE_DIRS or not _under(path, PRIVATE_DIRS) or not exists(path):
            continue
        if _under(path, tuple(hidden)) or any(_under(path, (s,)) for s in shown):
            continue
        parent = os.path.dirname(scratch)
        if _under(scratch, (path,)):
            if not _under(parent, (path,)) or parent == path:
                continue  # it would show other jobs' scratch dirs, and covering them would hide it all
            covers.append(parent)
        shown.append(path)
        ops.append(MountOp("mkdir" if isdir(path) else "touch", path))
        ops.append(MountOp("bind_ro", path, source=path))
    for raw in inputs:
        path = os.path.realpath(raw)
        if not exists(path) or _under(path, tuple(hidden)):
            continue  # a hidden input (the reference, to the candidate) is not shown at all
        if not allowed(path) and not allowed(os.path.dirname(path)):
            continue
        if not isdir(path) and allowed(os.path.dirname(path)):
            path = os.path.dirname(path)  # the kernel's siblings too (its helpers import from beside it)
        if any(_under(path, (s,)) for s in shown):
            continue
        shown.append(path)
        ops.append(MountOp("mkdir" if isdir(path) or path != os.path.realpath(raw) else "touch", path))
        ops.append(MountOp("bind_ro", path, source=path))
    for parent in dict.fromkeys(covers):
        ops.append(MountOp("tmpfs", parent, options="mode=755,size=64k"))
    if _under(scratch, PRIVATE_DIRS) or covers:
        ops.append(MountOp("mkdir", scratch))
    ops.append(MountOp("bind_rw", scratch, source=scratch))
    for path in hidden:
        if _under(path, PRIVATE_DIRS) and not _under(path, (scratch, *shown)):
            continue  # not in this job's view
        if not exists(path):
            continue
        ops.append(MountOp("mask_dir" if isdir(path) else "mask_file", path))
    ops.append(MountOp("proc", "/proc"))
    return ops


def _apply(ops: list[MountOp], sources: dict[str, int]) -> None:
    for op in ops:
        if op.kind == "tmpfs":
            if os.path.isdir(op.target):
                mount("tmpfs", op.target, "tmpfs", MS_NOSUID | MS_NODEV, op.options)
        elif op.kind == "mkdir":
            os.makedirs(op.target, mode=0o755, exist_ok=True)
        elif op.kind == "touch":
            os.makedirs(os.path.dirname(op.target), mode=0o755, exist_ok=True)
            open(op.target, "a").close()
        elif op.kind == "bind_ro":
            mount(f"/proc/self/fd/{sources[op.source]}", op.target, None, MS_BIND | MS_REC)
            mount(None, op.target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        elif op.kind == "bind_rw":
            mount(f"/proc/self/fd/{sources[op.source]}", op.target, None, MS_BIND | MS_REC)
            mount(None, op.target, None, MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV)
        elif op.kind == "mask_dir":
            mount(
                "tmpfs", op.target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=000"
            )
        elif op.kind == "mask_file":
            mount("/dev/null", op.target, None, MS_BIND)
            mount(None, op.target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
        elif op.kind == "proc":
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
            # Writes to most sysctls are checked by uid alone: a capability-less root job could still
            # change the host's kernel settings through a fresh /proc/sys. Read-only, as bwrap does.
            for sub in PROC_READONLY:
                path = f"/proc/{sub}"
                if os.path.exists(path):
                    mount(path, path, None, MS_BIND | MS_REC)
                    mount(
                        None, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC
                    )
        else:
            raise SandboxSetupError(errno.EINVAL, f"unknown mount step {op.kind}")


# ---- forkserver side --------------------------------------------------------------------------------
def enter_forkserver_namespaces(*, map_user: bool) -> None:
    """The namespaces tier's process-level sandbox (bwrap does this in its tier): new mount, network,
    IPC and UTS namespaces, the whole tree read-only, /dev reduced to the harmless nodes."""
    uid, gid = os.getuid(), os.getgid()
    unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | (CLONE_NEWUSER if map_user else 0))
    if map_user:  # keep our uid, with capabilities inside the new user namespace only
        with open("/proc/self/setgroups", "w") as f:
            f.write("deny")
        with open("/proc/self/uid_map", "w") as f:
            f.write(f"{uid} {uid} 1")
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    nodes = ("null", "zero", "full", "random", "urandom", "tty")
    fds = {n: os.open(f"/dev/{n}", os.O_PATH) for n in nodes if os.path.exists(f"/dev/{n}")}
    mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=64k")
    for name, fd in fds.items():
        open(f"/dev/{name}", "w").close()
        mount(f"/proc/self/fd/{fd}", f"/dev/{name}", None, MS_BIND)
        os.close(fd)
    os.mkdir("/dev/shm", 0o1777)
    make_tree_readonly("/")


# ---- job side ---------------------------------------------------------------------------------------
def enter_job(
    scratch_dir: str,
    hide_paths: list[str],
    tmp_size_bytes: int,
    conn,
    inputs: list[str] = (),
    runtime: list[str] = (),
) -> None:
    """Turn this freshly forked child into a sandboxed job; returns in the job process.

    This process (the one the pool knows by pid) becomes a relay: it unshares the namespaces, builds
    the mounts, forks the new PID namespace's init and exits with init's status. Init mounts /proc,
    forks the job (PID 2), reaps, relays the job's death by signal as ("signal", signum) on `conn`.
    (A raw clone(CLONE_NEWPID) would save a fork, but skips libc's fork handling: in the forkserver,
    which has threads, the child can deadlock on a malloc lock.)
    """
    die_with_parent()
    if os.getppid() == 1:
        raise SandboxSetupError(errno.ESRCH, "the forkserver went away")
    if not os.statvfs("/").f_flag & os.ST_RDONLY:  # the forkserver's own sandbox is the premise
        raise SandboxSetupError(errno.EPERM, "the forkserver is not sandboxed (its root is writable)")
    scratch = os.path.realpath(scratch_dir)
    if not os.path.isdir(scratch):
        raise SandboxSetupError(errno.ENOENT, f"scratch dir {scratch} is not visible to the sandbox")
    plan = job_mount_plan(scratch, tuple(hide_paths), tmp_size_bytes, tuple(inputs), runtime=tuple(runtime))
    unshare(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    # Opened in the new mount namespace (a bind source must be one of its mounts), before /tmp is covered.
    sources = {op.source: os.open(op.source, os.O_PATH) for op in plan if op.source}
    _apply([op for op in plan if op.kind != "proc"], sources)
    for fd in sources.values():
        os.close(fd)
    # A working directory under /tmp (a test's tmp_path) is gone under the fresh tmpfs: start in scratch.
    os.chdir(scratch)
    init = os.fork()
    if init != 0:
        _relay(init)
    die_with_parent()
    _apply([op for op in plan if op.kind == "proc"], sources)  # only init sees the new PID namespace
    job = os.fork()
    if job == 0:
        die_with_parent()
        drop_privileges()
        return
    _init_loop(job, conn)


def _relay(init: int) -> None:
    """The pool's view of the job: wait for the namespace's init and end the same way."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            _, status = os.waitpid(init, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
    try:
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig not in (signal.SIGKILL, signal.SIGSTOP):  # those cannot (and need not) be reset
                signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
    finally:
        os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def _init_loop(job_pid: int, conn) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(1)
        except InterruptedError:
            continue
        if pid != job_pid:
            continue  # an orphan reparented to us
        if os.WIFSIGNALED(status):
            try:
                if conn is not None:
                    conn.send(("signal", os.WTERMSIG(status)))
            except (OSError, ValueError):
                pass
            os._exit(128 + os.WTERMSIG(status))
        os._exit(os.WEXITSTATUS(status))


def self_test(namespaces: bool) -> int:
    """Probe: can this host run the job sandbox? Exit 0 and print 'ok', or print the failing step."""
    import sys
    import tempfile

    scratch = tempfile.mkdtemp(prefix="maxkernel-probe-")
    try:
        if namespaces:
            enter_forkserver_namespaces(map_user=os.getuid() != 0)
        # the probe binds what a job binds: the interpreter and its library, wherever they are
        runtime = [os.path.dirname(os.path.realpath(sys.executable)), sys.prefix, *filter(None, sys.path)]
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            try:
                enter_job(scratch, [], 1 << 20, None, runtime=runtime)
                with open(os.path.join(scratch, "probe"), "w") as f:
                    f.write("ok")
                os.write(write_end, b"ok")
            except BaseException as e:  # noqa: BLE001 - reported to the parent as text
                os.write(write_end, f"{e}".encode()[:400])
            os._exit(0)
        os.close(write_end)
        answer = os.read(read_end, 512).decode() or "the probe child died"
        os.waitpid(pid, 0)
        print(answer)
        return 0 if answer == "ok" else 1
    except OSError as e:
        print(e)
        return 1
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    import sys

    sys.exit(self_test("--namespaces" in sys.argv))
