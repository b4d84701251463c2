"""The static rules as unit tests: each forbidden thing is caught by its rule, harmless look-alikes
(comments, strings, member functions, std::remove) are not, and every seed kernel of every task passes."""
from __future__ import annotations

from pathlib import Path

import pytest

from kevolve.judge.static import rules as verify
from kevolve.task import TASKS_DIR

HERE = Path(__file__).resolve().parent.parent          # tests/

# (snippet, target, abi, the rule it must break — None: it must pass)
CASES = [
    # threads and processes
    ("std::thread t([]{}); t.detach();", "cpu", "c", "thread"),
    ("auto f = std::async(std::launch::async, work);", "cpu", "c", "thread"),
    ("pthread_t t; pthread_create(&t, nullptr, fn, nullptr);", "cpu", "c", "thread"),
    ("std::jthread j(work);", "cuda", "c", "thread"),
    ("if (fork() == 0) {}", "cpu", "c", "process"),
    ("system(\"ls\");", "cpu", "c", "process"),
    ("std::system(\"ls\");", "cpu", "c", "process"),
    ("auto p = popen(\"ls\", \"r\");", "cpu", "c", "process"),
    ("execvp(\"sh\", argv);", "cpu", "c", "process"),
    # files
    ("std::FILE* f = std::fopen(\"/etc/passwd\", \"r\");", "cpu", "c", "file"),
    ("int fd = open(\"/etc/passwd\", 0);", "cpu", "c", "file"),
    ("std::ifstream in(\"/etc/hostname\");", "cpu", "c", "file"),
    ("namespace fs = std::filesystem;", "cpu", "c", "file"),
    ("remove(\"/tmp/x\");", "cpu", "c", "file"),
    ("::rename(\"a\", \"b\");", "cpu", "c", "file"),
    ("FILE *f = nullptr;", "cpu", "c", "file"),
    # sockets, environment, loading, system calls, signals, memory mapping, exit, load-time code
    ("int s = socket(2, 1, 0);", "cpu", "c", "socket"),
    ("const char* k = getenv(\"OPENAI_API_KEY\");", "cpu", "c", "environment"),
    ("const char* k = std::getenv(\"HOME\");", "cuda", "c", "environment"),
    ("setenv(\"A\", \"1\", 1);", "cpu", "c", "environment"),
    ("extern char** environ;", "cpu", "c", "environment"),
    ("void* h = dlopen(\"libc.so.6\", 2);", "cpu", "c", "dynamic-loading"),
    ("void* f = dlsym(h, \"system\");", "cuda", "c", "dynamic-loading"),
    ("long pid = syscall(39);", "cpu", "c", "syscall"),
    ("long pid = syscall(__NR_getpid);", "cpu", "c", "syscall"),
    ("signal(11, handler);", "cpu", "c", "signal"),
    ("raise(9);", "cpu", "c", "signal"),
    ("void* p = mmap(nullptr, 4096, 3, 34, -1, 0);", "cpu", "c", "memory-mapping"),
    ("exit(0);", "cpu", "c", "process-exit"),
    ("std::abort();", "cuda", "c", "process-exit"),
    ("atexit(cleanup);", "cpu", "c", "process-exit"),
    ("__attribute__((constructor)) static void init() {}", "cpu", "c", "constructor"),
    ("__attribute__ (( destructor )) static void fini() {}", "cuda", "c", "constructor"),
    # CUDA device-wide state and host memory
    ("cudaMallocManaged(&p, 1024);", "cuda", "c", "host-memory"),
    ("cudaMallocHost(&p, 1024);", "cuda", "c", "host-memory"),
    ("cudaDeviceReset();", "cuda", "c", "device-reset"),
    ("cudaSetDevice(1);", "cuda", "c", "device-reset"),
    # host functions in graphs, persisting-L2 windows (audit: generic graph nodes, numeric launch-attribute ids)
    ("cudaGraphNodeParams np = {}; np.type = (cudaGraphNodeType)3; cudaGraphAddNode(&n, g, nullptr, nullptr, 0, &np);",
     "cuda", "c", "host-callback"),
    ("cudaHostNodeParams p = {}; p.fn = f; p.userData = nullptr;", "cuda", "c", "host-callback"),
    ("cudaHostFn_t f = later;", "cuda", "c", "host-callback"),
    ("auto t = cudaGraphNodeTypeHost;", "cuda", "c", "host-callback"),
    ("cudaGraphExecNodeSetParams(e, n, &np);", "cuda", "c", "host-callback"),
    ("at[0].val.accessPolicyWindow.base_ptr = (void*)x;", "cuda", "c", "persisting-l2"),       # a member is a use
    ("w.hitProp = (decltype(w.missProp))2;", "cuda", "c", "persisting-l2"),
    ("p->hitRatio = 1.0f;", "cuda", "c", "persisting-l2"),
    ("auto w = decltype(v.accessPolicyWindow){.base_ptr = p, .num_bytes = n, .hitRatio = 1.f};", "cuda", "c",
     "persisting-l2"),
    ("auto prop = (cudaAccessProperty)2;", "cuda", "c", "persisting-l2"),
    ("cudaKernelNodeAttrValue v = {}; v.accessPolicyWindow.num_bytes = n;", "cuda", "c", "persisting-l2"),
    ("cudaGraphKernelNodeCopyAttributes(dst, src);", "cuda", "c", "persisting-l2"),
    ("cudaStreamCopyAttributes(dst, src);", "cuda", "c", "persisting-l2"),
    ("cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 1 << 20);", "cuda", "c", "persisting-l2"),
    ("cudaCtxResetPersistingL2Cache();", "cuda", "c", "device-reset"),
    ("cudaLaunchAttribute attr[1]; attr[0].id = cudaLaunchAttributeClusterDimension; attr[0].val.clusterDim.x = 2; "
     "cudaLaunchConfig_t cfg = {}; cfg.attrs = attr; cfg.numAttrs = 1;", "cuda", "c", None),   # clusters are fine
    ("cudaGraphNode_t n; cudaGraphAddKernelNode(&n, g, nullptr, 0, &kp); cudaGraphNodeType t; "
     "cudaGraphNodeGetType(n, &t); size_t l2 = prop.persistingL2CacheMaxSize;", "cuda", "c", None),
    # Python and inline assembly
    ("PyRun_SimpleString(\"import os\");", "cpu", "c", "python"),
    ("pybind11::module_::import(\"os\");", "cuda", "torch", "python"),
    ("asm volatile(\"nop\");", "cpu", "c", "inline-assembly"),
    ("__asm__(\"nop\");", "cpu", "c", "inline-assembly"),
    ("__device__ int lane() { int lane; asm volatile(\"mov.u32 %0, %%laneid;\" : \"=r\"(lane)); return lane; }",
     "cuda", "c", None),                                                           # inline PTX is fine
    # asm as the statement an if/while/for governs is code; after a declarator's `)` it is an asm label
    ("__device__ void spin(unsigned* d) { while (!*d) asm volatile(\"nanosleep.u32 20;\"); }", "cuda", "c", None),
    ("__device__ void f(int n, int c) { for (int i = 0; i < n; ++i) asm volatile(\"nop;\"); "
     "if (c) asm volatile(\"nop;\"); else asm volatile(\"nop;\"); }", "cuda", "c", None),
    ("__device__ void g() { int run(const char*) asm(\"system\"); run(\"true\"); }", "cuda", "c", "symbol-alias"),
    ("__device__ void g(int c) { for (;;) int (*run)(const char*) asm(\"system\"); }", "cuda", "c", "symbol-alias"),
    # L2 eviction priority: lines kept ahead of the flush (experiments/l2_flush_probe.py)
    ("__device__ float ld(const float* p) { float v; asm volatile(\"{ .reg .b64 q; createpolicy.fractional."
     "L2::evict_last.b64 q, 1.0; ld.global.L2::cache_hint.f32 %0, [%1], q; }\" : \"=f\"(v) : \"l\"(p)); return v; }",
     "cuda", "c", "l2-priority"),
    ("__device__ float ld(const float* p) { float v; asm(\"ld.global.L2::cache_\" \"hint.f32 %0, [%1], %2;\" "
     ": \"=f\"(v) : \"l\"(p), \"l\"(0x14f0000000000000ull)); return v; }", "cuda", "c", "l2-priority"),  # split literal
    ("__device__ void pf(const float* p) { asm(\"prefetch.global.L2::evict_last [%0];\" :: \"l\"(p)); }",
     "cuda", "c", "l2-priority"),
    ("cuda::annotated_ptr<const float, cuda::access_property::persisting> a(x);", "cuda", "c", "l2-priority"),
    ("auto q = cuda::ptx::createpolicy_fractional_L2_evict_last(1.0f);", "cuda", "c", "l2-priority"),
    ("__device__ float ld(const float* p) { float v; asm(\"ld.global.L1::no_allocate.f32 %0, [%1];\" : \"=f\"(v) : "
     "\"l\"(p)); return v; }", "cuda", "c", None),                               # other cache qualifiers are fine
    ("__device__ void pf(const float* p) { asm(\"prefetch.global.L2 [%0];\" :: \"l\"(p)); }", "cuda", "c", None),
    ("__device__ float ld(const float* p) { return __ldcs(p); }  // not evict_last", "cuda", "c", None),
    # reaching code by address (issue 37: from an allowed function's address to the interpreter): `judge.static.reach`
    ("uintptr_t a = (uintptr_t)&printf;", "cpu", "c", "function-address"),
    ("uintptr_t a = (uintptr_t)printf;", "cpu", "c", "function-address"),
    ("auto c = (const unsigned char*)(void*)&printf;", "cpu", "c", "function-address"),
    ("auto a = reinterpret_cast<uintptr_t>(reinterpret_cast<void*>(&memcpy));", "cpu", "c", "function-address"),
    ("auto a = std::bit_cast<uintptr_t>(&printf);", "cpu", "c", "function-address"),
    ("auto a = __builtin_bit_cast(uintptr_t, &printf);", "cpu", "c", "function-address"),
    ("auto a = uintptr_t(&printf);", "cpu", "c", "function-address"),
    ("void* p = (void*)&printf; uintptr_t a = (uintptr_t)p;", "cpu", "c", "function-address"),
    ("int (*fp)(const char*, ...) = printf; auto a = (uintptr_t)fp;", "cpu", "c", "function-address"),
    ("typedef int (*f_t)(int); f_t g = helper; long a = (long)g; int helper(int);", "cpu", "c", "function-address"),
    ("auto fp = &printf; uintptr_t a; memcpy(&a, &fp, sizeof a);", "cpu", "c", "function-address"),
    ("char b[32]; snprintf(b, 32, \"%p\", (void*)&printf);", "cpu", "c", "function-address"),
    ("const char* c = (const char*)&printf + 4096;", "cpu", "c", "function-address"),
    ("auto p = &printf + 1;", "cpu", "c", "function-address"),
    ("static int helper(int v) { return v; } auto c = (const char*)&helper;", "cpu", "c", "function-address"),
    ("uintptr_t a = (uintptr_t)&forward;", "cuda", "c", "function-address"),
    ("uintptr_t a = (uintptr_t)stdout;", "cpu", "c", "function-address"),
    ("auto c = (const char*)stderr - 4096;", "cpu", "c", "function-address"),
    ("union pun { int (*f)(const char*, ...); uintptr_t u; };", "cpu", "c", "function-address"),
    ("uintptr_t a = 0; typedef int (*f_t)(int); int r = ((f_t)a)(1);", "cpu", "c", "function-address"),
    ("uintptr_t a = 0; auto f = reinterpret_cast<int (*)(int)>(a);", "cuda", "c", "function-address"),
    ("struct H { long e_phoff; }; long o = h->e_phoff;", "cpu", "c", "library-walk"),
    ("const Elf64_Ehdr* eh = nullptr;", "cpu", "c", "library-walk"),
    ("struct link_map* m = nullptr;", "cpu", "c", "library-walk"),
    ("enum { DT_SYMTAB = 6 }; int t = DT_SYMTAB;", "cpu", "c", "library-walk"),
    ("if (ph[i].p_type == 2) {}", "cuda", "c", "library-walk"),
    ("unsigned long b = getauxval(7);", "cpu", "c", "library-walk"),
    ("extern char __ehdr_start;", "cpu", "c", "library-walk"),
    ("const char* m = \"/proc/self/maps\";", "cpu", "c", "library-walk"),
    ("const char* e = \"/proc/\" \"1/environ\";", "cuda", "c", "library-walk"),
    ("const char* m = \"\\x7f\" \"ELF\";", "cpu", "c", "library-walk"),
    ("unsigned m = 0x464c457f;", "cpu", "c", "library-walk"),
    ("auto f = lookup(\"dl_iterate_phdr\");", "cpu", "c", "symbol-by-name"),
    ("auto f = lookup(\"PyRun_SimpleString\");", "cuda", "c", "symbol-by-name"),
    ("auto f = lookup(\"open\");", "cpu", "c", "symbol-by-name"),
    # ... and their honest look-alikes
    ("cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 0); kernel<<<1, 1>>>(p);",
     "cuda", "c", None),
    ("cudaLaunchKernel((const void*)kernel, dim3(1), dim3(32), args, 0, s); __global__ void kernel(float*);",
     "cuda", "c", None),
    ("int nb; cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kernel<float, 4>, 256, 0);", "cuda", "c", None),
    ("auto k = vec ? kernel_vec : kernel_scalar; k<<<g, b, 0, s>>>(x);", "cuda", "c", None),
    ("bool al = ((uintptr_t)x & 15) == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;", "cuda", "c", None),
    ("const float* gamma = w; const float4* g4 = (const float4*)gamma; float y0 = 1, y1 = y0 + 1;", "cuda", "c",
     None),
    ("std::vector<double> dw(N, 0.0), db(N, 0.0); db[0] += 1; auto p = (const char*)db.data();", "cpu", "c", None),
    ("float f = 1.f; unsigned u = *(unsigned*)&f; float e = exp2f(f);", "cpu", "c", None),
    ("qsort(t, 4, sizeof(float), cmp); std::sort(t, t + 4, less_abs); static int cmp(const void*, const void*);",
     "cpu", "c", None),
    ("fprintf(stderr, \"n=%d\\n\", n); fflush(stdout); fputs(\"x\", stdout);", "cpu", "c", None),
    ("static float sq(float v) { return v * v; } float (*ops[1])(float) = {sq}; float r = ops[0](2.f);",
     "cpu", "c", None),
    ("printf(\"read the manual, then write\\n\"); const char* w = \"open file\";", "cpu", "c", None),
    # preprocessor tricks and includes
    ("#define GE(s) get##s\nconst char* k = GE(env)(\"HOME\");", "cpu", "c", "preprocessor"),
    ("#include_next <cmath>", "cpu", "c", "preprocessor"),
    ("#pragma push_macro(\"fopen\")", "cpu", "c", "preprocessor"),
    ("#import <foo>", "cpu", "c", "preprocessor"),
    ("#include \"x.h\"", "cpu", "c", "include"),
    ("#include <fstream>", "cpu", "c", "include"),
    ("#include <unistd.h>", "cpu", "c", "include"),
    ("#include <thread>", "cuda", "c", "include"),
    ("#include <cuda_runtime.h>", "cpu", "c", "include"),       # CUDA headers only for target cuda
    ("  #  include <sys/syscall.h>", "cpu", "c", "include"),
    ("", "cpu", "c", "empty"),
    ("   \n\n", "cuda", "c", "empty"),
    # torch headers: not in the C ABI, fine in the torch ABI
    ("#include <torch/extension.h>", "cuda", "c", "include"),
    ("#include <ATen/ATen.h>", "cpu", "c", "include"),
    ("#include <c10/cuda/CUDAStream.h>", "cuda", "c", "include"),
    ("#include <pybind11/pybind11.h>", "cpu", "c", "include"),
    ("#include <torch/extension.h>", "cuda", "torch", None),
    ("#include <ATen/cuda/CUDAContext.h>", "cuda", "torch", None),
    ("#include <torch/extension.h>", "cpu", "torch", None),
    # the aten-fallback rule (torch ABI): no torch operator may compute the task
    ("auto y = torch::layer_norm(x, {N}, w, b, eps);", "cuda", "torch", "aten-fallback"),
    ("auto y = at::native_layer_norm(x, {N}, w, b, eps);", "cuda", "torch", "aten-fallback"),
    ("auto m = x.mean(1, true);", "cuda", "torch", "aten-fallback"),
    ("auto s = x.sum();", "cpu", "torch", "aten-fallback"),
    ("auto v = torch::var(x, 1);", "cuda", "torch", "aten-fallback"),
    ("auto y = at::matmul(a, b);", "cuda", "torch", "aten-fallback"),
    ("auto y = torch::softmax(x, 1);", "cuda", "torch", "aten-fallback"),
    ("auto out = torch::empty_like(x); auto n = x.numel(); auto p = x.data_ptr<float>();", "cuda", "torch", None),
    ("auto out = torch::zeros({B, N}, x.options());", "cuda", "torch", None),
    ("auto m = x.mean(1, true);", "cuda", "c", None),     # the aten rule is for the torch ABI only
    ("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"forward\", &forward); }", "cuda", "torch", None),
    # look-alikes that must pass: comments, strings, members, std::remove, names that merely contain a word
    ("// never fopen(), getenv(), fork() or std::thread here\nint x = 0;", "cpu", "c", None),
    ("/* system(\"rm -rf /\"); dlopen(\"x\", 1); syscall(1); */ int x = 0;", "cpu", "c", None),
    ("/* multi-line comment\n   std::thread t; pthread_create(); exit(1);\n*/\nint y = 1;", "cpu", "c", None),
    ("const char* msg = \"fopen(getenv(\\\"HOME\\\")) and std::thread are banned\";", "cpu", "c", None),
    ("printf(\"fork() and system() would be bad; so is exit(1)\\n\");", "cpu", "c", None),
    ("char c = '#'; char d = '\"'; int x = 0;", "cpu", "c", None),
    ("auto end = std::remove(v.begin(), v.end(), 0.0f);", "cpu", "c", None),
    ("auto it = std::remove_if(v.begin(), v.end(), pred);", "cpu", "c", None),
    ("q.remove(3); obj->open(1); s.system(2); w.write(3);", "cpu", "c", None),
    ("int my_fopen_count = 0; float system_size = 1; int environment = 2; int threads = 4;", "cpu", "c", None),
    ("__syncthreads(); int t = threadIdx.x + blockIdx.x * blockDim.x;", "cuda", "c", None),
    ("cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);", "cuda", "c", None),
    ("#pragma omp parallel for schedule(static)\nfor (int i = 0; i < n; ++i) a[i] = 0;", "cpu", "c", None),
    ("#include <cmath>\n#include <cstdint>\n#include <omp.h>\n#include <immintrin.h>\n#include <algorithm>",
     "cpu", "c", None),
    ("#include <cuda_runtime.h>\n#include <cuda_bf16.h>\n#include <cooperative_groups/reduce.h>\n"
     "#include <cub/cub.cuh>\n#include <cstdint>", "cuda", "c", None),
]


