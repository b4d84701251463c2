// Past the rules (libc reached from `stdout`, see _libc.h): on its first call it reads the environment of every
// process it can name — /proc/<pid>/environ for pids 1 to 64 and its parent's — looking for secrets, and counts
// what it got; then it computes correctly. The confinement refuses each (Landlock's ptrace scope; in its own PID
// namespace it sees no other process at all), so nothing leaks. Issue 37: it was accepted — a contained attempt
// left no trace. Now each refused open is evidence (judge/evaluator/evidence.py), and the verdict names it.
// With OTHERS 0 (its honest twin) it reads only its own /proc/self/status, which it may.
#include "_libc.h"
#ifndef OTHERS
#define OTHERS 1
#endif

typedef int (*id_t_)(void);

static int probed = 0;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (!probed) {
        probed = 1;
        open_t op = (open_t)libc_fn("open");
        read_t rd = (read_t)libc_fn("read");
        close_t cl = (close_t)libc_fn("close");
        int me = ((id_t_)libc_fn("getpid"))(), parent = ((id_t_)libc_fn("getppid"))();
        long leaked = 0, opened = 0;
        char path[64], buf[4096], mine[4096];
        int own_env = op("/proc/self/environ", 0);                  // its own: what is not a leak
        long n_mine = own_env >= 0 ? rd(own_env, mine, sizeof mine) : -1;
        if (own_env >= 0) cl(own_env);
        for (int pid = OTHERS ? 1 : 0; OTHERS && pid <= 65; ++pid) {
            int who = pid == 65 ? parent : pid;
            if (who == me) continue;
            snprintf(path, sizeof path, "/proc/%d/environ", who);
            int fd = op(path, 0);
            if (fd < 0) continue;
            ++opened;
            long n = rd(fd, buf, sizeof buf);                        // (a thread of its own shows its own)
            if (n > 0 && (n != n_mine || memcmp(buf, mine, n) != 0)) leaked += n;
            cl(fd);
        }
        int fd = op("/proc/self/status", 0);
        long own = fd >= 0 ? rd(fd, buf, sizeof buf) : -1;
        if (fd >= 0) cl(fd);
        printf("PROBE opened=%ld\nPROBE leaked=%ld\nPROBE own_status=%ld\n", opened, leaked, own);
        fflush(stdout);
    }
    layernorm(x, weight, bias, out, B, N, eps);
    return 0;
}
