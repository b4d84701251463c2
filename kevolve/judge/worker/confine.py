"""The worker confines itself after torch is imported, before CUDA starts a thread, and before the kernel loads.

`confine(readable, writable, target)` applies, in order, every layer the OS grants, and returns what holds
(`Worker.init` reports it as `info["confinement"]`):
- its mark (`_mark`: a hard RLIMIT_RTTIME under the evaluator's, inherited by every process it starts and
  never raised again), by which the evaluator finds and ends whatever its lineage left outside its process
  group (`process._end_orphans`);
- `no_new_privs`, not dumpable (no core dumps; with Landlock below, other processes of the same user can't
  open its /proc/<pid>/fd or mem), parent-death signal SIGKILL;
- capabilities: a root worker drops all of them (bounding, ambient, effective, permitted), so it can't
  ptrace, bypass file permissions, change uids, or get them back by exec;
- Landlock (Linux >= 5.13): files are readable only beneath the system and Python prefixes, the CUDA
  toolkit, the kernel's own build folder and the task; writable only beneath `writable` (the worker's
  private temporary directory and its output-exchange folder) and, on CUDA, its own threads' files in /proc
  (where the driver names the threads it starts); of /dev only a few character devices
  (`/dev/null`, `/dev/zero`, `/dev/full`, `/dev/random`, `/dev/urandom`, `/dev/nvidia*`), so not /dev/shm,
  where other judgements' exchange folders are; TCP bind/connect denied (ABI >= 4); signals and abstract
  unix sockets scoped to its own domain (ABI >= 6). Landlock also stops a confined process from
  ptrace-accessing any process outside its domain: another worker (the spare included) and the evaluator
  are out of reach through /proc (fds, memory, maps, environment);
- a PID namespace of its own with its own /proc (`pidns`, set up before this process started; reported here):
  the worker sees no process but itself and its namespace's init — not the evaluator, another worker or the
  spare — and every process left in the namespace dies with the worker. Where the OS denies it, a worker
  sees every process's pid, stat, status and cmdline, and still reaches none of them (Landlock, seccomp);
- seccomp (x86-64, `syscalls.first`, synchronised to every thread): no socket but AF_UNIX, no connect, no
  ptrace / process_vm_* / pidfd / kcmp, no io_uring, no namespaces or mounts, no setsid/setpgid (children stay in
  the process group the evaluator kills), no timer_create (SIGEV_THREAD timers start threads), no bpf / perf /
  userfaultfd / keyrings / modules; kill, tgkill and sigqueue only to itself or its own group; clone with
  namespace flags refused and clone3 answered ENOSYS so glibc falls back to clone, whose flags the filter can
  read;
- rlimits on the cpu target: address space, CPU seconds (soft: SIGXCPU; hard 5 s later: SIGKILL), file
  size, no core files — the values its evaluator chose (`process.WorkerProcess.limits`, passed in
  `KEVOLVE_WORKER_LIMITS`): the address space bounds what a kernel can map, the CPU seconds follow the
  judgement's timeout.

Landlock, no_new_privs and capabilities are per thread: a thread that exists before `confine` keeps running
without them, and a kernel that gets code run on it (a Python thread whose code it patches, a thread pool's
queue) escapes them. So the worker starts none before (`worker.main`: no watcher thread, no OpenBLAS server
threads; `Worker.init`: torch's pool sized and CUDA initialised after), and the report names any that exist
(`missing["threads"]`). seccomp filters are installed with TSYNC, on every thread.

Not denied by this first filter: fork and exec, which torch.compile (the baseline the clock times in this
same process) needs to run the C++ compiler, ptxas and its own worker processes. `seal()` denies both once
the baselines are compiled and before the kernel is loaded — dlopen's initialisers and a torch extension's
module init are the kernel's first code — so no process the kernel could start ever exists; on the CUDA target
it refuses new threads too. Its listener goes to the evaluator, which so learns of every refused call after
the kernel loads and rejects the kernel for it (`judge.evaluator.evidence`). Where the seal
is missing, a process the kernel starts inherits every layer above (seccomp and Landlock cannot be shed,
capabilities are gone, it cannot leave the process group) and dies with it; where seccomp is missing
altogether it can leave the group (setsid), and is still ended with the judgement by its mark.
On a machine that denies a layer (no Landlock, seccomp disabled, not x86-64) the rest still apply, the
report says which one is missing, and the static rules and the symbol check remain; without Landlock,
files the user can write are writable by a kernel that reaches libc by address arithmetic, and a sibling
process of the same user is reachable through /proc while it is dumpable (`reuse` then starts the spare
only after the current worker is dead).
"""
from __future__ import annotations

