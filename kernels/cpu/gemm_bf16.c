/* kernels/cpu/gemm_bf16.c: bf16-input, fp32-accumulate matrix products for the CPU backend
 * (see gemm_bf16.h for the function computed and the packed layout).
 *
 * Fast path (x86-64 with AVX512_BF16, chosen at run time): a micro-tile of 8 rows x 32
 * columns of C lives in 16 zmm accumulators; per k pair it loads two vectors of packed B and
 * broadcasts one (a[2kk], a[2kk+1]) dword per row into vdpbf16ps. A is packed per call in
 * blocks of MHA_BF16_KC columns so a panel of B (KC x 32 bf16, 16 KiB) stays in L1 while
 * every row block of A passes over it. The portable path runs the same loops in C.
 *
 * AMX path (CPUs with AMX-BF16, Linux granting the tile state, MHA_CPU_AMX not 0): the same
 * packed A and B and the same depth blocks, but 16 rows x 32 columns of C at a time in two
 * tile registers, tdpbf16ps taking 32 k per instruction straight from the packed panels (each
 * half of a panel's k-pair row, 16 columns' pairs, is a row of a B tile). Its sums are not
 * vdpbf16ps's bit for bit (the hardware's order of additions inside an instruction is its own);
 * each row of C still depends only on its row of A, so results do not depend on the thread
 * count. */
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_bf16.h"

#ifdef MHA_CPU_X86
#include <immintrin.h>
#define FAST_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#endif
#ifdef MHA_CPU_X86_AMX
#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#endif

/* ------------------------------------------------------------------ dispatch */

static int force_portable, amx_off;

int mha_bf16_fast(void) { return !force_portable && mha_cpu_avx512_bf16(); }
int mha_bf16_cpu_supported(void) { return mha_cpu_avx512_bf16(); }
void mha_bf16_force_portable(int on) { force_portable = on; }
void mha_bf16_allow_amx(int on) { amx_off = !on; }

int mha_bf16_amx_supported(void) { return mha_cpu_avx512_bf16() && mha_cpu_amx(); }

/* The AMX kernels run now: on the fast path, supported, not switched off by a test. */
int mha_bf16_amx(void) { return mha_bf16_fast() && !amx_off && mha_bf16_amx_supported(); }

/* ------------------------------------------------------------------ scalar conversion */

uint16_t mha_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u);   /* zero, subnormal */
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                        /* nearest even */
    return (uint16_t)(u >> 16);
}

float mha_bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* ------------------------------------------------------------------ packing */

size_t mha_bf16_packed_b_elems(int K, int N) {
    size_t kp = (size_t)(K + 1) & ~(size_t)1;
    return (size_t)mha_bf16_panels(N) * kp * MHA_BF16_NR;
}

static inline float b_at(const float *b, int ldb, int trans, int k, int n) {
    return trans ? b[(size_t)n * ldb + k] : b[(size_t)k * ldb + n];
}

#ifdef MHA_CPU_X86
static void pack_b_trans_fast(uint16_t *dst, const float *b, int ldb, int K, int n0, int nr);

/* 32 floats (src[0..31], `valid` of them real) -> 16 pair dwords (round to nearest even). */
FAST_TARGET static inline __m512i pairs_of_row(const float *src, int valid) {
    const __mmask16 lo = mha_mask16(valid), hi = mha_mask16(valid - 16);
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(hi, src + 16), _mm512_maskz_loadu_ps(lo, src));
}

/* 16 floats of each of two source rows (r1 may be NULL: zeros) -> 16 dwords (r0[i], r1[i]). */
FAST_TARGET static inline __m512i pairs_of_two_rows(const float *r0, const float *r1, __mmask16 m) {
    const __m512i inter = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                           23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m256i x0 = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r0));
    __m256i x1 = r1 ? (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, r1)) : _mm256_setzero_si256();
    return _mm512_permutexvar_epi16(inter, _mm512_inserti64x4(_mm512_castsi256_si512(x0), x1, 1));
}

