/* tests/bench/bench_util.h: what the benchmark programs of tests/bench share: a monotonic
 * clock and buffers of reproducible pseudo-random floats. */
#ifndef MHA_TESTS_BENCH_UTIL_H
#define MHA_TESTS_BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Seconds on the monotonic clock. */
static inline double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* n floats uniform in [-range/2, range/2) from a linear congruential sequence started at
 * seed; exits with a message naming `program` when out of memory. */
static inline float *bench_fill(size_t n, unsigned seed, float range, const char *program) {
    float *p = malloc((n ? n : 1) * sizeof *p);
    if (!p) {
        fprintf(stderr, "%s: out of memory\n", program);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = range * ((float)((seed >> 9) & 0xFFFF) / 65536.0f - 0.5f);
    }
    return p;
}

#endif
