/* tests/kernels/test_cpu_bf16.c: the mixed-precision CPU path (kernels/cpu/gemm_bf16.h,
 * kernels/cpu/layers_bf16.h) against double references computed on the bf16-ROUNDED inputs,
 * so that what is left to measure is the fp32 accumulation alone.
 *
 *  1. mha_bf16_round on known cases (ties to even both ways, negatives, subnormals to signed
 *     zero, infinities, NaN, overflow to inf), against a value-based reference on every
 *     sign/exponent/mantissa-top pattern with critical low halves, and mha_bf16_to_float
 *     round trips of all 65536 bf16 patterns.
 *  2. mha_bf16_pack_b + mha_bf16_gemm, fast (AVX512-BF16, and AMX where the CPU has it) and
 *     portable paths, all four
 *     (trans_a, trans_b), awkward sizes (K odd, K > MHA_BF16_KC, N not a multiple of 32, M not
 *     a multiple of 8), strides above the minimum whose unused cells hold NaN, C accumulated
 *     into, guard cells after each row of C that must stay bit-identical, the packed B layout
 *     bit-exact, fast vs portable, and a reference on UNROUNDED inputs that must be clearly
 *     worse (the test sees the rounding).
 *  3. mha_linear_forward_bf16 / mha_linear_backward_bf16 (both paths, 1 and 2 OpenMP threads,
 *     a size above MHA_GEMM_PAR_MIN and a small one) against mha_linear_*_f64 on rounded
 *     copies; gradients accumulate; NULL dinp / NULL dbias; 1 vs 2 threads bit-identical.
 *     Also C = bias + A @ B ignoring C's old contents (accumulate = 0) and the fused row sums
 *     of A (a linear layer's bias gradient), bit-exact.
 *  4. mha_cpu_backend_bf16: NULL exactly when the fast path is unavailable, else the fp32
 *     table with bf16 = 1 and the linear and attention entries replaced.
 *  5. the attention with bf16 products (math and fused, padding, causal, dropout) against
 *     the double kernels, within bf16 rounding (see test_attention).
 *  6. the backend's fused forward (attention_bf16.c) bit for bit against the generic one.
 *  7. mha_bf16_gemm_packed_a (its second product) bit for bit against mha_bf16_gemm.
 *
 * Error: normwise, max|c - ref| / max|ref|. Bound for a product of depth K (see tol_k): the
 * products of two bf16 are exact in fp32, so the only rounding is in the ~K fp32 additions
 * (plus the add of each depth block into C); each adds at most 2^-24 |partial sum|, with
 * random signs, so the error grows like sqrt(K) 2^-24 |partial| and |partial| <~ max|ref|.
 * tol_k(K) = 8 sqrt(K + 1) 2^-24 (6.7e-7 at K = 1, 1.2e-5 at K = 600) is >= 20x what is
 * measured (<= 0.05 tol_k on every case here: 5e-8 .. 3e-7), while bugs land far above it:
 * an unrounded input or ties rounded up ~1e-3, a lost k pair or a wrong index ~1e-1, a NaN
 * read from outside the matrix: inf.
 * Without AVX512_BF16 the fast-path checks print "skipped" and the portable ones still run.
 * Checks 2, 3, 5, 6 and 7 run once on the fast path's AVX512-BF16 kernels and, on a CPU with
 * AMX-BF16, once more on its AMX kernels (tdpbf16ps: the same bounds; its sums are not
 * vdpbf16ps's bit for bit, so "bit-identical" there means AMX against AMX). */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "kernels/backend.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/cpu/layers_f64.h"
#include "kernels/cpu/layers_bf16.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

static int have_fast = 0;   /* the CPU runs the AVX512-BF16 path */
static const char *fast_name = "fast";   /* the fast kernels under test: "avx512" or "amx" */

static double tol_k(int K) { return 8.0 * sqrt((double)K + 1.0) * ldexp(1.0, -24); }

/* two errors in one line: the one nearer its bound is printed */
static void result2(const char *what, double e1, double t1, double e2, double t2) {
    if (!(e1 / t1 >= e2 / t2)) e1 = e2, t1 = t2;
    test_result(what, e1, t1);
}
static void skipped(const char *what) { printf("%-58s skipped (no AVX512_BF16)\n", what); }

/* 64-byte aligned (the fast path loads packed B and the scratch with aligned loads) */
static uint16_t *u16_aligned(size_t n) {
    return test_aligned((n * sizeof(uint16_t) + 63) & ~(size_t)63);
}

/* u16_aligned whose end (rounded up to 64 bytes) touches an unreadable page: a kernel reading
 * past the buffer stops the test with SIGSEGV. (The AMX kernels' tile loads are instructions
 * AddressSanitizer does not see.) Freed with u16_fenced_free(p, n). */
static uint16_t *u16_fenced(size_t n) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), bytes = (n * sizeof(uint16_t) + 63) & ~(size_t)63;
    const size_t data = (bytes + pg - 1) / pg * pg;
    char *base = mmap(NULL, data + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED || mprotect(base + data, pg, PROT_NONE) != 0) {
        perror("u16_fenced");
        exit(1);
    }
    return (uint16_t *)(void *)(base + data - bytes);
}
static void u16_fenced_free(uint16_t *p, size_t n) {
    const size_t pg = (size_t)sysconf(_SC_PAGESIZE), bytes = (n * sizeof(uint16_t) + 63) & ~(size_t)63;
    const size_t data = (bytes + pg - 1) / pg * pg;
    munmap((char *)p + bytes - data, data + pg);
}

/* x rounded to bf16, back in float */
static float rb(float x) { return mha_bf16_to_float(mha_bf16_round(x)); }

/* Test data: uniform in [-1, 1); one value in 8 is made an exact tie between two bf16 (low
 * half 0x8000), and one in 128 is a subnormal (must be flushed to zero). */
static uint64_t counter = 0;
static float gen(void) {
    uint64_t i = counter++;
    float v = 2.0f * mha_rng_uniform(31, i) - 1.0f;
    uint64_t r = mha_rng_u64(32, i);
    if ((r & 7) == 0) v = u2f((f2u(v) & 0xffff0000u) | 0x8000u);
    else if ((r & 127) == 1) v = u2f((uint32_t)(r >> 32) & 0x807fffffu);
    return v;
}
static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = gen();
}
/* ================================ 1. rounding ================================ */