/* B (K, N) row-major, one panel: rows 2kk and 2kk+1 converted 16 columns at a time and
 * interleaved into (n, pair) order. */
FAST_TARGET static void pack_b_rows_fast(uint16_t *dst, const float *b, int ldb, int K, int n0, int nr) {
    const int kp2 = (K + 1) / 2;
    for (int kk = 0; kk < kp2; kk++) {
        const float *r0 = b + (size_t)(2 * kk) * ldb + n0;
        const float *r1 = 2 * kk + 1 < K ? r0 + ldb : NULL;
        for (int h = 0; h < MHA_BF16_NR; h += 16)
            _mm512_store_si512((void *)(dst + (size_t)kk * 2 * MHA_BF16_NR + 2 * h),
                               pairs_of_two_rows(r0 + h, r1 ? r1 + h : NULL, mha_mask16(nr - h)));
    }
}
#endif

void mha_bf16_pack_b(uint16_t *dst, const float *b, int ldb, int trans_b, int K, int N, int p0, int p1) {
    /* dst panel p: (Kp/2, NR, 2) */
    const int kp2 = (K + 1) / 2;
    const size_t panel = (size_t)kp2 * 2 * MHA_BF16_NR;
    for (int p = p0; p < p1; p++) {
        uint16_t *d = dst + (size_t)p * panel;
        const int n0 = p * MHA_BF16_NR, nr = N - n0 < MHA_BF16_NR ? N - n0 : MHA_BF16_NR;
#ifdef MHA_CPU_X86
        if (mha_bf16_fast()) {
            if (trans_b) pack_b_trans_fast(d, b, ldb, K, n0, nr);
            else pack_b_rows_fast(d, b, ldb, K, n0, nr);
            continue;
        }
#endif
        memset(d, 0, panel * sizeof *d);
        for (int kk = 0; kk < kp2; kk++)
            for (int j = 0; j < nr; j++)
                for (int r = 0; r < 2 && 2 * kk + r < K; r++)
                    d[(size_t)kk * 2 * MHA_BF16_NR + 2 * j + r] = mha_bf16_round(b_at(b, ldb, trans_b, 2 * kk + r, n0 + j));
    }
}

size_t mha_bf16_scratch_elems(int M) {
    size_t mp = ((size_t)M + MHA_BF16_MR - 1) / MHA_BF16_MR * MHA_BF16_MR;
    return mp * MHA_BF16_KC + mp * (sizeof(double) / sizeof(uint16_t));   /* packed A, row sums */
}

/* Packed A: (Mp, kl) bf16 row-major for one block of kl columns (kl even), rows M..Mp-1 and
 * columns past K zero; row m's k pair kk is the dword at m * kl/2 + kk. */

#ifdef MHA_CPU_X86
/* In-register transpose of a 16 x 16 matrix of dwords: r[i] element j -> r[j] element i.
 * Dwords interleaved in pairs of rows, then qwords, then 128-bit lanes (two steps). */
FAST_TARGET static inline void transpose16(__m512i r[16]) {
    __m512i a[16], b[16];
    for (int i = 0; i < 16; i += 2) {
        a[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);       /* lane L: r_i[4L], r_i+1[4L], ...[4L+1] */
        a[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);   /* ... columns 4L+2, 4L+3 */
    }
    for (int g = 0; g < 4; g++) {                           /* b[4g+c] lane L: rows 4g..4g+3, column 4L+c */
        b[4 * g + 0] = _mm512_unpacklo_epi64(a[4 * g], a[4 * g + 2]);
        b[4 * g + 1] = _mm512_unpackhi_epi64(a[4 * g], a[4 * g + 2]);
        b[4 * g + 2] = _mm512_unpacklo_epi64(a[4 * g + 1], a[4 * g + 3]);
        b[4 * g + 3] = _mm512_unpackhi_epi64(a[4 * g + 1], a[4 * g + 3]);
    }
    for (int c = 0; c < 4; c++) {
        __m512i d0 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0x88), d1 = _mm512_shuffle_i32x4(b[c], b[4 + c], 0xdd);
        __m512i e0 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0x88), e1 = _mm512_shuffle_i32x4(b[8 + c], b[12 + c], 0xdd);
        r[c] = _mm512_shuffle_i32x4(d0, e0, 0x88);          /* column c: lanes L = 0 of the four groups */
        r[4 + c] = _mm512_shuffle_i32x4(d1, e1, 0x88);
        r[8 + c] = _mm512_shuffle_i32x4(d0, e0, 0xdd);
        r[12 + c] = _mm512_shuffle_i32x4(d1, e1, 0xdd);
    }
}

