"""An attempt is evidence (`judge.evaluator.evidence`, `judge.syscalls`, `confine.seal`): the seccomp programs decide
what they should (read by a classic-BPF interpreter here), a sealed process's refused calls reach the evaluator's
supervisor — from every thread, with nothing the process does able to take them back — and file paths are read
as the worker would resolve them. The judgements built on it are in tests/adversarial/."""
from __future__ import annotations

import errno
import json
import os
import platform
import socket
import struct
import subprocess
import sys
import textwrap

import pytest

from kevolve.judge import syscalls
from kevolve.judge.worker import confine
from kevolve.judge.evaluator import evidence

x86_64 = pytest.mark.skipif(platform.machine() != "x86_64", reason="the filters are written for x86-64")


def run_bpf(prog: syscalls.Program, nr: int, args=(0,) * 6, arch: int = syscalls.AUDIT_ARCH_X86_64) -> int:
    """The action a classic-BPF seccomp program returns for one call (the loads and jumps it uses)."""
    full = [a & 0xFFFFFFFFFFFFFFFF for a in args] + [0] * (6 - len(args))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *full)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == syscalls.LD_W_ABS:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == syscalls.RET_K:
            return k
        elif code in (syscalls.JEQ_K, syscalls.JGE_K, syscalls.JSET_K):
            hit = acc == k if code == syscalls.JEQ_K else acc >= k if code == syscalls.JGE_K else bool(acc & k)
            pc += jt if hit else jf
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")
        pc += 1


ALLOW, NOTIFY, KILL = syscalls.RET_ALLOW, syscalls.RET_NOTIFY, syscalls.RET_KILL_PROCESS
ME = 4242
CALLS = [  # (what, nr, args, first filter, seal on the CPU, seal on CUDA)
    ("socket(AF_UNIX)", 41, (1,), ALLOW, ALLOW, ALLOW),
    ("socket(AF_INET)", 41, (2,), NOTIFY, NOTIFY, NOTIFY),
    ("a thread", 56, (0x003D0F00,), ALLOW, ALLOW, NOTIFY),          # glibc's pthread_create flags
    ("a process (clone)", 56, (17,), ALLOW, NOTIFY, NOTIFY),        # SIGCHLD
    ("clone into a namespace", 56, (0x20000000 | 17,), NOTIFY, NOTIFY, NOTIFY),
    ("fork", 57, (), ALLOW, NOTIFY, NOTIFY),
    ("execve", 59, (), ALLOW, NOTIFY, NOTIFY),
    ("kill(itself)", 62, (ME, 9), ALLOW, ALLOW, ALLOW),
    ("kill(its group)", 62, (-ME, 9), ALLOW, ALLOW, ALLOW),
    ("kill(another)", 62, (1, 9), NOTIFY, NOTIFY, NOTIFY),
    ("tgkill(another)", 234, (1, 1, 9), NOTIFY, NOTIFY, NOTIFY),
    ("ptrace", 101, (), NOTIFY, NOTIFY, NOTIFY),
    ("setsid", 112, (), NOTIFY, NOTIFY, NOTIFY),
    ("a filter of its own", 317, (1, 8), ALLOW, NOTIFY, NOTIFY),
    ("prctl(PR_SET_SECCOMP)", 157, (22, 2), ALLOW, NOTIFY, NOTIFY),
    ("prctl(PR_SET_NAME)", 157, (15, 0), ALLOW, ALLOW, ALLOW),
    ("openat", 257, (-100, 0, 0), ALLOW, NOTIFY, NOTIFY),          # notified with a listener (`paths`)
    ("read", 0, (3, 0, 0), ALLOW, ALLOW, ALLOW),
    ("an x32 call", syscalls.X32 + 41, (2,), NOTIFY, NOTIFY, NOTIFY),
    ("clone3", 435, (), RET_CLONE3 := syscalls.RET_ERRNO | errno.ENOSYS, RET_CLONE3, RET_CLONE3),
]


@pytest.mark.parametrize("what, nr, args, first, cpu, cuda", CALLS, ids=[c[0] for c in CALLS])
def test_the_programs_decide(what, nr, args, first, cpu, cuda):
    assert run_bpf(syscalls.first(ME), nr, args) == first
    assert run_bpf(syscalls.seal(ME, threads=True, paths=True), nr, args) == cpu
    assert run_bpf(syscalls.seal(ME, threads=False, paths=True), nr, args) == cuda


