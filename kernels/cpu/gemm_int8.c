/* kernels/cpu/gemm_int8.c: int8 x int8 -> int32 products for the linear layer at inference
 * (see gemm_int8.h for the function computed and the packed layout).
 *
 * Fast path (x86-64 with AVX512_VNNI, AVX512BW and AVX512VL, chosen at run time): a micro-tile of 8 rows x
 * 32 columns lives in 16 zmm int32 accumulators; per group of 4 k it loads two vectors of
 * packed W and broadcasts each row's 4 quantized bytes into vpdpbusd (64 multiply-adds per
 * instruction, twice vdpbf16ps's 32). The rows of x are quantized into the caller's scratch
 * once per call, whole depth at a time (int32 sums are exact, so no depth blocking is needed
 * for accuracy; a panel of W, K x 32 bytes, stays in L1 for the usual K <= 1024).
 *
 * AMX path (cpu_features.h's mha_cpu_amx): 16 rows x 32 columns at a time in two int32 tiles,
 * tdpbusd taking 64 k per instruction straight from the packed panels (each half of a panel's
 * row of 4-k groups, 16 columns, is a row of a B tile) and the quantized rows. The sums are
 * exact integers, so its results are the AVX512-VNNI path's bit for bit. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_int8.h"

#ifdef MHA_CPU_X86
#include <immintrin.h>
#define FAST_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#endif
#ifdef MHA_CPU_X86_AMX
#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))
#endif

/* ------------------------------------------------------------------ dispatch */

static int force_portable, amx_off;

int mha_i8_fast(void) { return !force_portable && mha_cpu_avx512_vnni(); }
int mha_i8_cpu_supported(void) { return mha_cpu_avx512_vnni(); }
void mha_i8_force_portable(int on) { force_portable = on; }
int mha_i8_amx_supported(void) { return mha_cpu_avx512_vnni() && mha_cpu_amx(); }
int mha_i8_amx(void) { return mha_i8_fast() && !amx_off && mha_i8_amx_supported(); }
void mha_i8_allow_amx(int on) { amx_off = !on; }

#define ROW_PAD 16   /* quantized rows in the scratch: a multiple of 16, an AMX tile's rows */

static inline int round_up4(int k) { return (k + 3) & ~3; }

/* ------------------------------------------------------------------ quantization */

/* Portable: max |x|, then rint(x * (127 / max)) clamped to [-127, 127] (NaN -> 127), + 128;
 * a row whose max is below 2^-100 is first scaled by 2^100 (exact), so 127 / max is finite. */
static float quantize_row_portable(uint8_t *xu, const float *x, int K) {
    float mx = 0.0f;
    for (int k = 0; k < K; k++) {
        float a = fabsf(x[k]);
        mx = a > mx ? a : mx;
    }
    if (mx == 0.0f) {
        memset(xu, 128, (size_t)K);
        return 0.0f;
    }
    const float up = mx < 0x1p-100f ? 0x1p100f : 1.0f;   /* 127 / mx stays finite */
    const float inv = 127.0f / (mx * up);
    for (int k = 0; k < K; k++) {
        float v = (x[k] * up) * inv;
        v = v < 127.0f ? v : 127.0f;
        v = v > -127.0f ? v : -127.0f;
        xu[k] = (uint8_t)(lrintf(v) + 128);
    }
    return mx / 127.0f;
}

#ifdef MHA_CPU_X86
/* The same function, 16 lanes at a time (cvtps rounds to nearest even, as lrintf does). */
FAST_TARGET static float quantize_row_fast(uint8_t *xu, const float *x, int K) {
    __m512 mx = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 16)
        mx = _mm512_max_ps(_mm512_abs_ps(_mm512_maskz_loadu_ps(mha_mask16(K - k), x + k)), mx);
    const float mxs = _mm512_reduce_max_ps(mx);
    if (mxs == 0.0f) {
        memset(xu, 128, (size_t)K);
        return 0.0f;
    }
    const float up = mxs < 0x1p-100f ? 0x1p100f : 1.0f;  /* as the portable loop */
    const __m512 upv = _mm512_set1_ps(up), inv = _mm512_set1_ps(127.0f / (mxs * up));
    const __m512 hi = _mm512_set1_ps(127.0f), lo = _mm512_set1_ps(-127.0f);
    const __m512i off = _mm512_set1_epi32(128);
    for (int k = 0; k < K; k += 16) {
        const __mmask16 m = mha_mask16(K - k);
        __m512 v = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), upv), inv);
        v = _mm512_max_ps(_mm512_min_ps(v, hi), lo);
        _mm512_mask_cvtepi32_storeu_epi8(xu + k, m, _mm512_add_epi32(_mm512_cvtps_epi32(v), off));
    }
    return mxs / 127.0f;
}
#endif