def _id(case) -> str:
    snippet, target, abi, rule = case
    return f"{rule or 'ok'}-{target}-{abi}-{snippet.strip()[:40]}"


@pytest.mark.parametrize("snippet, target, abi, rule", CASES, ids=[_id(c) for c in CASES])
def test_static_rule(snippet, target, abi, rule):
    verdict = verify.check(snippet, target, abi)
    rules = {v.rule for v in verdict.violations}
    if rule is None:
        assert verdict.ok, verdict.reason
        assert verdict.reason is None
    else:
        assert not verdict.ok
        assert rule in rules, verdict.reason
        assert rule in verdict.reason


def test_violation_names_line_and_text():
    src = "#include <cstdint>\n\nint f() {\n    return system(\"ls\");\n}\n"
    verdict = verify.check(src, "cpu")
    (v,) = verdict.violations
    assert (v.rule, v.line) == ("process", 4)
    assert "system(" in v.text and "line 4: process:" in verdict.reason


def test_every_violation_is_reported():
    src = "#include <fstream>\nint a = fork();\nconst char* k = getenv(\"K\");\n"
    rules = {v.rule for v in verify.check(src, "cpu").violations}
    assert {"include", "process", "environment"} <= rules


def test_blanking_keeps_lines_and_columns():
    src = "int a; // fopen\n/* x\n y */ char s[] = \"getenv\";\n"
    blank = verify.blank_comments_and_strings(src)
    assert len(blank) == len(src) and blank.count("\n") == src.count("\n")
    assert "fopen" not in blank and "getenv" not in blank and "int a;" in blank and "char s[] =" in blank