/* A rows [0, M), columns [k0, k0 + kl) -> dst (Mp, kl); sums (M) += row sums when non-NULL. */
FAST_TARGET static void pack_a_fast(uint16_t *dst, const float *a, int lda, int trans_a,
                                    int M, int K, int k0, int kl, double *sums) {
    const int kl2 = kl / 2;
    uint32_t *d32 = (uint32_t *)dst;
    if (!trans_a) {
        if (sums)
            for (int m = 0; m < M; m++)
                for (int k = k0; k < K && k < k0 + kl; k++) sums[m] += a[(size_t)m * lda + k];
        for (int m = 0; m < M; m++) {
            const float *src = a + (size_t)m * lda + k0;
            uint32_t *d = d32 + (size_t)m * kl2;
            for (int kk = 0; kk < kl2; kk += 16)
                _mm512_mask_storeu_epi32(d + kk, mha_mask16(kl2 - kk), pairs_of_row(src + 2 * kk, K - k0 - 2 * kk));
        }
        return;
    }
    /* A(m, k) = a[k * lda + m]: source rows k, k+1 interleaved give the pair dwords of 16
     * consecutive m at one kk; 16 kk of them are transposed through a buffer into rows. */
    for (int m0 = 0; m0 < M; m0 += 16) {
        const int mn = M - m0 < 16 ? M - m0 : 16;
        const __mmask16 mm = mha_mask16(mn);
        /* running sums of rows m0..m0+15, continued from the previous depth blocks */
        __m512d s_lo = sums ? _mm512_maskz_loadu_pd((__mmask8)mm, sums + m0) : _mm512_setzero_pd();
        __m512d s_hi = sums ? _mm512_maskz_loadu_pd((__mmask8)(mm >> 8), sums + m0 + 8) : _mm512_setzero_pd();
        for (int kk0 = 0; kk0 < kl2; kk0 += 16) {
            const int kn = kl2 - kk0 < 16 ? kl2 - kk0 : 16;
            __m512i t[16];                          /* row kk: the 16 m's pair dwords */
            for (int kk = 0; kk < 16; kk++) {
                const int k = k0 + 2 * (kk0 + kk);
                if (kk >= kn || k >= K) {
                    t[kk] = _mm512_setzero_si512();
                    continue;
                }
                const float *r0 = a + (size_t)k * lda + m0, *r1 = k + 1 < K ? r0 + lda : NULL;
                if (k + 33 < K) {   /* the rows of the next 16 kk: 32 row streams are more than the hardware follows */
                    _mm_prefetch((const char *)(r0 + 32 * (size_t)lda), _MM_HINT_T0);
                    _mm_prefetch((const char *)(r0 + 33 * (size_t)lda), _MM_HINT_T0);
                }
                t[kk] = pairs_of_two_rows(r0, r1, mm);
                if (sums) {                         /* in k order: row k, then row k+1 */
                    __m512 x = _mm512_maskz_loadu_ps(mm, r0);
                    s_lo = _mm512_add_pd(s_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(x)));
                    s_hi = _mm512_add_pd(s_hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
                    if (r1) {
                        x = _mm512_maskz_loadu_ps(mm, r1);
                        s_lo = _mm512_add_pd(s_lo, _mm512_cvtps_pd(_mm512_castps512_ps256(x)));
                        s_hi = _mm512_add_pd(s_hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1))));
                    }
                }
            }
            transpose16(t);                         /* now t[m]: row m's 16 kk dwords */
            for (int m = 0; m < mn; m++)
                _mm512_mask_storeu_epi32(d32 + (size_t)(m0 + m) * kl2 + kk0, mha_mask16(kn), t[m]);
        }
        if (sums) {
            _mm512_mask_storeu_pd(sums + m0, (__mmask8)mm, s_lo);
            _mm512_mask_storeu_pd(sums + m0 + 8, (__mmask8)(mm >> 8), s_hi);
        }
    }
}

