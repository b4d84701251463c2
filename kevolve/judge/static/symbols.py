"""The built library's imports and load-time code, checked before any worker loads it.

The static rules read spelling; this reads what the linker made of it. `check(lib, target)` returns `None`
or a reason (`symbol: ...`) when the library
- imports a dynamic symbol outside the target's allow-list (libm, memory and printf-style output, OpenMP's
  runtime by name (`GOMP_OK`: no entry that returns with a thread still running, issue 49) and `omp_*`, the
  C++ runtime pieces templates need, and on cuda the CUDA runtime calls a kernel needs: launches
  (`cudaLaunchKernelExC` included: thread-block clusters), async memset/memcpy, errors, function and device
  attributes, occupancy, streams, events, stream capture and the graph calls named in
  `CUDA_GRAPH`). `Py*`, `pthread_*`, `fork`/`exec*`/`system`, files, sockets, `dlopen`/`dlsym`, sleeps,
  signals, timers, `cudaGetDriverEntryPoint*`, host callbacks and host or generic graph nodes
  (`cudaGraphAddNode`, `cudaGraph(Exec)NodeSetParams`), stream and graph-kernel-node attributes (the
  access-policy window), the persisting-L2 limit are rejected whatever the source spelled (a macro, an asm
  label, a header's inline function). An access-policy window passed as a launch attribute to
  `cudaLaunchKernelExC` imports nothing new: the static rules (`persisting-l2`) and the worker's reset of
  the persisting-L2 set-aside around each timed round (`judge.worker.l2`) are the layers for it;
- runs code at load or unload: an `.init_array`/`.fini_array`/`.ctors`/`.dtors`/`.preinit_array` entry other
  than the toolchain's own (`frame_dummy`, `__do_global_dtors_aux`, nvcc's `__sti____cudaRegisterAll`, GCC's static
  initialisation of global objects `_GLOBAL__sub_I_*`: `INIT_OK`) — `__attribute__((constructor))` however spelled,
  a prioritised initialiser, a pointer placed in `.init_array`;
- contains a raw `syscall`/`sysenter`/`int 0x80` instruction (x86-64 host code: CUDA host-side inline asm);
- takes an imported function's address as data (`address_taken`): a relocation against it other than its PLT
  slot, which is what `&printf`, `(uintptr_t)printf` or a stored function pointer compile to however they are
  spelled — the first step of a walk from one allowed function to every other (issue 37). Every seed and best
  kernel of every task makes none but the toolchain's own (`DATA_OK`).

`build` links the CUDA runtime shared (`-cudart shared`), so each runtime call is an undefined `cuda*`/`__cuda*`
symbol here (why, and the evidence for the cuda list: docs/decisions/judge.md, "The symbol allow-list").
Not guaranteed: what the code does with addresses it computes from data it holds — a PLT slot of its own
library after a call, `stdout` (libc's data), its own static arrays; the worker's confinement (`judge.worker.confine`)
and the evidence of what it refuses (`judge.evaluator.evidence`) are the layers for that.
The torch ABI (an importer format that links libtorch and Python by construction) is not checked here.
"""
from __future__ import annotations

import re
import struct
import subprocess
from functools import lru_cache
from pathlib import Path

MEMORY = set("""memcpy memmove memset memcmp memchr malloc calloc realloc free aligned_alloc posix_memalign
    __memcpy_chk __memmove_chk __memset_chk strlen strnlen strcmp strncmp strcpy strncpy strchr strrchr strstr
    __strcpy_chk __strncpy_chk abs labs llabs div ldiv qsort bsearch strtol strtoul strtoll strtoull strtod
    strtof atoi atol atof rand srand rand_r __isoc23_strtol __isoc23_strtoul __isoc23_strtoll __isoc23_strtoull
    printf puts putchar fprintf fputs fputc fwrite fflush stdout stderr snprintf sprintf vprintf vfprintf
    vsnprintf __printf_chk __fprintf_chk __sprintf_chk __snprintf_chk __vfprintf_chk __vsnprintf_chk
    __stack_chk_fail __assert_fail __errno_location __tls_get_addr __cxa_finalize __gmon_start__
    _ITM_deregisterTMCloneTable _ITM_registerTMCloneTable __cxa_atexit""".split())