float mha_i8_quantize_row(uint8_t *xu, const float *x, int K) {
#ifdef MHA_CPU_X86
    if (mha_i8_fast()) return quantize_row_fast(xu, x, K);
#endif
    return quantize_row_portable(xu, x, K);
}

/* ------------------------------------------------------------------ packed W */

size_t mha_i8_packed_w_bytes(int N, int K) {
    size_t np = (size_t)mha_i8_panels(N) * MHA_I8_NR;
    return np * (size_t)round_up4(K) + np * (sizeof(float) + sizeof(int32_t));
}

void mha_i8_pack_w(void *dst, const float *w, int ldw, int N, int K, int p0, int p1) {
    const int kp = round_up4(K), np = mha_i8_panels(N) * MHA_I8_NR;
    const size_t panel = (size_t)kp * MHA_I8_NR;              /* bytes per panel */
    float *sw = (float *)(void *)((uint8_t *)dst + (size_t)mha_i8_panels(N) * panel);
    int32_t *wsum = (int32_t *)(sw + np);
    uint8_t row[4096];
    uint8_t *big = NULL, *wu = row;
    if (kp > (int)sizeof row && !(wu = big = malloc((size_t)kp))) {
        fprintf(stderr, "mha: out of memory (%d bytes for an int8 weight row)\n", kp);
        exit(1);
    }
    for (int p = p0; p < p1; p++) {
        uint32_t *d32 = (uint32_t *)(void *)((uint8_t *)dst + (size_t)p * panel);
        for (int j = 0; j < MHA_I8_NR; j++) {
            const int n = p * MHA_I8_NR + j;
            memset(wu, 128, (size_t)kp);      /* past K and past N: 0 after the -128 below */
            float s = n < N ? mha_i8_quantize_row(wu, w + (size_t)n * ldw, K) : 0.0f;
            int32_t sum = 0;
            for (int k = 0; k < kp; k++) {
                wu[k] = (uint8_t)(int8_t)(wu[k] - 128);        /* uint8 + 128 -> int8 bits */
                sum += (int8_t)wu[k];
            }
            for (int kq = 0; kq < kp / 4; kq++) {
                uint32_t v;
                memcpy(&v, wu + 4 * kq, sizeof v);
                d32[(size_t)kq * MHA_I8_NR + j] = v;
            }
            sw[n] = s;
            wsum[n] = sum;
        }
    }
    free(big);
}

/* ------------------------------------------------------------------ micro-kernels */

/* y (mr x nr, stride ldy) = (acc - 128 wsum) * (sx sw) + bias for a (MR rows of kp bytes) and
 * one panel b (kp/4, NR, 4). */
static void kernel_portable(const uint8_t *a, int kp, const int8_t *b, const float *sx, const float *sw,
                            const int32_t *wsum, const float *bias, float *y, int ldy, int mr, int nr) {
    for (int m = 0; m < mr; m++)
        for (int j = 0; j < nr; j++) {
            int32_t acc = 0;
            for (int k = 0; k < kp; k++)
                acc += (int32_t)a[(size_t)m * kp + k] * b[(size_t)(k / 4) * 4 * MHA_I8_NR + 4 * j + k % 4];
            float c = (float)(acc - 128 * wsum[j]);
            y[(size_t)m * ldy + j] = c * (sx[m] * sw[j]) + (bias ? bias[j] : 0.0f);
        }
}

#ifdef MHA_CPU_X86
/* The scaling of kernel_portable for one row of 32 columns of int32 sums (acc0: columns 0-15,
 * acc1: 16-31), the same float operations in the same order. */
typedef struct {
    __mmask16 k0, k1;             /* columns to store */
    __m512i corr0, corr1;         /* 128 wsum */
    __m512 sw0, sw1, bias0, bias1;
} RowScale;

FAST_TARGET static inline RowScale row_scale(const float *sw, const int32_t *wsum, const float *bias, int nr) {
    RowScale r;
    r.k0 = mha_mask16(nr), r.k1 = mha_mask16(nr - 16);
    r.corr0 = _mm512_slli_epi32(_mm512_loadu_si512((const void *)wsum), 7);
    r.corr1 = _mm512_slli_epi32(_mm512_loadu_si512((const void *)(wsum + 16)), 7);
    r.sw0 = _mm512_loadu_ps(sw), r.sw1 = _mm512_loadu_ps(sw + 16);
    r.bias0 = bias ? _mm512_maskz_loadu_ps(r.k0, bias) : _mm512_setzero_ps();
    r.bias1 = bias ? _mm512_maskz_loadu_ps(r.k1, bias + 16) : _mm512_setzero_ps();
    return r;
}