def test_the_seal_refuses_file_calls_only_with_a_listener_and_pinned_affinity_only_when_pinned():
    # no listener: ENOSYS would break them
    assert run_bpf(syscalls.seal(ME, paths=False), 257, (-100, 0, 0)) == ALLOW
    assert run_bpf(syscalls.seal(ME), 203) == ALLOW
    assert run_bpf(syscalls.seal(ME, pinned=True), 203) == NOTIFY


def test_another_architecture_is_killed():
    for prog in (syscalls.first(ME), syscalls.seal(ME)):
        assert run_bpf(prog, 1, arch=0x40000003) == KILL                        # i386 (int 0x80)


# ---------------------------------------------------------------------- a sealed process, for real
CHILD = textwrap.dedent("""
    import ctypes, errno, os, socket, sys, threading, time
    from kevolve.judge.worker import confine
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)                               # no_new_privs, as the worker has
    early = threading.Event(); go = threading.Event()
    def older():                                             # a thread that exists before the seal
        early.set(); go.wait()
        try: socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        except OSError as e: print("thread", e.errno, flush=True)
    t = threading.Thread(target=older); t.start(); early.wait()
    print("seal", confine.seal(), flush=True)
    go.set(); t.join()
    for name, call in (("inet", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
                       ("fork", os.fork), ("environ", lambda: open("/proc/1/environ", "rb")),
                       ("write", lambda: open(sys.argv[1], "w")),
                       ("own", lambda: open("/proc/self/status").read())):
        try:
            r = call(); print(name, "done", flush=True)
            if r == 0: os._exit(0)
        except OSError as e:
            print(name, e.errno, flush=True)
    libc.syscall(3, 0)                                       # close(0): nothing it closes holds the evidence
    os._exit(0)
""")


