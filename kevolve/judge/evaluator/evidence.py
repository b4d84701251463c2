"""An attempt is evidence: what a kernel tried and was refused, as the Linux kernel tells the evaluator.

The worker's seal (`confine.seal`, `syscalls.seal`) is a seccomp filter installed with a listener, and the listener
goes to the evaluator (a unix socket `process.WorkerProcess` opened for it) before the kernel's library loads;
the worker keeps no copy. From then on every system call the confinement refuses is not refused in the worker
but *notified* here: the Linux kernel holds the calling thread until `Supervisor` (a thread of the evaluator)
answers, and the call never runs unless it is told to continue. It answers EPERM (the call fails as before) and
writes down what was tried — `socket(AF_INET)`, `clone of a process`, `kill(pid 1, signal 9)`, a new thread on
the CUDA target, ... Calls that name a file (open, openat, creat, unlink, rename, ...) are notified too: the
supervisor reads the path from the worker's memory and, where it is what Landlock or /proc refuses —
another process's private files under /proc (environ, mem, maps, fd, ...), its own memory written through
/proc, another judgement's folder, a read or write outside what the worker may read or write — answers EACCES
and writes it down; any other path goes on, and Landlock decides. The harness rejects a kernel with any such
attempt after it was loaded, naming them (`harness.judge`), even when its outputs are right.

Guarantees: the evidence lives in the evaluator; no code in the worker can erase it, hold it back or answer in
its place (the listener never exists in the worker after the seal; a thread of the worker cannot skip the
filter, which is synchronised to every thread; without the supervisor a refused call fails with ENOSYS, never
runs). A system call of another architecture kills the worker (SIGSYS): a crash verdict. What the worker did
before the kernel loaded (the harness's own work) is kept apart and never blamed on the kernel.
Not guaranteed: an attempt nothing refuses leaves no trace (reading its own process's memory, an ELF walk, a
write to its own private directory). Of files: the path is read from the worker's memory after the call was
made, so a kernel that rewrites the string from another thread in between is judged on the string read (Landlock
still refuses the real one; a path unmapped before it could be read is itself named), and where the evaluator may not
read the worker's memory (not root, no user namespace of its own, Yama's ptrace_scope 2 or more) no path is known, every
file call goes on to Landlock and none is evidence. Refusals by other mechanisms (file permissions, rlimits, a device's
own checks) are not seen. Where seccomp's listener is unavailable (Linux < 5.7 with several threads, seccomp missing)
nothing is reported: `Supervisor.state` says so.
"""
from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import select
import socket
import struct
import threading

from kevolve.judge import syscalls

RECV, SEND, ID_VALID = 0xC0502100, 0xC0182101, 0x40082102      # SECCOMP_IOCTL_NOTIF_*: _IOWR('!', 0/1), _IOW('!', 2)
NOTIF = struct.Struct("<QIIiIQ6Q")                            # id, pid, flags, nr, arch, ip, args[6]
RESP = struct.Struct("<QqiI")                                 # id, val, error, flags
CONTINUE = 1                                                  # SECCOMP_USER_NOTIF_FLAG_CONTINUE
KEEP, LIMIT = 8, 1000                                         # attempts named in a verdict; kept at most
AT_FDCWD = -100
O_ACCMODE, O_CREAT, O_TRUNC, O_PATH = 0o3, 0o100, 0o1000, 0o10000000
FAMILIES = {2: "AF_INET", 10: "AF_INET6", 16: "AF_NETLINK", 17: "AF_PACKET", 40: "AF_VSOCK", 38: "AF_ALG"}
# /proc/<pid>/ entries the kernel guards with ptrace access checks: another process's memory, environment, files
PRIVATE = frozenset("environ mem maps smaps smaps_rollup numa_maps pagemap auxv stack syscall personality io fd "
                    "fdinfo cwd root exe map_files ns timers timerslack_ns wchan mountinfo mounts mountstats "
                    "task".split())
