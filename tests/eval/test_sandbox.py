"""The sandbox for generated code: each containment is an attack run in it, reported as a failure,
with the host checked from outside afterwards (its files, its processes, its listening sockets).

Where the machine cannot build the sandbox (no bwrap, user namespaces disabled), `run_program`
must refuse: `test_runs_or_refuses` checks that, and the containment tests skip, unless
SPECDIFF_REQUIRE_SANDBOX=1 makes a missing sandbox a failure.
"""
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from specdiff.eval import sandbox
from specdiff.eval.sandbox import SandboxUnavailable, run_program

ROOT = Path(__file__).resolve().parents[2]


def host_processes_with(marker: str) -> list[int]:
    """Pids of host processes whose command line contains `marker`, bwrap's own two processes excepted."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if not argv[0].endswith(b"bwrap") and any(marker.encode() in arg for arg in argv):
                pids.append(int(entry.name))
    return [pid for pid in pids if pid != os.getpid()]


def test_runs_or_refuses():
    reason = sandbox.unavailable_reason()
    if reason is None:
        result = run_program("print('hello')")
        assert result.ok and result.status == "ok" and result.stdout == "hello\n" and result.returncode == 0
    else:  # the machine lacks a mechanism: refuse, never run uncontained
        with pytest.raises(SandboxUnavailable):
            run_program("print('hello')")


def test_bad_arguments():
    for kwargs in ({"timeout_s": 0}, {"timeout_s": -1}, {"timeout_s": float("nan")}, {"memory_mb": 0},
                   {"max_processes": 0}, {"disk_mb": 0}):
        with pytest.raises(ValueError):
            run_program("pass", **kwargs)
    with pytest.raises(ValueError):
        run_program(b"pass")


def test_refuses_without_bwrap(monkeypatch):
    monkeypatch.setenv("SPECDIFF_BWRAP", "/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailable, match="SPECDIFF_BWRAP"):
        run_program("print(1)")


_NO_USERNS = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
uid, gid = os.geteuid(), os.getegid()
if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
    print("SKIP cannot create a user namespace here"); sys.exit(0)
for name, text in (("setgroups", "deny"), ("uid_map", f"1000 {uid} 1"), ("gid_map", f"1000 {gid} 1")):
    with open(f"/proc/self/{name}", "w") as f:
        f.write(text)
with open("/proc/sys/user/max_user_namespaces", "w") as f:  # this namespace's own limit
    f.write("0")
os.execv(sys.executable, [sys.executable, "-c", sys.argv[1]])
"""
_TRY_RUN = """
import os
from specdiff.eval import sandbox
assert os.geteuid() == 1000
try:
    result = sandbox.run_program("print(1)")
    print("RAN", result.status)
except sandbox.SandboxUnavailable as error:
    print("REFUSED", error)
"""