CXX = set("""__cxa_guard_acquire __cxa_guard_release __cxa_guard_abort __cxa_begin_catch __cxa_end_catch
    __cxa_rethrow __cxa_allocate_exception __cxa_free_exception __cxa_throw __cxa_pure_virtual
    __cxa_deleted_virtual __cxa_call_terminate __gxx_personality_v0 _Unwind_Resume _ZSt9terminatev""".split())
CXX_PREFIXES = ("_Znw", "_Zna", "_Zdl", "_Zda", "_ZTVN10__cxxabiv1", "_ZTISt", "_ZTSSt", "_ZNSt7__cxx1112basic_string",
                "__atomic_", "_ZGV")
# OpenMP's runtime, by name: the entries GCC emits for the constructs a kernel writes, each of which has joined every
# thread it started when it returns — `GOMP_parallel` and its combined loop, sections and reduction forms, worksharing
# inside a region, barriers, critical sections, atomics, tasks (which the region's end waits for), the allocator.
# Not here (so rejected): the legacy split entries `GOMP_parallel_start` / `GOMP_parallel_loop_*_start` /
# `GOMP_parallel_sections_start` / `GOMP_parallel_end`, which return with the team's other threads still running
# the region's body (issue 49: a helper thread that outlived the call, declared through a second `extern "C"`
# declarator), offloading and its plugins (`GOMP_target*`, `GOMP_offload_*`, `GOMP_PLUGIN_*`, `omp_target_*`), host
# teams (`GOMP_teams*`) and OpenACC (`GOACC_*`, `acc_*`), none of which a kernel on this host needs.
GOMP_OK = re.compile(
    r"^GOMP_(parallel|parallel_reductions|parallel_sections|"
    r"parallel_loop_(static|dynamic|guided|runtime|nonmonotonic_(dynamic|guided|runtime)|maybe_nonmonotonic_runtime)|"
    r"loop(_ull)?_(start|end|end_nowait|end_cancel|ordered_start|doacross_start|"
    r"((ordered_|doacross_|nonmonotonic_|maybe_nonmonotonic_)?(static|dynamic|guided|runtime)_(start|next)))|"
    r"sections2?_start|sections_(next|end|end_nowait|end_cancel)|single_(start|copy_start|copy_end)|scope_start|"
    r"barrier|barrier_cancel|critical(_name)?_(start|end)|atomic_(start|end)|ordered_(start|end)|"
    r"doacross(_ull)?_(post|wait)|task|taskwait|taskwait_depend|taskyield|taskgroup_(start|end)|"
    r"taskgroup_reduction_(register|unregister)|task_reduction_remap|workshare_task_reduction_unregister|"
    r"taskloop|taskloop_ull|cancel|cancellation_point|alloc|free|error|warning)$")
OMP_FORBIDDEN = ("omp_target_",)
CUDA = set("""__cudaRegisterFatBinary __cudaRegisterFatBinaryEnd __cudaUnregisterFatBinary __cudaRegisterFunction
    __cudaRegisterVar __cudaRegisterManagedVar __cudaRegisterTexture __cudaRegisterSurface __cudaRegisterLinkedBinary
    __cudaInitModule __cudaPushCallConfiguration __cudaPopCallConfiguration __cudaLaunchKernel __cudaGetKernel
    __cudaLaunchKernel_ptsz exit
    cudaLaunchKernel cudaLaunchKernel_ptsz cudaLaunchKernelExC cudaLaunchKernelExC_ptsz cudaLaunchCooperativeKernel
    cudaMemsetAsync cudaMemset2DAsync cudaMemset3DAsync cudaMemcpyAsync cudaMemcpy2DAsync cudaMemcpyToSymbolAsync
    cudaMemcpyFromSymbolAsync cudaMemsetAsync_ptsz cudaMemcpyAsync_ptsz cudaGetSymbolAddress cudaGetSymbolSize
    cudaGetLastError cudaPeekAtLastError cudaGetErrorString cudaGetErrorName cudaFuncSetAttribute
    cudaFuncGetAttributes cudaFuncSetCacheConfig cudaFuncGetName cudaDeviceGetAttribute cudaGetDevice
    cudaGetDeviceCount cudaGetDeviceProperties cudaGetDeviceProperties_v2 cudaStreamSynchronize
    cudaDeviceSynchronize cudaStreamWaitEvent cudaStreamCreate cudaStreamCreateWithFlags
    cudaStreamCreateWithPriority cudaStreamDestroy cudaStreamQuery cudaStreamGetPriority cudaStreamGetFlags
    cudaDeviceGetStreamPriorityRange cudaStreamBeginCapture cudaStreamEndCapture cudaStreamIsCapturing
    cudaStreamGetCaptureInfo cudaMalloc cudaFree cudaMallocAsync cudaFreeAsync cudaMemGetInfo
    cudaPointerGetAttributes cudaDriverGetVersion cudaRuntimeGetVersion cudaChooseDevice
    cudaDeviceGetLimit cudaFuncGetParamInfo""".split())