/* B given as (N, K) rows (trans_b), one panel: each of its 32 rows gives 16 pair dwords per
 * 32 k, transposed through a buffer into (kk, n) order. */
FAST_TARGET static void pack_b_trans_fast(uint16_t *dst, const float *b, int ldb, int K, int n0, int nr) {
    uint32_t *d32 = (uint32_t *)dst;
    const int kp2 = (K + 1) / 2;
    for (int kk0 = 0; kk0 < kp2; kk0 += 16) {
        const int kn = kp2 - kk0 < 16 ? kp2 - kk0 : 16;
        for (int h = 0; h < MHA_BF16_NR; h += 16) {
            if (h >= nr) {                          /* columns past N: zeros, nothing to transpose */
                for (int kk = 0; kk < kn; kk++)
                    _mm512_store_si512((void *)(d32 + (size_t)(kk0 + kk) * MHA_BF16_NR + h), _mm512_setzero_si512());
                continue;
            }
            __m512i t[16];                          /* row j: column n0 + h + j's 16 pair dwords */
            for (int j = 0; j < 16; j++)
                t[j] = h + j < nr ? pairs_of_row(b + (size_t)(n0 + h + j) * ldb + 2 * kk0, K - 2 * kk0)
                                  : _mm512_setzero_si512();
            transpose16(t);                         /* now t[kk]: the 16 columns' dwords at kk */
            for (int kk = 0; kk < kn; kk++)
                _mm512_store_si512((void *)(d32 + (size_t)(kk0 + kk) * MHA_BF16_NR + h), t[kk]);
        }
    }
}
#endif

/* A rows [0, M), columns [k0, k0 + kl) -> dst (Mp, kl); sums (M), when non-NULL, += the
 * fp32 values of each row in k order. */
static void pack_a(uint16_t *dst, const float *a, int lda, int trans_a, int M, int K, int k0, int kl,
                   double *sums) {
    const int mp = (M + MHA_BF16_MR - 1) / MHA_BF16_MR * MHA_BF16_MR;
    if (mp > M) memset(dst + (size_t)M * kl, 0, (size_t)(mp - M) * kl * sizeof *dst);
#ifdef MHA_CPU_X86
    if (mha_bf16_fast()) {
        pack_a_fast(dst, a, lda, trans_a, M, K, k0, kl, sums);
        return;
    }
#endif
    for (int m = 0; m < M; m++)
        for (int k = 0; k < kl; k++) {
            int kg = k0 + k;
            float v = kg < K ? (trans_a ? a[(size_t)kg * lda + m] : a[(size_t)m * lda + kg]) : 0.0f;
            dst[(size_t)m * kl + k] = mha_bf16_round(v);
            if (sums && kg < K) sums[m] += v;
        }
}

/* ------------------------------------------------------------------ micro-kernels */

/* c (mr x nr, stride ldc) = start + a (MR rows of kp2 pairs, row stride 2 as2) @ b (kp2, NR, 2);
 * start = c when add; otherwise bias (nr) broadcast, or zeros when bias is NULL. */