/* Independent reference: the nearer of the two bf16 neighbours of x by value (ties to the
 * even one), subnormal x -> signed zero; x finite. */
static uint16_t ref_round(uint32_t u) {
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);
    uint32_t mag = u & 0x7fffffffu, lo = mag >> 16, hi = lo + 1;
    double x = (double)u2f(mag), vlo = (double)u2f(lo << 16);
    double vhi = hi == 0x7f80u ? ldexp(1.0, 128) : (double)u2f(hi << 16);   /* inf: 2^128 */
    double dlo = x - vlo, dhi = vhi - x;
    uint32_t r = dlo < dhi ? lo : dhi < dlo ? hi : ((lo & 1) ? hi : lo);
    return (uint16_t)(r | ((u >> 16) & 0x8000u));
}

static void test_round(void) {
    static const struct { uint32_t in; uint16_t out; const char *what; } cases[] = {
        {0x3f800000u, 0x3f80, "1.0"},
        {0x3f808000u, 0x3f80, "tie, even below"},
        {0x3f818000u, 0x3f82, "tie, odd below: up"},
        {0x3f808001u, 0x3f81, "just above a tie: up"},
        {0x3f807fffu, 0x3f80, "just below a tie: down"},
        {0xbf800000u, 0xbf80, "-1.0"},
        {0xbf808000u, 0xbf80, "negative tie, even"},
        {0xbf818000u, 0xbf82, "negative tie, odd: away"},
        {0xbf808001u, 0xbf81, "negative above a tie"},
        {0x3fff8000u, 0x4000, "tie carrying into the exponent"},
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0"},
        {0x00000001u, 0x0000, "smallest subnormal -> +0"},
        {0x007fffffu, 0x0000, "largest subnormal -> +0 (flushed, not rounded)"},
        {0x807fffffu, 0x8000, "negative subnormal -> -0"},
        {0x00800000u, 0x0080, "smallest normal"},
        {0x7f800000u, 0x7f80, "+inf"},
        {0xff800000u, 0xff80, "-inf"},
        {0x7f7f7fffu, 0x7f7f, "large, stays finite"},
        {0x7f7f8000u, 0x7f80, "tie above the largest odd bf16 -> inf"},
        {0x7f7fffffu, 0x7f80, "FLT_MAX -> +inf"},
        {0xff7fffffu, 0xff80, "-FLT_MAX -> -inf"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint16_t got = mha_bf16_round(u2f(cases[i].in));
        if (got != cases[i].out) {
            bad++;
            printf("  round(0x%08x) [%s] = 0x%04x, want 0x%04x\n", (unsigned)cases[i].in, cases[i].what,
                   (unsigned)got, (unsigned)cases[i].out);
        }
    }
    char what[96];
    snprintf(what, sizeof what, "bf16_round: %zu known cases", sizeof cases / sizeof cases[0]);
    test_expect(what, bad == 0);

    /* NaN stays NaN, including a signalling NaN whose payload is all in the low half
     * (truncation would turn it into inf) */
    static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fa00000u, 0xffffffffu};
    bad = 0;
    for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
        uint16_t h = mha_bf16_round(u2f(nans[i]));
        if ((h & 0x7f80) != 0x7f80 || (h & 0x7f) == 0 || !isnan(mha_bf16_to_float(h))) {
            bad++;
            printf("  round(NaN 0x%08x) = 0x%04x, not a NaN\n", (unsigned)nans[i], (unsigned)h);
        }
    }
    test_expect("bf16_round: NaN stays NaN (6 patterns)", bad == 0);

    /* against the value-based reference: every upper half (sign, exponent, 7 mantissa bits)
     * with low halves at and around the tie, the extremes and a random one */
    long wrong = 0, tried = 0;
    for (uint32_t hi = 0; hi < 65536; hi++) {
        if ((hi & 0x7f80u) == 0x7f80u) continue;   /* inf / NaN: known cases above */
        const uint32_t lows[8] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff,
                                  (uint32_t)(mha_rng_u64(7, hi) & 0xffff), 0x4000};
        for (int j = 0; j < 8; j++) {
            uint32_t u = (hi << 16) | lows[j];
            tried++;
            if (mha_bf16_round(u2f(u)) != ref_round(u)) {
                if (wrong < 5)
                    printf("  round(0x%08x) = 0x%04x, reference 0x%04x\n", (unsigned)u,
                           (unsigned)mha_bf16_round(u2f(u)), (unsigned)ref_round(u));
                wrong++;
            }
        }
    }
    snprintf(what, sizeof what, "bf16_round vs value reference (%ld inputs)", tried);
    test_expect(what, wrong == 0);

    /* to_float is exact (h << 16); round(to_float(h)) == h for all non-NaN, non-subnormal h,
     * and subnormal h go to signed zero */
    long trip = 0, exact = 0, sub = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float x = mha_bf16_to_float((uint16_t)h);
        if (f2u(x) != h << 16) exact++;
        int e = (int)((h >> 7) & 0xff), m = (int)(h & 0x7f);
        if (e == 0xff && m) continue;                               /* NaN */
        if (e == 0 && m) {
            if (mha_bf16_round(x) != (h & 0x8000u)) sub++;          /* subnormal */
            continue;
        }
        if (mha_bf16_round(x) != h) trip++;
    }
    test_expect("bf16_to_float exact for all 65536 patterns", exact == 0);
    test_expect("bf16 round trip, all non-NaN non-subnormal patterns", trip == 0);
    test_expect("bf16 subnormal patterns -> signed zero", sub == 0);
}

/* ================================ 2. the GEMM ================================ */

/* Guard cells of C: test_util.h's guard_bits. */

typedef struct { int M, N, K; } Size;
static const Size sizes[] = {
    {1, 1, 1},    {7, 9, 31},   {8, 32, 8},    {9, 33, 7},    {31, 64, 33},  {33, 31, 200},
    {64, 200, 9}, {200, 7, 513}, {13, 65, 600}, {1, 513, 64}, {17, 40, 257}, {9, 96, 1},
    {40, 70, 256}, {16, 1, 2}, {19, 45, 30}, {33, 64, 62},   /* the last two: AMX's longest remainder, 30 of 32 */
};
#define NSIZES ((int)(sizeof sizes / sizeof sizes[0]))

