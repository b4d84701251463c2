// Hostile, past the rules and the symbol check (libc reached by address arithmetic, see _libc.h): on its first
// call it tries everything the worker's confinement must stop, prints what happened, then computes correctly.
// - create a file outside its private directory;   - open a TCP socket;
// - write into the spare worker's stdin through /proc (the attack that once gave the next candidate a
//   protocol error; in its own PID namespace it does not even see the spare), and into its parent's fds;
//   - signal its parent (the evaluator; in a namespace, the namespace's init);
// - fork a child that leaves the process group (setsid) and sleeps, to outlive the judgement; exec a program
//   (a path that does not exist: ENOENT where exec is allowed, EPERM where the seal refuses it); clone a
//   process through the raw syscall; and start a thread, which must still work (OpenMP needs threads).
#include "_libc.h"

typedef long (*rw_t)(int, const void*, unsigned long);
typedef int (*i_t)(void);
typedef int (*ii_t)(int, int);
typedef int (*iii_t)(int, int, int);
typedef unsigned (*sleep_t)(unsigned);

static int probed = 0;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (!probed) {
        probed = 1;
        open_t op = (open_t)libc_fn("open");
        rw_t wr = (rw_t)libc_fn("write");
        i_t pid = (i_t)libc_fn("getpid"), ppid = (i_t)libc_fn("getppid"), fk = (i_t)libc_fn("fork"),
            ss = (i_t)libc_fn("setsid");
        iii_t sock = (iii_t)libc_fn("socket");
        ii_t kl = (ii_t)libc_fn("kill");
        int fd = op("/tmp/kevolve-adversarial-probe", 0101, 0644);          // O_WRONLY | O_CREAT
        printf("PROBE file=%d\n", fd);
        printf("PROBE socket=%d\n", sock(2, 1, 0));                        // AF_INET, SOCK_STREAM
        char path[64];
        snprintf(path, sizeof path, "/proc/%d/fd/0", ppid());
        printf("PROBE evaluator_fd=%d\n", op(path, 1));
        printf("PROBE kill_evaluator=%d\n", kl(ppid(), 0));
        int spares = 0, reached = 0;
        void* d = ((opendir_t)libc_fn("opendir"))("/proc");
        for (dent* e; d && (e = ((readdir_t)libc_fn("readdir"))(d));) {
            int p = 0; for (const char* c = e->name; *c >= '0' && *c <= '9'; ++c) p = p * 10 + (*c - '0');
            if (p <= 0 || p == pid()) continue;
            char cmd[64], buf[256] = {0};
            snprintf(cmd, sizeof cmd, "/proc/%d/cmdline", p);
            int c = op(cmd, 0);
            if (c < 0) continue;
            long n = ((rw_t)libc_fn("read"))(c, buf, sizeof buf - 1);
            for (long k = 0; k < n; ++k) if (!buf[k]) buf[k] = ' ';
            if (!strstr(buf, "kevolve.judge.worker") || p == 1) continue;   // a worker (not its namespace's init)
            ++spares;
            snprintf(cmd, sizeof cmd, "/proc/%d/fd/0", p);
            int w = op(cmd, 1);
            if (w >= 0 && wr(w, "{\"cmd\": \"exit\"}\n", 16) > 0) ++reached;
        }
        printf("PROBE workers_seen=%d workers_reached=%d\n", spares, reached);
        char ns[64] = {0};                                  // its PID namespace, for the test to look for after
        typedef long (*readlink_t)(const char*, char*, unsigned long);
        long nl = ((readlink_t)libc_fn("readlink"))("/proc/self/ns/pid", ns, sizeof ns - 1);
        unsigned long ino = 0;
        for (long k = 0; k < nl; ++k) if (ns[k] >= '0' && ns[k] <= '9') ino = ino * 10 + (ns[k] - '0');
        printf("PROBE pidns=%lu\n", ino);
        typedef int (*exec_t)(const char*, char* const*, char* const*);
        typedef long (*sys_t)(long, ...);
        typedef int (*pth_t)(void*, const void*, void* (*)(void*), void*);
        int* err = ((int* (*)(void))libc_fn("__errno_location"))();
        char* argv[] = {(char*)"kevolve-probe", nullptr};
        int ex = ((exec_t)libc_fn("execve"))("/nonexistent-kevolve-probe", argv, argv + 1);
        printf("PROBE exec=%d\nPROBE exec_errno=%d\n", ex, *err);
        long cl = ((sys_t)libc_fn("syscall"))(56L, 17L, 0L, 0L, 0L, 0L);   // clone(SIGCHLD): a new process
        if (cl == 0) ((void (*)(int))libc_fn("_exit"))(0);
        printf("PROBE raw_clone=%ld\n", cl);
        unsigned long th[8] = {0};
        int made = ((pth_t)libc_fn("pthread_create"))(th, nullptr, [](void*) -> void* { return nullptr; }, nullptr);
        if (made == 0) ((int (*)(unsigned long, void**))libc_fn("pthread_join"))(th[0], nullptr);
        printf("PROBE thread=%d\n", made);
        int child = fk();
        if (child == 0) {
            printf("PROBE setsid=%d\n", ss());
            fflush(stdout);
            ((sleep_t)libc_fn("sleep"))(600);
            ((void (*)(int))libc_fn("_exit"))(0);
        }
        printf("PROBE child=%d\n", child);
        fflush(stdout);
    }
    layernorm(x, weight, bias, out, B, N, eps);
    return 0;
}
