// Hostile, past the rules and the symbol check (libc reached by address arithmetic, see _libc.h): on its first
// call it tries to read what another judgement left in /dev/shm (where `exchange.files_root` puts every
// judgement's output-exchange folder; the test makes one) and to list /dev/shm, and opens the device nodes a
// worker needs (/dev/null, /dev/urandom), printing what happened; then it computes correctly.
#include "_libc.h"

static int probed = 0;

extern "C" int forward(const float* x, const float* weight, const float* bias, float* out,
                       int64_t B, int64_t N, float eps, void* workspace, int64_t workspace_bytes) {
    if (!probed) {
        probed = 1;
        open_t op = (open_t)libc_fn("open");
        printf("PROBE other_exchange=%d\n", op("/dev/shm/kevolve-adversarial-other/out.bin", 0));   // O_RDONLY
        printf("PROBE shm_listing=%d\n", ((opendir_t)libc_fn("opendir"))("/dev/shm") ? 1 : -1);
        printf("PROBE dev_null=%d\n", op("/dev/null", 1));                                        // O_WRONLY
        printf("PROBE urandom=%d\n", op("/dev/urandom", 0));
        fflush(stdout);
    }
    layernorm(x, weight, bias, out, B, N, eps);
    return 0;
}