/* Mismatches between packed B and the layout of gemm_bf16.h: panel p, k pair kk, column j,
 * element r holds round(B(2kk + r, 32p + j)), zero past N and past K. */
static long pack_mismatches(const uint16_t *packed, const float *b, int ldb, int tb, int K, int N) {
    const int kp2 = (K + 1) / 2, np = mha_bf16_panels(N);
    long bad = 0;
    for (int p = 0; p < np; p++)
        for (int kk = 0; kk < kp2; kk++)
            for (int j = 0; j < MHA_BF16_NR; j++)
                for (int r = 0; r < 2; r++) {
                    int k = 2 * kk + r, n = p * MHA_BF16_NR + j;
                    uint16_t want = k < K && n < N ? mha_bf16_round(tb ? b[(size_t)n * ldb + k] : b[(size_t)k * ldb + n]) : 0;
                    size_t at = ((size_t)p * kp2 + kk) * 2 * MHA_BF16_NR + 2 * (size_t)j + (size_t)r;
                    bad += packed[at] != want;
                }
    return bad;
}

/* C (M rows of ldc, plus one guard row) += A @ B on the chosen path; counts packing layout
 * errors into *pack_bad. */
static void run_gemm(int portable, int M, int N, int K, const float *a, int lda, int ta, const float *b, int ldb,
                     int tb, float *c, int ldc, long *pack_bad) {
    mha_bf16_force_portable(portable);
    size_t pe = mha_bf16_packed_b_elems(K, N), se = mha_bf16_scratch_elems(M);
    uint16_t *packed = u16_aligned(pe), *scratch = u16_fenced(se);   /* rows of packed A past the scratch fault */
    for (size_t i = 0; i < pe; i++) packed[i] = 0x7fc1;   /* NaN: unwritten padding shows */
    for (size_t i = 0; i < se; i++) scratch[i] = 0x7fc1;
    const int np = mha_bf16_panels(N);
    mha_bf16_pack_b(packed, b, ldb, tb, K, N, 0, np / 2);   /* two disjoint panel ranges */
    mha_bf16_pack_b(packed, b, ldb, tb, K, N, np / 2, np);
    *pack_bad += pack_mismatches(packed, b, ldb, tb, K, N);
    mha_bf16_gemm(M, N, K, a, lda, ta, packed, c, ldc, 1, NULL, NULL, scratch);
    free(packed);
    u16_fenced_free(scratch, se);
    mha_bf16_force_portable(0);
}

static int guards_intact(const float *c, int M, int N, int ldc) {
    for (int m = 0; m <= M; m++)
        for (int n = m < M ? N : 0; n < ldc; n++)
            if (f2u(c[(size_t)m * ldc + n]) != guard_bits((size_t)m * ldc + n)) return 0;
    return 1;
}