FAST_TARGET static inline void store_row(float *yr, __m512i acc0, __m512i acc1, float sx, const RowScale *r) {
    const __m512 s = _mm512_set1_ps(sx);
    __m512 c0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc0, r->corr0));
    _mm512_mask_storeu_ps(yr, r->k0, _mm512_add_ps(_mm512_mul_ps(c0, _mm512_mul_ps(s, r->sw0)), r->bias0));
    if (r->k1) {
        __m512 c1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc1, r->corr1));
        _mm512_mask_storeu_ps(yr + 16, r->k1, _mm512_add_ps(_mm512_mul_ps(c1, _mm512_mul_ps(s, r->sw1)), r->bias1));
    }
}

#endif

#ifdef MHA_CPU_X86_AMX
#define AMX_ROWS 16   /* rows per tile */
#define AMX_KB 64     /* k (bytes) per tile row */

/* Tiles for a depth of kp (a multiple of 4): 0, 1 int32 sums (16 rows x 16 columns: columns 0-15
 * and 16-31 of a panel); 2 A (16 rows x 64 k); 3, 4 B (16 groups of 4 k x 16 columns); for the
 * last kr = kp % 64, 5 A (16 rows x kr) and 6, 7 B (kr/4 groups). */
AMX_TARGET static void amx_configure(int kp) {
    MhaAmxTileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) cfg.colsb[t] = 64, cfg.rows[t] = AMX_ROWS;
    const int kr = kp % AMX_KB;
    if (kr > 0) {
        cfg.colsb[5] = (unsigned short)kr, cfg.rows[5] = AMX_ROWS;
        cfg.colsb[6] = cfg.colsb[7] = 64, cfg.rows[6] = cfg.rows[7] = (unsigned char)(kr / 4);
    }
    mha_amx_load_config(&cfg);
}

/* kernel_fast for 16 rows of a (kp bytes each; rows past mr are padding the scratch holds). */
AMX_TARGET static void kernel_amx(const uint8_t *a, int kp, const int8_t *b, const float *sx, const float *sw,
                                  const int32_t *wsum, const float *bias, float *y, int ldy, int mr, int nr) {
    _Alignas(64) int32_t acc[AMX_ROWS][MHA_I8_NR];
    const size_t b_bytes = 4 * MHA_I8_NR;   /* one 4-k group's row of the panel */
    const int kf = kp - kp % AMX_KB;
    mha_amx_memory_barrier();   /* a and b hold their values before the tile loads read them */
    _tile_zero(0);
    _tile_zero(1);
    for (int k = 0; k < kf; k += AMX_KB) {
        _tile_loadd(2, a + k, kp);
        _tile_loadd(3, b + (size_t)k * MHA_I8_NR, b_bytes);
        _tile_loadd(4, b + (size_t)k * MHA_I8_NR + 64, b_bytes);
        _tile_dpbusd(0, 2, 3);
        _tile_dpbusd(1, 2, 4);
    }
    if (kf < kp) {
        _tile_loadd(5, a + kf, kp);
        _tile_loadd(6, b + (size_t)kf * MHA_I8_NR, b_bytes);
        _tile_loadd(7, b + (size_t)kf * MHA_I8_NR + 64, b_bytes);
        _tile_dpbusd(0, 5, 6);
        _tile_dpbusd(1, 5, 7);
    }
    _tile_stored(0, &acc[0][0], sizeof acc[0]);
    _tile_stored(1, &acc[0][16], sizeof acc[0]);
    const RowScale r = row_scale(sw, wsum, bias, nr);
    for (int m = 0; m < mr; m++)
        store_row(y + (size_t)m * ldy, _mm512_load_si512((const void *)&acc[m][0]),
                  _mm512_load_si512((const void *)&acc[m][16]), sx[m], &r);
}

/* The panels and row groups of mha_i8_gemm on AMX: xa (Mp, kp) quantized rows, Mp a multiple
 * of 16. */
AMX_TARGET static void gemm_amx(int M, int N, int kp, const uint8_t *xa, const float *sx, const void *packed_w,
                                const float *sw, const int32_t *wsum, const float *bias, float *y, int ldy) {
    const size_t panel = (size_t)kp * MHA_I8_NR;
    amx_configure(kp);
    for (int p = 0; p < mha_i8_panels(N); p++) {
        const int8_t *bp = (const int8_t *)packed_w + (size_t)p * panel;
        const int n0 = p * MHA_I8_NR, nr = N - n0 < MHA_I8_NR ? N - n0 : MHA_I8_NR;
        for (int m0 = 0; m0 < M; m0 += AMX_ROWS)
            kernel_amx(xa + (size_t)m0 * kp, kp, bp, sx + m0, sw + n0, wsum + n0, bias ? bias + n0 : NULL,
                       y + (size_t)m0 * ldy + n0, ldy, M - m0 < AMX_ROWS ? M - m0 : AMX_ROWS, nr);
    }
    _tile_release();
}
#endif

