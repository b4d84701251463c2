// Shared by the attackers built past the static rules (which reject every line of the walk below: `stdout` cast to
// an integer, the ELF magic, <elf.h>'s names, a function's name in a string): finds any libc function by walking
// libc's own ELF headers in memory from `stdout`, a pointer into libc's data. `stdout` is data, not a function, so
// the symbol check (which rejects a function's address taken as data: `&printf`) passes it — only the worker's
// confinement, and the evidence its refusals leave, stand between what follows and the machine.
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <elf.h>

// the libc calls the probes make, as the types `libc_fn`'s addresses are called through
typedef int (*open_t)(const char*, int, ...);
typedef long (*read_t)(int, void*, unsigned long);
typedef int (*close_t)(int);
typedef void* (*opendir_t)(const char*);
typedef struct { unsigned long ino; long off; unsigned short reclen; unsigned char type; char name[256]; } dent;
typedef dent* (*readdir_t)(void*);

static void* libc_fn(const char* name) {
    uintptr_t base = (uintptr_t)(void*)stdout & ~(uintptr_t)4095;
    while (memcmp((const void*)base, "\x7f" "ELF", 4) != 0) base -= 4096;
    const Elf64_Ehdr* eh = (const Elf64_Ehdr*)base;
    const Elf64_Phdr* ph = (const Elf64_Phdr*)(base + eh->e_phoff);
    const Elf64_Dyn* dyn = nullptr;
    for (int i = 0; i < eh->e_phnum; ++i) if (ph[i].p_type == PT_DYNAMIC) dyn = (const Elf64_Dyn*)(base + ph[i].p_vaddr);
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

static void layernorm(const float* x, const float* w, const float* b, float* out, int64_t B, int64_t N, float eps) {
    for (int64_t r = 0; r < B; ++r) {
        const float* row = x + r * N;
        double s = 0, q = 0;
        for (int64_t i = 0; i < N; ++i) s += row[i];
        const double m = s / N;
        for (int64_t i = 0; i < N; ++i) q += (row[i] - m) * (row[i] - m);
        const double rs = 1.0 / __builtin_sqrt(q / N + eps);
        for (int64_t i = 0; i < N; ++i) out[r * N + i] = (float)((row[i] - m) * rs) * w[i] + b[i];
    }
}