static void test_gemm(void) {
    /* per path (0 fast, 1 portable) and (ta, tb): worst err / tol and its error */
    double worst[2][4] = {{0}}, worst_err[2][4] = {{0}}, fp_worst = 0, fp_err = 0, fp_tol = tol_k(1);
    double unr_min_ratio = INFINITY, unr_min = INFINITY, unr_max = 0;
    int worst_at[2][4] = {{0}};
    int guards_ok[2] = {1, 1}, empty_ok = 1;
    long pack_bad[2] = {0, 0};
    int bitwise_same = 1;
    for (int s = 0; s < NSIZES; s++) {
        const int M = sizes[s].M, N = sizes[s].N, K = sizes[s].K;
        for (int t = 0; t < 4; t++) {
            const int ta = t >> 1, tb = t & 1;
            /* storage: A (M, K) or (K, M), B (K, N) or (N, K), strides above the minimum,
             * the cells past each row's end NaN (a read outside the matrix shows) */
            const int arows = ta ? K : M, acols = ta ? M : K, lda = acols + 3;
            const int brows = tb ? N : K, bcols = tb ? K : N, ldb = bcols + 5;
            /* ldc: 3 guards per row, or (every other case) guards up to past the last panel's end */
            const int ldc = ((s + t) & 1) ? mha_bf16_panels(N) * MHA_BF16_NR + 5 : N + 3;
            float *a = test_malloc((size_t)arows * lda * sizeof *a), *b = test_malloc((size_t)brows * ldb * sizeof *b);
            for (int i = 0; i < arows; i++)
                for (int j = 0; j < lda; j++) a[(size_t)i * lda + j] = j < acols ? gen() : u2f(0x7fc00000u);
            for (int i = 0; i < brows; i++)
                for (int j = 0; j < ldb; j++) b[(size_t)i * ldb + j] = j < bcols ? gen() : u2f(0x7fc00000u);
            size_t nc = (size_t)(M + 1) * ldc;
            float *c0 = test_malloc(nc * sizeof *c0), *cp = test_malloc(nc * sizeof *cp), *cf = test_malloc(nc * sizeof *cf);
            for (size_t i = 0; i < nc; i++) c0[i] = u2f(guard_bits(i));
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) c0[(size_t)m * ldc + n] = gen();
            /* references on rounded and on unrounded inputs; errors over the M x N cells */
            double *ref = test_malloc((size_t)M * N * sizeof *ref), *unr = test_malloc((size_t)M * N * sizeof *unr);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    double sr = c0[(size_t)m * ldc + n], su = sr;
                    for (int k = 0; k < K; k++) {
                        float av = ta ? a[(size_t)k * lda + m] : a[(size_t)m * lda + k];
                        float bv = tb ? b[(size_t)n * ldb + k] : b[(size_t)k * ldb + n];
                        sr += (double)rb(av) * (double)rb(bv);
                        su += (double)av * (double)bv;
                    }
                    ref[(size_t)m * N + n] = sr, unr[(size_t)m * N + n] = su;
                }
            float *got = test_malloc((size_t)M * N * sizeof *got), *gotf = test_malloc((size_t)M * N * sizeof *gotf);
            for (int path = have_fast ? 0 : 1; path < 2; path++) {
                float *c = path ? cp : cf;
                memcpy(c, c0, nc * sizeof *c);
                run_gemm(path, M, N, K, a, lda, ta, b, ldb, tb, c, ldc, &pack_bad[path]);
                if (!guards_intact(c, M, N, ldc)) {
                    if (guards_ok[path])
                        printf("  %s: guard cell of C changed (M=%d N=%d K=%d ta=%d tb=%d)\n",
                               path ? "portable" : fast_name, M, N, K, ta, tb);
                    guards_ok[path] = 0;
                }
                float *g = path ? got : gotf;
                for (int m = 0; m < M; m++) memcpy(g + (size_t)m * N, c + (size_t)m * ldc, (size_t)N * sizeof *g);
                double e = rel_err_f_d(g, ref, (size_t)M * N), r = e / tol_k(K);
                if (!(r <= worst[path][t])) worst[path][t] = r, worst_err[path][t] = e, worst_at[path][t] = s;
                if (path == 1) {
                    /* the rounding is visible: against exact products of the unrounded
                     * inputs the error is at bf16 level (only where K > 1 and there are a
                     * few cells, so that a lucky draw cannot make it small) */
                    double eu = rel_err_f_d(g, unr, (size_t)M * N);
                    if (K >= 7 && (size_t)M * N >= 7) {
                        if (eu / tol_k(K) < unr_min_ratio) unr_min_ratio = eu / tol_k(K);
                        if (eu < unr_min) unr_min = eu;
                        if (eu > unr_max) unr_max = eu;
                    }
                }
            }
            if (have_fast) {
                double e = rel_err_f_f(gotf, got, (size_t)M * N), r = e / tol_k(K);
                if (!(r <= fp_worst)) fp_worst = r, fp_err = e, fp_tol = tol_k(K);
                if (memcmp(gotf, got, (size_t)M * N * sizeof *got) != 0) bitwise_same = 0;
            }
            free(a), free(b), free(c0), free(cp), free(cf), free(ref), free(unr), free(got), free(gotf);
        }
    }
    /* empty products leave C alone */
    {
        float c[4] = {1, 2, 3, 4}, a[4] = {1, 1, 1, 1};
        uint16_t *packed = u16_aligned(mha_bf16_packed_b_elems(2, 2) + 64), *scratch = u16_aligned(mha_bf16_scratch_elems(2));
        memset(packed, 0, (mha_bf16_packed_b_elems(2, 2) + 64) * sizeof *packed);
        for (int path = have_fast ? 0 : 1; path < 2; path++) {
            mha_bf16_force_portable(path);
            mha_bf16_gemm(0, 2, 2, a, 2, 0, packed, c, 2, 1, NULL, NULL, scratch);
            mha_bf16_gemm(2, 0, 2, a, 2, 0, packed, c, 2, 1, NULL, NULL, scratch);
            mha_bf16_gemm(2, 2, 0, a, 2, 0, packed, c, 2, 1, NULL, NULL, scratch);
        }
        mha_bf16_force_portable(0);
        empty_ok = c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4;
        free(packed), free(scratch);
    }

    static const char *tn[4] = {"A   @ B  ", "A   @ B^T", "A^T @ B  ", "A^T @ B^T"};
    char what[128];
    for (int path = 0; path < 2; path++) {
        const char *pn = path ? "portable" : fast_name;
        for (int t = 0; t < 4; t++) {
            snprintf(what, sizeof what, "gemm %-8s %s, %d sizes (worst %dx%dx%d)", pn, tn[t], NSIZES,
                     sizes[worst_at[path][t]].M, sizes[worst_at[path][t]].N, sizes[worst_at[path][t]].K);
            if (path == 0 && !have_fast) {
                snprintf(what, sizeof what, "gemm %-8s %s", pn, tn[t]);
                skipped(what);
                continue;
            }
            /* the size with the largest err / tol_k(K): passes when every size is within */
            test_result(what, worst_err[path][t], tol_k(sizes[worst_at[path][t]].K));
        }
        snprintf(what, sizeof what, "gemm %-8s guard cells of C bit-identical", pn);
        if (path == 0 && !have_fast) skipped(what);
        else test_expect(what, guards_ok[path]);
        snprintf(what, sizeof what, "gemm %-8s packed B matches the documented layout", pn);
        if (path == 0 && !have_fast) skipped(what);
        else {
            if (pack_bad[path]) printf("  %ld packed elements differ\n", pack_bad[path]);
            test_expect(what, pack_bad[path] == 0);
        }
    }
    if (have_fast) {
        snprintf(what, sizeof what, "gemm %s vs portable (all cases, worst err / tol_k(K))", fast_name);
        test_result(what, fp_err, fp_tol);
        printf("  (%s and portable results %s bit-identical)\n", fast_name, bitwise_same ? "are" : "are not");
    } else {
        skipped("gemm fast vs portable");
    }
    printf("  unrounded-input reference: err %.3e .. %.3e, at least %.0fx tol_k(K)\n", unr_min, unr_max, unr_min_ratio);
    test_expect("gemm vs UNROUNDED reference is >= 10x tol_k (sees rounding)", unr_min_ratio >= 10.0);
    test_expect("gemm with M, N or K = 0 leaves C untouched", empty_ok);
}

/* ============================== 3. linear layer ============================== */