static void kernel_portable(const uint16_t *a, int as2, const uint16_t *b, int kp2, float *c, int ldc,
                            int mr, int nr, int add, const float *bias) {
    float acc[MHA_BF16_MR][MHA_BF16_NR];
    memset(acc, 0, sizeof acc);
    for (int kk = 0; kk < kp2; kk++) {
        const uint16_t *bk = b + (size_t)kk * 2 * MHA_BF16_NR;
        for (int m = 0; m < mr; m++) {
            float a0 = mha_bf16_to_float(a[(size_t)m * 2 * as2 + 2 * kk]);
            float a1 = mha_bf16_to_float(a[(size_t)m * 2 * as2 + 2 * kk + 1]);
            for (int j = 0; j < MHA_BF16_NR; j++) {
                /* products of two bf16 are exact in fp32: one rounding per addition */
                acc[m][j] += a1 * mha_bf16_to_float(bk[2 * j + 1]);
                acc[m][j] += a0 * mha_bf16_to_float(bk[2 * j]);
            }
        }
    }
    for (int m = 0; m < mr; m++)
        for (int j = 0; j < nr; j++) {
            float *cj = c + (size_t)m * ldc + j;
            *cj = (add ? *cj : (bias ? bias[j] : 0.0f)) + acc[m][j];
        }
}

#ifdef MHA_CPU_X86
FAST_TARGET static void kernel_fast(const uint16_t *a, int as2, const uint16_t *b, int kp2, float *c, int ldc,
                                    int mr, int nr, int add, const float *bias) {
    __m512 acc0[MHA_BF16_MR], acc1[MHA_BF16_MR];
#pragma GCC unroll 8
    for (int m = 0; m < MHA_BF16_MR; m++) acc0[m] = acc1[m] = _mm512_setzero_ps();
    for (int kk = 0; kk < kp2; kk++) {
        __m512bh b0 = (__m512bh)_mm512_load_si512((const void *)(b + (size_t)kk * 64));
        __m512bh b1 = (__m512bh)_mm512_load_si512((const void *)(b + (size_t)kk * 64 + 32));
#pragma GCC unroll 8
        for (int m = 0; m < MHA_BF16_MR; m++) {
            int32_t pair;
            memcpy(&pair, a + (size_t)m * 2 * as2 + 2 * kk, sizeof pair);
            __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
            acc0[m] = _mm512_dpbf16_ps(acc0[m], av, b0);
            acc1[m] = _mm512_dpbf16_ps(acc1[m], av, b1);
        }
    }
    const __mmask16 k0 = mha_mask16(nr), k1 = mha_mask16(nr - 16);
    const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(k0, bias) : _mm512_setzero_ps();
    const __m512 bias1 = bias && k1 ? _mm512_maskz_loadu_ps(k1, bias + 16) : _mm512_setzero_ps();
#pragma GCC unroll 8
    for (int m = 0; m < MHA_BF16_MR; m++) {
        if (m >= mr) break;
        float *cr = c + (size_t)m * ldc;
        __m512 s0 = add ? _mm512_maskz_loadu_ps(k0, cr) : bias0;
        _mm512_mask_storeu_ps(cr, k0, _mm512_add_ps(s0, acc0[m]));
        if (k1) {
            __m512 s1 = add ? _mm512_maskz_loadu_ps(k1, cr + 16) : bias1;
            _mm512_mask_storeu_ps(cr + 16, k1, _mm512_add_ps(s1, acc1[m]));
        }
    }
}
#endif

#ifdef MHA_CPU_X86_AMX
#define AMX_ROWS 16   /* rows of C per tile */
#define AMX_K 32      /* k per tile product: 16 pairs */

/* Tiles for a depth of kl (even): 0, 1 C (16 rows x 16 fp32, columns 0-15 and 16-31 of a
 * panel); 2 A (16 rows x 32 bf16); 3, 4 B (16 k pairs x 16 columns' pairs); for the last
 * kr = kl % 32 of the depth, 5 A (16 rows x kr bf16) and 6, 7 B (kr/2 k pairs). */
