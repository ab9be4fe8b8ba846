/* tests/kernels/test_cpu_int8.c: the int8 inference path (kernels/cpu/gemm_int8.h,
 * kernels/cpu/layers_int8.h, mha_cpu_backend_int8) against an independent reconstruction of
 * the function gemm_int8.h documents, and against double references.
 *
 *  1. mha_i8_quantize_row: fast (AVX512-VNNI) vs portable bit-identical on random rows of
 *     lengths 1..70, 128, 512, 1000 (most not multiples of 16; scales 2^-100 .. 2^100,
 *     negative maxima, repeated maxima, unaligned rows), bytes past K untouched; bit-exact
 *     against a reference of the documented rule (mx = max|x|, v = x * (127 / mx) in float,
 *     round half to even by comparison, clamp to +-127, + 128, scale mx / 127); special rows
 *     with known answers: zeros (scale +0, all bytes 128), a single nonzero, exact .5 ties
 *     (x * (127 / mx) == k + 0.5 in float: to even both ways), a negative maximum, huge
 *     (FLT_MAX) and tiny maxima (1e-36: subnormal scale; 1e-38 and subnormal, a check of
 *     their own: 127 / mx overflows, only the properties below are required there, but they
 *     are: a zero must still map to 128). Properties on every row:
 *     the elements of largest |x| map to 128 +- 127, signs are kept, and
 *     |x - s (xu - 128)| <= h(s) = s/2 (1 + 768 u) + 2^-142 (u = 2^-24), derived so:
 *     t = 127 x / mx exactly; inv = fl(127 / mx) and v = fl(x inv) give |v - t| <= 127 (2u + u^2);
 *     q = rint(clamp(v)) gives |t - q| <= 1/2 + 127 (2u + u^2) (clamping only moves towards t);
 *     s = fl(mx / 127) = (mx / 127)(1 + e), so |x - s q| = (mx/127) |t - q - e q|
 *     <= (mx/127)(1/2 + 381 u + 127 u^2) <= s/2 (1 + 765 u + O(u^2)); a subnormal s has an
 *     absolute error <= 2^-150 instead, times |q| <= 127: the 2^-142. (The half-step bound
 *     alone, s/2 (1 + 1e-6), is not a theorem: x inv may round onto a tie from above.)
 *  2. mha_i8_pack_w + mha_i8_gemm, both paths (the fast one twice on a CPU with AMX-INT8: its
 *     AVX512-VNNI kernels, then its AMX kernels, which must give the same bits): every M in 1..17 and 300, N in {1, 5, 31, 32,
 *     33, 64, 70, 200}, K in {1, 2, 3, 4, 5, 60, 124, 127, 128, 130, 512, 777} (M = 3: all N x K; other
 *     M: every N with two K each; M = 300: four (N, K)), plus K = 4099 (pack_w's heap row) and
 *     K = 0; with and without bias; ldx > K, ldw > K with NaN in the unused cells (a read
 *     past K shows); ldy > N with guard cells after each row and a guard row, which must stay
 *     bit-identical; zero rows in x and W (scale 0); W packed as two disjoint panel ranges
 *     into a poisoned buffer; x, W and bias ending at an inaccessible page (the masked
 *     vector loads ASan does not instrument must not reach past them). Checked:
 *     - mha_i8_packed_w_bytes and every packed byte, sw and wsum against the reconstruction
 *       (panel p, group kq, column j, byte r = wq[32p + j][4kq + r], 0 past K and past N;
 *       sw, wsum of padding columns 0);
 *     - y bit-identical to the documented float expression evaluated here on the
 *       reconstructed integers, (float)(sum xq wq) * (sx * sw) + bias, and fast == portable;
 *     - against a double reference on the QUANTIZED values, yq = c sx sw + b with
 *       c = sum_k xq wq (exact): fl(c) is exact while |c| <= 2^24 (K <= 1040), then two
 *       roundings in the scaling and one in the bias add give
 *       |y - yq| <= 3u |c sx sw| + u |b| (+ u |c sx sw| when |c| > 2^24) + O(u^2);
 *     - against the UNQUANTIZED double product yt = x . w + b: with x = x^ + ex, w = w^ + ew
 *       (x^ = sx xq, |ex| <= h(sx), |ew| <= h(sw)), x.w - x^.w^ = x.ew + ex.w^, so by
 *       Cauchy-Schwarz |y - yt| <= sqrt(K) (|x|_2 h(sw) + h(sx) |w^|_2) + the bound above;
 *     - that the unquantized reference is clearly worse (normwise >= 100x the 4u the
 *       quantized one allows): the test sees the quantization.
 *  3. mha_linear_forward_int8 (both paths, 1 and 2 OpenMP threads, 300x96x160 above
 *     MHA_GEMM_PAR_MIN and 13x40x24 below it, with and without bias): bit-identical to
 *     mha_i8_pack_w + mha_i8_gemm called directly, 1T == 2T, fast == portable.
 *     The weights packed by an earlier call are reused only while their bytes are unchanged
 *     (3b: changed in place, another shape at the same address), and are reused (hit counts:
 *     twice the same, more matrices than entries in turn, an idle entry taken over).
 *  4. mha_cpu_backend_int8: NULL with a reason exactly when mha_i8_fast() is 0 (also after
 *     mha_i8_force_portable(1)); else int8 = 1, linear_forward = mha_linear_forward_int8, the
 *     rest the bf16 table's (the fp32 table's when the bf16 one is NULL, also forced).
 * Measured (both paths identical): |x - s q| up to s/2 (1 + 267 u), in a tie row with an
 * inexact 127 / mx (so the 1e-6 = 17 u margin would fail); against the quantized reference
 * up to 0.99 of the bound (a cell whose bias add rounds by half an ulp just above a power of
 * two: the bound is tight), normwise <= 8.3e-8; against the unquantized one up to 0.70 of
 * its bound, and normwise >= 6300 x 4u. Bugs land far above: a wrong rounding, scale,
 * wsum or index gives 1e0 .. 1e40 times the bound, a read past K a NaN.
 * Without AVX512_VNNI the fast-path checks print "skipped" and the portable ones still run. */
#include <float.h>
#include <math.h>
#include <omp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "kernels/backend.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/layers_int8.h"
#include "kernels/cpu/packed_cache.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

#define U 0x1p-24   /* float unit roundoff */

static int have_fast = 0;   /* the CPU runs the AVX512-VNNI path */

static void skipped(const char *what) { printf("%-62s skipped (no AVX512_VNNI)\n", what); }

#define QNAN u2f(0x7fc00000u)

static uint64_t counter = 0;
static float gen(void) { return 2.0f * mha_rng_uniform(41, counter++) - 1.0f; }   /* [-1, 1) */

/* ================================ the reference ================================ */

/* v rounded to the nearest integer, ties to even, by comparisons (not lrint: independent of
 * the rounding mode and of the code under test). v is a float value, so v - floor(v) is exact. */