# CUDA graphs, by name: what stream capture and a hand-built graph of kernel/memset/memcpy/event/empty nodes need.
# Not here (so rejected): generic nodes (`cudaGraphAddNode`, `cudaGraph(Exec)NodeSetParams`: a `cudaGraphNodeParams`
# of type host runs a host function on a runtime thread), host nodes, kernel-node attributes (`*SetAttribute`,
# `*CopyAttributes`: an access-policy window), whole-graph updates (`cudaGraphExecUpdate`), child graphs, clones,
# conditional and allocation nodes, user objects, `cudaGraphDebugDotPrint` (writes a file) and `cudaGraphics*`
# (graphics interop), none of which a kernel needs.
CUDA_GRAPH = set("""cudaStreamBeginCapture_ptsz cudaStreamEndCapture_ptsz cudaStreamIsCapturing_ptsz
    cudaStreamGetCaptureInfo_ptsz cudaGraphCreate cudaGraphDestroy cudaGraphInstantiate cudaGraphInstantiateWithFlags
    cudaGraphInstantiateWithParams cudaGraphInstantiateWithParams_ptsz cudaGraphUpload cudaGraphUpload_ptsz
    cudaGraphLaunch cudaGraphLaunch_ptsz cudaGraphExecDestroy cudaGraphExecGetFlags cudaGraphGetNodes
    cudaGraphGetRootNodes cudaGraphGetEdges cudaGraphNodeGetType cudaGraphNodeGetDependencies
    cudaGraphNodeGetDependentNodes cudaGraphAddDependencies cudaGraphRemoveDependencies cudaGraphDestroyNode
    cudaGraphAddEmptyNode cudaGraphAddKernelNode cudaGraphKernelNodeGetParams cudaGraphKernelNodeSetParams
    cudaGraphExecKernelNodeSetParams cudaGraphAddMemsetNode cudaGraphMemsetNodeGetParams cudaGraphMemsetNodeSetParams
    cudaGraphExecMemsetNodeSetParams cudaGraphAddMemcpyNode cudaGraphAddMemcpyNode1D cudaGraphMemcpyNodeGetParams
    cudaGraphMemcpyNodeSetParams cudaGraphMemcpyNodeSetParams1D cudaGraphExecMemcpyNodeSetParams
    cudaGraphExecMemcpyNodeSetParams1D cudaGraphAddEventRecordNode cudaGraphAddEventWaitNode""".split())
CUDA |= CUDA_GRAPH
CUDA_PREFIXES = ("cudaOccupancy", "cudaEvent")
# rejected on cuda even if a future entry of CUDA or CUDA_PREFIXES would admit them
FORBIDDEN_INSIDE = re.compile(r"HostNode|HostFunc|Callback|EntryPoint|ExportTable|Ipc|Managed|Persisting|UserObject|"
                              r"GraphAddNode|Graph(Exec)?NodeSetParams|NodeSetAttribute|NodeCopyAttributes|"
                              r"Stream(Set|Copy)Attribute|AccessPolicy|Graphics|DebugDotPrint")