# a file call's paths: (argument of the directory fd or None, argument of the path, "r", "w" or where the flags are)
_PATH_ARGS = {"open": [(None, 0, "flags1")], "openat": [(0, 1, "flags2")], "openat2": [(0, 1, "how2")],
              "creat": [(None, 0, "w")], "truncate": [(None, 0, "w")], "mkdir": [(None, 0, "w")],
              "mkdirat": [(0, 1, "w")], "rmdir": [(None, 0, "w")], "unlink": [(None, 0, "w")],
              "unlinkat": [(0, 1, "w")], "rename": [(None, 0, "w"), (None, 1, "w")],
              "renameat": [(0, 1, "w"), (2, 3, "w")], "renameat2": [(0, 1, "w"), (2, 3, "w")],
              "link": [(None, 0, "r"), (None, 1, "w")], "linkat": [(0, 1, "r"), (2, 3, "w")],
              "symlink": [(None, 1, "w")], "symlinkat": [(1, 2, "w")]}
PATH_ARGS = {syscalls.PATHS[name]: spec for name, spec in _PATH_ARGS.items()}


class Supervisor:
    """The evaluator's end of one worker's seal: receives its listener on `sock`, answers every notification,
    and keeps the attempts. `policy(confinement)` gives it what the worker may read and write (its confinement
    report, made before any kernel code ran); `loading()` marks the kernel's first code; `close()` once the
    worker is gone."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.attempts: list[str] = []           # after the kernel loaded, each kind once: evidence against it
        self.before: list[str] = []             # before: the harness's own, never blamed on the kernel
        self.state = "waiting for the worker's seal"
        self.loaded = False
        self.read: tuple[str, ...] = ()
        self.write: tuple[str, ...] = ()
        self.devices: tuple[str, ...] = ()
        self.paths_known = True
        self._listener: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="kevolve-evidence")
        self._thread.start()

    def policy(self, confinement: dict) -> None:
        paths = confinement.get("paths") or {}
        self.read, self.write = tuple(paths.get("read") or ()), tuple(paths.get("write") or ())
        self.devices = tuple(paths.get("devices") or ())

    def loading(self) -> None:
        self.loaded = True

    def found(self) -> str | None:
        """The attempts after the kernel loaded, as one sentence for a verdict; None if there were none."""
        if not self.attempts:
            return None
        more = len(self.attempts) - KEEP
        return ("forbidden action: the kernel tried " + "; ".join(self.attempts[:KEEP])
                + (f"; and {more} more" if more > 0 else "")
                + " — refused by the worker's confinement (an attempt is a rejection, whatever it computed)")

    def close(self, timeout: float = 5.0) -> None:
        """Stops once the listener has nothing left (the worker is gone), at most `timeout` seconds from now."""
        self._stop.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._thread.join(timeout)
        self.sock.close()

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        try:
            _, fds, _, _ = socket.recv_fds(self.sock, 16, 1)
        except OSError:
            fds = []
        if not fds:
            self.state = "no listener: the worker was not sealed with one (no seccomp, or it ended first)"
            return
        self._listener = fds[0]
        self.state = "listening"
        poller = select.poll()
        poller.register(self._listener, select.POLLIN)
        try:
            while True:
                events = poller.poll(200)
                if not events:
                    if self._stop.is_set():
                        return
                    continue
                if any(ev & select.POLLIN for _, ev in events):
                    self._one()
                elif any(ev & (select.POLLHUP | select.POLLERR) for _, ev in events):
                    return                                # no task uses the filter any more
        finally:
            os.close(self._listener)
            self.state = "closed"

    def _one(self) -> None:
        buf = bytearray(NOTIF.size)
        try:
            fcntl.ioctl(self._listener, RECV, buf)
        except OSError:
            return                                       # the thread that called was killed meanwhile
        nid, pid, _, nr, _, _, *args = NOTIF.unpack(buf)
        error, flags, what = -errno.EPERM, 0, None
        try:
            if nr in PATH_ARGS:
                what = self._paths(nid, pid, nr, args)
                error, flags = (-errno.EACCES, 0) if what else (0, CONTINUE)
            else:
                what = describe(nr, args)
        except Exception as e:                           # noqa: BLE001 — never leave a thread of the worker waiting
            what = None if nr in PATH_ARGS else f"{syscalls.NAMES.get(nr, nr)} ({type(e).__name__})"
            error, flags = ((0, CONTINUE) if nr in PATH_ARGS else (-errno.EPERM, 0))
        try:
            fcntl.ioctl(self._listener, SEND, bytearray(RESP.pack(nid, 0, error, flags)))
        except OSError:
            pass                                         # gone meanwhile
        if what:
            self._note(what)

    def _note(self, what: str) -> None:
        kept = self.attempts if self.loaded else self.before
        if len(kept) < LIMIT and what not in kept:
            kept.append(what)

    def _paths(self, nid: int, pid: int, nr: int, args: list[int]) -> str | None:
        """What is wrong with a file call's paths, or None (it goes on to Landlock)."""
        for dirfd_arg, path_arg, mode in PATH_ARGS[nr]:
            path, err = _read_string(pid, args[path_arg])
            if path is None and err == errno.EFAULT and _still_waiting(self._listener, nid):
                return f"{syscalls.NAMES[nr]} of a path that is not in its memory (unmapped before it could be read)"
            if path is None:
                self.paths_known = False
                return None
            write = _writes(pid, mode, args)
            if write is None:                            # O_PATH: opens nothing to read or write
                continue
            if not path.startswith("/"):
                base = _link(pid, "cwd" if dirfd_arg is None or _int(args[dirfd_arg]) == AT_FDCWD
                             else f"fd/{_int(args[dirfd_arg])}")
                if base is None:
                    self.paths_known = False
                    return None
                path = os.path.join(base, path)
            if not _still_waiting(self._listener, nid):
                return None
            problem = path_problem(path, write, self.read, self.write, self.devices, _own(pid), pid)
            if problem:
                return f"{syscalls.NAMES[nr]} {problem}"
        return None