def test_refuses_without_user_namespaces(works):
    """An ordinary user on a machine where user namespaces are off: a real refusal, nothing run. (The
    namespace limit is set to 0 inside a user namespace of our own, so the host is not touched.)"""
    out = subprocess.run([sys.executable, "-c", _NO_USERNS, _TRY_RUN], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.stdout.startswith("SKIP"):
        pytest.skip(out.stdout)
    assert out.stdout.startswith("REFUSED"), out.stdout + out.stderr
    assert "user namespaces" in out.stdout and "bwrap" in out.stdout


def test_refuses_as_root_without_capabilities(works):
    """Root in a container that took CAP_SYS_ADMIN away (Docker's default): a real refusal."""
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or setpriv is None:
        pytest.skip("needs root and util-linux's setpriv")
    out = subprocess.run([setpriv, "--inh-caps=-sys_admin", "--bounding-set=-sys_admin", sys.executable, "-c",
                          "from specdiff.eval import sandbox; print(sandbox.unavailable_reason())"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "could not build the sandbox" in out.stdout and "CAP_SYS_ADMIN" in out.stdout, out.stdout + out.stderr


def test_exit_codes_and_output(works):
    ok = run_program("import sys; print('out'); print('err', file=sys.stderr)")
    assert (ok.ok, ok.status, ok.stdout, ok.stderr, ok.returncode) == (True, "ok", "out\n", "err\n", 0)
    exit3 = run_program("raise SystemExit(3)")
    assert (exit3.ok, exit3.status, exit3.returncode) == (False, "error", 3)
    crash = run_program("1 / 0")
    assert crash.status == "error" and "ZeroDivisionError" in crash.stderr
    killed = run_program("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert (killed.status, killed.returncode) == ("killed", 128 + signal.SIGSEGV)


def test_infinite_loop(works):
    start = time.monotonic()
    result = run_program("while True:\n    pass", timeout_s=1.0)
    assert (result.ok, result.status, result.returncode) == (False, "timeout", None)
    assert time.monotonic() - start < 5


def test_sleep_forever(works):
    start = time.monotonic()
    result = run_program("import time\ntime.sleep(10**6)", timeout_s=1.0)
    assert (result.ok, result.status) == (False, "timeout")
    assert time.monotonic() - start < 5


def test_fork_bomb(works):
    """A real fork bomb: the process limit holds it to max_processes on the host, the wall clock ends it,
    and nothing of it is left afterwards."""
    peak, stop = [0], threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], len(host_processes_with(sandbox.PROGRAM_PATH)))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        result = run_program("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
                             timeout_s=2.0, max_processes=8)
    finally:
        stop.set()
        watcher.join()
    assert (result.ok, result.status) == (False, "timeout")
    assert 1 <= peak[0] <= 8, peak
    assert host_processes_with(sandbox.PROGRAM_PATH) == []


def test_fork_limit_is_reported(works):
    program = textwrap.dedent("""
        import os, time
        children = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                children += 1
        except OSError as error:
            print("refused after", children, error.errno, flush=True)
            raise
    """)
    result = run_program(program, timeout_s=10.0, max_processes=6)
    assert result.status == "error" and "BlockingIOError" in result.stderr
    words = result.stdout.split()
    assert words[:2] == ["refused", "after"] and 1 <= int(words[2]) <= 5 and int(words[3]) == 11  # EAGAIN
    assert host_processes_with(sandbox.PROGRAM_PATH) == []  # the sleeping children died with the sandbox


def test_ten_gigabytes(works):
    result = run_program("x = bytearray(10 * 2**30)\nprint('allocated')", memory_mb=512)
    assert (result.ok, result.status) == (False, "memory")
    assert "allocated" not in result.stdout and "MemoryError" in result.stderr


def test_limits_inside(works):
    program = textwrap.dedent("""
        import os, resource
        limits = {name: resource.getrlimit(getattr(resource, "RLIMIT_" + name)) for name in
                  ("NPROC", "AS", "CPU", "FSIZE", "CORE")}
        status = dict(line.split(":\\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\\t" in line)
        print(repr((limits, os.getuid(), status["CapEff"].strip(), status["NoNewPrivs"].strip())))
    """)
    result = run_program(program, timeout_s=2.5, memory_mb=300, max_processes=9, disk_mb=5)
    limits, uid, caps, no_new_privs = eval(result.stdout)
    assert limits == {"NPROC": (9, 9), "AS": (300 << 20,) * 2, "CPU": (3, 4), "FSIZE": (5 << 20,) * 2, "CORE": (0, 0)}
    assert uid != 0 and int(caps, 16) == 0 and no_new_privs == "1"


def test_no_network(works):
    """A TCP server and an abstract unix socket listen on the host; the program reaches neither, nor
    anything outside."""
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    port = server.getsockname()[1]
    name = "specdiff-test-" + secrets.token_hex(4)
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind("\0" + name)
    unix.listen()
    unix.setblocking(False)
    program = textwrap.dedent(f"""
        import socket
        errors = []
        for target in (("127.0.0.1", {port}), ("localhost", {port}), ("1.1.1.1", 53)):
            try:
                socket.create_connection(target, timeout=3).close()
                errors.append("connected " + repr(target))
            except OSError as error:
                errors.append(type(error).__name__)
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect("\\0{name}")
            errors.append("connected unix")
        except OSError as error:
            errors.append(type(error).__name__)
        print(errors)
        raise SystemExit(1)
    """)
    try:
        result = run_program(program, timeout_s=10.0)
        assert result.status == "error"
        assert "connected" not in result.stdout and len(eval(result.stdout)) == 4
        for listener in (server, unix):
            with pytest.raises(BlockingIOError):  # nobody connected
                listener.accept()
    finally:
        server.close()
        unix.close()


def test_delete_outside_tmp(works, tmp_path):
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    own = sandbox.interpreter()[0]
    program = f"import os\nos.remove({str(victim)!r})"
    result = run_program(program)
    assert result.status == "error" and "FileNotFoundError" in result.stderr  # not even visible
    assert victim.read_text() == "keep me"
    result = run_program(f"import os\nos.remove({own!r})")  # visible, read-only
    assert result.status == "error" and ("OSError" in result.stderr or "PermissionError" in result.stderr)
    assert Path(own).exists()


def test_write_outside_tmp(works, tmp_path):
    token = secrets.token_hex(4)
    targets = [tmp_path / f"new-{token}.txt", Path(f"/usr/specdiff-probe-{token}"),
               Path(sandbox.interpreter()[1]) / f"specdiff-probe-{token}", Path(f"/specdiff-probe-{token}"),
               Path(f"/etc/specdiff-probe-{token}"), Path(f"/dev/specdiff-probe-{token}"),
               Path(f"/sandbox/specdiff-probe-{token}")]  # the last ones: the sandbox's own root and /dev, read-only
    program = textwrap.dedent(f"""
        import os
        outcomes = []
        for path in {[str(t) for t in targets]!r}:
            try:
                with open(path, "w") as f:
                    f.write("x")
                outcomes.append("wrote")
            except OSError as error:
                outcomes.append(type(error).__name__)
        with open("/tmp/inside-{token}", "w") as f:  # the sandbox's own working directory is writable
            f.write("fine")
        print(outcomes)
        raise SystemExit(1 if "wrote" not in outcomes else 0)
    """)
    try:
        result = run_program(program)
        assert result.status == "error" and "wrote" not in result.stdout, result.stdout + result.stderr
        assert not any(t.exists() for t in targets)
        assert not Path(f"/tmp/inside-{token}").exists()  # the sandbox's /tmp is not the host's
    finally:
        for t in targets:
            if t.exists():
                t.unlink()


def test_cannot_see_host_files(works, tmp_path):
    prefix = Path(sandbox.interpreter()[1])
    paths = [p for p in (str(ROOT), "/root", "/home", "/etc/passwd", "/etc/shadow", str(tmp_path), __file__, "/work",
                         str(Path.home() / ".ssh")) if Path(p) not in prefix.parents]
    result = run_program(f"import os\nprint([p for p in {paths!r} if os.path.exists(p)])")
    assert result.ok and result.stdout.strip() == "[]"
    for parent in prefix.parents[:-1]:  # the Python installation's folders hold only the way to it
        listing = run_program(f"import os\nprint(os.listdir({str(parent)!r}))")
        assert eval(listing.stdout) == [prefix.relative_to(parent).parts[0]]
    listing = run_program("import os\nprint(sorted(os.listdir('/')))")
    assert set(eval(listing.stdout)) <= {"bin", "dev", "etc", "lib", "lib32", "lib64", "proc", "sandbox", "sbin", "tmp",
                                         "usr", *Path(sandbox.interpreter()[1]).parts[1:2]}


def test_cannot_kill_host_processes(works):
    victim = subprocess.Popen(["sleep", "60"])
    program = textwrap.dedent(f"""
        import os, signal
        outcomes = []
        # the sandbox's init (the kernel ignores SIGKILL to it from inside, or it is not ours), then host processes
        for pid in (os.getppid(), {victim.pid}, {os.getpid()}):
            try:
                os.kill(pid, signal.SIGKILL)
                outcomes.append("sent")
            except OSError as error:
                outcomes.append(type(error).__name__)
        print(outcomes)
        raise SystemExit(1)
    """)
    try:
        result = run_program(program)
        assert result.status == "error"
        init, *host = eval(result.stdout)
        assert host == ["ProcessLookupError", "ProcessLookupError"]  # not in its pid namespace
        assert init in ("sent", "PermissionError")
        assert victim.poll() is None  # alive
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("then", ["exit", "hang"])
def test_setsid_orphans_die(works, then):
    """A grandchild in a new session (and a double-forked daemon) outlives the program, not the sandbox."""
    marker = "specdiff-orphan-" + secrets.token_hex(4)
    program = textwrap.dedent(f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "{marker}"],
                                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if os.fork() == 0:                  # a classic daemon: fork, setsid, fork, exec
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", "{marker}-daemon"])
            os._exit(0)
        time.sleep(0.5)
        print("running", child.poll() is None, flush=True)
        if "{then}" == "hang":
            time.sleep(1000)
    """)
    result = run_program(program, timeout_s=3.0)
    assert result.stdout.strip() == "running True"
    assert result.status == ("ok" if then == "exit" else "timeout")
    assert host_processes_with(marker) == []


def test_environment_is_scrubbed(works, monkeypatch):
    secret = "specdiff-secret-" + secrets.token_hex(8)
    monkeypatch.setenv("SPECDIFF_TEST_SECRET", secret)
    program = textwrap.dedent("""
        import os
        print(sorted(os.environ))
        for path in ("/proc/self/environ", "/proc/1/environ", "/proc/2/environ"):
            try:
                print(open(path, "rb").read())
            except OSError as error:
                print(path, type(error).__name__)
    """)
    result = run_program(program)
    assert result.ok
    assert secret not in result.stdout and "SPECDIFF_TEST_SECRET" not in result.stdout
    assert set(eval(result.stdout.splitlines()[0])) <= {"PATH", "HOME", "LANG", "PWD"}


def test_output_is_bounded(works):
    result = run_program("import sys\nfor _ in range(200):\n    sys.stdout.write('x' * 50_000)\nprint('done')",
                         max_output_bytes=100_000)
    assert result.ok and result.truncated and len(result.stdout) == 100_000


def test_disk_is_bounded(works):
    result = run_program("with open('/tmp/big', 'wb') as f:\n    f.write(b'x' * (20 << 20))", disk_mb=4)
    assert result.status in ("error", "killed")  # ENOSPC, or SIGXFSZ at the file-size limit
    assert not result.ok


_AS_ORDINARY_USER = """
import json, os, socket, sys
sys.path.insert(0, sys.argv[1])
from specdiff.eval import sandbox
port, marker, victim_dir = int(sys.argv[2]), sys.argv[3], sys.argv[4]
out = {"host_uid": os.geteuid()}
r = sandbox.run_program("import os; print(os.getuid(), sorted(os.environ), open('/proc/1/environ','rb').read())")
out["inside"] = r.stdout
r = sandbox.run_program("import os\\nn = 0\\ntry:\\n    while True:\\n        if os.fork() == 0:\\n"
                        "            import time; time.sleep(60); os._exit(0)\\n        n += 1\\n"
                        "except OSError:\\n    print(n)", max_processes=5)
out["forks"] = r.stdout.strip()
r = sandbox.run_program(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3)")
out["connect"] = r.status
r = sandbox.run_program(f"open({victim_dir!r} + '/x', 'w').write('x')")
out["write"] = r.status
r = sandbox.run_program("open('/x', 'w').write('x')")  # the sandbox's root belongs to its user here: read-only
out["write root"] = r.status
r = sandbox.run_program("import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; "
                        f"time.sleep(60)', {marker!r}], start_new_session=True)")
out["orphan"] = r.status
print(json.dumps(out))
"""


def test_as_an_ordinary_user(works, tmp_path):
    """The unprivileged path (user namespace, --disable-userns), exercised from root by dropping to
    nobody: it runs the system Python, so that needs /usr/bin/python3 and a world-readable checkout."""
    if os.geteuid() != 0:
        pytest.skip("already an ordinary user: every other test here runs the unprivileged path")
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 that the dropped user could run")
    nobody = 65534
    importing = f"import sys; sys.path.insert(0, {str(ROOT)!r}); import specdiff.eval.sandbox"
    probe = subprocess.run([python, "-c", importing],
                           user=nobody, group=nobody, extra_groups=[], capture_output=True, cwd="/", timeout=60)
    if probe.returncode != 0:
        pytest.skip(f"uid {nobody} cannot import specdiff from {ROOT}: {probe.stderr.decode()[-300:]}")
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    victim_dir = tmp_path / "open-to-all"
    victim_dir.mkdir()
    victim_dir.chmod(0o777)
    tmp_path.chmod(0o755)
    marker = "specdiff-orphan-" + secrets.token_hex(4)
    secret = "specdiff-secret-" + secrets.token_hex(8)
    env = {"PATH": "/usr/bin:/bin", "SPECDIFF_BWRAP": sandbox.bwrap_path(), "SPECDIFF_TEST_SECRET": secret}
    try:
        out = subprocess.run([python, "-c", _AS_ORDINARY_USER, str(ROOT), str(server.getsockname()[1]), marker,
                              str(victim_dir)], user=nobody, group=nobody, extra_groups=[], capture_output=True,
                             text=True, cwd="/", env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()
    assert result["host_uid"] == nobody
    uid, names = result["inside"].split(" ", 1)
    assert uid == "65534" and secret not in result["inside"] and "SPECDIFF_TEST_SECRET" not in result["inside"]
    assert 1 <= int(result["forks"]) <= 4
    assert result["connect"] == "error" and result["write"] == "error" and result["write root"] == "error"
    assert list(victim_dir.iterdir()) == []
    assert result["orphan"] == "ok" and host_processes_with(marker) == []