static void test_linear(int portable, int N, int IC, int OC) {
    const char *pn = portable ? "portable" : fast_name;
    char what[128];
    if (!portable && !have_fast) {
        snprintf(what, sizeof what, "linear %s N=%d IC=%d OC=%d", pn, N, IC, OC);
        skipped(what);
        return;
    }
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = test_malloc(ni * 4), *w = test_malloc(nw * 4), *bias = test_malloc((size_t)OC * 4), *dout = test_malloc(no * 4);
    float *dinp0 = test_malloc(ni * 4), *dw0 = test_malloc(nw * 4), *db0 = test_malloc((size_t)OC * 4);
    fill(inp, ni), fill(w, nw), fill(bias, (size_t)OC), fill(dout, no);
    fill(dinp0, ni), fill(dw0, nw), fill(db0, (size_t)OC);   /* gradients accumulate */
    /* references: products of the rounded inp, w, dout; bias and dbias in full precision */
    double *inp_r = test_malloc(ni * 8), *w_r = test_malloc(nw * 8), *dout_r = test_malloc(no * 8), *bias_d = test_malloc((size_t)OC * 8);
    double *out_ref = test_malloc(no * 8), *outnb_ref = test_malloc(no * 8);
    double *dinp_ref = test_malloc(ni * 8), *dw_ref = test_malloc(nw * 8), *db_ref = test_malloc((size_t)OC * 8);
    for (size_t i = 0; i < ni; i++) inp_r[i] = rb(inp[i]), dinp_ref[i] = dinp0[i];
    for (size_t i = 0; i < nw; i++) w_r[i] = rb(w[i]), dw_ref[i] = dw0[i];
    for (size_t i = 0; i < no; i++) dout_r[i] = rb(dout[i]);
    for (int o = 0; o < OC; o++) {
        bias_d[o] = bias[o];
        double s = db0[o];
        for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];   /* the fp32 dout */
        db_ref[o] = s;
    }
    mha_linear_forward_f64(out_ref, inp_r, w_r, bias_d, N, IC, OC);
    mha_linear_forward_f64(outnb_ref, inp_r, w_r, NULL, N, IC, OC);
    mha_linear_backward_f64(dinp_ref, dw_ref, NULL, dout_r, inp_r, w_r, N, IC, OC, 1);

    float *out = test_malloc(no * 4), *dinp = test_malloc(ni * 4), *dw = test_malloc(nw * 4), *db = test_malloc((size_t)OC * 4);
    float *out1 = test_malloc(no * 4), *dinp1 = test_malloc(ni * 4), *dw1 = test_malloc(nw * 4);
    int same = 1;
    mha_bf16_force_portable(portable);
    for (int nt = 1; nt <= 2; nt++) {
        omp_set_num_threads(nt);
        char head[64];
        snprintf(head, sizeof head, "linear %-8s %dx%dx%d %dT", pn, N, IC, OC, nt);
        for (size_t i = 0; i < no; i++) out[i] = u2f(0x7fc00000u);   /* out is overwritten */
        mha_linear_forward_bf16(out, inp, w, bias, N, IC, OC);
        snprintf(what, sizeof what, "%s forward", head);
        test_result(what, rel_err_f_d(out, out_ref, no), tol_k(IC));
        if (nt == 1) memcpy(out1, out, no * 4);
        else same &= memcmp(out1, out, no * 4) == 0;
        for (size_t i = 0; i < no; i++) out[i] = u2f(0x7fc00000u);
        mha_linear_forward_bf16(out, inp, w, NULL, N, IC, OC);
        snprintf(what, sizeof what, "%s forward, no bias", head);
        test_result(what, rel_err_f_d(out, outnb_ref, no), tol_k(IC));

        memcpy(dinp, dinp0, ni * 4), memcpy(dw, dw0, nw * 4), memcpy(db, db0, (size_t)OC * 4);
        mha_linear_backward_bf16(dinp, dw, db, dout, inp, w, N, IC, OC, 1);
        snprintf(what, sizeof what, "%s backward dinp", head);
        test_result(what, rel_err_f_d(dinp, dinp_ref, ni), tol_k(OC));
        snprintf(what, sizeof what, "%s backward dw", head);
        test_result(what, rel_err_f_d(dw, dw_ref, nw), tol_k(N));
        snprintf(what, sizeof what, "%s backward dbias (fp32 dout)", head);
        test_result(what, rel_err_f_d(db, db_ref, (size_t)OC), tol_k(N));
        if (nt == 1) memcpy(dinp1, dinp, ni * 4), memcpy(dw1, dw, nw * 4);
        else same &= memcmp(dinp1, dinp, ni * 4) == 0 && memcmp(dw1, dw, nw * 4) == 0;

        memcpy(dw, dw0, nw * 4), memcpy(db, db0, (size_t)OC * 4);
        mha_linear_backward_bf16(NULL, dw, db, dout, inp, w, N, IC, OC, 1);
        snprintf(what, sizeof what, "%s dinp=NULL: dw, dbias", head);
        result2(what, rel_err_f_d(dw, dw_ref, nw), tol_k(N), rel_err_f_d(db, db_ref, (size_t)OC), tol_k(N));
        memcpy(dinp, dinp0, ni * 4), memcpy(dw, dw0, nw * 4);
        mha_linear_backward_bf16(dinp, dw, NULL, dout, inp, w, N, IC, OC, 1);
        snprintf(what, sizeof what, "%s dbias=NULL: dinp, dw", head);
        result2(what, rel_err_f_d(dinp, dinp_ref, ni), tol_k(OC), rel_err_f_d(dw, dw_ref, nw), tol_k(N));
        /* dinp overwritten: poisoned first, then dinp_ref less what it started from */
        for (size_t i = 0; i < ni; i++) dinp[i] = u2f(0x7fc00000u);
        mha_linear_backward_bf16(dinp, NULL, NULL, dout, inp, w, N, IC, OC, 0);
        double worst = 0, top = 0;
        for (size_t i = 0; i < ni; i++) {
            double r = dinp_ref[i] - dinp0[i], e = fabs(dinp[i] - r);
            if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;   /* NaN: not written */
            top = fabs(r) > top ? fabs(r) : top;
        }
        snprintf(what, sizeof what, "%s dinp overwritten (was NaN)", head);
        test_result(what, top > 0 ? worst / top : worst, tol_k(OC));
    }
    mha_bf16_force_portable(0);
    snprintf(what, sizeof what, "linear %-8s %dx%dx%d 1T vs 2T bit-identical", pn, N, IC, OC);
    test_expect(what, same);
    free(inp), free(w), free(bias), free(dout), free(dinp0), free(dw0), free(db0);
    free(inp_r), free(w_r), free(dout_r), free(bias_d), free(out_ref), free(outnb_ref);
    free(dinp_ref), free(dw_ref), free(db_ref);
    free(out), free(dinp), free(dw), free(db), free(out1), free(dinp1), free(dw1);
}

/* ============================== 4. backend table ============================== */