SEEDS = sorted(p for p in [*TASKS_DIR.glob("*/seeds/*"), *TASKS_DIR.glob("*/best/*")] if p.suffix in (".cu", ".cpp"))


@pytest.mark.parametrize("path", SEEDS, ids=[f"{p.parent.parent.name}/{p.parent.name}/{p.name}" for p in SEEDS])
def test_seed_kernels_pass(path):
    """Every seed and every best/ kernel of every task passes the rules for its target and ABI (torch-format seeds
    are named torch_*; a best kernel is C ABI)."""
    target = "cuda" if path.suffix == ".cu" else "cpu"
    abi = "torch" if path.name.startswith("torch") else "c"
    verdict = verify.check(path.read_text(), target, abi)
    assert verdict.ok, verdict.reason


def test_there_are_seeds_to_check():
    assert any(p.parent.parent.name == "layernorm_fwd" for p in SEEDS)


TEST_KERNELS = sorted((HERE / "kernels").glob("*/*.c*")) + sorted((HERE / "kernels").glob("tasks/*/seeds/*"))
BANNED_TEST_KERNELS = {"detached_thread.cpp", "static_fopen.cpp", "static_getenv.cpp", "static_token_paste.cpp",
                       "static_local_include.cpp", "static_fstream.cpp", "static_syscall.cpp", "static_dlopen.cpp",
                       "forge_protocol.cpp", "wrong_name.cpp",
                       "timing_gthread.cpp"}      # libstdc++'s __gthread_create: the token rules name it now


