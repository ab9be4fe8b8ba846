/* tests/cuda/paired.h: the helpers the CUDA op tests share: random host data, buffers held on
 * both backends at once (cpu reference and gpu), poisoned outputs, and comparisons
 * (normwise relative error, integers, bitwise determinism). One test per program: the state
 * (backends, RNG, check count, filter) is file-static.
 *
 * Set cpu and gpu before use; MHA_TEST_FILTER (substring of the check names) selects checks. */
#ifndef MHA_TESTS_CUDA_PAIRED_H
#define MHA_TESTS_CUDA_PAIRED_H

#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const Backend *cpu, *gpu;
static uint64_t rng_state = 12345;
static int n_checks;
static const char *filter;

/* ------------------------------------------------------------------ host data */

static inline float urand(void) { return mha_rng_uniform(2024, rng_state++); }

/* uniform in [lo, hi), pushed away from zero */
static inline float *h_rand(size_t n, float lo, float hi) {
    float *x = malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++) {
        float v = lo + (hi - lo) * urand();
        if (fabsf(v) < 1e-3f) v = v < 0 ? -1e-3f : 1e-3f;
        x[i] = v;
    }
    return x;
}

static inline int32_t *h_randint(size_t n, int lo, int hi_incl) {
    int32_t *x = malloc(n * sizeof *x + 1);
    for (size_t i = 0; i < n; i++) {
        int v = lo + (int)(urand() * (float)(hi_incl - lo + 1));
        x[i] = v > hi_incl ? hi_incl : v;
    }
    return x;
}

/* ------------------------------------------------------------------ paired buffers */

typedef struct {
    void *c, *g;      /* cpu and gpu copies */
    size_t bytes;
} Buf;

#define MAX_BUFS 64
static Buf bufs[MAX_BUFS];
static int n_bufs;

static inline Buf *buf_new(size_t bytes) {
    if (n_bufs == MAX_BUFS) {
        fprintf(stderr, "test: too many buffers\n");
        exit(1);
    }
    Buf *b = &bufs[n_bufs++];
    b->bytes = bytes;
    b->c = cpu->alloc(bytes ? bytes : 4);
    b->g = gpu->alloc(bytes ? bytes : 4);
    if (!b->c || !b->g) {
        fprintf(stderr, "test: out of memory allocating %zu bytes\n", bytes);
        exit(1);
    }
    return b;
}

static inline void buf_set(Buf *b, const void *host) {
    cpu->to_device(b->c, host, b->bytes);
    gpu->to_device(b->g, host, b->bytes);
}

static inline void free_all(void) {
    for (int i = 0; i < n_bufs; i++) {
        cpu->free(bufs[i].c);
        gpu->free(bufs[i].g);
    }
    n_bufs = 0;
}

/* An input (or an accumulated output): the same values on both. */
static inline Buf *in_f(const float *host, size_t n) {
    Buf *b = buf_new(n * sizeof(float));
    buf_set(b, host);
    return b;
}

static inline Buf *in_rand(size_t n, float lo, float hi) {
    float *h = h_rand(n, lo, hi);
    Buf *b = in_f(h, n);
    free(h);
    return b;
}

/* An attention input qkv (B, T, 3C), uniform in [-1.5, 1.5). key_ramp R > 0: the key of
 * position j scaled by 1 + j / R, so that a query's largest score keeps growing along the keys
 * by more than one tile's range (the fused forward must then move its reference maximum and
 * rescale O, which inputs of one scale rarely ask). bf16_exact: every value rounded to bf16,
 * so that a bf16 kernel's rounding of Q, K and V is exact (scores of 10 would otherwise carry
 * bf16's relative error 2^-9 times 10 into the probabilities, a few percent). */