static void test_backend(void) {
    char why[160] = "";
    mha_bf16_force_portable(0);
    const Backend *bb = mha_cpu_backend_bf16(2, why, sizeof why);
    if (!bb) {
        printf("  mha_cpu_backend_bf16: NULL (%s)\n", why);
        test_expect("backend_bf16 NULL only without AVX512_BF16", !mha_bf16_fast() && why[0] != 0);
        return;
    }
    test_expect("backend_bf16 available (fast path on)", mha_bf16_fast());
    const Backend *bf = mha_cpu_backend(2);
    test_expect("backend_bf16: bf16 = 1 (fp32 table: 0)", bb->bf16 == 1 && bf->bf16 == 0);
    test_expect("backend_bf16: linear and attention entries are the bf16 ones",
           bb->linear_forward == mha_linear_forward_bf16 && bb->linear_backward == mha_linear_backward_bf16 &&
           bb->linear_forward_post == mha_linear_forward_post_bf16 &&
           bb->attention_forward_math == mha_attention_forward_math_bf16 &&
           bb->attention_backward_math == mha_attention_backward_math_bf16 &&
           bb->attention_forward_fused == mha_attention_forward_packed_bf16 &&
           bb->attention_backward_fused == mha_attention_backward_fused_bf16);
    /* everything else is the fp32 table's: the name and every pointer from alloc on, with the
     * seven product entries blanked in copies (no padding after alloc: all pointers) */
    Backend x = *bb, y = *bf;
    x.linear_forward = y.linear_forward = NULL;
    x.linear_forward_post = y.linear_forward_post = NULL;
    x.linear_backward = y.linear_backward = NULL;
    x.attention_forward_math = y.attention_forward_math = NULL;
    x.attention_backward_math = y.attention_backward_math = NULL;
    x.attention_forward_fused = y.attention_forward_fused = NULL;
    x.attention_backward_fused = y.attention_backward_fused = NULL;
    const size_t from = offsetof(Backend, alloc);
    test_expect("backend_bf16: other entries equal mha_cpu_backend's",
           x.name == y.name && memcmp((char *)&x + from, (char *)&y + from, sizeof(Backend) - from) == 0);
    test_expect("backend_bf16: omp threads set to 2", omp_get_max_threads() == 2);
}

/* The start of C and the row sums of A: accumulate = 0 with a bias (and without) must ignore
 * C's old contents (NaN here) and give bias + A @ B; a_row_sums[m] += the double sum over k of
 * the fp32 A(m, k), in k order, rounded once: bit-identical to that computed here. Both
 * paths, both layouts of A, K over several depth blocks and K odd. */
static void test_gemm_start_and_sums(void) {
    static const Size cases[] = {{13, 40, 600}, {9, 33, 7}, {24, 70, 256}};
    for (int portable = 0; portable < 2; portable++) {
        if (!portable && !have_fast) {
            printf("%-58s skipped (no AVX512_BF16)\n", "gemm start/bias/row sums, fast path");
            continue;
        }
        double worst = 0, worst_tol = 1;
        long sums_bad = 0, nan_seen = 0;
        for (int cs = 0; cs < 3; cs++)
            for (int ta = 0; ta < 2; ta++)
                for (int with_bias = 0; with_bias < 2; with_bias++) {
                    const int M = cases[cs].M, N = cases[cs].N, K = cases[cs].K;
                    const int lda = ta ? M : K;
                    float *a = test_malloc((size_t)M * K * sizeof *a), *b = test_malloc((size_t)K * N * sizeof *b);
                    float *c = test_malloc((size_t)M * N * sizeof *c), *bias = test_malloc((size_t)N * sizeof *bias);
                    float *rs = test_malloc((size_t)M * sizeof *rs), *rs0 = test_malloc((size_t)M * sizeof *rs0);
                    for (int i = 0; i < M * K; i++) a[i] = gen();
                    for (int i = 0; i < K * N; i++) b[i] = gen();
                    for (int i = 0; i < N; i++) bias[i] = gen();
                    for (int i = 0; i < M * N; i++) c[i] = u2f(0x7fc00000u);
                    for (int m = 0; m < M; m++) rs[m] = rs0[m] = gen();
                    mha_bf16_force_portable(portable);
                    uint16_t *packed = u16_aligned(mha_bf16_packed_b_elems(K, N)), *scratch = u16_aligned(mha_bf16_scratch_elems(M));
                    mha_bf16_pack_b(packed, b, N, 0, K, N, 0, mha_bf16_panels(N));
                    mha_bf16_gemm(M, N, K, a, lda, ta, packed, c, N, 0, with_bias ? bias : NULL, rs, scratch);
                    mha_bf16_force_portable(0);
                    double num = 0, den = 0;
                    for (int m = 0; m < M; m++) {
                        double sum = 0;
                        for (int k = 0; k < K; k++) sum += ta ? a[(size_t)k * lda + m] : a[(size_t)m * lda + k];
                        float want = rs0[m] + (float)sum;
                        sums_bad += f2u(rs[m]) != f2u(want);
                        for (int n = 0; n < N; n++) {
                            double ref = with_bias ? bias[n] : 0.0;
                            for (int k = 0; k < K; k++)
                                ref += (double)rb(ta ? a[(size_t)k * lda + m] : a[(size_t)m * lda + k]) * rb(b[(size_t)k * N + n]);
                            double got = c[(size_t)m * N + n];
                            nan_seen += isnan(got);
                            if (fabs(got - ref) > num || isnan(got)) num = isnan(got) ? INFINITY : fabs(got - ref);
                            if (fabs(ref) > den) den = fabs(ref);
                        }
                    }
                    double e = num / den;
                    if (e / tol_k(K) > worst / worst_tol) worst = e, worst_tol = tol_k(K);
                    free(a), free(b), free(c), free(bias), free(rs), free(rs0), free(packed), free(scratch);
                }
        const char *pn = portable ? "portable" : fast_name;
        char what[96];
        snprintf(what, sizeof what, "gemm C = bias + A@B (old C NaN), %s", pn);
        test_result(what, worst, worst_tol);
        snprintf(what, sizeof what, "gemm row sums of A bit-exact, %s", pn);
        test_expect(what, sums_bad == 0 && nan_seen == 0);
    }
}

/* ============================= 5. the attention =============================
 * mha_attention_*_bf16 (attention_impl.h over mha_sgemm_bf16) against
 * the double kernels: the inputs of all products are rounded to bf16 (q, k, v, dy, and the
 * probabilities and dS between the products), so unlike the GEMM no exact double reference
 * exists; the bound is bf16's: each rounding is at most 2^-9 relative, and a handful of
 * them in a row give normwise errors of a few 1e-3. 2e-2 leaves room for that while a wrong
 * index, a lost block or a missing scale gives O(1). A check that the error is above 1e-5
 * shows bf16 is really used. Padding (lengths < T, one example empty), causal, dropout. */
