"""The worker's two seccomp programs, and the names of the system calls they refuse (x86-64).

Both sides of the pipe import this (no side effects on import): the worker installs the programs
(`judge.worker.confine`), the evaluator names what a notification says was refused (`judge.evaluator.evidence`).

- `first(pid)`, installed when the worker confines itself (before torch.compile's compilers run in it): no socket
  but AF_UNIX, no connect, ptrace, process_vm_*, pidfd_*, kcmp, io_uring, bpf, perf, userfaultfd, keyrings,
  modules, mounts, namespaces (unshare, setns, clone with a namespace flag), setsid / setpgid, timer_create, signals
  only to itself or its own group. Each refusal is `SECCOMP_RET_USER_NOTIF` with no listener: the Linux kernel
  answers ENOSYS, and the call never runs. clone3 is answered ENOSYS outright (glibc then uses clone, whose flags
  a filter can read).
- `seal(pid, threads, pinned, paths)`, installed once the baselines are compiled and before the kernel's library
  loads: everything `first` refuses, and exec, fork, vfork, clone without CLONE_THREAD (no new process by any
  spelling); `threads=False` (the CUDA target, where a kernel needs no host thread) refuses clone with
  CLONE_THREAD too; `pinned` refuses sched_setaffinity; no filter of its own (seccomp, prctl(PR_SET_SECCOMP): a
  filter of its own with a listener could answer its own calls "continue" once the evaluator's listener is gone,
  which the Linux kernel otherwise forbids while it exists); `paths` notifies the calls that name a file (open, openat,
  openat2, creat, truncate, mkdir, unlink, rename, link, symlink and their *at forms) for the evaluator to look
  at. Every refusal here is also `SECCOMP_RET_USER_NOTIF`: with filters stacked, the newest that returns the
  action of highest precedence decides, so the seal's listener — held by the evaluator, `judge.evaluator.evidence` — is
  told of every refused call after the kernel loads, and answers it (EPERM; a file call it finds allowed goes on,
  Landlock deciding). With no listener (or once it is closed) the kernel answers ENOSYS: a refusal never depends
  on the listener being there.
- A system call of another architecture (int 0x80) kills the process (`SECCOMP_RET_KILL_PROCESS`: SIGSYS, which
  no handler can catch); x32's numbers are refused like the rest.
Not here: what the listener does with a notification (`judge.evaluator.evidence`), and how the programs are installed
(`judge.worker.confine`).
"""
from __future__ import annotations

import errno

AUDIT_ARCH_X86_64 = 0xC000003E
DENY = {  # x86-64 numbers: refused from the confinement on
    "connect": 42, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
    "pidfd_open": 434, "pidfd_send_signal": 424, "kcmp": 312, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "mount": 165,
    "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308, "keyctl": 250,
    "add_key": 248, "request_key": 249, "setsid": 112, "setpgid": 109, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "reboot": 169, "swapon": 167,
    "swapoff": 168, "acct": 163, "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305,
    "adjtimex": 159, "sethostname": 170, "setdomainname": 171, "ioperm": 173, "iopl": 172,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "fanotify_init": 300, "timer_create": 222, "tkill": 200,
    "mknod": 133, "mknodat": 259, "quotactl": 179, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "mount_setattr": 442,
}
PROCESS = {"fork": 57, "vfork": 58, "execve": 59, "execveat": 322}     # refused by the seal
SOCKET, CLONE, CLONE3, KILL, TGKILL, SIGQUEUE, TGSIGQUEUE = 41, 56, 435, 62, 234, 129, 297
SCHED_SETAFFINITY = 203
SECCOMP, PRCTL, PR_SET_SECCOMP = 317, 157, 22
# the calls that name a file, notified after the seal for the evaluator to look at (`evidence.path_problem`)
PATHS = {"open": 2, "openat": 257, "openat2": 437, "creat": 85, "truncate": 76, "mkdir": 83, "mkdirat": 258,
         "rmdir": 84, "unlink": 87, "unlinkat": 263, "rename": 82, "renameat": 264, "renameat2": 316, "link": 86,
         "linkat": 265, "symlink": 88, "symlinkat": 266}
NAMES = {nr: name for table in (DENY, PROCESS, PATHS) for name, nr in table.items()}
NAMES.update({SOCKET: "socket", CLONE: "clone", CLONE3: "clone3", KILL: "kill", TGKILL: "tgkill",
              SIGQUEUE: "rt_sigqueueinfo", TGSIGQUEUE: "rt_tgsigqueueinfo", SCHED_SETAFFINITY: "sched_setaffinity",
              SECCOMP: "seccomp", PRCTL: "prctl"})