def describe(nr: int, args: list[int]) -> str:
    """A refused call, in words."""
    name = syscalls.NAMES.get(nr)
    if nr >= syscalls.X32:
        return f"an x32 system call ({nr - syscalls.X32})"
    if nr == syscalls.SOCKET:
        return f"socket({FAMILIES.get(_int(args[0]), f'family {_int(args[0])}')}): a network socket"
    if nr == syscalls.CLONE:
        flags = args[0] & 0xFFFFFFFF
        if flags & syscalls.CLONE_NAMESPACES:
            return "clone into a new namespace"
        return ("clone of a thread (the CUDA target starts no host thread once the kernel is loaded)"
                if flags & syscalls.CLONE_THREAD else "clone of a process")
    if nr in (syscalls.KILL, syscalls.TGKILL, syscalls.SIGQUEUE, syscalls.TGSIGQUEUE):
        return f"{name}(pid {_int(args[0])}): a signal to another process"
    if nr in (syscalls.SECCOMP, syscalls.PRCTL):
        return f"{name}: a seccomp filter of its own"
    if nr == syscalls.SCHED_SETAFFINITY:
        return "sched_setaffinity: to leave the CPUs the worker is held to"
    if nr in syscalls.PROCESS.values():
        return f"{name}: a new process or program"
    return f"{name or f'system call {nr}'}"


def path_problem(path: str, write: bool, read_roots, write_roots, devices, own: set[str], pid: int) -> str | None:
    """Why the worker may not open `path` (for writing if `write`), or None where this cannot tell (Landlock still
    decides). `own`: the names under /proc of the worker's own process and threads (its namespace's); `pid`: the
    worker as this process sees it (its /proc links are read to follow the worker's own)."""
    real, problem = resolve(path, write, own, pid)
    if problem or not real:
        return problem
    if real.split("/")[1:2] in (["dev"], ["sys"]) and not real.startswith("/dev/shm/"):
        return None                                      # device nodes and sysfs: Landlock's alone
    if write and "/__pycache__" in real:
        return None                                      # Python caching bytecode it may not write: its own
    if _beneath(real, write_roots + devices) or (not write and _beneath(real, read_roots)):
        return None
    if not write and any(_beneath(root, (real,)) for root in read_roots + write_roots) and os.path.isdir(real):
        return None                                      # listing a folder on the way to one it may read
    return f"{real} for {'writing' if write else 'reading'}: outside what the worker may {'write' if write else 'read'}"