static void test_attention(void) {
    if (!have_fast) {
        printf("%-58s skipped (no AVX512_BF16)\n", "attention bf16");
        return;
    }
    /* T above the bf16 instantiation's 256-row query blocks: two blocks for the first example */
    const int B = 3, T = 300, NH = 4, HS = 32, C = NH * HS, C3 = 3 * C;
    const int32_t lengths[3] = {300, 141, 0};
    const size_t nqkv = (size_t)B * T * C3, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = test_malloc(nqkv * sizeof *qkv), *dout = test_malloc(nout * sizeof *dout);
    double *qkvd = test_malloc(nqkv * sizeof *qkvd), *doutd = test_malloc(nout * sizeof *doutd);
    for (size_t i = 0; i < nqkv; i++) qkvd[i] = qkv[i] = 2.0f * gen();
    for (size_t i = 0; i < nout; i++) doutd[i] = dout[i] = gen();
    for (int variant = 0; variant < 4; variant++) {
        const int causal = variant & 1;
        const float p = variant & 2 ? 0.1f : 0.0f;
        const uint64_t seed = 77;
        /* double reference (math path) */
        double *outd = test_malloc(nout * sizeof *outd), *attd = test_malloc(natt * sizeof *attd);
        double *dattd = test_malloc(natt * sizeof *dattd), *dqkvd = calloc(nqkv, sizeof *dqkvd);
        mha_attention_forward_math_f64(outd, attd, qkvd, lengths, B, T, C, NH, causal, p, seed);
        mha_attention_backward_math_f64(dqkvd, dattd, doutd, qkvd, attd, lengths, B, T, C, NH, causal, p, seed);
        for (int fused = 0; fused < 2; fused++) {
            float *out = test_malloc(nout * sizeof *out), *dqkv = calloc(nqkv, sizeof *dqkv);
            float *att = test_malloc(natt * sizeof *att), *datt = test_malloc(natt * sizeof *datt);
            float *lse = test_malloc((size_t)B * NH * T * sizeof *lse);
            for (size_t i = 0; i < nout; i++) out[i] = u2f(0x7fc00000u);
            if (fused) {
                mha_attention_forward_fused_bf16(out, lse, qkv, lengths, B, T, C, NH, causal, p, seed);
                mha_attention_backward_fused_bf16(dqkv, dout, out, qkv, lse, lengths, B, T, C, NH, causal, p, seed);
            } else {
                mha_attention_forward_math_bf16(out, att, qkv, lengths, B, T, C, NH, causal, p, seed);
                mha_attention_backward_math_bf16(dqkv, datt, dout, qkv, att, lengths, B, T, C, NH, causal, p, seed);
            }
            char what[96];
            double eo = rel_err_f_d(out, outd, nout), eg = rel_err_f_d(dqkv, dqkvd, nqkv);
            snprintf(what, sizeof what, "attention bf16 %s%s%s forward", fused ? "fused" : "math",
                     causal ? " causal" : "", p > 0 ? " dropout" : "");
            test_result(what, eo, 2e-2);
            snprintf(what, sizeof what, "attention bf16 %s%s%s backward dqkv", fused ? "fused" : "math",
                     causal ? " causal" : "", p > 0 ? " dropout" : "");
            test_result(what, eg, 2e-2);
            test_expect("  ... and not fp32 (err > 1e-5)", eo > 1e-5 && eg > 1e-5);
            free(out), free(dqkv), free(att), free(datt), free(lse);
        }
        free(outd), free(attd), free(dattd), free(dqkvd);
    }
    free(qkv), free(dout), free(qkvd), free(doutd);
}

/* 7. mha_bf16_gemm_packed_a against mha_bf16_gemm on the same (rounded) A, bit for bit: fast and
 * portable kernels, accumulate on and off (C starts as random values), odd K (A's column K
 * zero), K over MHA_BF16_KC (two depth blocks), B packed for more rows than K (b_rows > K: its
 * rows past K real values, multiplied by A's zero column or not reached), a_stride wider than
 * K, M not a multiple of 8 (A's rows up to the micro-tile zero), N over one panel. A ends at an
 * unreadable page: only rows up to M rounded up to 8 may be read (AMX takes 16 at a time). */
static void test_gemm_packed_a(void) {
    static const struct { int M, N, K, b_rows, extra; } cases[] = {
        {13, 32, 32, 32, 0}, {8, 40, 7, 9, 2}, {21, 70, 300, 300, 0}, {5, 16, 257, 260, 4}, {1, 33, 1, 5, 0},
    };
    for (int portable = 0; portable < 2; portable++) {
        if (!portable && !have_fast) {
            skipped("gemm_packed_a fast");
            continue;
        }
        mha_bf16_force_portable(portable);
        int ok = 1;
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            const int M = cases[ci].M, N = cases[ci].N, K = cases[ci].K, BR = cases[ci].b_rows;
            const int stride = ((K + 1) & ~1) + 2 * cases[ci].extra, Mp = (M + 7) / 8 * 8;
            float *a = test_malloc((size_t)M * K * sizeof *a), *b = test_malloc((size_t)BR * N * sizeof *b);
            for (size_t i = 0; i < (size_t)M * K; i++) a[i] = gen();
            for (size_t i = 0; i < (size_t)BR * N; i++) b[i] = gen();
            uint16_t *pa = u16_fenced((size_t)Mp * stride), *pb_k = u16_aligned(mha_bf16_packed_b_elems(K, N));
            uint16_t *pb_r = u16_aligned(mha_bf16_packed_b_elems(BR, N)), *scr = u16_aligned(mha_bf16_scratch_elems(M));
            memset(pa, 0, (size_t)Mp * stride * sizeof *pa);
            for (int m = 0; m < M; m++)
                for (int k = 0; k < K; k++) pa[(size_t)m * stride + k] = mha_bf16_round(a[(size_t)m * K + k]);
            mha_bf16_pack_b(pb_k, b, N, 0, K, N, 0, mha_bf16_panels(N));    /* B (K, N): rows [0, K) */
            mha_bf16_pack_b(pb_r, b, N, 0, BR, N, 0, mha_bf16_panels(N));   /* the same, packed for BR rows */
            for (int acc = 0; acc < 2; acc++) {
                float *c1 = test_malloc((size_t)M * N * sizeof *c1), *c2 = test_malloc((size_t)M * N * sizeof *c2);
                for (size_t i = 0; i < (size_t)M * N; i++) c1[i] = c2[i] = acc ? gen() : u2f(0x7fc00000u);
                mha_bf16_gemm(M, N, K, a, K, 0, pb_k, c1, N, acc, NULL, NULL, scr);
                mha_bf16_gemm_packed_a(M, N, K, pa, stride, pb_r, BR, c2, N, acc);
                ok &= memcmp(c1, c2, (size_t)M * N * sizeof *c1) == 0;
                free(c1), free(c2);
            }
            free(a), free(b), free(pb_k), free(pb_r), free(scr);
            u16_fenced_free(pa, (size_t)Mp * stride);
        }
        char what[96];
        snprintf(what, sizeof what, "gemm_packed_a %s == mha_bf16_gemm (5 shapes, +=, =)", portable ? "portable" : fast_name);
        test_expect(what, ok);
    }
    mha_bf16_force_portable(0);
}