static double rne(double v) {
    double f = floor(v), d = v - f;
    if (d > 0.5) return f + 1;
    if (d < 0.5) return f;
    return fmod(f, 2.0) == 0 ? f : f + 1;
}

/* q (K) = the documented quantization of x (K): returns the scale; *defined = 0 when
 * 127 / max|x| overflows (max|x| < 127 / FLT_MAX), where the float rule has no meaning. */
static float ref_quantize(int *q, const float *x, int K, int *defined) {
    float mx = 0.0f;
    for (int k = 0; k < K; k++)
        if (fabsf(x[k]) > mx) mx = fabsf(x[k]);
    *defined = 1;
    if (mx == 0.0f) {
        for (int k = 0; k < K; k++) q[k] = 0;
        return 0.0f;
    }
    const float inv = 127.0f / mx;
    if (!isfinite(inv)) *defined = 0;
    for (int k = 0; k < K; k++) {
        const float v = x[k] * inv;   /* one float multiply */
        double r = rne((double)v);
        q[k] = (int)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
    return mx / 127.0f;
}

/* h(s): the largest |x - s q| the quantization may leave (head comment) */
static double half_step(float s) { return (double)s / 2 * (1 + 768 * U) + 0x1p-142; }

/* ================================ 1. quantize_row ================================ */

typedef struct {
    long rows, fp_bad, ref_bad, ref_skipped, guard_bad, prop_bad;
    double worst_excess;   /* max (|x - s q| - s/2) / (s/2), in units of u */
    char worst_row[160];
} QStats;

/* Runs both paths on x (K) and checks them; returns the portable bytes in out (K) if given. */
static void check_row(const char *label, const float *x, int K, QStats *st, uint8_t *out) {
    uint8_t *xf = test_malloc((size_t)K + 16), *xp = test_malloc((size_t)K + 16);
    int *q = test_malloc((size_t)(K ? K : 1) * sizeof *q);
    memset(xf, 0x5a, (size_t)K + 16), memset(xp, 0x5a, (size_t)K + 16);
    float sf = 0.0f, sp;
    if (have_fast) {
        mha_i8_force_portable(0);
        sf = mha_i8_quantize_row(xf, x, K);
    }
    mha_i8_force_portable(1);
    sp = mha_i8_quantize_row(xp, x, K);
    mha_i8_force_portable(0);
    st->rows++;
    for (int i = K; i < K + 16; i++)
        if (xp[i] != 0x5a || (have_fast && xf[i] != 0x5a)) {
            if (st->guard_bad++ < 3) printf("  %s K=%d: byte %d past the row written\n", label, K, i);
            break;
        }
    if (have_fast && (f2u(sf) != f2u(sp) || memcmp(xf, xp, (size_t)K) != 0)) {
        if (st->fp_bad++ < 3) printf("  %s K=%d: fast and portable differ\n", label, K);
    }
    int defined;
    const float sr = ref_quantize(q, x, K, &defined);
    if (!defined) {
        st->ref_skipped++;
    } else {
        int bad = f2u(sr) != f2u(sp);
        for (int k = 0; k < K && !bad; k++) bad = xp[k] != q[k] + 128;
        if (bad && st->ref_bad++ < 3) printf("  %s K=%d: portable differs from the reference\n", label, K);
    }
    /* properties, on the portable bytes (the fast ones are identical, checked above) */
    float mx = 0.0f;
    for (int k = 0; k < K; k++)
        if (fabsf(x[k]) > mx) mx = fabsf(x[k]);
    long bad = 0;
    if (mx == 0.0f) {
        bad += f2u(sp) != 0;
        for (int k = 0; k < K; k++) bad += xp[k] != 128;
    } else {
        const double h = half_step(sp);
        for (int k = 0; k < K; k++) {
            const int qk = (int)xp[k] - 128;
            const double e = fabs((double)x[k] - (double)sp * qk);
            const double excess = (e - (double)sp / 2) / ((double)sp / 2) / U;
            if (defined && !(excess <= st->worst_excess)) {
                st->worst_excess = excess;
                snprintf(st->worst_row, sizeof st->worst_row, "%s, K=%d", label, K);
            }
            int b = !(e <= h);
            if (fabsf(x[k]) == mx) b |= xp[k] != (x[k] > 0 ? 255 : 1);
            b |= (x[k] > 0 && qk < 0) || (x[k] < 0 && qk > 0) || qk < -127;
            if (b && bad++ == 0 && st->prop_bad < 3)
                printf("  %s K=%d: x[%d]=%.9g -> %d (s=%.9g, |x - s q|=%.3g, h=%.3g)\n", label, K, k, (double)x[k],
                       (int)xp[k], (double)sp, e, h);
        }
    }
    if (bad && st->prop_bad < 3 && K <= 8) {
        printf("   row:");
        for (int k = 0; k < K; k++) printf(" %.3g", (double)x[k]);
        printf(" -> bytes:");
        for (int k = 0; k < K; k++) printf(" %d", (int)xp[k]);
        printf(" (127/max = %g)\n", (double)(127.0f / mx));
    }
    if (bad) st->prop_bad++;
    if (out) memcpy(out, xp, (size_t)K);
    free(xf), free(xp), free(q);
}

/* A row with known bytes: checks the portable (and so the fast) bytes against want. */
static void check_known(const char *label, const float *x, int K, const uint8_t *want, float want_s, QStats *st,
                        long *known_bad) {
    uint8_t *got = test_malloc((size_t)K);
    check_row(label, x, K, st, got);
    mha_i8_force_portable(1);
    uint8_t *tmp = test_malloc((size_t)K);
    float s = mha_i8_quantize_row(tmp, x, K);
    mha_i8_force_portable(0);
    int bad = f2u(s) != f2u(want_s);
    for (int k = 0; k < K; k++)
        if (got[k] != want[k]) {
            if (!bad) printf("  %s: x[%d]=%.9g -> %d, want %d\n", label, k, (double)x[k], got[k], want[k]);
            bad = 1;
        }
    if (f2u(s) != f2u(want_s)) printf("  %s: scale %.9g, want %.9g\n", label, (double)s, (double)want_s);
    *known_bad += bad;
    free(got), free(tmp);
}

/* 128 + the even neighbour of k + 0.5 */
static uint8_t tie_byte(int k) { return (uint8_t)(128 + ((k % 2 == 0) ? k : k + 1)); }

static void test_quantize(void) {
    QStats st = {0};
    st.worst_excess = -INFINITY;
    long known_bad = 0;
    char what[128];

    /* random rows */
    static const float scales[5] = {1.0f, 1e-3f, 3e4f, 0x1p-100f, 0x1p100f};
    int lengths[80], nl = 0;
    for (int k = 1; k <= 70; k++) lengths[nl++] = k;
    lengths[nl++] = 128, lengths[nl++] = 512, lengths[nl++] = 1000;
    for (int li = 0; li < nl; li++) {
        const int K = lengths[li];
        for (int r = 0; r < 4; r++) {
            float *buf = test_malloc((size_t)(K + 1) * sizeof *buf);
            float *x = r == 3 ? buf + 1 : buf;   /* r = 3: not 8-byte aligned */
            const float sc = scales[(K + r) % 5];
            for (int k = 0; k < K; k++) x[k] = gen() * sc;
            if (r == 1) x[(K * 7) % K] = -1.5f * sc;   /* a negative maximum */
            if (r == 2 && K > 3) {                      /* the maximum three times, both signs */
                x[0] = sc, x[K / 2] = -sc, x[K - 1] = sc;
            }
            check_row("random", x, K, &st, NULL);
            free(buf);
        }
    }

    /* zeros: scale +0, all 128 (also -0) */
    {
        float x[37];
        uint8_t want[37];
        for (int k = 0; k < 37; k++) x[k] = (k % 3) ? 0.0f : -0.0f, want[k] = 128;
        check_known("zeros", x, 37, want, 0.0f, &st, &known_bad);
        check_known("one zero", x, 1, want, 0.0f, &st, &known_bad);
    }
    /* a single nonzero, at the start, across a 16-lane boundary, at the end */
    {
        static const int at[4] = {0, 15, 16, 36};
        static const float val[4] = {0.3f, -2.5e-3f, 7.0f, -1e20f};
        for (int i = 0; i < 4; i++) {
            float x[37];
            uint8_t want[37];
            for (int k = 0; k < 37; k++) x[k] = 0.0f, want[k] = 128;
            x[at[i]] = val[i];
            want[at[i]] = val[i] > 0 ? 255 : 1;
            check_known("single nonzero", x, 37, want, fabsf(val[i]) / 127.0f, &st, &known_bad);
        }
    }
    /* exact ties: mx = 127 2^e makes 127 / mx = 2^-e exact, x = (k + 0.5) 2^e lands on k + 0.5 */
    {
        static const int exps[4] = {0, 1, -20, 40};
        for (int i = 0; i < 4; i++) {
            float x[256];
            uint8_t want[256];
            const float p2 = ldexpf(1.0f, exps[i]);
            int K = 0;
            x[K] = 127.0f * p2, want[K++] = 255;
            for (int k = -127; k <= 126; k++) x[K] = ((float)k + 0.5f) * p2, want[K++] = tie_byte(k);
            x[K] = -127.0f * p2, want[K++] = 1;
            snprintf(what, sizeof what, "ties, mx = 127 * 2^%d", exps[i]);
            check_known(what, x, K, want, 127.0f * p2 / 127.0f, &st, &known_bad);
        }
    }
    /* ties with an inexact 127 / mx: x found near (k + 0.5) / inv with fl(x * inv) == k + 0.5 */
    {
        static const float mxs[3] = {100.0f, 0.37f, 3.3e-7f};
        long found = 0;
        for (int i = 0; i < 3; i++) {
            const float inv = 127.0f / mxs[i];
            float x[300];
            uint8_t want[300];
            int K = 0;
            x[K] = mxs[i], want[K++] = 255;
            for (int k = -126; k <= 125; k++) {
                const float t0 = (float)((k + 0.5) / (double)inv);
                float up = t0, down = t0;   /* t0, then 1, 2, .. 8 ulps either side */
                for (int step = 0; step <= 8; step++) {
                    if (up * inv == (float)k + 0.5f) {
                        x[K] = up, want[K++] = tie_byte(k);
                        break;
                    }
                    if (down * inv == (float)k + 0.5f) {
                        x[K] = down, want[K++] = tie_byte(k);
                        break;
                    }
                    up = nextafterf(up, INFINITY), down = nextafterf(down, -INFINITY);
                }
            }
            found += K - 1;
            snprintf(what, sizeof what, "ties, mx = %g", (double)mxs[i]);
            check_known(what, x, K, want, mxs[i] / 127.0f, &st, &known_bad);
        }
        printf("  (%ld exact ties with an inexact 127 / mx found)\n", found);
        test_expect("tie rows with inexact 127 / mx: ties found", found > 300);
    }
    /* a negative maximum */
    {
        const float x[5] = {0.5f, -3.0f, 2.0f, -1.0f, 3.0f * 0.999f};
        uint8_t want[5];
        int q[5], d;
        ref_quantize(q, x, 5, &d);
        for (int k = 0; k < 5; k++) want[k] = (uint8_t)(q[k] + 128);
        want[1] = 1;   /* explicitly: -max -> 128 - 127 */
        check_known("negative maximum", x, 5, want, 3.0f / 127.0f, &st, &known_bad);
    }
    /* huge and tiny magnitudes (only properties and fast == portable; the reference where
     * 127 / mx is finite) */
    {
        const float huge[6] = {FLT_MAX, -FLT_MAX / 3, 1e30f, -1.0f, 0.0f, FLT_MAX * 0.5f};
        const float nhuge[4] = {1e38f, -FLT_MAX, 2.0f, 0.0f};
        const float tiny_ok[5] = {1e-36f, -3e-37f, 5e-38f, 0.0f, 1e-45f};   /* scale subnormal */
        const float normal_tiny[4] = {1e-30f, -7e-31f, 0.0f, 3e-33f};
        check_row("huge", huge, 6, &st, NULL);
        check_row("huge, negative max", nhuge, 4, &st, NULL);
        check_row("tiny 1e-30", normal_tiny, 4, &st, NULL);
        check_row("tiny 1e-36 (subnormal scale)", tiny_ok, 5, &st, NULL);
    }
    /* max|x| < 127 / FLT_MAX: 127 / max overflows in float; the documented function
     * (rint(x / s), zeros to 128) is still well defined, so only the properties are asked */
    QStats so = {0};
    so.worst_excess = -INFINITY;
    {
        const float tiny_lo[4] = {1e-38f, -4e-39f, 0.0f, 1e-45f};   /* normal max */
        const float tiny_sub[3] = {1e-41f, -3e-42f, 0.0f};         /* subnormal max */
        check_row("tiny 1e-38 (127/mx overflows)", tiny_lo, 4, &so, NULL);
        check_row("tiny subnormal 1e-41", tiny_sub, 3, &so, NULL);
    }

    snprintf(what, sizeof what, "quantize_row: %ld rows, fast vs portable bit-identical", st.rows);
    if (have_fast) test_expect(what, st.fp_bad == 0);
    else skipped(what);
    snprintf(what, sizeof what, "quantize_row: bit-exact vs reference (%ld rows)", st.rows - st.ref_skipped);
    test_expect(what, st.ref_bad == 0);
    test_expect("quantize_row: bytes past K untouched", st.guard_bad == 0);
    test_expect("quantize_row: known rows (zeros, single, ties, negative max)", known_bad == 0);
    printf("  worst |x - s q| = s/2 (1 + %.1f u) (rows with 127/max finite; in \"%s\"); bound s/2 (1 + 768 u) + 2^-142\n",
           st.worst_excess, st.worst_row);
    test_expect("quantize_row: |x - s q| <= h(s), max -> +-127, signs kept", st.prop_bad == 0);
    if (st.prop_bad) printf("  %ld rows break a property\n", st.prop_bad);
    snprintf(what, sizeof what, "quantize_row: max|x| < 127/FLT_MAX (%ld rows): same properties", so.rows);
    test_expect(what, so.prop_bad == 0 && so.guard_bad == 0);
    if (have_fast) test_expect("quantize_row: max|x| < 127/FLT_MAX: fast vs portable bit-identical", so.fp_bad == 0);
}

/* ================================ 2. the GEMM ================================ */

/* Guard cells of y: test_util.h's guard_bits. */

typedef struct {
    long cases, pack_bad[2], size_bad, guard_bad[2], exact_bad[2], fp_bad, empty_bad;
    double q_ratio[2], u_ratio[2];   /* worst err / bound against the two references */
    double q_err[2], u_err[2];       /* the errors there */
    double sees_min;                 /* min over cases of the normwise unquantized error / 4u */
    double q_norm_max;               /* max normwise error against the quantized reference */
} GStats;

/* Mismatches of packed W against the layout of gemm_int8.h for the reconstruction (wq, sw). */
static long pack_mismatches(const uint8_t *packed, const int *wq, const float *sw, int N, int K) {
    const int kp = (K + 3) / 4 * 4, np = mha_i8_panels(N), Np = np * MHA_I8_NR;
    const size_t panel = (size_t)kp * MHA_I8_NR;
    long bad = 0;
    for (int p = 0; p < np; p++)
        for (int kq = 0; kq < kp / 4; kq++)
            for (int j = 0; j < MHA_I8_NR; j++)
                for (int r = 0; r < 4; r++) {
                    const int n = p * MHA_I8_NR + j, k = 4 * kq + r;
                    const int want = n < N && k < K ? wq[(size_t)n * K + k] : 0;
                    const int got = (int8_t)packed[(size_t)p * panel + ((size_t)kq * MHA_I8_NR + j) * 4 + r];
                    bad += got != want;
                }
    for (int n = 0; n < Np; n++) {
        float s;
        int32_t sum, want = 0;
        memcpy(&s, packed + (size_t)np * panel + (size_t)n * 4, 4);
        memcpy(&sum, packed + (size_t)np * panel + (size_t)Np * 4 + (size_t)n * 4, 4);
        if (n < N)
            for (int k = 0; k < K; k++) want += wq[(size_t)n * K + k];
        bad += f2u(s) != f2u(n < N ? sw[n] : 0.0f);
        bad += sum != want;
    }
    return bad;
}

static void gemm_case(int M, int N, int K, int variant, GStats *st) {
    const int ldx = K + (variant & 1 ? 3 : 16), ldw = K + 5;
    const int ldy = (variant & 2) ? mha_i8_panels(N) * MHA_I8_NR + 5 : N + 3;
    float *x = test_malloc((size_t)M * ldx * sizeof *x), *w = test_malloc((size_t)N * ldw * sizeof *w);
    float *bias = test_malloc((size_t)N * sizeof *bias);
    /* rows of different magnitudes; NaN past K; some rows zero, one with an outlier */
    for (int m = 0; m < M; m++) {
        const float rs = ldexpf(1.0f, (m * 7 + variant) % 9 - 4);
        for (int k = 0; k < ldx; k++) x[(size_t)m * ldx + k] = k < K ? gen() * rs : QNAN;
    }
    if (M >= 3 && variant % 3 == 0)
        for (int k = 0; k < K; k++) x[(size_t)1 * ldx + k] = 0.0f;
    if (K >= 4 && variant % 4 == 1) x[(size_t)0 * ldx + (variant % K)] *= 40.0f;
    for (int n = 0; n < N; n++) {
        const float rs = 0.1f * ldexpf(1.0f, (n * 5 + variant) % 7 - 3);
        for (int k = 0; k < ldw; k++) w[(size_t)n * ldw + k] = k < K ? gen() * rs : QNAN;
    }
    if (N >= 5 && variant % 2 == 0)
        for (int k = 0; k < K; k++) w[(size_t)(N - 2) * ldw + k] = 0.0f;
    for (int n = 0; n < N; n++) bias[n] = gen();

    /* the reconstruction and the references */
    const size_t mn = (size_t)M * N;
    int *xq = test_malloc((size_t)M * K * sizeof *xq + 1), *wq = test_malloc((size_t)N * K * sizeof *wq + 1);
    float *sx = test_malloc((size_t)M * sizeof *sx), *sw = test_malloc((size_t)N * sizeof *sw);
    double *xn = test_malloc((size_t)M * sizeof *xn), *whn = test_malloc((size_t)N * sizeof *whn);
    int64_t *c = test_malloc(mn * sizeof *c);
    double *ut = test_malloc(mn * sizeof *ut);
    for (int m = 0; m < M; m++) {
        int d;
        sx[m] = ref_quantize(xq + (size_t)m * K, x + (size_t)m * ldx, K, &d);
        double s2 = 0;
        for (int k = 0; k < K; k++) s2 += (double)x[(size_t)m * ldx + k] * x[(size_t)m * ldx + k];
        xn[m] = sqrt(s2);
    }
    for (int n = 0; n < N; n++) {
        int d;
        sw[n] = ref_quantize(wq + (size_t)n * K, w + (size_t)n * ldw, K, &d);
        double s2 = 0;
        for (int k = 0; k < K; k++) s2 += (double)wq[(size_t)n * K + k] * wq[(size_t)n * K + k];
        whn[n] = (double)sw[n] * sqrt(s2);   /* |w^|_2 */
    }
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            int64_t acc = 0;
            double su = 0;
            for (int k = 0; k < K; k++) {
                acc += (int64_t)xq[(size_t)m * K + k] * wq[(size_t)n * K + k];
                su += (double)x[(size_t)m * ldx + k] * (double)w[(size_t)n * ldw + k];
            }
            c[(size_t)m * N + n] = acc, ut[(size_t)m * N + n] = su;
        }

    const size_t pbytes = mha_i8_packed_w_bytes(N, K);
    const int np = mha_i8_panels(N), kp = (K + 3) / 4 * 4;
    st->size_bad += pbytes != (size_t)np * MHA_I8_NR * (size_t)kp + (size_t)np * MHA_I8_NR * 8;
    const size_t ny = (size_t)(M + 1) * ldy;
    float *ys[2][2];   /* [path][with_bias] */
    for (int path = have_fast ? 0 : 1; path < 2; path++) {
        mha_i8_force_portable(path);
        uint8_t *packed = test_aligned(pbytes);
        memset(packed, 0xa5, pbytes);   /* every byte must be written */
        mha_i8_pack_w(packed, w, ldw, N, K, 0, np / 2);
        mha_i8_pack_w(packed, w, ldw, N, K, np / 2, np);
        const long pb = pack_mismatches(packed, wq, sw, N, K);
        if (pb && !st->pack_bad[path])
            printf("  %s: %ld packed values differ (M=%d N=%d K=%d)\n", path ? "portable" : "fast", pb, M, N, K);
        st->pack_bad[path] += pb;
        const size_t sbytes = mha_i8_scratch_bytes(M, K);
        uint8_t *scratch = test_aligned(sbytes);
        memset(scratch, 0xa5, sbytes);
        for (int wb = 0; wb < 2; wb++) {
            const float *bp = wb ? bias : NULL;
            float *y = ys[path][wb] = test_malloc(ny * sizeof *y);
            for (size_t i = 0; i < ny; i++) y[i] = u2f(guard_bits(i));
            mha_i8_gemm(M, N, K, x, ldx, packed, bp, y, ldy, scratch);
            int gbad = 0;
            for (int m = 0; m <= M; m++)
                for (int n = m < M ? N : 0; n < ldy; n++) gbad |= f2u(y[(size_t)m * ldy + n]) != guard_bits((size_t)m * ldy + n);
            if (gbad && !st->guard_bad[path])
                printf("  %s: guard cell of y changed (M=%d N=%d K=%d)\n", path ? "portable" : "fast", M, N, K);
            st->guard_bad[path] += gbad;
            double qnum = 0, qden = 0, unum = 0, uden = 0;
            long ebad = 0;
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    const float got = y[(size_t)m * ldy + n];
                    const int64_t ci = c[(size_t)m * N + n];
                    const double b = wb ? bias[n] : 0.0;
                    /* the documented float expression, one operation per statement */
                    const float cf = (float)ci;
                    const float s2 = sx[m] * sw[n];
                    const float pf = cf * s2;
                    const float want = pf + (wb ? bias[n] : 0.0f);
                    if (f2u(want) != f2u(got)) {
                        if (!ebad && !st->exact_bad[path])
                            printf("  %s M=%d N=%d K=%d: y[%d][%d] = %.9g, documented expression %.9g\n",
                                   path ? "portable" : "fast", M, N, K, m, n, (double)got, (double)want);
                        ebad++;
                    }
                    /* the double references */
                    const double P = (double)ci * (double)sx[m] * (double)sw[n];
                    const double yq = P + b, yt = ut[(size_t)m * N + n] + b;
                    const double gam = (ci > (1 << 24) || ci < -(1 << 24)) ? 4.0 : 3.0;
                    const double bq = gam * U * fabs(P) * (1 + 1e-6) + U * fabs(b) * (1 + 1e-6) + 0x1p-140;
                    const double bu =
                        bq + sqrt((double)K) * (xn[m] * half_step(sw[n]) + half_step(sx[m]) * whn[n]) + 1e-15 * (fabs(yt) + 1e-30);
                    const double eq = fabs((double)got - yq), eu = fabs((double)got - yt);
                    const double rq = isnan(eq) ? INFINITY : eq / bq, ru = isnan(eu) ? INFINITY : eu / bu;
                    if (!(rq <= st->q_ratio[path])) st->q_ratio[path] = rq, st->q_err[path] = eq;
                    if (!(ru <= st->u_ratio[path])) st->u_ratio[path] = ru, st->u_err[path] = eu;
                    if (!(eq <= qnum)) qnum = isnan(eq) ? INFINITY : eq;
                    if (!(eu <= unum)) unum = isnan(eu) ? INFINITY : eu;
                    if (fabs(yq) > qden) qden = fabs(yq);
                    if (fabs(yt) > uden) uden = fabs(yt);
                }
            st->exact_bad[path] += ebad;
            if (path == 1 && wb == 0 && qden > 0 && uden > 0) {
                if (qnum / qden > st->q_norm_max) st->q_norm_max = qnum / qden;
                if (K >= 5 && mn >= 8) {
                    const double r = unum / uden / (4 * U);
                    if (!(r >= st->sees_min)) st->sees_min = r;
                }
            }
        }
        free(packed), free(scratch);
    }
    mha_i8_force_portable(0);
    if (have_fast) {
        int d = memcmp(ys[0][0], ys[1][0], ny * sizeof(float)) != 0 || memcmp(ys[0][1], ys[1][1], ny * sizeof(float)) != 0;
        if (d && !st->fp_bad) printf("  fast and portable y differ (M=%d N=%d K=%d)\n", M, N, K);
        st->fp_bad += d;
        free(ys[0][0]), free(ys[0][1]);
    }
    free(ys[1][0]), free(ys[1][1]);
    st->cases++;
    free(x), free(w), free(bias), free(xq), free(wq), free(sx), free(sw), free(xn), free(whn), free(c), free(ut);
}