def resolve(path: str, write: bool, own: set[str], pid: int) -> tuple[str, str | None]:
    """`path` with its symlinks followed as the worker follows them: (the path, None), or ("", a problem) where it
    reaches another process's private files under /proc or writes its own memory, or ("", None) where it goes
    somewhere under /proc this does not follow. The worker's /proc is its own namespace's: its own entries
    (`self`, its ids) are read through `/proc/<pid>` here."""
    todo, done, hops = [c for c in path.split("/") if c], [], 0
    while todo:
        c = todo.pop(0)
        if c == ".":
            continue
        if c == "..":
            done = done[:-1]
            continue
        done.append(c)
        if done[0] == "proc":
            if len(done) < 3:
                continue
            who, what = done[1], done[2]
            mine = who in ("self", "thread-self") or who in own
            if not mine:
                return "", (f"/{'/'.join(done + todo)}: another process's {what}"
                            if who.isdigit() and what in PRIVATE else None)
            if what == "task":                           # one of its threads' folders (writable on CUDA, where
                if len(done) < 5:                        # the driver names its threads, `confine.OWN_THREADS`):
                    continue                             # judged as its process's, `..` as the folders it climbs
                what = done[4]
            if what == "mem" and write:
                return "", f"/{'/'.join(done + todo)} for writing: its own process's memory through /proc"
            link = what if what in ("cwd", "root", "exe") else f"fd/{todo.pop(0)}" if what == "fd" and todo else None
            target = _link(pid, link) if link else None
            if target is None or not target.startswith("/"):
                return "", None                          # its other /proc files (or a pipe, a socket): not paths
            todo, done, hops = [x for x in target.split("/") if x] + todo, [], hops + 1
        elif os.path.islink("/" + "/".join(done)):
            target = os.readlink("/" + "/".join(done))
            hops += 1
            done = [] if target.startswith("/") else done[:-1]
            todo = [x for x in target.split("/") if x] + todo
        if hops > 40:
            return "", None
    return "/" + "/".join(done), None


def _beneath(path: str, roots) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _int(v: int) -> int:
    """An argument's low 32 bits as a signed int (pids, fds, flags)."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v & 0x80000000 else v


def _writes(pid: int, mode: str, args: list[int]) -> bool | None:
    if mode in ("r", "w"):
        return mode == "w"
    if mode.startswith("how"):
        raw, _ = _read(pid, args[int(mode[3:])], 8)
        flags = struct.unpack("<Q", raw)[0] if raw and len(raw) == 8 else 0
    else:
        flags = args[int(mode[5:])]
    if flags & O_PATH:
        return None
    return bool(flags & O_ACCMODE) or bool(flags & (O_CREAT | O_TRUNC))


class _iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.process_vm_readv.restype = ctypes.c_ssize_t


def _read(pid: int, addr: int, n: int) -> tuple[bytes | None, int]:
    """Up to `n` bytes of the worker's memory at `addr` (fewer where a page ends unmapped), or None and why (EFAULT:
    not mapped there; EPERM: this process may not read it)."""
    if not addr:
        return None, errno.EFAULT
    buf = ctypes.create_string_buffer(n)
    local, remote = _iovec(ctypes.addressof(buf), n), _iovec(addr, n)
    got = _libc.process_vm_readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    return (buf.raw[:got], 0) if got > 0 else (None, ctypes.get_errno())


def _read_string(pid: int, addr: int, limit: int = 4096) -> tuple[str | None, int]:
    out = b""
    while len(out) < limit:
        chunk, err = _read(pid, addr + len(out), min(4096 - (addr + len(out)) % 4096, limit - len(out)))
        if chunk is None:
            return (None, err) if not out else (out.decode(errors="replace"), 0)
        end = chunk.find(b"\0")
        if end >= 0:
            return (out + chunk[:end]).decode(errors="replace"), 0
        out += chunk
    return out.decode(errors="replace"), 0


def _link(pid: int, name: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/{name}")
    except OSError:
        return None


def _own(pid: int) -> set[str]:
    """The worker's process and thread ids as its own /proc shows them (its PID namespace's)."""
    own = set()
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            own.add(_inner(f"/proc/{pid}/task/{tid}/status", "NSpid:") or tid)
        own.add(_inner(f"/proc/{pid}/status", "NStgid:") or str(pid))
    except OSError:
        pass
    return own


def _inner(status: str, key: str) -> str | None:
    try:
        with open(status) as f:
            for line in f:
                if line.startswith(key):
                    return line.split()[-1]
    except OSError:
        pass
    return None


def _still_waiting(listener: int, nid: int) -> bool:
    """Whether notification `nid`'s thread still waits (its pid not reused for another process meanwhile)."""
    try:
        fcntl.ioctl(listener, ID_VALID, bytearray(struct.pack("<Q", nid)))
        return True
    except OSError:
        return False