import ctypes
import errno
import os
import platform
import resource
import signal
import struct
import sys
from pathlib import Path

from kevolve.judge import syscalls
from kevolve.judge.worker import pidns

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT = 1, 4, 24, 38, 47
NR = {"landlock_create_ruleset": 444, "landlock_add_rule": 445, "landlock_restrict_self": 446, "capset": 126}
READ_ONLY = ("/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc", "/proc", "/sys", "/opt")
# the only device nodes (with /dev/nvidia*) a worker may open: not /dev as a whole, which holds /dev/shm (every
# judgement's output-exchange folder, `exchange.files_root`; a worker is given its own folder only), raw disks
# and the kernel log
DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
MARK_RTTIME_US = 1 << 32      # a confined worker's hard RLIMIT_RTTIME at most: how its evaluator knows its lineage
LIMITS_ENV = "KEVOLVE_WORKER_LIMITS"   # the rlimits its evaluator chose (`process.WorkerProcess.limits`), JSON


def confine(readable: list[str], writable: list[str], target: str, limits: dict | None = None) -> dict:
    """Applies every layer it can; returns {layer: what holds} and `missing`: {layer: why not}."""
    report: dict = {"missing": {}}
    early = _other_threads()                  # before anything here: they escape what is per thread below
    if early:
        report["missing"]["threads"] = (f"{len(early)} thread(s) started before the confinement "
                                        f"({', '.join(early[:4])}):"
                                        " Landlock, no_new_privs and the dropped capabilities hold only on threads "
                                        "started after it (seccomp is synchronised to every thread)")
    _mark()
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    report["no_new_privs"] = True
    report["capabilities"] = _drop_capabilities()
    report["pid_namespace"] = os.environ.get(pidns.ENV) or "none: the worker was not started by pidns.py"
    if report["pid_namespace"] != pidns.HOLDS:
        report["missing"]["pid_namespace"] = report["pid_namespace"]
    own_threads = target == "cuda"            # the CUDA driver names its threads (`_landlock`)
    for name, layer in (("landlock", lambda: _landlock(readable, writable, own_threads)), ("seccomp", _seccomp)):
        try:
            report[name] = layer()
        except OSError as e:
            report[name] = None
            report["missing"][name] = str(e)
    if target == "cpu":
        report["rlimits"] = _rlimits(limits if limits is not None else _chosen_limits())
    # the supervisor (`evidence`) reads these as paths of its own namespace; its own threads' files are named apart,
    # which `evidence.resolve` judges by what they are (`/proc/<pid>` there would be another process)
    report["paths"] = {"read": _existing(list(READ_ONLY) + list(readable)), "write": _existing(writable),
                       "devices": _existing(list(DEVICES) + [str(p) for p in Path("/dev").glob("nvidia*")])}
    if own_threads:
        report["paths"]["own_threads"] = OWN_THREADS
    return report


def _other_threads() -> list[str]:
    """The threads of this process other than the calling one, by name: Landlock (`landlock_restrict_self`),
    no_new_privs and capabilities are per thread, so a thread that exists before they are applied keeps running
    without them, and a kernel that gets code run there (a Python thread it patches, a pool's queue) escapes
    them. The worker starts none before it confines itself (`worker.main`, `Worker.init`)."""
    me = str(_libc.syscall(186))                               # gettid
    out = []
    for tid in sorted(os.listdir("/proc/self/task")):
        if tid != me:
            try:
                out.append(f"{tid} {Path(f'/proc/self/task/{tid}/comm').read_text().strip()}")
            except OSError:
                pass                                          # ended meanwhile
    return out



def _mark() -> None:
    """Lowers the hard RLIMIT_RTTIME (CPU time a real-time-scheduled thread may use without blocking: no
    effect on this process, which schedules nothing real-time) below the evaluator's, which this process
    inherited: to `MARK_RTTIME_US`, or one less where the evaluator's is lower. Every process this one starts
    inherits it and, unprivileged, can lower it but never raise it, so a hard limit under the evaluator's own
    marks the worker's lineage: the evaluator finds a kernel's child that left the worker's process group by it
    (`process._end_orphans`)."""
    inf = resource.RLIM_INFINITY
    soft, hard = resource.getrlimit(resource.RLIMIT_RTTIME)
    if hard == 0:
        return                                                # nothing lower: the evaluator sweeps nothing
    mark = MARK_RTTIME_US if hard == inf else min(hard - 1, MARK_RTTIME_US)
    resource.setrlimit(resource.RLIMIT_RTTIME, (mark if soft == inf else min(soft, mark), mark))