/* M = 0 or N = 0: y untouched; K = 0: y = bias (+0 without a bias) */
static long gemm_empty(void) {
    long bad = 0;
    for (int path = have_fast ? 0 : 1; path < 2; path++) {
        mha_i8_force_portable(path);
        float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, bias[3] = {0.25f, -3.0f, 7.5f}, y[12];
        uint8_t *packed = test_aligned(mha_i8_packed_w_bytes(3, 2)), *scratch = test_aligned(mha_i8_scratch_bytes(3, 2));
        mha_i8_pack_w(packed, x, 2, 3, 2, 0, mha_i8_panels(3));
        for (int i = 0; i < 12; i++) y[i] = u2f(guard_bits((size_t)i));
        mha_i8_gemm(0, 3, 2, x, 2, packed, bias, y, 3, scratch);
        mha_i8_gemm(3, 0, 2, x, 2, packed, bias, y, 3, scratch);
        for (int i = 0; i < 12; i++) bad += f2u(y[i]) != guard_bits((size_t)i);
        free(packed), free(scratch);
        packed = test_aligned(mha_i8_packed_w_bytes(3, 0)), scratch = test_aligned(mha_i8_scratch_bytes(4, 0));
        mha_i8_pack_w(packed, x, 0, 3, 0, 0, mha_i8_panels(3));
        mha_i8_gemm(4, 3, 0, x, 0, packed, bias, y, 3, scratch);
        for (int i = 0; i < 12; i++) bad += f2u(y[i]) != f2u(bias[i % 3]);
        mha_i8_gemm(4, 3, 0, x, 0, packed, NULL, y, 3, scratch);
        for (int i = 0; i < 12; i++) bad += f2u(y[i]) != 0;
        free(packed), free(scratch);
    }
    mha_i8_force_portable(0);
    return bad;
}

