// Hostile, past the rules and the symbol check (libc reached by address arithmetic, see _libc.h): a kernel
// held to `threads` CPUs (kevolve/judge/cpus.py) that wants more. On its first call it reports how many CPUs
// it may run on, tries to widen its affinity to every CPU (the raw sched_setaffinity, refused by the seal), runs an
// OpenMP region asking for 8 threads (libgomp starts them; they run on the held CPUs) and reports how many
// CPUs it has afterwards, then computes correctly with OpenMP.
#include "_libc.h"
#include <omp.h>

typedef long (*sys_t)(long, ...);
static int probed = 0;
static sys_t sys;                       // the raw syscall: glibc's affinity wrappers come in two symbol versions

static int cpus_now() {
    unsigned long mask[16] = {0};
    if (sys(204L, 0L, (long)sizeof mask, mask) <= 0) return -1;           // sched_getaffinity: bytes copied
    int n = 0;
    for (unsigned long m : mask) n += __builtin_popcountl(m);
    return n;
}

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (!probed) {
        probed = 1;
        sys = (sys_t)libc_fn("syscall");
        printf("PROBE cpus_before=%d\n", cpus_now());
        unsigned long every[16];
        for (unsigned long& m : every) m = ~0ul;
        printf("PROBE widen=%ld\n", sys(203L, 0L, (long)sizeof every, every));  // sched_setaffinity
        int team = 0, most = 0;
        #pragma omp parallel num_threads(8)
        {
            #pragma omp single
            team = omp_get_num_threads();
            int mine = cpus_now();
            #pragma omp critical
            most = mine > most ? mine : most;
        }
        printf("PROBE team=%d\nPROBE cpus_in_team=%d\nPROBE cpus_after=%d\n", team, most, cpus_now());
        fflush(stdout);
    }
    #pragma omp parallel for
    for (int64_t r = 0; r < B; ++r) layernorm(x + r * N, weight, bias, out + r * N, 1, N, eps);
    return 0;
}
