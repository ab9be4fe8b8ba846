/* tests/test_util.h: tiny helpers shared by the C tests: checks that count failures (CHECK,
 * or one printed line per check: test_result, test_expect), reading a file, normwise relative
 * error, allocation that exits on failure, float bit patterns and guard cells, skipping
 * (exit 77). */
#ifndef MHA_TESTS_TEST_UTIL_H
#define MHA_TESTS_TEST_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            test_failures++;                                                \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

/* One line per check, "ok" or "FAIL": err within tol (NaN fails), or a condition. */
static inline void test_result(const char *what, double err, double tol) {
    int ok = err <= tol;
    printf("%-62s err=%.3e tol=%.1e  %s\n", what, err, tol, ok ? "ok" : "FAIL");
    if (!ok) test_failures++;
}
static inline void test_expect(const char *what, int ok) {
    printf("%-62s %s\n", what, ok ? "ok" : "FAIL");
    if (!ok) test_failures++;
}

/* malloc that exits on failure (0 bytes gives a valid pointer). */
static inline void *test_malloc(size_t bytes) {
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}
/* n doubles, zeroed; exits on failure. */
static inline double *dalloc(size_t n) {
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}
/* 64-byte aligned and exactly `bytes` long (so that ASan sees any access past the end). */
static inline void *test_aligned(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* The bits of a float, and the float of some bits. */
static inline uint32_t f2u(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}
static inline float u2f(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The bits of guard cell i of an output buffer, by position: -0 (catches a stray `+= +0`,
 * the value of padding lanes), a NaN that nobody computes (catches any store), a large
 * finite value. */
static inline uint32_t guard_bits(size_t i) {
    static const uint32_t g[3] = {0x80000000u, 0x7fc0beefu, 0x71234567u};
    return g[i % 3];
}

static inline int test_skip(const char *why) {
    printf("SKIP: %s\n", why);
    return 77;
}

static inline char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) { free(s); s = NULL; }
    if (s) s[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return s;
}

/* max |a - b| / max |b| (normwise relative error; b is the reference). */
static inline double rel_err_f_d(const float *a, const double *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

static inline double rel_err_f_f(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num || isnan(d)) num = isnan(d) ? INFINITY : d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

static inline int test_finish(const char *name) {
    if (test_failures) {
        fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures);
        return 1;
    }
    printf("%s: all checks passed\n", name);
    return 0;
}

#endif
