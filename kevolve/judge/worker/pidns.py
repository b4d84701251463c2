"""Runs the worker in a PID namespace of its own, with a /proc of its own, under a small init.

    python -s kevolve/judge/worker/pidns.py PROGRAM [ARG ...]      (as the evaluator starts it: `process.WorkerProcess`)

Run as a script (standard library only, no `kevolve` import: it starts for every worker), it is three processes:
- the *relay* (this script as started, in the evaluator's namespace, the process group's leader): it unshares a
  PID and a mount namespace (as root with CAP_SYS_ADMIN; else inside a new user namespace that maps the user to
  itself, where the kernel allows unprivileged ones), forks the init, waits for it, and ends the way the worker
  ended — the same exit status, or killed by the same signal — so the evaluator reads the worker's end as
  before;
- the *init* (PID 1 of the new namespace): it makes the mount tree private, mounts a fresh /proc (so the worker
  sees only the processes of its namespace: itself and the init; not the evaluator, not another worker, not the
  spare), starts the worker, reaps whatever gets orphaned inside, and when the worker ends it tells the relay how
  (a pipe) and exits — and the kernel kills every process left in the namespace with it: a child a kernel left
  behind cannot outlive its judgement, whatever it did to leave the process group. It dies with the relay,
  and the relay with the evaluator (parent-death signals), so a worker never outlives its evaluator;
- the *worker* (PID 2), the program given, with stdin, stdout and stderr inherited: the evaluator's pipes.

Why not make the worker PID 1 itself (`unshare --pid --fork`): the init of a namespace ignores every signal
it has no handler for when it comes from inside, its own `raise` and `abort` included, which would change
crash verdicts; and its exit would kill nothing it had not already reaped.

Where the OS refuses (no CAP_SYS_ADMIN and no unprivileged user namespaces; a container's seccomp profile), the
relay becomes the worker (exec) with nothing changed; where the namespace is granted but mounting /proc is not
(a container's masked /proc under a user namespace), the worker runs in the namespace and still sees the
outer /proc. Either way `KEVOLVE_PIDNS` tells the worker what holds; it reports it with its confinement
(`confine.confine`). `KEVOLVE_PIDNS=off` in the evaluator's environment turns the namespace off.
"""
import ctypes
import os
import resource
import signal
import struct
import sys

ENV = "KEVOLVE_PIDNS"
PARENT_ENV = "KEVOLVE_PIDNS_PARENT"            # the evaluator's pid, which the relay checks after asking to die with it
CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 1 << 18
PR_SET_PDEATHSIG = 1
HOLDS = "own pid namespace and /proc"          # what the worker reports when all of it holds

_libc = ctypes.CDLL(None, use_errno=True)


def _unshare() -> str | None:
    """New PID and mount namespaces for this process's children; None, or why not."""
    if _libc.unshare(CLONE_NEWPID | CLONE_NEWNS) == 0:
        return None
    why = os.strerror(ctypes.get_errno())
    uid, gid = os.geteuid(), os.getegid()
    if _libc.unshare(CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS) != 0:
        return f"unshare(CLONE_NEWPID): {why}; with a user namespace: {os.strerror(ctypes.get_errno())}"
    try:                                                  # the user is itself inside: files keep their owners
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError as e:
        return f"user namespace id maps: {e}"           # the namespaces exist; the mounts will say what holds
    return None


def _mount_proc() -> str | None:
    """In the init: a private mount tree and a /proc of this PID namespace; None, or why not."""
    if _libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return f"making / private: {os.strerror(ctypes.get_errno())}"
    if _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) != 0:
        return f"mounting /proc: {os.strerror(ctypes.get_errno())}"
    return None


def _init(argv: list[str], report) -> None:
    """PID 1 of the namespace: /proc, the worker, reaping; writes the worker's wait status to `report`, exits."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    why = _mount_proc()
    os.environ[ENV] = HOLDS if why is None else f"own pid namespace, not its /proc ({why}): other processes visible"
    worker = os.fork()
    if worker == 0:
        os.close(report)
        try:
            os.execvp(argv[0], argv)
        finally:
            os._exit(127)
    _let_go_of_the_pipes()
    while True:                                           # reap the orphans of the namespace until the worker ends
        pid, status = os.wait()                           # (retried on EINTR by Python itself, PEP 475)
        if pid == worker:
            os.write(report, struct.pack("<i", status))
            os._exit(0)                                   # and the kernel kills everything left in the namespace


def _let_go_of_the_pipes() -> None:
    """stdin, stdout and stderr (the evaluator's pipes) on /dev/null here: only the worker holds them, so the
    evaluator reads the end of its stdout, and a write to its stdin fails, as soon as the worker is gone."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def _end_as(status: int) -> None:
    """Ends this process as a process with wait status `status` ended: the same signal, or the same exit code."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))   # the worker's crash dumps no core here either
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)                               # a signal whose default is not to end (none expected)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("usage: pidns.py PROGRAM [ARG ...]")
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)   # dies with the evaluator, and so its init and worker
    parent = os.environ.pop(PARENT_ENV, None)
    if parent and os.getppid() != int(parent):
        os._exit(1)                                           # the evaluator died before the line above
    why = "turned off (KEVOLVE_PIDNS=off)" if os.environ.get(ENV) == "off" else _unshare()
    if why is not None:
        os.environ[ENV] = f"none: {why}"
        os.execvp(argv[0], argv)
    read, write = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(read)
        try:
            _init(argv, write)
        finally:
            os._exit(126)
    os.close(write)
    _let_go_of_the_pipes()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)                # the group's signals reach the worker, which decides
    _, init_status = os.waitpid(init, 0)
    got = os.read(read, 4)
    _end_as(struct.unpack("<i", got)[0] if len(got) == 4 else init_status)


if __name__ == "__main__":
    main(sys.argv[1:])
