// Past the rules (libc reached from `stdout`, see _libc.h; it tries nothing the confinement refuses): on its first
// call it reads every thread of its worker in /proc/self/task and prints how many seccomp filters each carries. A
// thread that predates the confinement runs without Landlock, no_new_privs and the dropped capabilities (all per
// thread), and before issue 37 also without seccomp (filters were per thread): two of four had none (the parent
// watcher, numpy's OpenBLAS server). Code a kernel gets run there (a Python thread it patches, a pool's queue)
// escapes the confinement. It computes correctly.
#include <cstdlib>
#include "_libc.h"

static int probed = 0;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (!probed) {
        probed = 1;
        open_t op = (open_t)libc_fn("open");
        read_t rd = (read_t)libc_fn("read");
        close_t cl = (close_t)libc_fn("close");
        void* d = ((opendir_t)libc_fn("opendir"))("/proc/self/task");
        int threads = 0, low = 1 << 30, high = -1;
        for (dent* e; d && (e = ((readdir_t)libc_fn("readdir"))(d));) {
            if (e->name[0] == '.') continue;
            char path[96], buf[4096];
            snprintf(path, sizeof path, "/proc/self/task/%s/status", e->name);
            int fd = op(path, 0);
            long n = fd >= 0 ? rd(fd, buf, sizeof buf - 1) : -1;
            if (fd >= 0) cl(fd);
            buf[n > 0 ? n : 0] = 0;
            const char* f = strstr(buf, "Seccomp_filters:");
            int filters = f ? (int)strtol(f + 16, nullptr, 10) : -1;
            ++threads;
            if (filters < low) low = filters;
            if (filters > high) high = filters;
        }
        printf("PROBE threads=%d\nPROBE fewest_filters=%d\nPROBE most_filters=%d\n", threads, low, high);
        fflush(stdout);
    }
    layernorm(x, weight, bias, out, B, N, eps);
    return 0;
}