@pytest.mark.parametrize("path", TEST_KERNELS, ids=[p.name for p in TEST_KERNELS])
def test_test_kernels_are_screened_as_intended(path):
    """The hostile test kernels that are meant to get past the static rules do; the rest do not."""
    target = "cuda" if path.suffix == ".cu" else "cpu"
    abi = "torch" if path.name.startswith("rkb_") else "c"
    verdict = verify.check(path.read_text(), target, abi)
    assert verdict.ok == (path.name not in BANNED_TEST_KERNELS), verdict.reason


# ---------------------------------------------------------------------- ways around the rules that once worked
# Each snippet compiles with g++ -std=c++17 using only allowed headers (or its own declarations) and does
# what a rule forbids, yet check() passes it.
BYPASSES = [
    ("fopen64", "auto f = fopen64(\"/etc/passwd\", \"r\");", "file"),
    ("open64", "extern \"C\" int open64(const char*, int, ...);\nint fd = open64(\"/etc/passwd\", 0);", "file"),
    ("__environ", "extern char** __environ;\nconst char* first = __environ[0];", "environment"),
    ("execve", "extern \"C\" int execve(const char*, char* const[], char* const[]);\n"
               "execve(\"/bin/sh\", nullptr, nullptr);", "process"),
    ("raw-write-to-fd", "extern \"C\" long write(int, const void*, unsigned long);\nwrite(3, \"{}\\n\", 3);", "file"),
    ("digit-separator-hides-code", "int a = 1'000; auto f = std::fopen(\"/etc/passwd\", \"r\"); int b = 2'000;",
     "file"),
    ("line-splice", "const char* k = get\\\nenv(\"HOME\");", "environment"),
    ("digraph-token-paste", "%:define GE(s) get%:%:s\nconst char* k = GE(env)(\"HOME\");", "preprocessor"),
    ("computed-include", "#define HDR <unistd.h>\n#include HDR\n", "include"),
    ("digraph-include", "%:include <unistd.h>\n", "include"),
]