AMX_TARGET static void amx_configure(int kl) {
    MhaAmxTileConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 5; t++) cfg.colsb[t] = 64, cfg.rows[t] = AMX_ROWS;
    const int kr = kl % AMX_K;
    if (kr > 0) {
        cfg.colsb[5] = (uint16_t)(2 * kr), cfg.rows[5] = AMX_ROWS;
        cfg.colsb[6] = cfg.colsb[7] = 64, cfg.rows[6] = cfg.rows[7] = (uint8_t)(kr / 2);
    }
    mha_amx_load_config(&cfg);
}

/* c (mr x nr, stride ldc) = start + a (16 rows of kl bf16, a_bytes apart) @ b (kl/2, NR, 2);
 * start as in kernel_fast. Tiles configured by amx_configure(kl). */
AMX_TARGET static void kernel_amx(const uint16_t *a, size_t a_bytes, const uint16_t *b, int kl, float *c, int ldc,
                                  int mr, int nr, int add, const float *bias) {
    _Alignas(64) float acc[AMX_ROWS][MHA_BF16_NR];
    const size_t b_bytes = 2 * MHA_BF16_NR * sizeof *b;   /* one k pair's row of the panel */
    const int kf = kl - kl % AMX_K;
    mha_amx_memory_barrier();   /* a and b hold their values before the tile loads read them */
    _tile_zero(0);
    _tile_zero(1);
    for (int k = 0; k < kf; k += AMX_K) {
        _tile_loadd(2, a + k, a_bytes);
        _tile_loadd(3, b + (size_t)k * MHA_BF16_NR, b_bytes);
        _tile_loadd(4, b + (size_t)k * MHA_BF16_NR + 32, b_bytes);
        _tile_dpbf16ps(0, 2, 3);
        _tile_dpbf16ps(1, 2, 4);
    }
    if (kf < kl) {
        _tile_loadd(5, a + kf, a_bytes);
        _tile_loadd(6, b + (size_t)kf * MHA_BF16_NR, b_bytes);
        _tile_loadd(7, b + (size_t)kf * MHA_BF16_NR + 32, b_bytes);
        _tile_dpbf16ps(0, 5, 6);
        _tile_dpbf16ps(1, 5, 7);
    }
    _tile_stored(0, &acc[0][0], sizeof acc[0]);
    _tile_stored(1, &acc[0][16], sizeof acc[0]);
    const __mmask16 k0 = mha_mask16(nr), k1 = mha_mask16(nr - 16);
    const __m512 bias0 = bias ? _mm512_maskz_loadu_ps(k0, bias) : _mm512_setzero_ps();
    const __m512 bias1 = bias && k1 ? _mm512_maskz_loadu_ps(k1, bias + 16) : _mm512_setzero_ps();
    for (int m = 0; m < mr; m++) {
        float *cr = c + (size_t)m * ldc;
        __m512 s0 = add ? _mm512_maskz_loadu_ps(k0, cr) : bias0;
        _mm512_mask_storeu_ps(cr, k0, _mm512_add_ps(s0, _mm512_load_ps(&acc[m][0])));
        if (k1) {
            __m512 s1 = add ? _mm512_maskz_loadu_ps(k1, cr + 16) : bias1;
            _mm512_mask_storeu_ps(cr + 16, k1, _mm512_add_ps(s1, _mm512_load_ps(&acc[m][16])));
        }
    }
}

/* depth_block on AMX. Rows [0, a_rows) of a are readable; a last group of 16 rows that would
 * read past them takes its rows from a zero-padded copy. */
