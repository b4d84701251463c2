"""Static rules: reject a candidate before any build, with the rule and the line that broke it.

A kernel is one source file that computes; it has no business starting threads or processes, touching files,
sockets or the environment, loading libraries, making system calls, handling signals, sleeping, running code at
load time, binding names to other symbols, or (in the C ABI) reaching into torch or the Python interpreter.

Two passes. On the raw text (comments and literals blanked): includes against an allow-list per target and
ABI, and the directives that could smuggle code past the second pass (`##`, `#include_next`, `#import`,
macro stacking, `#line` and GNU line markers, which would make user code look like a system header's).
Then on the *preprocessed* token stream (`judge.static.tokens`: the toolchain's own preprocessor with the build's
flags, then a real C++ tokenizer): every identifier of the user's file (tokens of system headers are skipped
by the line markers, but a header's macro expanded in user code is user code) is looked up in the
vocabulary below — any use, not only `name(`: taking its address, `(f)(x)`, a `(` on the next line, a
macro; members (`x.open`, `p->write`) are not uses, except the fields of an access-policy window
(`MEMBERS_FORBIDDEN`: `.accessPolicyWindow`, `.hitProp`, `.missProp`, `.hitRatio`). Token sequences catch
`std::thread` and friends, attributes however spelled (`__attribute__((__constructor__))`,
`[[gnu::constructor]]`, `alias`, `section`), asm labels and file-scope asm, `extern "C"` declarations other than the entry point (however spelled), and
`#pragma`s outside an allow-list (`#pragma weak`, `redefine_extname` bind names).

A library's own structures are vocabulary too (`library-walk`: `Elf64_*`, `link_map`, `DT_*`, `PT_*`, the
auxiliary vector, the ELF structs' field names as members), and `judge.static.reach` reads the same tokens for a
function's address used as data (cast to an integer or a byte pointer, stepped, copied, punned), data made
callable, /proc paths, the ELF magic and forbidden names in strings.

Guarantees: `check(source, target, abi)` returns a `Verdict`; `ok=False` carries every violated rule with its
reason and line number. Not guaranteed: that a kernel which passes is harmless — C reaches any function by
address arithmetic from any pointer it holds, which no rule sees whole (`judge.static.reach` says which spellings pass;
`tests/adversarial/cpu/slows_torch.cpp` passes every rule). The symbol check of the built library
(`judge.static.symbols`), the worker's confinement (`judge.worker.confine`) and the evidence of what it refused
(`judge.evaluator.evidence`) are the next layers; no layer is trusted alone.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from kevolve.judge.static import reach
from kevolve.judge.static import tokens as lex

# rule -> (reason, forbidden identifiers, forbidden identifier prefixes)
VOCABULARY: dict[str, tuple[str, frozenset[str], tuple[str, ...]]] = {
    "thread": ("starts a thread: work outside the call escapes timing and correctness checks (use OpenMP or CUDA)",
               frozenset("thrd_create thrd_detach clone clone3 timer_create sigevent this_thread "
                         "call_once".split()),
               ("pthread_", "__gthread", "__gthrw", "__pthread")),
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
                       "fdopendir readdir scandir readlink readlinkat truncate ftruncate stat lstat fstat fstatat statx "
                       "access faccessat eaccess euidaccess chmod fchmod fchmodat chown fchown lchown fchownat "
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
                    frozenset("cudaMallocManaged cudaHostAlloc cudaMallocHost cudaHostRegister cudaHostGetDevicePointer "
                              "cuMemAllocManaged cuMemHostAlloc cuMemHostRegister".split()), ()),
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
ATTRIBUTES = {"constructor": "constructor", "destructor": "constructor", "init_priority": "constructor",
              "section": "constructor", "alias": "symbol-alias", "weakref": "symbol-alias",
              "ifunc": "symbol-alias", "symver": "symbol-alias", "weak": "symbol-alias"}
PRAGMAS = re.compile(r"#\s*pragma\s+(omp\b|unroll\b|nounroll\b|once\b|message\b|pack\b|nv_diag_\w+|diag_\w+|"
                     r"GCC\s+(unroll|ivdep|diagnostic|optimize|push_options|pop_options|target)\b|clang\s+loop\b|"
                     r"GCC\s+visibility\s+(push|pop)\b)")
ASM = {"asm", "__asm__", "__asm"}
ASM_TEXT = re.compile(r"\.(pushsection|section|symver|weak|globl|init_array|fini_array|ctors|dtors)\b|"
                      r"\bsys(call|enter)\b|\bint\s+\$?0x80\b")
CODE_OPENERS = {")", "]", "const", "noexcept", "override", "final", "mutable", "else", "do", "try"}
REASONS = {"constructor": "runs code at load or unload time, outside the harness's call",
           "symbol-alias": "binds a name to another symbol (a way to reach C functions without declaring them)",
           "inline-assembly": "inline assembly in a CPU kernel",
           "extern-c": "only the entry point (forward/backward) may be extern \"C\" — declaring C functions "
                       "yourself reaches what the headers don't give",
           "preprocessor": "token pasting, #import, macro stacking or line markers can assemble a forbidden name "
                           "or hide code from these rules"}
TORCH_RULES: tuple[tuple[str, str, str], ...] = (
    ("aten-fallback", r"\b(at|torch)\s*::\s*(matmul|mm|bmm|layer_norm|native_layer_norm\w*|rms_norm|softmax|log_softmax|"
                      r"cross_entropy\w*|nll_loss\w*|linear|conv\w*|var_mean|var|mean|sum|std)\s*\(|"
                      r"\.\s*(layer_norm|softmax|log_softmax|mean|sum|var|matmul|mm)\s*\(",
     "calls a torch operator that computes the task: the kernel must compute it itself"),
)

C_INCLUDES = {
    "cstdint", "stdint.h", "cstddef", "stddef.h", "cmath", "math.h", "cfloat", "float.h", "climits", "limits.h",
    "limits", "cstring", "string.h", "algorithm", "type_traits", "utility", "array", "numeric", "cassert",
    "assert.h", "omp.h", "immintrin.h", "x86intrin.h", "arm_neon.h", "vector", "tuple", "functional",
    "initializer_list", "cstdlib", "stdlib.h", "cstdio", "stdio.h", "new", "memory", "atomic", "bit",
}
CUDA_INCLUDES = {
    "cuda_runtime.h", "cuda_runtime_api.h", "cuda.h", "cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "mma.h",
    "cuda_pipeline.h", "cuda_pipeline_primitives.h", "cooperative_groups.h", "device_launch_parameters.h",
    "vector_types.h", "math_constants.h", "cuda_awbarrier.h", "crt/math_functions.h", "sm_90_rt.h",
}
CUDA_INCLUDE_PREFIXES = ("cooperative_groups/", "cub/", "cuda/", "thrust/", "cute/", "cutlass/")
TORCH_INCLUDE_PREFIXES = ("torch/", "ATen/", "c10/", "pybind11/")


@dataclass(frozen=True)
class Violation:
    rule: str
    line: int
    text: str
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.rule}: {self.reason} (`{self.text.strip()[:80]}`)"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    violations: tuple[Violation, ...] = ()
    verifier: str = "static"
    seconds: float = 0.0

    @property
    def reason(self) -> str | None:
        return None if self.ok else "; ".join(str(v) for v in self.violations[:5])


def normalize(src: str) -> str:
    """What the compiler's first phases see: line splices joined (the line count kept, so reported line
    numbers stay right) and `%:` digraphs spelled `#` (so `%:define`, `%:%:` and `%:include` are checked)."""
    out: list[str] = []
    logical, joined = "", 0
    for line in src.split("\n"):
        if line.endswith("\\"):
            logical, joined = logical + line[:-1], joined + 1
            continue
        out.append(logical + line)
        out.extend([""] * joined)
        logical, joined = "", 0
    if joined:
        out.append(logical)
        out.extend([""] * (joined - 1))
    return "\n".join(out).replace("%:", "#")


def blank_comments_and_strings(src: str) -> str:
    """Replaces comments and string/char literals (raw strings too) with spaces, keeping lines and columns.
    A `'` inside a number is a digit separator (1'000), not a character literal."""
    out, i, n = [], 0, len(src)
    while i < n:
        c, nxt = src[i], src[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif c == "/" and nxt == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(_spaces(src[i:j])); i = j
        elif c == '"' and re.search(r"(?<![\w])(u8|[uUL])?R$", src[max(0, i - 3):i]):
            m = re.match(r'"([^ ()\\\t\n]{0,16})\(', src[i:])
            close = src.find(f"){m.group(1)}\"", i) if m else -1
            j = n if close < 0 else close + len(m.group(1)) + 2
            out.append('"' + _spaces(src[i + 1:j - 1]) + '"'); i = j
        elif c == "'" and _in_number(src, i):
            out.append(c); i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c and src[j] != "\n":
                j += 2 if src[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + (src[j - 1] if j - i >= 2 else "")); i = j
        else:
            out.append(c); i += 1
    return "".join(out)


def _spaces(text: str) -> str:
    return "".join(ch if ch == "\n" else " " for ch in text)


def _in_number(src: str, i: int) -> bool:
    """Is the `'` at i a digit separator: inside a token that starts with a digit, with a digit after?"""
    j = i
    while j > 0 and (src[j - 1].isalnum() or src[j - 1] in "_."):
        j -= 1
    return j < i and src[j].isdigit() and i + 1 < len(src) and src[i + 1].isalnum()


def check(source: str, target: str, abi: str = "c", preprocess: bool = True) -> Verdict:
    """Applies every static rule; returns all violations found. `preprocess=False` reads the raw text only
    (for tests of the token rules; the harness always preprocesses)."""
    from kevolve.judge.build import MAX_SOURCE_BYTES
    if len(source.encode()) > MAX_SOURCE_BYTES:           # not read further: a kernel is one file of code, not data
        return Verdict(False, (Violation("size", 1, "", f"the source is {len(source.encode()) >> 10} KiB, over the cap "
                                                        f"of {MAX_SOURCE_BYTES >> 10} KiB on a kernel's source"),))
    text = normalize(source)
    code = blank_comments_and_strings(text)
    raw_lines = source.split("\n")
    found: list[Violation] = []

    def add(rule: str, lineno: int, reason: str) -> None:
        v = Violation(rule, lineno, raw_lines[lineno - 1] if 0 < lineno <= len(raw_lines) else "", reason)
        if v not in found:
            found.append(v)

    clean = _directives(text, code, target, abi, add)
    if abi == "torch":
        for lineno, line in enumerate(code.split("\n"), 1):
            for name, pattern, reason in TORCH_RULES:
                if re.search(pattern, line):
                    add(name, lineno, reason)
    toks = None
    if preprocess and clean:               # a rejected include or directive: the raw tokens are enough
        try:
            toks = lex.tokenize(lex.preprocess(source, target), lex.MAIN[target])
        except lex.PreprocessError as e:
            if str(e).startswith("the preprocessed source is over"):
                add("size", 1, f"{e} (macros that expand without bound)")
            toks = None                    # the build fails the same way; still read what is there
    if toks is None:
        toks = [t for t in lex.tokenize(code) if t.kind != "directive"]
    for rule, lineno, reason in token_violations(toks, target) + reach.violations(toks):
        add(rule, lineno, reason)
    if not source.strip():
        found.append(Violation("empty", 1, "", "the source is empty"))
    return Verdict(not found, tuple(found))


def _directives(text: str, code: str, target: str, abi: str, add) -> bool:
    """Raw-text checks of preprocessor directives; returns whether none was rejected."""
    text_lines = text.split("\n")
    problems = 0
    for lineno, line in enumerate(code.split("\n"), 1):
        if "##" in line or re.search(r"^\s*#\s*(include_next|import|pragma\s+(push_macro|pop_macro))\b", line):
            add("preprocessor", lineno, REASONS["preprocessor"]); problems += 1
        if re.match(r"\s*#\s*(line\b|\d)", line):
            add("preprocessor", lineno, "#line or a line marker would make the code after it look like a system "
                                        "header's"); problems += 1
        if re.match(r"\s*#\s*include\b", line):   # a directive in code, not in a comment
            m = re.match(r"\s*#\s*include\s*([<\"])([^>\"]+)[>\"]", text_lines[lineno - 1])
            reason = (_include_problem(m.group(1), m.group(2).strip(), target, abi) if m else
                      "#include must name a header in <...> (a computed include could name any file)")
            if reason:
                add("include", lineno, reason); problems += 1
    return problems == 0


def token_violations(toks: list, target: str) -> list[tuple[str, int, str]]:
    """(rule, line, reason) for every forbidden use in the user's tokens."""
    out: list[tuple[str, int, str]] = []
    stack: list[str] = []                          # brace kinds: "code" (a function body) or "decl"
    prev = None
    n = len(toks)
    for i, t in enumerate(toks):
        if not t.user:
            prev = None
            continue
        if t.kind == "directive":
            if re.match(r"#\s*pragma\b", t.text) and not PRAGMAS.match(t.text):
                out.append(("symbol-alias" if re.search(r"\b(weak|redefine_extname)\b", t.text) else "preprocessor",
                            t.line, f"`{t.text[:60]}` is not an allowed pragma (omp, unroll, GCC unroll/ivdep/"
                                    "diagnostic/optimize)"))
            continue
        if t.kind == "punct" and t.text == "{":
            stack.append("code" if (stack and stack[-1] == "code") or (prev is not None and prev.text in CODE_OPENERS)
                         else "decl")
        elif t.kind == "punct" and t.text == "}" and stack:
            stack.pop()
        elif t.kind == "ident":
            member = prev is not None and prev.text in (".", "->", ".*", "->*")
            qualified_std = (prev is not None and prev.text == "::" and i >= 2 and toks[i - 2].text == "std")
            if t.text in ASM:
                out.extend(_asm_problems(toks, i, prev, stack, target))
            elif t.text in ("__attribute__", "__attribute", "__declspec"):
                out.extend(_attribute_problems(toks, i + 1, t.line))
            elif t.text == "extern" and i + 1 < n and toks[i + 1].kind == "string":
                out.extend(_extern_c_problems(toks, i + 1))
            elif prev is not None and prev.text == "::" and t.text in ("exec", "eval", "eval_file", "import"):
                out.append(("python", t.line, VOCABULARY["python"][0]))
            elif not member or t.text in MEMBERS_FORBIDDEN:
                rule = _forbidden(t.text, qualified_std)
                if rule:
                    out.append((rule, t.line, VOCABULARY[rule][0]))
        elif t.kind == "punct" and t.text == "[" and i + 1 < n and toks[i + 1].text == "[":
            out.extend(_attribute_problems(toks, i, t.line))
        prev = t
    return out


BUILTIN = "__builtin_"


def _forbidden(name: str, qualified_std: bool) -> str | None:
    """The rule `name` breaks, if any. GCC's builtin spelling of a libc function (`__builtin_fork`,
    `__builtin_execl`, `__builtin__exit`, `__builtin_abort`) is the function itself: it compiles to a call of it
    (the symbol check saw `fork` where these rules saw nothing), so it is looked up without the prefix too."""
    if name.startswith(BUILTIN) and len(name) > len(BUILTIN):
        rule = _forbidden(name[len(BUILTIN):], False)
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


def _group(toks: list, i: int) -> tuple[list, int]:
    """The tokens of the balanced bracket group that opens at toks[i], and the index after it."""
    opener = toks[i].text
    closer = {"(": ")", "[": "]", "{": "}"}.get(opener)
    if closer is None:
        return [], i
    depth, j = 0, i
    while j < len(toks):
        if toks[j].text == opener:
            depth += 1
        elif toks[j].text == closer:
            depth -= 1
            if depth == 0:
                return toks[i + 1:j], j + 1
        j += 1
    return toks[i + 1:], j


def _attribute_problems(toks: list, i: int, line: int) -> list[tuple[str, int, str]]:
    inner, _ = _group(toks, i)
    out = []
    for t in inner:
        name = t.text.strip("_") if t.kind == "ident" else None
        if name in ATTRIBUTES:
            rule = ATTRIBUTES[name]
            out.append((rule, t.line, f"attribute `{t.text}`: {REASONS[rule]}"))
    return out


def _asm_problems(toks: list, i: int, prev, stack: list[str], target: str) -> list[tuple[str, int, str]]:
    t = toks[i]
    if target == "cpu":
        return [("inline-assembly", t.line, REASONS["inline-assembly"])]
    out = []
    statement = bool(stack) and stack[-1] == "code" and (prev is None or prev.text in (";", "{", "}", ":", "else", "do")
                                                          or _after_statement_header(toks, i - 1))
    if not statement:
        out.append(("symbol-alias", t.line, "asm outside a statement (an asm label after a declaration, or file-"
                                            "scope asm) binds names to symbols or emits sections"))
    j = i + 1
    while j < len(toks) and toks[j].kind == "ident":          # volatile, __volatile__, goto, inline
        j += 1
    body, _ = _group(toks, j) if j < len(toks) else ([], j)
    text = " ".join(b.value() for b in body if b.kind == "string")
    if ASM_TEXT.search(text):
        out.append(("syscall", t.line, "inline assembly that makes system calls or emits sections/symbols"))
    joined = "".join(b.value() for b in body if b.kind == "string")     # adjacent literals are one string to C
    if L2_PRIORITY_TEXT.search(joined):
        out.append(("l2-priority", t.line, VOCABULARY["l2-priority"][0]))
    return out


def _after_statement_header(toks: list, j: int) -> bool:
    """Whether toks[j] is the `)` that closes an `if`, `while`, `for` or `switch` header: asm right after it is
    the statement that header governs (`while (!done) asm volatile(...);`), not an asm label of a declarator
    (`int f(void) asm("name");`, whose `(` follows a name)."""
    if j < 0 or toks[j].text != ")":
        return False
    depth = 0
    while j >= 0:
        if toks[j].text == ")":
            depth += 1
        elif toks[j].text == "(":
            depth -= 1
            if depth == 0:
                return j > 0 and toks[j - 1].text in ("if", "while", "for", "switch")
        j -= 1
    return False


def _extern_c_problems(toks: list, i: int) -> list[tuple[str, int, str]]:
    """`extern "C"` items other than the entry point: functions, variables, blocks."""
    lit = toks[i]
    if lit.value() != "C":
        return []
    j = i + 1
    if j < len(toks) and toks[j].text == "{":
        body, _ = _group(toks, j)
        items, start, depth = [], 0, 0
        for k, b in enumerate(body):                  # split the block into top-level items
            depth += b.text in "({[" and len(b.text) == 1
            depth -= b.text in ")}]" and len(b.text) == 1
            if depth == 0 and (b.text == ";" or (b.text == "}" and b.kind == "punct")):
                items.append(body[start:k + 1]); start = k + 1
        items.append(body[start:])
        return [p for item in items if item for p in _c_item(item, lit.line)]
    return _c_item(toks[j:], lit.line)


def _c_item(toks: list, line: int) -> list[tuple[str, int, str]]:
    """The one declaration `toks` starts with must be forward/backward, a function."""
    depth, name = 0, None
    for k, t in enumerate(toks):
        if t.text in (";", "=", "{") and depth == 0:
            break
        if t.text == "(":
            if depth == 0 and name is None:
                inner, after = _group(toks, k)          # `int (system)(...)`, `int (*fp)(...)`
                idents = [x.text for x in inner if x.kind == "ident"]
                if after < len(toks) and toks[after].text == "(" and idents and all(x.kind != "string" for x in inner):
                    name = idents[-1]
                    break
                prev = toks[k - 1] if k else None
                name = prev.text if prev is not None and prev.kind == "ident" else None
                break
            depth += 1
        elif t.text == ")":
            depth -= 1
        elif t.kind == "ident":
            last = t.text
            if k + 1 < len(toks) and toks[k + 1].text in (";", "=", "[", ","):
                name = last
                break
    if name in ("forward", "backward"):
        return []
    return [("extern-c", toks[0].line if toks else line,
             f'extern "C" declares `{name or "{ ... }"}`: ' + REASONS["extern-c"])]


def _include_problem(kind: str, header: str, target: str, abi: str) -> str | None:
    if kind == '"':
        return f'#include "{header}": a candidate is one self-contained file'
    if header.startswith(TORCH_INCLUDE_PREFIXES):
        return None if abi == "torch" else f"<{header}>: torch headers are not allowed in the C ABI"
    if header in C_INCLUDES:
        return None
    if target == "cuda" and (header in CUDA_INCLUDES or header.startswith(CUDA_INCLUDE_PREFIXES)):
        return None
    return f"<{header}> is not on the allowed list for target={target} (see kevolve.judge.static.rules)"