@x86_64
def test_a_sealed_process_cannot_keep_its_attempts_from_the_evaluator(tmp_path):
    """A process sealed by `confine.seal` with the evaluator's socket: every refused call — from its main thread and
    from a thread that existed before the seal (TSYNC) — is answered by the supervisor here and kept, named, while
    what it may do (read its own /proc) goes on. The process ending takes nothing back."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    supervisor = evidence.Supervisor(ours)
    supervisor.policy({"paths": {"read": ["/usr", "/proc"], "write": [str(tmp_path)], "devices": []}})
    supervisor.loading()
    outside = "/var/tmp/kevolve-evidence-probe"
    env = {**os.environ, confine.EVIDENCE_ENV: str(theirs.fileno())}
    proc = subprocess.run([sys.executable, "-c", CHILD, outside], env=env, pass_fds=(theirs.fileno(),),
                          capture_output=True, text=True, timeout=120)
    theirs.close()
    supervisor.close()
    said = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert "every refusal reported to the evaluator" in said["seal"], proc.stdout + proc.stderr
    assert said["thread"] == str(errno.EPERM) and said["inet"] == str(errno.EPERM), said
    assert said["fork"] == str(errno.EPERM) and said["environ"] == str(errno.EACCES), said
    assert said["write"] == str(errno.EACCES) and said["own"] == "done", said
    assert not os.path.exists(outside)
    found = supervisor.found()
    for tried in ("socket(AF_INET6)", "socket(AF_INET)", "clone of a process", "/proc/1/environ: another process's "
                  "environ", f"{outside} for writing: outside what the worker may write"):
        assert tried in found, found
    assert "status" not in found, found


@x86_64
def test_a_path_taken_away_before_it_is_read_is_evidence(tmp_path):
    """Written after reading `Supervisor._paths`: a kernel that passes a path the evaluator cannot read (unmapped
    by another thread as soon as the call is made, here never mapped) would make every file call go on to Landlock
    unexamined. A path that is not in its memory is itself named."""
    code = textwrap.dedent("""
        import ctypes, errno, os
        from kevolve.judge.worker import confine
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(38, 1, 0, 0, 0)
        print(confine.seal(), flush=True)
        r = libc.syscall(257, -100, ctypes.c_void_p(4096 * 3), 0)      # openat(AT_FDCWD, <unmapped>, O_RDONLY)
        print(r, ctypes.get_errno(), flush=True)
    """)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    supervisor = evidence.Supervisor(ours)
    supervisor.loading()
    env = {**os.environ, confine.EVIDENCE_ENV: str(theirs.fileno())}
    out = subprocess.run([sys.executable, "-c", code], env=env, pass_fds=(theirs.fileno(),), capture_output=True,
                         text=True, timeout=60)
    theirs.close()
    supervisor.close()
    assert out.stdout.splitlines()[1] == f"-1 {errno.EACCES}", out.stdout + out.stderr
    assert "openat of a path that is not in its memory" in (supervisor.found() or ""), supervisor.found()


@x86_64
def test_without_the_supervisor_a_refused_call_still_fails(tmp_path):
    """With no listener (the seal installed without the evaluator's socket) a refused call fails with ENOSYS: the
    refusal never rests on the supervisor being there."""
    code = textwrap.dedent("""
        import ctypes, os, socket
        from kevolve.judge.worker import confine
        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)
        print(confine.seal())
        try: socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        except OSError as e: print(e.errno)
        print(open("/proc/self/status").read()[:5])
    """)
    env = {k: v for k, v in os.environ.items() if k != confine.EVIDENCE_ENV}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert "no listener" in lines[0] and lines[1] == str(errno.ENOSYS) and lines[2] == "Name:", out.stdout + out.stderr


# ---------------------------------------------------------------------- paths, as the worker resolves them
ROOTS = (["/usr", "/etc", "/proc"], [], [])


def test_other_processes_private_files_are_named():
    own = {str(os.getpid())}
    for path in ("/proc/1/environ", "/proc/1/mem", "/proc/1/fd/0", "/proc/1/task/1/maps", "/proc/self/../1/environ"):
        assert "another process's" in (evidence.path_problem(path, False, *ROOTS, own, os.getpid()) or ""), path
    for path in ("/proc/self/environ", f"/proc/{os.getpid()}/maps", "/proc/1/cmdline", "/proc/1/stat"):
        assert evidence.path_problem(path, False, *ROOTS, own, os.getpid()) is None, path
    assert "its own process's memory" in evidence.path_problem("/proc/self/mem", True, *ROOTS, own, os.getpid())


def test_its_own_threads_files_may_be_written_but_not_their_memory():
    """A CUDA worker may write its own threads' files (the driver names its threads there, `confine.OWN_THREADS`);
    their memory, reached there or by climbing back out with `..`, is still an attempt."""
    own, me = {str(os.getpid())}, os.getpid()
    for path in (f"/proc/self/task/{me}/comm", f"/proc/{me}/task/{me}/comm", "/proc/thread-self/comm"):
        assert evidence.path_problem(path, True, *ROOTS, own, me) is None, path
    for path in (f"/proc/self/task/{me}/mem", f"/proc/self/task/{me}/../{me}/mem", f"/proc/self/task/{me}/../../mem",
                 f"/proc/self/task/./{me}//mem"):
        assert "memory through /proc" in (evidence.path_problem(path, True, *ROOTS, own, me) or ""), path
    assert "another process's environ" in evidence.path_problem("/proc/self/task/../../1/environ", False, *ROOTS,
                                                                own, me)
    assert "another process's environ" in evidence.path_problem(f"/proc/self/task/{me}/../../../1/environ", False,
                                                                *ROOTS, own, me)
    assert evidence.path_problem(f"/proc/self/task/{me}/mem", False, *ROOTS, own, me) is None      # reading it


def test_a_threads_links_are_followed_as_its_processs(tmp_path):
    """A thread's cwd, root, exe and fds are its process's: a write through `/proc/self/task/<tid>/cwd/..` is
    judged where it lands, as through `/proc/self/cwd/..`."""
    own, me = {str(os.getpid())}, os.getpid()
    roots = (["/usr", "/etc", "/proc"], [str(tmp_path)], [])
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert evidence.path_problem(f"/proc/self/task/{me}/cwd/out.bin", True, *roots, own, me) is None
        assert "for writing" in evidence.path_problem(f"/proc/self/task/{me}/cwd/../x", True, *roots, own, me)
        assert "for writing" in evidence.path_problem(f"/proc/{me}/task/{me}/root/etc/passwd", True, *roots, own, me)
    finally:
        os.chdir(here)


OWN_THREADS_CHILD = textwrap.dedent("""
    import ctypes, json, sys, threading, time
    from kevolve.judge.worker import confine
    report = confine.confine([p for p in sys.path if p], [sys.argv[2]], sys.argv[1])
    tids, done = [], threading.Event()
    def run():
        tids.append(ctypes.CDLL(None).syscall(186))
        done.wait()
    t = threading.Thread(target=run)
    t.start()
    while not tids:
        time.sleep(0.01)
    out = {"paths": report["paths"], "landlock": report.get("landlock")}
    for name, path in (("thread", f"/proc/self/task/{tids[0]}/comm"), ("process", "/proc/self/oom_score_adj"),
                       ("other", "/proc/1/comm")):
        try:
            with open(path, "w") as f:
                f.write("0")
            out[name] = "written"
        except OSError as e:
            out[name] = e.strerror
    done.set()
    t.join()
    print(json.dumps(out))