/* Over-reads that ASan cannot see (the fast path's masked vector loads and AMX's tile loads are
 * not instrumented): x's last row, W's last row, the bias and the scratch (whose quantized rows
 * AMX reads 16 at a time) each end exactly at a page followed by an inaccessible one, so a load
 * past their end faults. Returns 1 when it ran (and did not crash). */
static int gemm_page_edges(void) {
    const long pg = sysconf(_SC_PAGESIZE);
    const int M = 3, N = 33, K = 19;
    float *end[3];
    char *base[3];
    for (int i = 0; i < 3; i++) {
        base[i] = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (base[i] == MAP_FAILED || mprotect(base[i] + pg, (size_t)pg, PROT_NONE) != 0) return 0;
        end[i] = (float *)(void *)(base[i] + pg);
    }
    float *x = end[0] - M * K, *w = end[1] - N * K, *bias = end[2] - N;
    for (int i = 0; i < M * K; i++) x[i] = gen();
    for (int i = 0; i < N * K; i++) w[i] = gen();
    for (int i = 0; i < N; i++) bias[i] = gen();
    /* the scratch: 64-byte aligned, its end (rounded up to 64 bytes) at the inaccessible page */
    const size_t sbytes = (mha_i8_scratch_bytes(M, K) + 63) & ~(size_t)63, spages = (sbytes + (size_t)pg - 1) / (size_t)pg;
    char *sbase = mmap(NULL, (spages + 1) * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (sbase == MAP_FAILED || mprotect(sbase + spages * (size_t)pg, (size_t)pg, PROT_NONE) != 0) return 0;
    uint8_t *scratch = (uint8_t *)sbase + spages * (size_t)pg - sbytes;
    float y[3 * 33];
    for (int path = have_fast ? 0 : 1; path < 2; path++) {
        mha_i8_force_portable(path);
        uint8_t *packed = test_aligned(mha_i8_packed_w_bytes(N, K));
        mha_i8_pack_w(packed, w, K, N, K, 0, mha_i8_panels(N));
        mha_i8_gemm(M, N, K, x, K, packed, bias, y, N, scratch);
        uint8_t xu[19];
        mha_i8_quantize_row(xu, x + (M - 1) * K, K);
        free(packed);
    }
    mha_i8_force_portable(0);
    for (int i = 0; i < 3; i++) munmap(base[i], (size_t)pg * 2);
    munmap(sbase, (spages + 1) * (size_t)pg);
    return 1;
}

static void test_gemm(void) {
    static const int Ns[8] = {1, 5, 31, 32, 33, 64, 70, 200};
    static const int Ks[12] = {1, 2, 3, 4, 5, 60, 124, 127, 128, 130, 512, 777};   /* 60, 124: AMX's longest remainder (60 of 64) */
    GStats st = {0};
    st.sees_min = INFINITY;
    int variant = 0;
    for (int M = 1; M <= 17; M++)
        for (int ni = 0; ni < 8; ni++) {
            if (M == 3) {
                for (int ki = 0; ki < 12; ki++) gemm_case(M, Ns[ni], Ks[ki], variant++, &st);
            } else {
                gemm_case(M, Ns[ni], Ks[(M + 3 * ni) % 12], variant++, &st);
                gemm_case(M, Ns[ni], Ks[(M + 3 * ni + 5) % 12], variant++, &st);
            }
        }
    gemm_case(300, 1, 1, variant++, &st);
    gemm_case(300, 33, 5, variant++, &st);
    gemm_case(300, 70, 130, variant++, &st);
    gemm_case(300, 200, 777, variant++, &st);
    gemm_case(2, 33, 4099, variant++, &st);   /* K > 4096: pack_w's heap row buffer */
    const long empty_bad = gemm_empty();
    const int edges_ran = gemm_page_edges();

    char what[128];
    for (int path = 0; path < 2; path++) {
        const char *pn = path ? "portable" : "fast";
        if (path == 0 && !have_fast) {
            snprintf(what, sizeof what, "gemm %s (all checks)", pn);
            skipped(what);
            continue;
        }
        snprintf(what, sizeof what, "gemm %-8s packed W matches the layout (%ld cases)", pn, st.cases);
        test_expect(what, st.pack_bad[path] == 0);
        snprintf(what, sizeof what, "gemm %-8s guard cells of y bit-identical", pn);
        test_expect(what, st.guard_bad[path] == 0);
        snprintf(what, sizeof what, "gemm %-8s y == documented float expression, bit-exact", pn);
        test_expect(what, st.exact_bad[path] == 0);
        if (st.exact_bad[path]) printf("  %ld cells differ\n", st.exact_bad[path]);
        snprintf(what, sizeof what, "gemm %-8s vs quantized double ref (worst err / bound)", pn);
        test_result(what, st.q_ratio[path], 1.0);
        printf("  (that cell's error %.3e)\n", st.q_err[path]);
        snprintf(what, sizeof what, "gemm %-8s vs unquantized double ref (worst err / bound)", pn);
        test_result(what, st.u_ratio[path], 1.0);
        printf("  (that cell's error %.3e)\n", st.u_err[path]);
    }
    test_expect("mha_i8_packed_w_bytes == Np Kp + 8 Np", st.size_bad == 0);
    if (have_fast) test_expect("gemm fast vs portable bit-identical (y and guards)", st.fp_bad == 0);
    else skipped("gemm fast vs portable bit-identical");
    printf("  normwise vs quantized ref: max %.3e (bound 4u = %.1e)\n", st.q_norm_max, 4 * U);
    printf("  normwise vs unquantized ref: min %.0f x 4u over cases with K >= 5\n", st.sees_min);
    test_expect("gemm vs UNQUANTIZED reference >= 100x 4u (sees quantization)", st.sees_min >= 100.0);
    test_expect("gemm M = 0 / N = 0 leave y alone, K = 0 gives bias", empty_bad == 0);
    test_expect("gemm, pack_w, quantize_row read nothing past x, W, bias (guard pages)", edges_ran);
}

/* ============================== 3. linear layer ============================== */

static void test_linear(int N, int IC, int OC) {
    const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = test_malloc(ni * 4), *w = test_malloc(nw * 4), *bias = test_malloc((size_t)OC * 4);
    for (size_t i = 0; i < ni; i++) inp[i] = gen() * (float)(1 + i / IC % 5);
    for (size_t i = 0; i < nw; i++) w[i] = 0.1f * gen();
    for (int o = 0; o < OC; o++) bias[o] = gen();
    float *outs[2][2] = {{NULL, NULL}, {NULL, NULL}};   /* [path][with_bias], 1 thread */
    char what[128];
    const int par = (size_t)N * IC * OC >= MHA_GEMM_PAR_MIN;
    for (int portable = 0; portable < 2; portable++) {
        const char *pn = portable ? "portable" : "fast";
        if (!portable && !have_fast) {
            snprintf(what, sizeof what, "linear %s %dx%dx%d", pn, N, IC, OC);
            skipped(what);
            continue;
        }
        mha_i8_force_portable(portable);
        /* direct: the product this call must equal */
        uint8_t *packed = test_aligned(mha_i8_packed_w_bytes(OC, IC)), *scratch = test_aligned(mha_i8_scratch_bytes(N, IC));
        mha_i8_pack_w(packed, w, IC, OC, IC, 0, mha_i8_panels(OC));
        float *direct[2], *out = test_malloc(no * 4);
        int same_direct = 1, same_threads = 1;
        for (int wb = 0; wb < 2; wb++) {
            direct[wb] = test_malloc(no * 4);
            mha_i8_gemm(N, OC, IC, inp, IC, packed, wb ? bias : NULL, direct[wb], OC, scratch);
            outs[portable][wb] = test_malloc(no * 4);
        }
        for (int nt = 1; nt <= 2; nt++) {
            omp_set_num_threads(nt);
            for (int wb = 0; wb < 2; wb++) {
                for (size_t i = 0; i < no; i++) out[i] = QNAN;   /* overwritten */
                mha_linear_forward_int8(out, inp, w, wb ? bias : NULL, N, IC, OC);
                same_direct &= memcmp(out, direct[wb], no * 4) == 0;
                if (nt == 1) memcpy(outs[portable][wb], out, no * 4);
                else same_threads &= memcmp(out, outs[portable][wb], no * 4) == 0;
            }
        }
        mha_i8_force_portable(0);
        snprintf(what, sizeof what, "linear %-8s %dx%dx%d%s == pack_w + gemm (1T, 2T)", pn, N, IC, OC,
                 par ? " (par)" : "");
        test_expect(what, same_direct);
        snprintf(what, sizeof what, "linear %-8s %dx%dx%d 1T vs 2T bit-identical", pn, N, IC, OC);
        test_expect(what, same_threads);
        free(packed), free(scratch), free(out), free(direct[0]), free(direct[1]);
    }
    if (have_fast) {
        snprintf(what, sizeof what, "linear %dx%dx%d fast vs portable bit-identical", N, IC, OC);
        test_expect(what, memcmp(outs[0][0], outs[1][0], no * 4) == 0 && memcmp(outs[0][1], outs[1][1], no * 4) == 0);
    }
    for (int p = 0; p < 2; p++) free(outs[p][0]), free(outs[p][1]);
    free(inp), free(w), free(bias);
}

/* 3b. The calling thread's cache of packed weights (packed_cache.c), as linear_int8.c uses it: a product always equals
 * pack_w + gemm on the weights as they are at the call: after the same buffer's bytes change
 * (one weight made its row's largest, so the row's scale changes) and under the same address
 * with another shape. And the cache is used (mha_packed_cache_hits): the same weights twice
 * hit; 33 matrices used in turn (one more than the entries) hit 32 times a round, the entries
 * kept rather than each replaced before its next use; a new matrix takes over an entry once
 * that has gone unused for a while. Under a promise that the weights do not change
 * (mha_weights_fixed), a change is not looked for (breaking the promise shows the packing
 * kept), and after the promise ends, or a new one starts over the same range, it is seen
 * again; weights outside the promised range are still compared. */
static void test_linear_cache(void) {
    enum { N = 13, IC = 40, OC = 24, MANY = 33 };
    const size_t nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = test_malloc((size_t)N * IC * 4), *w = test_malloc(nw * 4);
    float *out = test_malloc(no * 4), *before = test_malloc(no * 4), *ref = test_malloc(no * 4);
    uint8_t *packed = test_aligned(mha_i8_packed_w_bytes(OC > IC ? OC : IC, OC > IC ? OC : IC));
    uint8_t *scratch = test_aligned(mha_i8_scratch_bytes(N, OC > IC ? OC : IC));
    for (size_t i = 0; i < (size_t)N * IC; i++) inp[i] = gen();
    for (size_t i = 0; i < nw; i++) w[i] = 0.1f * gen();
    omp_set_num_threads(1);
    mha_packed_cache_clear();
    /* ref (N, oc) = inp (N, ic) @ wt^T through pack_w + gemm */
#define DIRECT(wt, ic, oc)                                                        \
    do {                                                                          \
        mha_i8_pack_w(packed, wt, ic, oc, ic, 0, mha_i8_panels(oc));              \
        mha_i8_gemm(N, oc, ic, inp, ic, packed, NULL, ref, oc, scratch);          \
    } while (0)
    unsigned long h0 = mha_packed_cache_hits();
    mha_linear_forward_int8(before, inp, w, NULL, N, IC, OC);
    mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);   /* from the cache */
    const unsigned long hits_same = mha_packed_cache_hits() - h0;
    DIRECT(w, IC, OC);
    int ok_same = memcmp(out, ref, no * 4) == 0 && memcmp(before, ref, no * 4) == 0;
    w[5 * IC + 7] = 1.0f;                                     /* row 5's new largest */
    mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);
    DIRECT(w, IC, OC);
    int ok_changed = memcmp(out, ref, no * 4) == 0 && memcmp(out, before, no * 4) != 0;
    mha_linear_forward_int8(out, inp, w, NULL, N, OC, IC > OC ? OC : IC);   /* (24, 24) view */
    DIRECT(w, OC, IC > OC ? OC : IC);
    int ok_shape = memcmp(out, ref, (size_t)N * (IC > OC ? OC : IC) * 4) == 0;
    /* the promise: w fixed (one call checks it under the promise, the next trusts it) */
    mha_packed_cache_clear();
    mha_linear_forward_int8(before, inp, w, NULL, N, IC, OC);      /* packed before the promise */
    mha_weights_fixed(w, nw * 4);
    mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);         /* compared once, then trusted */
    w[2 * IC + 3] = 2.0f;                                          /* the promise broken */
    mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);
    int ok_trusted = memcmp(out, before, no * 4) == 0;
    mha_weights_fixed(w + 1, (nw - 1) * 4);                     /* a range that misses w's start */
    mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);
    DIRECT(w, IC, OC);
    int ok_outside = memcmp(out, ref, no * 4) == 0 && memcmp(out, before, no * 4) != 0;
    mha_weights_fixed(w, nw * 4);
    mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);         /* checked under the new promise */
    w[2 * IC + 3] = -2.0f;
    mha_linear_forward_int8(before, inp, w, NULL, N, IC, OC);      /* trusted: the old packing */
    mha_weights_fixed(NULL, 0);                                 /* the promise ends */
    mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);
    DIRECT(w, IC, OC);
    ok_trusted &= memcmp(before, out, no * 4) != 0;
    int ok_ended = memcmp(out, ref, no * 4) == 0;
    /* a new promise over the same range is a new promise: what changed in between is seen */
    mha_weights_fixed(w, nw * 4);
    mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);         /* checked under it */
    mha_weights_fixed(NULL, 0);
    w[4 * IC + 1] = 3.0f;
    mha_weights_fixed(w, nw * 4);
    mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);
    DIRECT(w, IC, OC);
    ok_ended &= memcmp(out, ref, no * 4) == 0;
    mha_weights_fixed(NULL, 0);
    /* MANY matrices in turn, three rounds, from an empty cache */
    float *many = test_malloc((size_t)(MANY + 1) * nw * 4);
    for (size_t i = 0; i < (size_t)(MANY + 1) * nw; i++) many[i] = 0.1f * gen();
    mha_packed_cache_clear();
    int ok_many = 1;
    unsigned long round_hits[3];
    for (int round = 0; round < 3; round++) {
        const unsigned long h = mha_packed_cache_hits();
        for (int k = 0; k < MANY; k++) {
            mha_linear_forward_int8(out, inp, many + (size_t)k * nw, NULL, N, IC, OC);
            DIRECT(many + (size_t)k * nw, IC, OC);
            ok_many &= memcmp(out, ref, no * 4) == 0;
        }
        round_hits[round] = mha_packed_cache_hits() - h;
    }
    /* then one new matrix, 80 times: an entry idle for long enough becomes its own */
    const float *fresh = many + (size_t)MANY * nw;
    const unsigned long hf = mha_packed_cache_hits();
    for (int k = 0; k < 80; k++) mha_linear_forward_int8(out, inp, fresh, NULL, N, IC, OC);
    const unsigned long fresh_hits = mha_packed_cache_hits() - hf;
    DIRECT(fresh, IC, OC);
    ok_many &= memcmp(out, ref, no * 4) == 0;