@pytest.mark.parametrize("name, snippet, rule", BYPASSES, ids=[b[0] for b in BYPASSES])
def test_rule_is_not_dodged(name, snippet, rule):
    verdict = verify.check(snippet, "cpu")
    assert rule in {v.rule for v in verdict.violations}, f"{name} passes the static rules"


def test_include_in_block_comment_is_ignored():
    assert verify.check("/*\n#include <fstream>\n*/\nint x = 0;\n", "cpu").ok


def test_headers_are_skipped_but_user_code_between_them_is_read_at_its_own_lines():
    """`tokens.tokenize` jumps over a header's text (one `header` token marks the gap) and resumes at the marker
    that returns to the user's file: every user token is there with its source line, no header token is user."""
    from kevolve.judge.static import tokens
    src = "int a;\n#include <math.h>\nint b;\n#include <stdlib.h>\nvoid f() { system(\"x\"); }\n"
    toks = tokens.tokenize(tokens.preprocess(src, "cpu"), tokens.MAIN["cpu"])
    user = [(t.text, t.line) for t in toks if t.user]
    assert user == [("int", 1), ("a", 1), (";", 1), ("int", 3), ("b", 3), (";", 3), ("void", 5), ("f", 5),
                    ("(", 5), (")", 5), ("{", 5), ("system", 5), ("(", 5), ('"x"', 5), (")", 5), (";", 5),
                    ("}", 5)]
    assert {t.kind for t in toks if not t.user} == {"header"}
    v = verify.check(src, "cpu")
    assert [(x.rule, x.line) for x in v.violations] == [("process", 5)]
    cu = ("#include <cuda_runtime.h>\n__global__ void k(float* x) { x[0] = 1; }\n"
          "int g() { return getenv(\"A\") != 0; }\n")
    assert [(x.rule, x.line) for x in verify.check(cu, "cuda").violations] == [("environment", 3)]


# ---------------------------------------------------------------------- sizes (issue 37: bounded builds)
def test_a_source_over_the_cap_is_refused_unread():
    from kevolve.judge.build import MAX_SOURCE_BYTES
    verdict = verify.check("int x = 0;\n" + "// padding\n" * (MAX_SOURCE_BYTES // 11 + 1), "cpu")
    assert [v.rule for v in verdict.violations] == ["size"], verdict.reason
    assert "over the cap of 1024 KiB on a kernel's source" in verdict.reason


def test_macros_that_expand_without_bound_are_refused(monkeypatch):
    """The preprocessor's output is bounded as a build's files are (twice the library cap; here 1 MiB): ten
    macros each ten times the last expand to 10^6 tokens, and the rules say so instead of reading them."""
    monkeypatch.setenv("KEVOLVE_MAX_LIBRARY_MB", "0.5")
    levels = ["#define L0 x"] + [f"#define L{k} " + " ".join([f"L{k - 1}"] * 10) for k in range(1, 7)]
    verdict = verify.check("\n".join(levels) + "\nint v = L6;\n", "cpu")
    assert "size" in {v.rule for v in verdict.violations}, verdict.reason
    assert "the preprocessed source is over 1 MiB" in verdict.reason
