/* tests/fuzz/fuzz_common.h: helpers shared by the fuzz targets. Each target defines
 * LLVMFuzzerTestOneInput; it is linked either with libFuzzer (fuzz_<target>, clang with
 * -Dfuzz=true, see scripts/fuzz) or with tests/fuzz/replay.c (replay_<target>, an ordinary
 * test that runs the corpus and every saved crash input under tests/fuzz/regressions).
 * A target aborts when an invariant breaks; the sanitizers catch the rest. */
#ifndef MHA_TESTS_FUZZ_COMMON_H
#define MHA_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_ASSERT(cond)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz invariant failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                   \
        }                                                                              \
    } while (0)

/* The bytes as a file that the readers can fopen() by name: an in-memory file (memfd),
 * rewritten on every call and named through /proc/self/fd. Returns the path. */
static inline const char *fuzz_file(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("mha-fuzz", 0);
        if (fd < 0) { perror("memfd_create"); abort(); }
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0) abort();
    size_t done = 0;
    while (done < size) {
        ssize_t w = pwrite(fd, data + done, size - done, (off_t)done);
        if (w <= 0) abort();
        done += (size_t)w;
    }
    return path;
}

/* The bytes as a NUL-terminated string (malloc'd; embedded NULs end it early). */
static inline char *fuzz_string(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    if (size) memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

#endif