# load-time code the toolchain writes: crtstuff's, nvcc's registration, and GCC's static initialisation of a file's
# global objects (`_GLOBAL__sub_I_<file>`: constructors of namespace-scope objects, their destructors registered with
# __cxa_atexit) — since issue 49, by decision: a library loads after the seal, under the confinement and the evidence a
# call has, and what a static initialiser does the first call could do as well, so the rule only cost honest kernels
# (a grow-only `static std::vector` scratch buffer). Not the prioritised form (`_GLOBAL__sub_I.00101_...`:
# init_priority), nor an entry of any other name (a constructor attribute, a pointer placed in .init_array), which the
# static rules reject too (`constructor`, `reserved-name`).
INIT_OK = re.compile(r"^(frame_dummy|__do_global_dtors_aux|_ZL\d+__sti____cudaRegisterAllv|"
                     r"__sti____cudaRegisterAll\w*|_GLOBAL__sub_I_(?!\d{5}_)[\w.$-]+)$")
INIT_SECTIONS = (".init_array", ".fini_array", ".ctors", ".dtors", ".preinit_array")
SYSCALL_INSN = re.compile(r"\t(syscall|sysenter)\b|\tint\s+\$0x80\b")


def check(lib: str, target: str) -> str | None:
    """None if the library passes, else `symbol: <what> — <why>` naming the first offenders (or `library:` for a
    library over the size cap, `build.library_problem`, however it got here)."""
    from kevolve.judge.build import library_problem
    too_large = library_problem(lib)
    if too_large:
        return f"library: {too_large}"
    bad = [f"`{s}` ({_why(s)})" for s in undefined(lib) if not allowed(s, target)]
    if bad:
        return "symbol: the library imports " + ", ".join(bad[:6]) + (" ..." if len(bad) > 6 else "")
    taken = address_taken(lib)
    if taken:
        return ("symbol: the library takes the address of " + ", ".join(f"`{n}`" for n in taken[:6]) + " as data "
                "(a data relocation, not a call): a function's address used as data reaches every other function of "
                "its library (`judge.static.reach`) — call it instead")
    extra = [e for e in init_entries(lib) if not INIT_OK.match(e)]
    if extra:
        return ("symbol: the library runs code at load or unload time (" + ", ".join(extra[:4]) + "): constructor "
                "attributes, prioritised initialisers and pointers placed in init sections are not allowed (global "
                "objects with constructors are)")
    insn = raw_syscalls(lib)
    if insn:
        return f"symbol: the library contains a raw `{insn}` instruction (a system call the rules cannot see)"
    return None


def allowed(name: str, target: str) -> bool:
    if name in MEMORY or name in CXX or name.startswith(CXX_PREFIXES) or name in libm():
        return True
    if GOMP_OK.match(name) or (name.startswith("omp_") and not name.startswith(OMP_FORBIDDEN)):
        return True
    if re.match(r"^__(pow|div|mul|udiv|umod|mod|extend|trunc|fix|float|neg|cmp|ucmp|clz|ctz|popcount|bswap|add|"
                r"sub)\w*\d$", name):                        # libgcc arithmetic helpers (__divti3, __extendhfsf2)
        return True
    if re.match(r"^_ZSt\d+__throw_\w+$", name):                # std::__throw_length_error and friends
        return True
    if target == "cuda":
        if FORBIDDEN_INSIDE.search(name):
            return False
        return name in CUDA or name.startswith(CUDA_PREFIXES)
    return False


def _why(name: str) -> str:
    from kevolve.judge.static.vocabulary import VOCABULARY, forbidden
    rule = forbidden(name, False) or forbidden(re.sub(r"^__|_chk$|64$", "", name), False)
    if rule:
        return f"{rule}: {VOCABULARY[rule][0]}"
    if name.startswith("cu") and not name.startswith("cuda"):
        return "a CUDA driver API function: kernels use the runtime calls on the allow-list"
    return "not on the allow-list of symbols a kernel needs"


@lru_cache(maxsize=1)
def libm() -> frozenset[str]:
    """Every function the system's libm exports (found through the compiler, so it is the one linked)."""
    try:
        path = subprocess.run(["g++", "-print-file-name=libm.so.6"], capture_output=True, text=True,
                              timeout=30).stdout.strip()
        out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(line.split()[-1].split("@")[0] for line in out.splitlines()
                     if line.split()[1:2] in (["T"], ["W"], ["i"]))


def undefined(lib: str) -> list[str]:
    """The library's undefined dynamic symbols, without version suffixes."""
    out = subprocess.run(["nm", "-D", "--undefined-only", lib], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"nm failed on {lib}: {out.stderr.strip()}")
    return sorted({line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.strip()})


