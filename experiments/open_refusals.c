/* Preloaded into strict_cuda_probe.py's children: every open or mkdir that fails with EACCES or EPERM is written to
   stderr as "refused: <call> <path> flags=<octal>", so the probe can name what the CUDA driver needed that the
   confinement refused. Built by the probe with the system's C compiler; experiments only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void note(const char *call, const char *path, int flags) {
    int saved = errno;
    if (saved == EACCES || saved == EPERM) {
        char line[600];
        int n = snprintf(line, sizeof line, "refused: %s %s flags=%o errno=%d\n", call, path ? path : "?", flags, saved);
        if (n > 0) (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
    errno = saved;
}

#define OPEN_LIKE(name)                                                              \
    int name(const char *path, int flags, ...) {                                     \
        static int (*real)(const char *, int, ...);                                  \
        if (!real) real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, #name);   \
        mode_t mode = 0;                                                             \
        if (flags & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); mode = va_arg(a, mode_t); va_end(a); } \
        int fd = real(path, flags, mode);                                            \
        if (fd < 0) note(#name, path, flags);                                        \
        return fd;                                                                   \
    }
OPEN_LIKE(open)
OPEN_LIKE(open64)

#define OPENAT_LIKE(name)                                                            \
    int name(int dir, const char *path, int flags, ...) {                            \
        static int (*real)(int, const char *, int, ...);                             \
        if (!real) real = (int (*)(int, const char *, int, ...))dlsym(RTLD_NEXT, #name); \
        mode_t mode = 0;                                                             \
        if (flags & (O_CREAT | O_TMPFILE)) { va_list a; va_start(a, flags); mode = va_arg(a, mode_t); va_end(a); } \
        int fd = real(dir, path, flags, mode);                                       \
        if (fd < 0) note(#name, path, flags);                                        \
        return fd;                                                                   \
    }
OPENAT_LIKE(openat)
OPENAT_LIKE(openat64)

int __open_2(const char *path, int flags) { return open(path, flags); }
int __open64_2(const char *path, int flags) { return open64(path, flags); }

#define FOPEN_LIKE(name)                                                             \
    FILE *name(const char *path, const char *mode) {                                 \
        static FILE *(*real)(const char *, const char *);                            \
        if (!real) real = (FILE *(*)(const char *, const char *))dlsym(RTLD_NEXT, #name); \
        FILE *f = real(path, mode);                                                  \
        if (!f) note(#name, path, mode && (mode[0] == 'w' || mode[0] == 'a' || strchr(mode, '+')) ? 1 : 0); \
        return f;                                                                    \
    }
FOPEN_LIKE(fopen)
FOPEN_LIKE(fopen64)

int mkdir(const char *path, mode_t mode) {
    static int (*real)(const char *, mode_t);
    if (!real) real = (int (*)(const char *, mode_t))dlsym(RTLD_NEXT, "mkdir");
    int r = real(path, mode);
    if (r < 0) note("mkdir", path, (int)mode);
    return r;
}