#ifdef MHA_CPU_X86
FAST_TARGET static void kernel_fast(const uint8_t *a, int kp, const int8_t *b, const float *sx, const float *sw,
                                    const int32_t *wsum, const float *bias, float *y, int ldy, int mr, int nr) {
    __m512i acc0[MHA_I8_MR], acc1[MHA_I8_MR];
#pragma GCC unroll 8
    for (int m = 0; m < MHA_I8_MR; m++) acc0[m] = acc1[m] = _mm512_setzero_si512();
    for (int kq = 0; kq < kp / 4; kq++) {
        const __m512i b0 = _mm512_load_si512((const void *)(b + (size_t)kq * 4 * MHA_I8_NR));
        const __m512i b1 = _mm512_load_si512((const void *)(b + (size_t)kq * 4 * MHA_I8_NR + 64));
#pragma GCC unroll 8
        for (int m = 0; m < MHA_I8_MR; m++) {
            int32_t quad;
            memcpy(&quad, a + (size_t)m * kp + 4 * kq, sizeof quad);
            const __m512i av = _mm512_set1_epi32(quad);
            acc0[m] = _mm512_dpbusd_epi32(acc0[m], av, b0);
            acc1[m] = _mm512_dpbusd_epi32(acc1[m], av, b1);
        }
    }
    const RowScale r = row_scale(sw, wsum, bias, nr);
#pragma GCC unroll 8
    for (int m = 0; m < MHA_I8_MR; m++) {
        if (m >= mr) break;
        store_row(y + (size_t)m * ldy, acc0[m], acc1[m], sx[m], &r);
    }
}
#endif

/* ------------------------------------------------------------------ the product */

size_t mha_i8_scratch_bytes(int M, int K) {
    size_t mp = ((size_t)M + ROW_PAD - 1) / ROW_PAD * ROW_PAD;
    return mp * sizeof(float) + mp * (size_t)round_up4(K) + 64;
}

void mha_i8_gemm(int M, int N, int K, const float *x, int ldx, const void *packed_w, const float *bias,
                 float *y, int ldy, void *scratch) {
    if (M <= 0 || N <= 0) return;
    const int kp = round_up4(K), np = mha_i8_panels(N);
    const size_t panel = (size_t)kp * MHA_I8_NR;
    const float *sw = (const float *)(const void *)((const uint8_t *)packed_w + (size_t)np * panel);
    const int32_t *wsum = (const int32_t *)(sw + (size_t)np * MHA_I8_NR);
    const int mp = (M + ROW_PAD - 1) / ROW_PAD * ROW_PAD;
    float *sx = scratch;                                          /* (Mp) */
    uint8_t *xa = (uint8_t *)scratch + (((size_t)mp * sizeof(float) + 63) & ~(size_t)63);   /* (Mp, kp) */
    for (int m = 0; m < mp; m++) {
        uint8_t *row = xa + (size_t)m * kp;
        if (m < M) {
            if (kp > K) memset(row + K, 128, (size_t)(kp - K));
            sx[m] = K > 0 ? mha_i8_quantize_row(row, x + (size_t)m * ldx, K) : 0.0f;
        } else {
            memset(row, 128, (size_t)kp);
            sx[m] = 0.0f;
        }
    }
    const int fast = mha_i8_fast();
#ifdef MHA_CPU_X86_AMX
    if (mha_i8_amx() && kp > 0) {
        gemm_amx(M, N, kp, xa, sx, packed_w, sw, wsum, bias, y, ldy);
        return;
    }
#endif
    for (int p = 0; p < np; p++) {
        const int8_t *bp = (const int8_t *)packed_w + (size_t)p * panel;
        const int n0 = p * MHA_I8_NR, nr = N - n0 < MHA_I8_NR ? N - n0 : MHA_I8_NR;
        for (int m0 = 0; m0 < M; m0 += MHA_I8_MR) {
            const int mr = M - m0 < MHA_I8_MR ? M - m0 : MHA_I8_MR;
            const uint8_t *ap = xa + (size_t)m0 * kp;
            float *yp = y + (size_t)m0 * ldy + n0;
#ifdef MHA_CPU_X86
            if (fast) {
                kernel_fast(ap, kp, bp, sx + m0, sw + n0, wsum + n0, bias ? bias + n0 : NULL, yp, ldy, mr, nr);
                continue;
            }
#endif
            (void)fast;
            kernel_portable(ap, kp, bp, sx + m0, sw + n0, wsum + n0, bias ? bias + n0 : NULL, yp, ldy, mr, nr);
        }
    }
}
