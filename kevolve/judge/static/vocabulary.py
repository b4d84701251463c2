"""The vocabulary the static rules forbid: rule -> (reason, identifiers, identifier prefixes), and `forbidden(name)`,
the rule a name breaks. Shared by the token rules (`judge.static.rules`), the address rules (`judge.static.reach`,
`judge.static.literals`) and the symbol check's reasons (`judge.static.symbols`); it imports none of them.

Guarantees: `forbidden(name, qualified_std)` is a pure lookup; GCC's `__builtin_` spelling of a function is the
function itself; a `64` suffix (`open64`) is the function without it.
"""
from __future__ import annotations

import re

# rule -> (reason, forbidden identifiers, forbidden identifier prefixes)
VOCABULARY: dict[str, tuple[str, frozenset[str], tuple[str, ...]]] = {
    "thread": ("starts a thread: work outside the call escapes timing and correctness checks (use OpenMP or CUDA)",
               frozenset("thrd_create thrd_detach clone clone3 timer_create sigevent this_thread "
                         "call_once".split()),
               ("pthread_", "__gthread", "__gthrw", "__pthread")),
    # libgomp's and libomp's own entry points, which only the compiler calls: `GOMP_parallel_start` returns with the
    # team's other threads still running (issue 49). A kernel writes `#pragma omp`, and calls `omp_*` routines
    "openmp-runtime": ("calls the OpenMP runtime's internal entry points (what the compiler emits for a pragma; some "
                       "leave threads running past the call): write `#pragma omp ...` and call `omp_*` routines",
                       frozenset(), ("GOMP_", "GOACC_", "__kmpc_", "__kmp_")),
    # the names GCC gives load-time code (`_GLOBAL__sub_I_<file>`), which the symbol check lets run as the static
    # initialisation of global objects (issue 49): a function of the kernel's own may not pose as one
    "reserved-name": ("names a symbol the toolchain reserves for load-time code", frozenset(), ("_GLOBAL__",)),
    "host-callback": ("runs host code on a CUDA runtime thread, outside the call (a host function, stream "
                      "callback, graph host node or user object): do all host work inside forward itself; graphs "
                      "may hold kernel, memset, memcpy, event and empty nodes (cudaGraphAddKernelNode..., or stream "
                      "capture), not generic nodes (cudaGraphAddNode, cudaGraphNodeParams)",
                      frozenset("cudaLaunchHostFunc cudaStreamAddCallback cuLaunchHostFunc cuStreamAddCallback "
                                "cudaUserObjectCreate cuUserObjectCreate cudaGraphAddHostNode "
                                "cudaGraphHostNodeSetParams cudaGraphExecHostNodeSetParams cudaGraphHostNodeGetParams "
                                "cudaGraphAddNode cudaGraphAddNode_v2 cudaGraphNodeSetParams "
                                "cudaGraphExecNodeSetParams "
                                "cudaGraphNodeParams cudaHostNodeParams cudaHostNodeParamsV2 cudaHostFn_t "
                                "cudaGraphNodeTypeHost cuGraphAddHostNode cuGraphAddNode cuGraphAddNode_v2 "
                                "cuGraphNodeSetParams cuGraphExecNodeSetParams CUDA_HOST_NODE_PARAMS "
                                "CUDA_HOST_NODE_PARAMS_v2 CUgraphNodeParams CUhostFn".split()), ()),
    "process": ("starts or replaces a process",
                frozenset("fork vfork _Fork execl execlp execle execv execvp execvpe execve fexecve execveat system "
                          "popen pclose daemon wait waitpid wait3 wait4 waitid".split()), ("posix_spawn",)),
    "file": ("touches files: a kernel reads only its arguments (if this is your own variable, rename it)",
             frozenset("fopen freopen fdopen open openat openat2 creat unlink unlinkat mkdir mkdirat rmdir opendir "
                       "fdopendir readdir scandir readlink readlinkat truncate ftruncate stat lstat fstat fstatat "
                       "statx access faccessat eaccess euidaccess chmod fchmod fchmodat chown fchown lchown fchownat "
                       "symlink symlinkat link linkat rename renameat renameat2 read write pread pwrite readv writev "
                       "preadv pwritev close close_range lseek dup dup2 dup3 fcntl ioctl pipe pipe2 sendfile splice "
                       "tee vmsplice fsync fdatasync sync syncfs mkfifo mknod mknodat tmpfile tmpnam tempnam mkstemp "
                       "mkostemp mkdtemp inotify_init inotify_init1 fanotify_init FILE fstream ifstream ofstream "
                       "basic_fstream basic_ifstream basic_ofstream filebuf basic_filebuf filesystem __open "
                       "__open_2 __read __write __close io_uring_setup io_uring_enter "
                       # the command pipe, and a FILE's insides: `stdout->_fileno = 3` pointed printf at the
                       # worker's protocol pipe (tests/adversarial/test_cpu_round2.py; the nonce check caught it).
                       # Printing to stdout or stderr stays allowed (tests/kernels/cpu/good_printf.cpp)
                       "stdin _fileno".split()), ("_IO_",)),
    "socket": ("opens a network connection",
               frozenset("socket socketpair connect bind listen accept accept4 sendto recvfrom sendmsg recvmsg "
                         "send recv getaddrinfo gethostbyname gethostbyname2 gethostbyaddr".split()), ()),
    "environment": ("reads or changes the environment (which holds no secrets, but a kernel has no use for it)",
                    frozenset("getenv secure_getenv setenv putenv unsetenv clearenv environ __environ _environ "
                              "__libc_secure_getenv".split()), ()),
    "dynamic-loading": ("loads code or looks up symbols at run time",
                        frozenset("dlopen dlsym dlmopen dlvsym dlinfo dladdr dladdr1 dl_iterate_phdr dlerror "
                                  "__libc_dlopen_mode __libc_dlsym _dl_sym".split()), ()),
    "driver-entry-point": ("asks the CUDA runtime for driver functions: a dlsym for the whole driver API",
                           frozenset(), ("cudaGetDriverEntryPoint", "cuGetProcAddress", "cudaGetExportTable",
                                         "cuGetExportTable")),
    "syscall": ("makes a raw system call", frozenset("syscall __syscall sysenter".split()), ("__NR_", "SYS_")),
    "signal": ("handles or sends signals",
               frozenset("signal sigaction sigprocmask pthread_sigmask raise kill killpg tgkill tkill sigqueue "
                         "setjmp longjmp sigsetjmp siglongjmp _setjmp _longjmp __sigsetjmp alarm ualarm setitimer "
                         "ptrace pause sigwait sigsuspend sigaltstack timer_settime __builtin_setjmp "
                         "__builtin_longjmp".split()), ()),
    "sleep": ("waits on the clock: a kernel computes", frozenset("sleep usleep nanosleep clock_nanosleep "
                                                                 "sched_yield".split()), ()),
    "memory-mapping": ("maps or protects memory outside the harness's buffers",
                       frozenset("mmap mmap64 munmap mprotect mremap shm_open shm_unlink shmget shmat shmdt madvise "
                                 "memfd_create process_vm_readv process_vm_writev pkey_mprotect brk sbrk".split()),
                       ()),
    "process-exit": ("ends or hooks the process; return a nonzero status instead",
                     frozenset("exit _exit _Exit abort quick_exit atexit at_quick_exit __cxa_atexit "
                               "__cxa_thread_atexit on_exit terminate set_terminate".split()), ()),
    "stack-walk": ("reads its caller's frames: the worker's interpreter is off limits",
                   frozenset("__builtin_return_address __builtin_frame_address __builtin_extract_return_addr "
                             "__builtin_apply __builtin_apply_args backtrace _Unwind_Backtrace".split()), ()),
    "host-memory": ("allocates managed or pinned host memory; use the workspace the harness passes",
                    frozenset("cudaMallocManaged cudaHostAlloc cudaMallocHost cudaHostRegister "
                              "cudaHostGetDevicePointer cuMemAllocManaged cuMemHostAlloc "
                              "cuMemHostRegister".split()), ()),
    "device-reset": ("changes device-wide state that the harness owns",
                     frozenset("cudaDeviceReset cudaSetDevice cudaDeviceSetLimit cudaSetDeviceFlags cudaThreadExit "
                               "cudaDeviceSetCacheConfig cudaDeviceSetSharedMemConfig cudaDeviceSetMemPool "
                               "cudaCtxResetPersistingL2Cache cudaSetValidDevices cudaDeviceFlushGPUDirectRDMAWrites "
                               "cudaIpcOpenMemHandle cudaIpcGetMemHandle cudaIpcOpenEventHandle".split()), ()),
    "persisting-l2": ("pins data in persisting L2 (an access-policy window survives the cache flush the clock "
                      "relies on): launch without an access-policy window and leave the persisting-L2 set-aside to "
                      "the harness; cudaLaunchKernelEx with other attributes (cluster dimensions, a cooperative "
                      "launch) is fine",
                      frozenset("cudaStreamSetAttribute cudaStreamCopyAttributes cudaGraphKernelNodeSetAttribute "
                                "cudaGraphKernelNodeCopyAttributes accessPolicyWindow hitProp missProp hitRatio "
                                "cudaAccessPolicyWindow cudaLaunchAttributeAccessPolicyWindow "
                                "cudaStreamAttributeAccessPolicyWindow cudaKernelNodeAttributeAccessPolicyWindow "
                                "cudaAccessProperty cudaAccessPropertyPersisting cudaAccessPropertyStreaming "
                                "cudaAccessPropertyNormal cudaLimitPersistingL2CacheSize "
                                "cudaCtxResetPersistingL2Cache cuStreamSetAttribute cuStreamCopyAttributes "
                                "cuGraphKernelNodeSetAttribute cuGraphKernelNodeCopyAttributes CUaccessPolicyWindow "
                                "CUaccessPolicyWindow_st CUaccessProperty CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW "
                                "CU_ACCESS_PROPERTY_PERSISTING CU_LIMIT_PERSISTING_L2_CACHE_SIZE "
                                "cuCtxResetPersistingL2Cache".split()), ()),
    "l2-priority": ("keeps data in L2 ahead of other lines (an evict_last cache policy or a persisting access "
                    "property outlasts the flush before every timed call); use plain or evict-first loads",
                    frozenset("annotated_ptr access_property apply_access_property associate_access_property".split()),
                    ("createpolicy", "__nv_associate_access_property", "__nv_apply_access_property")),
    "python": ("calls into the Python interpreter", frozenset(), ("Py", "_Py")),
    # a library's own structures: how a kernel that holds one function's address finds every other (issue 37: from
    # an allowed libc function to dl_iterate_phdr to the interpreter's PyRun_SimpleString). The fields are uses
    # as members too (`MEMBERS_FORBIDDEN`). See also `judge.static.reach`: addresses used as data, the ELF magic, /proc
    "library-walk": ("reads the dynamic linker's or a library's own structures (ELF headers, program headers, "
                     "dynamic sections, symbol tables, link maps, the auxiliary vector): a kernel calls functions, "
                     "it never looks them up",
                     frozenset("link_map r_debug _r_debug r_map dl_phdr_info dlpi_addr dlpi_name dlpi_phdr dlpi_phnum "
                               "_DYNAMIC _GLOBAL_OFFSET_TABLE_ __ehdr_start __executable_start __dso_handle getauxval "
                               "__libc_stack_end program_invocation_name program_invocation_short_name __progname "
                               "__progname_full ElfW AT_BASE AT_PHDR AT_PHNUM AT_PHENT AT_ENTRY AT_SYSINFO_EHDR "
                               "AT_EXECFN AT_RANDOM ELFMAG SELFMAG ELFMAG0 ELFMAG1 ELFMAG2 ELFMAG3 ELFOSABI_SYSV "
                               "e_ident e_phoff e_shoff e_phnum e_shnum e_phentsize e_shentsize e_shstrndx p_vaddr "
                               "p_paddr p_memsz p_filesz p_offset p_type d_tag st_name st_value st_shndx st_info "
                               "sh_addr sh_offset sh_addralign sh_entsize l_addr l_ld l_next l_prev r_brk "
                               "r_ldbase".split()),
                     ("Elf32_", "Elf64_", "Elf_", "_dl_", "DT_", "PT_", "SHT_", "STT_", "STB_", "SHN_", "EI_",
                      "ELFCLASS", "ELFDATA", "R_X86_64_", "VER_DEF_", "VER_NEED_")),
}
# inline PTX that sets an L2 eviction priority: an evict_last qualifier, a cache policy made by createpolicy, or any
# L2::cache_hint (whose 64-bit policy operand can be an evict_last policy written as a constant). Measured on an
# H200 (experiments/l2_flush_probe.py): a read primed with evict_last loads is up to 20% faster than cold after the
# judge's flush (4-48 MB inputs).
L2_PRIORITY_TEXT = re.compile(r"evict_last|createpolicy|cache_hint")
# names that are forbidden only as `std::name` (`thread` is a common variable name)
STD_ONLY = {"thread": "thread", "jthread": "thread", "async": "thread", "filesystem": "file", "system": "process",
            "getenv": "environment", "exit": "process-exit", "quick_exit": "process-exit", "abort": "process-exit"}