/* 6. mha_attention_forward_packed_bf16 (the backend's fused forward: K, V and the
 * probabilities packed once) against the generic fused forward it replaces: the same bits of
 * out and lse, on shapes that reach every branch: several query blocks, depth blocks of the
 * second product (L > MHA_BF16_KC), odd lengths, odd and wide heads (V in one, two or a
 * partial panel), lengths 0 and 1, causal, T odd; and with dropout (handed to the generic
 * path). Outputs start as NaN, so a row it leaves unwritten fails. */
static void test_attention_packed(void) {
    if (!have_fast) {
        printf("%-58s skipped (no AVX512_BF16)\n", "attention bf16 packed forward");
        return;
    }
    /* with AVX512_BF16 the AVX-512 rows are there too: the packed path really runs (dropout,
     * and the portable rows, go to the generic one: those cases check the hand-over) */
    test_expect("attention bf16 packed: its fast path is available", mha_rows_fast());
    static const struct { int B, T, NH, HS; int32_t len[4]; } cases[] = {
        {4, 64, 4, 32, {64, 57, 1, 0}},
        {3, 131, 2, 32, {131, 66, 65, 0}},
        {2, 300, 2, 32, {300, 257, 0, 0}},
        {3, 45, 3, 15, {45, 44, 2, 0}},
        {2, 97, 1, 64, {97, 33, 0, 0}},
        {2, 70, 2, 40, {70, 69, 0, 0}},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const int B = cases[ci].B, T = cases[ci].T, NH = cases[ci].NH, C = NH * cases[ci].HS;
        const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
        float *qkv = test_malloc(nqkv * sizeof *qkv);
        for (size_t i = 0; i < nqkv; i++) qkv[i] = 3.0f * gen();
        for (int variant = 0; variant < 3; variant++) {
            const int causal = variant == 1;
            const float p = variant == 2 ? 0.2f : 0.0f;
            float *o1 = test_malloc(nout * sizeof *o1), *o2 = test_malloc(nout * sizeof *o2);
            float *l1 = test_malloc(nlse * sizeof *l1), *l2 = test_malloc(nlse * sizeof *l2);
            for (size_t i = 0; i < nout; i++) o1[i] = o2[i] = u2f(0x7fc00000u);
            for (size_t i = 0; i < nlse; i++) l1[i] = l2[i] = u2f(0x7fc00000u);
            mha_attention_forward_fused_bf16(o1, l1, qkv, cases[ci].len, B, T, C, NH, causal, p, 5);
            mha_attention_forward_packed_bf16(o2, l2, qkv, cases[ci].len, B, T, C, NH, causal, p, 5);
            int nan = 0;
            for (size_t i = 0; i < nout; i++) nan |= o2[i] != o2[i];
            for (size_t i = 0; i < nlse; i++) nan |= l2[i] != l2[i];
            char what[96];
            snprintf(what, sizeof what, "attention bf16 packed = generic: B%d T%d NH%d HS%d%s%s", B, T, NH,
                     cases[ci].HS, causal ? " causal" : "", p > 0 ? " dropout (generic)" : "");
            test_expect(what, !nan && memcmp(o1, o2, nout * sizeof *o1) == 0 &&
                                  memcmp(l1, l2, nlse * sizeof *l1) == 0);
            free(o1), free(o2), free(l1), free(l2);
        }
        free(qkv);
    }
}

int main(void) {
    mha_bf16_force_portable(0);
    have_fast = mha_bf16_fast();
    const int have_amx = have_fast && mha_bf16_amx_supported();
    printf("AVX512_BF16 fast path: %s\n", have_fast ? "yes" : "no (fast-path checks skipped)");
    printf("AMX-BF16 fast path: %s\n", have_amx ? "yes (both fast paths checked)" : "no (its checks skipped)");
    const char *amx_env = getenv("MHA_CPU_AMX");   /* meson's cpu_bf16_no_amx sets it to 0 */
    if (amx_env && strcmp(amx_env, "0") == 0)
        test_expect("MHA_CPU_AMX=0 keeps the AMX kernels off", !mha_bf16_amx_supported() && !mha_bf16_amx());
    test_round();
    /* every check of the fast path, on its AVX512-BF16 kernels and then on AMX */
    for (int amx = 0; amx <= have_amx; amx++) {
        mha_bf16_allow_amx(amx);
        fast_name = amx ? "amx" : "avx512";
        printf("== fast path: %s ==\n", amx ? "AMX (tdpbf16ps)" : "AVX512-BF16 (vdpbf16ps)");
        if (have_fast)
            test_expect(amx ? "AMX kernels in use when allowed" : "AMX kernels unused when not allowed",
                        mha_bf16_amx() == amx);
        test_gemm();
        test_gemm_start_and_sums();
        for (int portable = 0; portable < 2; portable++) {
            test_linear(portable, 300, 96, 160);   /* 4.6M multiply-adds: the parallel branch */
            test_linear(portable, 13, 40, 24);     /* below MHA_GEMM_PAR_MIN: one thread */
        }
        for (int rows_portable = 0; rows_portable < 2; rows_portable++) {
            mha_rows_force_portable(rows_portable);
            printf("softmax rows: %s\n", rows_portable ? "portable" : "AVX-512 where the CPU has it");
            test_attention();
        }
        mha_rows_force_portable(0);
        test_attention_packed();
        test_gemm_packed_a();
        mha_rows_force_portable(0);
    }
    mha_bf16_allow_amx(1);
    test_backend();
    if (test_failures) {
        printf("%d checks FAILED\n", test_failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