""")


@pytest.mark.skipif(confine.landlock_abi() < 1, reason="needs Landlock")
@pytest.mark.parametrize("target", ["cuda", "cpu"])
def test_a_cuda_worker_may_write_its_own_threads_files_and_nothing_else_under_proc(target, tmp_path):
    """`confine.confine` on CUDA lets the process write its own threads' files (the driver names its threads: it
    did not start without it), and nothing else under /proc; on the CPU not even that. The supervisor's write roots
    never name /proc (it would read `/proc/<pid>` as one of its own processes)."""
    out = subprocess.run([sys.executable, "-c", OWN_THREADS_CHILD, target, str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["landlock"], got
    assert got["thread"] == ("written" if target == "cuda" else "Permission denied"), got
    assert got["process"] == "Permission denied" and got["other"] == "Permission denied", got
    assert not [p for p in got["paths"]["write"] if p.startswith("/proc")], got["paths"]
    assert got["paths"].get("own_threads") == (confine.OWN_THREADS if target == "cuda" else None), got["paths"]


def test_paths_are_followed_through_symlinks_and_the_workers_own_proc(tmp_path):
    own = {str(os.getpid())}
    (tmp_path / "to-etc").symlink_to("/etc")
    (tmp_path / "to-secret").symlink_to("/root/.ssh/id_rsa")
    (tmp_path / "to-environ").symlink_to("/proc/1/environ")
    roots = (["/usr", "/etc", "/proc"], [str(tmp_path)], [])
    assert evidence.path_problem(str(tmp_path / "to-etc" / "hostname"), False, *roots, own, os.getpid()) is None
    assert "/root/.ssh/id_rsa for reading" in evidence.path_problem(str(tmp_path / "to-secret"), False, *roots, own,
                                                                    os.getpid())
    assert "another process's environ" in evidence.path_problem(str(tmp_path / "to-environ"), False, *roots, own,
                                                                 os.getpid())
    here = os.getcwd()                       # /proc/self/cwd is the worker's own cwd, read through its pid here
    os.chdir(tmp_path)
    try:
        assert evidence.path_problem("/proc/self/cwd/out.bin", True, *roots, own, os.getpid()) is None
        assert "for writing" in evidence.path_problem("/proc/self/cwd/../x", True, *roots, own, os.getpid())
    finally:
        os.chdir(here)


def test_what_the_harness_itself_may_do_is_not_evidence(tmp_path):
    """Listing a folder on the way to one it may read (Python's import path), caching bytecode it may not write,
    device nodes: Landlock decides, and none of it is blamed on a kernel."""
    roots = (["/usr", str(tmp_path / "pkg")], [str(tmp_path / "tmp")], ["/dev/null"])
    (tmp_path / "pkg").mkdir()
    own = {str(os.getpid())}
    assert evidence.path_problem(str(tmp_path), False, *roots, own, os.getpid()) is None
    assert evidence.path_problem(str(tmp_path / "pkg" / "__pycache__" / "m.pyc"), True, *roots, own,
                                 os.getpid()) is None
    assert evidence.path_problem("/dev/null", True, *roots, own, os.getpid()) is None
    assert evidence.path_problem("/dev/nvidia0", True, *roots, own, os.getpid()) is None
    assert "outside what the worker may read" in evidence.path_problem("/dev/shm/kevolve-other/0.out.bin", False,
                                                                       *roots, own, os.getpid())