MEMBERS_OK = {"remove"}                   # std::remove is the algorithm; the file function needs no qualifier
# members that are uses too: the fields of an access-policy window (`attr.val.accessPolicyWindow.hitProp = ...`, a
# designated `.hitRatio = 1`) exist only to pin lines in persisting L2, and a window set through them needs no
# forbidden type or call (cudaLaunchKernelEx with a numeric attribute id)
MEMBERS_FORBIDDEN = frozenset("accessPolicyWindow hitProp missProp hitRatio _fileno".split()) | frozenset(
    "e_ident e_phoff e_shoff e_phnum e_shnum e_phentsize e_shentsize e_shstrndx p_vaddr p_paddr p_memsz p_filesz "
    "p_offset p_type d_tag st_name st_value st_shndx st_info sh_addr sh_offset sh_addralign sh_entsize l_addr l_ld "
    "l_next l_prev r_brk r_ldbase dlpi_addr dlpi_name dlpi_phdr dlpi_phnum".split())   # forbidden as members too


BUILTIN = "__builtin_"


def forbidden(name: str, qualified_std: bool) -> str | None:
    """The rule `name` breaks, if any. GCC's builtin spelling of a libc function (`__builtin_fork`,
    `__builtin_execl`, `__builtin__exit`, `__builtin_abort`) is the function itself: it compiles to a call of it
    (the symbol check saw `fork` where these rules saw nothing), so it is looked up without the prefix too."""
    if name.startswith(BUILTIN) and len(name) > len(BUILTIN):
        rule = forbidden(name[len(BUILTIN):], False)
        if rule:
            return rule
    if qualified_std and name in STD_ONLY:
        return STD_ONLY[name]
    if name in MEMBERS_OK and qualified_std:
        return None
    if name == "remove" and not qualified_std:
        return "file"
    if "evict_last" in name:                  # cuda::ptx's policy names, e.g. createpolicy_fractional_L2_evict_last
        return "l2-priority"
    for rule, (_, names, prefixes) in VOCABULARY.items():
        if name in names or (prefixes and name.startswith(prefixes) and (rule != "python" or _python_name(name))):
            return rule
        if name.endswith("64") and name[:-2] in names:
            return rule
    return None


def _python_name(name: str) -> bool:
    """CPython's C API: Py_*, PyFoo*, _Py* (not `Pyramid` as a word... but `PyX` with X upper or `_`)."""
    rest = name[3:] if name.startswith("_Py") else name[2:]
    return bool(rest) and (rest[0].isupper() or rest[0] == "_")