CLONE_THREAD = 0x00010000
CLONE_NAMESPACES = 0x00020000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x02000000
X32 = 0x40000000

RET_KILL_PROCESS, RET_ERRNO, RET_NOTIFY, RET_ALLOW = 0x80000000, 0x00050000, 0x7FC00000, 0x7FFF0000
LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
Program = list[tuple[int, int, int, int]]


def first(pid: int) -> Program:
    """The confinement's filter (see the module's docstring). Arguments are compared on their low 32 bits (the
    kernel reads pid_t and int flags from those)."""
    p = _prologue()
    p += _refuse(sorted(DENY.values()))
    p += [(JEQ_K, 0, 1, CLONE3), (RET_K, 0, 0, RET_ERRNO | errno.ENOSYS)]
    p += _socket() + _clone(threads=True, processes=True) + _signals(pid)
    p.append((RET_K, 0, 0, RET_ALLOW))
    return p


def seal(pid: int, threads: bool = True, pinned: bool = False, paths: bool = False) -> Program:
    """The seal's filter (see the module's docstring): `first`'s refusals again (so that its listener, not the
    first filter's ENOSYS, answers them), and no new process; no new thread unless `threads`."""
    p = _prologue()
    p += _refuse(sorted(DENY.values()) + sorted(PROCESS.values()) + [SECCOMP]
                 + ([SCHED_SETAFFINITY] if pinned else []))
    p += [(JEQ_K, 0, 1, CLONE3), (RET_K, 0, 0, RET_ERRNO | errno.ENOSYS)]
    p += _socket() + _clone(threads=threads, processes=False) + _signals(pid)
    p += [(JEQ_K, 0, 4, PRCTL), (LD_W_ABS, 0, 0, 16), (JEQ_K, 0, 1, PR_SET_SECCOMP), (RET_K, 0, 0, RET_NOTIFY),
          (RET_K, 0, 0, RET_ALLOW)]
    if paths:
        p += _refuse(sorted(PATHS.values()))
    p.append((RET_K, 0, 0, RET_ALLOW))
    return p


def _prologue() -> Program:
    """A system call of another architecture kills the process; x32's numbers are refused."""
    return [(LD_W_ABS, 0, 0, 4), (JEQ_K, 1, 0, AUDIT_ARCH_X86_64), (RET_K, 0, 0, RET_KILL_PROCESS),
            (LD_W_ABS, 0, 0, 0), (JGE_K, 0, 1, X32), (RET_K, 0, 0, RET_NOTIFY)]


def _refuse(numbers: list[int]) -> Program:
    out: Program = []
    for nr in numbers:                      # the accumulator holds the number throughout
        out += [(JEQ_K, 0, 1, nr), (RET_K, 0, 0, RET_NOTIFY)]
    return out


def _socket() -> Program:
    """socket(domain): AF_UNIX only."""
    return [(JEQ_K, 0, 4, SOCKET), (LD_W_ABS, 0, 0, 16), (JEQ_K, 0, 1, 1), (RET_K, 0, 0, RET_ALLOW),
            (RET_K, 0, 0, RET_NOTIFY)]


def _clone(threads: bool, processes: bool) -> Program:
    """clone(flags): never a new namespace; a new process only if `processes`, a new thread only if `threads`."""
    thread = RET_ALLOW if threads else RET_NOTIFY
    process = RET_ALLOW if processes else RET_NOTIFY
    return [(JEQ_K, 0, 6, CLONE), (LD_W_ABS, 0, 0, 16), (JSET_K, 0, 1, CLONE_NAMESPACES), (RET_K, 0, 0, RET_NOTIFY),
            (JSET_K, 0, 1, CLONE_THREAD), (RET_K, 0, 0, thread), (RET_K, 0, 0, process)]


def _signals(pid: int) -> Program:
    """kill(pid): itself, its group (0 or -pid); tgkill / sigqueue: its own thread group."""
    own = [pid, 0, (-pid) & 0xFFFFFFFF]
    p = [(JEQ_K, 0, 6, KILL), (LD_W_ABS, 0, 0, 16), (JEQ_K, 3, 0, own[0]), (JEQ_K, 2, 0, own[1]),
         (JEQ_K, 1, 0, own[2]), (RET_K, 0, 0, RET_NOTIFY), (RET_K, 0, 0, RET_ALLOW)]
    for nr in (TGKILL, SIGQUEUE, TGSIGQUEUE):          # each branch returns: the accumulator still holds the number
        p += [(JEQ_K, 0, 4, nr), (LD_W_ABS, 0, 0, 16), (JEQ_K, 1, 0, pid), (RET_K, 0, 0, RET_NOTIFY),
              (RET_K, 0, 0, RET_ALLOW)]
    return p