def raw_syscalls(lib: str) -> str | None:
    """The first system-call instruction in the library's code, if any (x86-64 objdump)."""
    try:
        out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True, text=True,
                             timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = SYSCALL_INSN.search(out)
    return m.group(0).strip() if m else None


# imported functions the toolchain itself references as data: C++ exception tables (DW.ref.__gxx_personality_v0),
# crtstuff's weak references
DATA_OK = frozenset("__gxx_personality_v0 __cxa_finalize __gmon_start__ _ITM_registerTMCloneTable "
                    "_ITM_deregisterTMCloneTable".split())
JUMP_SLOT, OBJECT, TLS = 7, 1, 6


def address_taken(lib: str) -> list[str]:
    """Imported functions the library uses as data: each relocation against an undefined symbol that is not a
    PLT slot (a call goes through `JUMP_SLOT`; `&printf`, `(uintptr_t)printf`, a function pointer stored or passed
    make a `GLOB_DAT` or absolute relocation, however the source spelled it). Data objects (`stdout`) are not
    functions; the toolchain's own references (`DATA_OK`) are allowed."""
    data, sections = _elf(lib)
    out: list[str] = []
    for sec in sections:
        if sec[1] != 4 or not sec[6] or sec[6] >= len(sections):               # SHT_RELA, with its symbol table
            continue
        symtab = sections[sec[6]]
        strtab = sections[symtab[6]] if symtab[6] < len(sections) else None
        if strtab is None or symtab[1] not in (2, 11):                      # SHT_SYMTAB, SHT_DYNSYM
            continue
        for k in range(sec[5] // 24):
            _, info, _ = struct.unpack_from("<QQq", data, sec[4] + k * 24)
            kind, index = info & 0xFFFFFFFF, info >> 32
            if not index or kind == JUMP_SLOT:
                continue
            st_name, st_info, _, shndx, _, _ = struct.unpack_from("<IBBHQQ", data, symtab[4] + index * 24)
            if shndx != 0 or (st_info & 0xF) in (OBJECT, TLS):                  # defined here, or data
                continue
            start = strtab[4] + st_name
            name = data[start:data.index(b"\0", start)].decode(errors="replace")
            if name not in DATA_OK and name not in out:
                out.append(name)
    return out


def _elf(lib: str) -> tuple[bytes, list[tuple]]:
    data = Path(lib).read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise RuntimeError(f"{lib}: not a little-endian 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, _ = struct.unpack_from("<HHH", data, 0x3A)
    return data, [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]


def init_entries(lib: str) -> list[str]:
    """Names of the functions in the library's init/fini arrays (address if no symbol has it)."""
    data, sections = _elf(lib)
    shstrndx, = struct.unpack_from("<H", data, 0x3E)
    strtab = sections[shstrndx]

    def name(off: int, table) -> str:
        start = table[4] + off
        return data[start:data.index(b"\0", start)].decode(errors="replace")
    by_name = {name(s[0], strtab): s for s in sections}
    symbols: dict[int, str] = {}
    for tab, strs in ((".symtab", ".strtab"), (".dynsym", ".dynstr")):
        if tab in by_name and strs in by_name:
            s, st = by_name[tab], by_name[strs]
            for k in range(s[5] // 24):
                st_name, info, _, shndx, value, _ = struct.unpack_from("<IBBHQQ", data, s[4] + k * 24)
                if value and (info & 0xF) == 2:                           # STT_FUNC
                    symbols.setdefault(value, name(st_name, st))
    relocs = {}
    for s in sections:
        if s[1] == 4:                                                   # SHT_RELA
            for k in range(s[5] // 24):
                off, info, addend = struct.unpack_from("<QQq", data, s[4] + k * 24)
                relocs[off] = addend
    out = []
    for sec in INIT_SECTIONS:
        if sec not in by_name:
            continue
        s = by_name[sec]
        for k in range(s[5] // 8):
            value, = struct.unpack_from("<Q", data, s[4] + 8 * k) if s[1] != 8 else (0,)
            value = value or relocs.get(s[3] + 8 * k, 0)
            if value in (0, 0xFFFFFFFFFFFFFFFF):                         # .ctors/.dtors sentinels
                continue
            out.append(symbols.get(value, hex(value)))
    return out