def _chosen_limits() -> dict:
    import json
    try:
        chosen = json.loads(os.environ.get(LIMITS_ENV) or "{}")
    except ValueError:
        chosen = {}
    return chosen if isinstance(chosen, dict) else {}


def _prctl(option: int, arg: int) -> None:
    if _libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _drop_capabilities() -> str:
    if os.geteuid() != 0:
        return "none held (not root)"
    for cap in range(64):
        _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)       # EINVAL past the last capability: ignored
    _libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)               # PR_CAP_AMBIENT_CLEAR_ALL
    header = struct.pack("<Ii", 0x20080522, 0)            # _LINUX_CAPABILITY_VERSION_3, this process
    data = bytes(24)                                      # two empty (effective, permitted, inheritable) sets
    if _libc.syscall(NR["capset"], header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")
    return "dropped (root without capabilities)"


# ---------------------------------------------------------------- Landlock
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_TRUNCATE, FS_IOCTL_DEV = 1 << 14, 1 << 15


def landlock_abi() -> int:
    r = _libc.syscall(NR["landlock_create_ruleset"], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(r), 0)


OWN_THREADS = "/proc/self/task"


def _landlock(readable: list[str], writable: list[str], own_threads: bool = False) -> int:
    """`own_threads`: this process's own threads' files in /proc writable (`OWN_THREADS`, resolved to its pid now),
    for the CUDA driver, which names the threads it starts by writing their `comm` there and fails to start when
    it cannot ("error 304: OS call failed", seen on an H100 and an H200 with the driver started after Landlock).
    What it opens to the process: its own threads' names, scheduler statistics (`sched`: not the run time the
    outside clock reads, `test_outside`) and memory (a write there is still an attempt, `evidence.resolve`), none
    of which it could not already change from inside."""
    abi = landlock_abi()
    if abi < 1:
        raise OSError(errno.ENOSYS, "Landlock is not available (kernel < 5.13 or not enabled)")
    handled = (1 << 13) - 1                                   # ABI 1: execute .. make_sym
    handled |= (1 << 13) if abi >= 2 else 0                   # refer
    handled |= FS_TRUNCATE if abi >= 3 else 0
    handled |= FS_IOCTL_DEV if abi >= 5 else 0
    net = 0b11 if abi >= 4 else 0                             # bind_tcp, connect_tcp: no rule allows them
    scoped = 0b11 if abi >= 6 else 0                          # abstract unix sockets, signals
    attr = struct.pack("<QQQ", handled, net, scoped)[:24 if abi >= 6 else 16 if abi >= 4 else 8]
    fd = _libc.syscall(NR["landlock_create_ruleset"], attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        read = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
        file_rights = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | (FS_TRUNCATE if abi >= 3 else 0) \
            | (FS_IOCTL_DEV if abi >= 5 else 0)
        for path in _existing(list(READ_ONLY) + list(readable)):
            _add_rule(fd, path, read if os.path.isdir(path) else read & ~FS_READ_DIR)
        for path in _existing(list(DEVICES) + [str(p) for p in Path("/dev").glob("nvidia*")]):
            _add_rule(fd, path, (file_rights & ~FS_EXECUTE) if not os.path.isdir(path)
                      else (file_rights & ~FS_EXECUTE) | FS_READ_DIR)
        for path in _existing(writable):
            _add_rule(fd, path, handled)
        if own_threads:
            _add_rule(fd, os.path.realpath(OWN_THREADS), read | FS_WRITE_FILE | (FS_TRUNCATE if abi >= 3 else 0))
        if _libc.syscall(NR["landlock_restrict_self"], fd, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(fd)
    return abi


def _existing(paths: list[str]) -> list[str]:
    return sorted({os.path.realpath(p) for p in paths if p and os.path.exists(p)})


def _add_rule(ruleset: int, path: str, access: int) -> None:
    pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        attr = struct.pack("<Qi", access, pfd)                # struct landlock_path_beneath_attr, packed
        if _libc.syscall(NR["landlock_add_rule"], ruleset, ctypes.c_int(1), attr, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), f"landlock_add_rule({path}) failed")
    finally:
        os.close(pfd)


# ---------------------------------------------------------------- seccomp
EVIDENCE_ENV = "KEVOLVE_EVIDENCE_FD"   # the unix socket on which the seal's listener goes to the evaluator (`process`)
NR_SECCOMP, SET_MODE_FILTER = 317, 1
FLAG_TSYNC, FLAG_NEW_LISTENER, FLAG_TSYNC_ESRCH = 1, 8, 16


def _seccomp() -> str:
    _require_x86_64()
    _install(syscalls.first(os.getpid()))
    return "filter installed on every thread (x86-64)"


def _require_x86_64() -> None:
    if platform.machine() != "x86_64" or sys.byteorder != "little":
        raise OSError(errno.ENOSYS, f"the seccomp filter is written for x86-64, not {platform.machine()}")


def seal(pinned: bool = False, threads: bool = True) -> str:
    """The second, last seccomp filter (`syscalls.seal`), applied once the worker's own processes are done with
    (torch.compile's compiler runs and its compile workers) and before the kernel's code first runs
    (`Worker.seal`): no exec, no fork or vfork, no clone without CLONE_THREAD — so no new process at all, by any
    spelling; threads (the OpenMP and CUDA runtimes' own) stay allowed unless `threads=False` (the CUDA target:
    its runtime's threads exist by now, and a kernel needs none of its own). `pinned` (a worker held to its claimed
    CPUs, `cpus.py`): sched_setaffinity is refused too. Filters stack and neither can be removed; both are
    synchronised to every thread of the worker (TSYNC), not only the calling one.
    Where the evaluator gave this process a socket (`EVIDENCE_ENV`), the filter is installed with a listener,
    which goes to the evaluator and is closed here: from now on every refused call is a notification the
    evaluator reads (`judge.evaluator.evidence`), and the calls that name a file are notified too. Raises OSError where
    seccomp is unavailable (the caller reports it)."""
    _require_x86_64()
    sock = _evidence_socket()
    listener = _install(syscalls.seal(os.getpid(), threads, pinned, paths=sock is not None), listen=sock is not None)
    said = ("no new processes (exec, fork, vfork, clone without CLONE_THREAD refused)"
            + ("" if threads else "; no new threads (clone with CLONE_THREAD refused)")
            + ("; held to its CPUs (sched_setaffinity refused)" if pinned else ""))
    if sock is None:
        return said + "; no listener: refusals answered ENOSYS, not reported"
    import socket
    try:
        socket.send_fds(sock, [b"L"], [listener])
    finally:
        os.close(listener)
        sock.close()
    return said + "; every refusal reported to the evaluator"


def _evidence_socket():
    """The socket to the evaluator, taken out of the environment (used once)."""
    import socket
    fd = os.environ.pop(EVIDENCE_ENV, None)
    if not fd:
        return None
    try:
        return socket.socket(fileno=int(fd))
    except (OSError, ValueError):
        return None


def _install(prog: syscalls.Program, listen: bool = False) -> int:
    """Installs `prog` on every thread of this process (TSYNC); with `listen`, returns its listener's fd."""
    buf = b"".join(struct.pack("<HBBI", *ins) for ins in prog)
    cbuf = ctypes.create_string_buffer(buf)
    fprog = struct.pack("<HxxxxxxQ", len(prog), ctypes.addressof(cbuf))
    flags = FLAG_TSYNC | ((FLAG_NEW_LISTENER | FLAG_TSYNC_ESRCH) if listen else 0)
    r = _libc.syscall(NR_SECCOMP, SET_MODE_FILTER, ctypes.c_ulong(flags), ctypes.c_char_p(fprog))
    if r < 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")
    if not listen and r > 0:                                  # TSYNC without ESRCH: the thread that could not sync
        raise OSError(errno.ESRCH, f"seccomp filter not synchronised to thread {r}")
    return int(r)


def _rlimits(limits: dict) -> dict:
    """Address space, CPU seconds, file size; no core files. `limits` overrides the defaults."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    wanted = {"RLIMIT_AS": limits.get("address_space", max(total, 16 << 30)),
              "RLIMIT_CPU": limits.get("cpu_seconds", 3600 * max(os.cpu_count() or 1, 1)),
              "RLIMIT_FSIZE": limits.get("file_size", 16 << 30), "RLIMIT_CORE": 0}
    out = {}
    for name, value in wanted.items():
        kind = getattr(resource, name)
        soft, hard = resource.getrlimit(kind)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(kind, (value, value if name != "RLIMIT_CPU" else hard if hard != resource.RLIM_INFINITY
                                  else value + 5))
        out[name] = value
    return out