#undef DIRECT
    test_expect("linear cache: the same weights twice == pack_w + gemm, the second a hit",
                ok_same && hits_same == 1);
    test_expect("linear cache: changed bytes at the same address repacked", ok_changed);
    test_expect("linear cache: the same address with another shape", ok_shape);
    test_expect("linear cache: weights promised fixed are not compared again (a broken promise keeps the packing)",
                ok_trusted);
    test_expect("linear cache: weights outside the promised range are compared", ok_outside);
    test_expect("linear cache: after the promise ends, or a new one starts, changed weights are repacked", ok_ended);
    char what[160];
    snprintf(what, sizeof what, "linear cache: 33 matrices in turn == pack_w + gemm, hits %lu/%lu/%lu (0/32/32)",
             round_hits[0], round_hits[1], round_hits[2]);
    test_expect(what, ok_many && round_hits[0] == 0 && round_hits[1] == 32 && round_hits[2] == 32);
    snprintf(what, sizeof what, "linear cache: a new matrix takes an idle entry (%lu hits of 80)", fresh_hits);
    test_expect(what, fresh_hits > 0 && fresh_hits < 80);
    mha_packed_cache_clear();
    free(inp), free(w), free(out), free(before), free(ref), free(packed), free(scratch), free(many);
}

/* ============================== 4. backend table ============================== */