AMX_TARGET static void depth_block_amx(int M, int N, const uint16_t *a, int a_stride, int a_rows,
                                       const uint16_t *packed_b, size_t panel, int k0, int kl,
                                       float *c, int ldc, int add, const float *bias) {
    _Alignas(64) uint16_t tail[AMX_ROWS * MHA_BF16_KC];   /* (16, kl) */
    const int np = mha_bf16_panels(N), full = M - M % AMX_ROWS;
    const int tail_copy = full < M && full + AMX_ROWS > a_rows;
    if (tail_copy) {
        memset(tail, 0, (size_t)AMX_ROWS * kl * sizeof *tail);   /* the (16, kl) the kernel reads */
        for (int m = full; m < M; m++)
            memcpy(tail + (size_t)(m - full) * kl, a + (size_t)m * a_stride, (size_t)kl * sizeof *a);
    }
    amx_configure(kl);
    for (int p = 0; p < np; p++) {
        const uint16_t *bp = packed_b + (size_t)p * panel + (size_t)k0 * MHA_BF16_NR;
        const int n0 = p * MHA_BF16_NR, nr = N - n0 < MHA_BF16_NR ? N - n0 : MHA_BF16_NR;
        const float *bias_p = !add && bias ? bias + n0 : NULL;
        for (int m0 = 0; m0 < M; m0 += AMX_ROWS) {
            const int mr = M - m0 < AMX_ROWS ? M - m0 : AMX_ROWS;
            float *cp = c + (size_t)m0 * ldc + n0;
            if (m0 == full && tail_copy)
                kernel_amx(tail, (size_t)kl * sizeof *a, bp, kl, cp, ldc, mr, nr, add, bias_p);
            else
                kernel_amx(a + (size_t)m0 * a_stride, (size_t)a_stride * sizeof *a, bp, kl, cp, ldc, mr, nr, add, bias_p);
        }
    }
    _tile_release();
}
#endif

/* One depth block [k0, k0 + kl) of C (M, N) (+)= A @ B: a points at A's row 0, column k0 in
 * bf16, rows a_stride apart (rows up to M rounded up to MHA_BF16_MR readable); packed_b's
 * panels hold `panel` elements each. add: C += the block, else C = bias (or 0) + the block. */
static void depth_block(int M, int N, const uint16_t *a, int a_stride, const uint16_t *packed_b, size_t panel,
                        int k0, int kl, float *c, int ldc, int add, const float *bias) {
#ifdef MHA_CPU_X86_AMX
    if (mha_bf16_amx()) {
        const int a_rows = (M + MHA_BF16_MR - 1) / MHA_BF16_MR * MHA_BF16_MR;
        depth_block_amx(M, N, a, a_stride, a_rows, packed_b, panel, k0, kl, c, ldc, add, bias);
        return;
    }
#endif
    const int np = mha_bf16_panels(N), fast = mha_bf16_fast();
    for (int p = 0; p < np; p++) {
        const uint16_t *bp = packed_b + (size_t)p * panel + (size_t)k0 * MHA_BF16_NR;
        const int n0 = p * MHA_BF16_NR, nr = N - n0 < MHA_BF16_NR ? N - n0 : MHA_BF16_NR;
        const float *bias_p = !add && bias ? bias + n0 : NULL;
        for (int m0 = 0; m0 < M; m0 += MHA_BF16_MR) {
            const int mr = M - m0 < MHA_BF16_MR ? M - m0 : MHA_BF16_MR;
            const uint16_t *ap = a + (size_t)m0 * a_stride;
            float *cp = c + (size_t)m0 * ldc + n0;
#ifdef MHA_CPU_X86
            if (fast) {
                kernel_fast(ap, a_stride / 2, bp, kl / 2, cp, ldc, mr, nr, add, bias_p);
                continue;
            }
#endif
            (void)fast;
            kernel_portable(ap, a_stride / 2, bp, kl / 2, cp, ldc, mr, nr, add, bias_p);
        }
    }
}

/* ------------------------------------------------------------------ the product */