static inline Buf *in_qkv(int B, int T, int C, int key_ramp, int bf16_exact) {
    const size_t n = (size_t)B * T * 3 * C;
    float *h = h_rand(n, -1.5f, 1.5f);
    if (key_ramp > 0)
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int c = C; c < 2 * C; c++) h[r * 3 * C + c] *= 1.0f + (float)(r % T) / (float)key_ramp;
    if (bf16_exact)
        for (size_t i = 0; i < n; i++) h[i] = mha_bf16_to_float(mha_bf16_round(h[i]));
    Buf *b = in_f(h, n);
    free(h);
    return b;
}

static inline Buf *in_i(const int32_t *host, size_t n) {
    Buf *b = buf_new(n * sizeof(int32_t));
    buf_set(b, host);
    return b;
}

/* An overwritten output: NaN (all bits set) on both. */
static inline Buf *out_poison(size_t n_elems, size_t elem) {
    Buf *b = buf_new(n_elems * elem);
    void *h = malloc(b->bytes + 1);
    memset(h, 0xff, b->bytes);
    buf_set(b, h);
    free(h);
    return b;
}

#define F(b) ((float *)(b)->g)
#define FC(b) ((float *)(b)->c)
#undef I   /* <complex.h>'s imaginary unit (cblas.h, through gemm_bf16.h): not used here */
#define I(b) ((int32_t *)(b)->g)
#define IC(b) ((int32_t *)(b)->c)

/* lengths: uniform in [T/2, T]; example 1 has length 1, example 2 length T; with_zero: the
 * last has length 0 */
static inline int32_t *make_lengths(int B, int T, int with_zero) {
    int32_t *len = h_randint(B, T / 2 > 0 ? T / 2 : 1, T);
    if (B > 1) len[1] = 1;
    if (B > 2) len[2] = T;
    if (with_zero && B > 3) len[B - 1] = 0;
    return len;
}

static inline int wanted(const char *name) { return !filter || strstr(name, filter) != NULL; }

/* Compares the float buffer of both backends (gpu against cpu as reference). */
static inline void cmp_f(const char *name, Buf *b, size_t n, double tol) {
    float *hc = malloc(n * sizeof(float) + 1), *hg = malloc(n * sizeof(float) + 1);
    cpu->to_host(hc, b->c, n * sizeof(float));
    gpu->to_host(hg, b->g, n * sizeof(float));
    double e = rel_err_f_f(hg, hc, n);
    n_checks++;
    int ok = e < tol;
    printf("%-4s %-64s rel %.3g\n", ok ? "ok" : "FAIL", name, e);
    CHECK(ok, "%s: relative error %.3g >= %.1g", name, e, tol);
    if (!ok) {   /* the first few differences */
        int shown = 0;
        for (size_t i = 0; i < n && shown < 5; i++) {
            double d = fabs((double)hg[i] - (double)hc[i]);
            if (d > tol * 1e-3 * (fabs((double)hc[i]) + 1) || isnan(d)) {
                fprintf(stderr, "   [%zu] gpu %.8g cpu %.8g\n", i, hg[i], hc[i]);
                shown++;
            }
        }
    }
    free(hc);
    free(hg);
}

static inline void cmp_i(const char *name, Buf *b, size_t n) {
    int32_t *hc = malloc(n * sizeof(int32_t) + 1), *hg = malloc(n * sizeof(int32_t) + 1);
    cpu->to_host(hc, b->c, n * sizeof(int32_t));
    gpu->to_host(hg, b->g, n * sizeof(int32_t));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += hc[i] != hg[i];
    n_checks++;
    printf("%-4s %-64s %zu mismatches\n", bad ? "FAIL" : "ok", name, bad);
    CHECK(bad == 0, "%s: %zu of %zu integers differ", name, bad, n);
    free(hc);
    free(hg);
}

/* Bitwise equality of two gpu buffers (determinism). */
static inline void cmp_bits_gpu(const char *name, const void *a, const void *b, size_t bytes) {
    unsigned char *ha = malloc(bytes + 1), *hb = malloc(bytes + 1);
    gpu->to_host(ha, a, bytes);
    gpu->to_host(hb, b, bytes);
    int same = memcmp(ha, hb, bytes) == 0;
    n_checks++;
    printf("%-4s %-64s %s\n", same ? "ok" : "FAIL", name, same ? "bitwise equal" : "DIFFER");
    CHECK(same, "%s: the two buffers differ", name);
    free(ha);
    free(hb);
}