/* t equals base except int8 = 1 and the linear forward entries (the int8 ones) */
static int table_matches(const Backend *t, const Backend *base) {
    Backend x = *t, y = *base;
    x.linear_forward = y.linear_forward = NULL;
    x.linear_forward_post = y.linear_forward_post = NULL;
    x.weights_fixed = y.weights_fixed = NULL;
    const size_t from = offsetof(Backend, alloc);
    return x.name == y.name && x.bf16 == y.bf16 && base->int8 == 0 &&
           memcmp((char *)&x + from, (char *)&y + from, sizeof(Backend) - from) == 0;
}

static void test_backend(void) {
    char why[160] = "";
    mha_i8_force_portable(0);
    const Backend *t = mha_cpu_backend_int8(2, why, sizeof why);
    if (!have_fast) {
        printf("  mha_cpu_backend_int8: NULL? %s (%s)\n", t ? "no" : "yes", why);
        test_expect("backend_int8 NULL with a reason without AVX512_VNNI", t == NULL && why[0] != 0);
    } else {
        test_expect("backend_int8 available (fast path on)", t != NULL);
        if (t) {
            test_expect("backend_int8: int8 = 1, linear_forward(_post) the int8 ones, weights_fixed the packed cache's",
                   t->int8 == 1 && t->linear_forward == mha_linear_forward_int8 &&
                       t->linear_forward_post == mha_linear_forward_post_int8 &&
                       t->weights_fixed == mha_weights_fixed);
            char why2[160];
            const Backend *bf = mha_cpu_backend_bf16(2, why2, sizeof why2);
            const Backend *base = bf ? bf : mha_cpu_backend(2);
            test_expect(bf ? "backend_int8: other entries equal the bf16 table's"
                      : "backend_int8: other entries equal the fp32 table's (no bf16)",
                   table_matches(t, base));
            test_expect("backend_int8: omp threads set to 2", omp_get_max_threads() == 2);
            if (bf) {   /* without the bf16 table: the fp32 one */
                mha_bf16_force_portable(1);
                t = mha_cpu_backend_int8(1, why, sizeof why);
                test_expect("backend_int8 with bf16 forced off: the fp32 table's entries",
                       t && t->int8 == 1 && t->linear_forward == mha_linear_forward_int8 &&
                           table_matches(t, mha_cpu_backend(1)));
                mha_bf16_force_portable(0);
            }
        }
    }
    why[0] = 0;
    mha_i8_force_portable(1);
    t = mha_cpu_backend_int8(2, why, sizeof why);
    test_expect("backend_int8 NULL with a reason after force_portable(1)", t == NULL && why[0] != 0 && !mha_i8_fast());
    mha_i8_force_portable(0);
    t = mha_cpu_backend_int8(2, why, sizeof why);
    test_expect("backend_int8 back after force_portable(0) (iff fast)", (t != NULL) == (mha_i8_fast() != 0));
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);   /* lines before a crash reach the log */
    mha_i8_force_portable(0);
    have_fast = mha_i8_fast();
    const int have_amx = have_fast && mha_i8_amx_supported();
    printf("AVX512_VNNI fast path: %s\n", have_fast ? "yes" : "no (fast-path checks skipped)");
    printf("AMX-INT8 fast path: %s\n", have_amx ? "yes (both fast paths checked)" : "no (its checks skipped)");
    const char *amx_env = getenv("MHA_CPU_AMX");   /* meson's cpu_int8_no_amx sets it to 0 */
    if (amx_env && strcmp(amx_env, "0") == 0)
        test_expect("MHA_CPU_AMX=0 keeps the AMX kernels off", !mha_i8_amx_supported() && !mha_i8_amx());
    test_quantize();
    /* the products' checks on the fast path's AVX512-VNNI kernels, then on AMX */
    for (int amx = 0; amx <= have_amx; amx++) {
        mha_i8_allow_amx(amx);
        printf("== fast path: %s ==\n", amx ? "AMX (tdpbusd)" : "AVX512-VNNI (vpdpbusd)");
        if (have_fast)
            test_expect(amx ? "AMX kernels in use when allowed" : "AMX kernels unused when not allowed",
                        mha_i8_amx() == amx);
        test_gemm();
        test_linear(13, 40, 24);     /* below MHA_GEMM_PAR_MIN: one thread */
        test_linear(300, 96, 160);   /* 4.6M multiply-adds: the parallel branch */
        test_linear(13, 40, 24);     /* again, after the buffers grew */
        test_linear_cache();
    }
    mha_i8_allow_amx(1);
    test_backend();
    if (test_failures) {
        printf("%d checks FAILED\n", test_failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