void mha_bf16_gemm(int M, int N, int K, const float *a, int lda, int trans_a,
                   const uint16_t *packed_b, float *c, int ldc, int accumulate, const float *bias,
                   float *a_row_sums, uint16_t *scratch) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {                                            /* C = start + nothing */
        if (!accumulate)
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) c[(size_t)m * ldc + n] = bias ? bias[n] : 0.0f;
        return;
    }
    const int kp = (K + 1) & ~1;
    const size_t panel = (size_t)kp * MHA_BF16_NR;          /* elements per panel of B */
    const int mp = (M + MHA_BF16_MR - 1) / MHA_BF16_MR * MHA_BF16_MR;
    double *sums = NULL;                                     /* (Mp) at the start of scratch */
    uint16_t *ap_all = scratch;
    if (a_row_sums) {
        sums = (double *)(void *)scratch;
        memset(sums, 0, (size_t)M * sizeof *sums);
        ap_all = scratch + (size_t)mp * (sizeof(double) / sizeof(uint16_t));
    }
    for (int k0 = 0; k0 < kp; k0 += MHA_BF16_KC) {
        const int kl = kp - k0 < MHA_BF16_KC ? kp - k0 : MHA_BF16_KC;
        const int add = accumulate || k0 > 0;                /* the first depth block sets C */
        pack_a(ap_all, a, lda, trans_a, M, K, k0, kl, sums); /* (Mp, kl) */
        depth_block(M, N, ap_all, kl, packed_b, panel, k0, kl, c, ldc, add, bias);
    }
    if (a_row_sums)
        for (int m = 0; m < M; m++) a_row_sums[m] += (float)sums[m];
}

void mha_bf16_gemm_packed_a(int M, int N, int K, const uint16_t *a, int a_stride,
                            const uint16_t *packed_b, int b_rows, float *c, int ldc, int accumulate) {
    if (M <= 0 || N <= 0 || K <= 0) return;
    const int kp = (K + 1) & ~1;
    const size_t panel = (size_t)((b_rows + 1) & ~1) * MHA_BF16_NR;   /* elements per panel of B */
    /* the depth blocks of mha_bf16_gemm, so that both give the same sums */
    for (int k0 = 0; k0 < kp; k0 += MHA_BF16_KC) {
        const int kl = kp - k0 < MHA_BF16_KC ? kp - k0 : MHA_BF16_KC;
        depth_block(M, N, a + k0, a_stride, packed_b, panel, k0, kl, c, ldc, accumulate || k0 > 0, NULL);
    }
}

/* ------------------------------------------------------------------ cblas-like entry */

/* One thread's packing buffers, grown on demand and kept (a thread's step allocates nothing
 * once warm), freed when the thread exits. Out of memory gives NULL: mha_sgemm_bf16 then
 * runs the fp32 product. */
static _Thread_local MhaThreadBuffer tl_packed, tl_scratch;

uint16_t *mha_bf16_thread_scratch(int M) {
    return mha_thread_buffer_try_get(&tl_scratch, mha_bf16_scratch_elems(M) * sizeof(uint16_t));
}

void mha_sgemm_bf16(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE trans_a, enum CBLAS_TRANSPOSE trans_b,
                    int M, int N, int K, float alpha, const float *a, int lda, const float *b, int ldb,
                    float beta, float *c, int ldc) {
    const int accumulate = beta == 1.0f && alpha == 1.0f;
    uint16_t *packed = NULL, *scratch = NULL;
    if (order == CblasRowMajor && (beta == 0.0f || accumulate) && M > 0 && N > 0) {
        packed = mha_thread_buffer_try_get(&tl_packed, mha_bf16_packed_b_elems(K, N) * sizeof(uint16_t));
        scratch = mha_bf16_thread_scratch(M);
    }
    if (!packed || !scratch) {   /* not a case this path covers, or out of memory: fp32 */
        cblas_sgemm(order, trans_a, trans_b, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    const int tb = trans_b != CblasNoTrans;
    mha_bf16_pack_b(packed, b, ldb, tb, K, N, 0, mha_bf16_panels(N));
    mha_bf16_gemm(M, N, K, a, lda, trans_a != CblasNoTrans, packed, c, ldc, accumulate, NULL, NULL, scratch);
    if (!accumulate && alpha != 1.0f)
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) c[(size_t)m * ldc + n] *= alpha;
}