/* Relative error between two gpu float buffers. */
static inline void cmp_gpu_gpu(const char *name, const float *a, const float *ref, size_t n, double tol) {
    float *ha = malloc(n * sizeof(float) + 1), *hr = malloc(n * sizeof(float) + 1);
    gpu->to_host(ha, a, n * sizeof(float));
    gpu->to_host(hr, ref, n * sizeof(float));
    double e = rel_err_f_f(ha, hr, n);
    n_checks++;
    printf("%-4s %-64s rel %.3g\n", e < tol ? "ok" : "FAIL", name, e);
    CHECK(e < tol, "%s: relative error %.3g >= %.1g", name, e, tol);
    free(ha);
    free(hr);
}

/* The fused attention of `be` (the fp32 or the bf16 table) with qkv and dout 4 bytes past a
 * 16-byte boundary, so that every tile is loaded one float at a time (fused_load_tile), against
 * the same values 16-byte aligned (four at a time): forward and backward bitwise equal. qkv
 * (B, T, 3C) and len (B) on the gpu; `name` says which case. */
static inline void cmp_attention_misaligned(const char *name, const Backend *be, const float *qkv,
                                            const int32_t *len, int B, int T, int C, int NH,
                                            int causal, float p, uint64_t seed) {
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    char n2[300];
    float *qm = gpu->alloc((nqkv + 1) * 4), *dm = gpu->alloc((nout + 1) * 4);
    float *q_off = qm + 1, *d_off = dm + 1;   /* (B, T, 3C) and (B, T, C), 4 bytes off */
    float *dout = gpu->alloc(nout * 4);
    float *hd = h_rand(nout, -1, 1);
    gpu->to_device(dout, hd, nout * 4);
    free(hd);
    CHECK(((uintptr_t)qkv & 15) == 0 && ((uintptr_t)dout & 15) == 0 && ((uintptr_t)q_off & 15) != 0 &&
              ((uintptr_t)d_off & 15) != 0,
          "%s: the aligned buffers must be 16-byte aligned, the offset ones not", name);
    gpu->copy(q_off, qkv, nqkv * 4);
    gpu->copy(d_off, dout, nout * 4);

    float *o[2], *l[2], *dq[2];
    for (int k = 0; k < 2; k++) {   /* 0: aligned, 1: offset */
        o[k] = gpu->alloc(nout * 4);
        l[k] = gpu->alloc(nlse * 4);
        dq[k] = gpu->alloc(nqkv * 4);
        gpu->zero(dq[k], nqkv * 4);
        be->attention_forward_fused(o[k], l[k], k ? q_off : qkv, len, B, T, C, NH, causal, p, seed);
    }
    snprintf(n2, sizeof n2, "%s out, inputs 4 bytes off 16", name);
    cmp_bits_gpu(n2, o[0], o[1], nout * 4);
    snprintf(n2, sizeof n2, "%s lse, inputs 4 bytes off 16", name);
    cmp_bits_gpu(n2, l[0], l[1], nlse * 4);
    for (int k = 0; k < 2; k++)   /* both from the aligned forward's out and lse */
        be->attention_backward_fused(dq[k], k ? d_off : dout, o[0], k ? q_off : qkv, l[0], len, B,
                                     T, C, NH, causal, p, seed);
    snprintf(n2, sizeof n2, "%s dqkv, inputs 4 bytes off 16", name);
    cmp_bits_gpu(n2, dq[0], dq[1], nqkv * 4);
    for (int k = 0; k < 2; k++) {
        gpu->free(o[k]);
        gpu->free(l[k]);
        gpu->free(dq[k]);
    }
    gpu->free(qm);
    gpu->free(dm);
    gpu->free(dout);
}

#endif
