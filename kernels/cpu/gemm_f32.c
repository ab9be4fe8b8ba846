/* kernels/cpu/gemm_f32.c: the fp32 product of the linear forward on AVX2 + FMA CPUs, in AVX2
 * or AVX-512 tiles, and of the backward's dinp on the AVX-512 ones (see gemm_f32.h for why, the
 * function computed and the packed layout).
 *
 * AVX2: a micro-tile of MHA_F32_MR (6) rows x MHA_F32_NR (16) columns of y lives in 12 ymm
 * accumulators; per k it loads the panel's 16 weights (two vectors) and broadcasts x[r][k]
 * of each row into one FMA per vector. AVX-512: MHA_F32_WIDE_MR (12) rows x two panels (32
 * columns) in 24 zmm accumulators, the same way. Rows past a multiple of the tile's run the
 * same code with fewer rows, columns past OC are zero weights whose sums are never stored, and
 * the depth is cut into blocks of KC whose partial sums go through y unchanged (a float stored
 * and loaded), so an element's value is always fma(x[r][IC-1], w[c][IC-1], ... fma(x[r][0],
 * w[c][0], y0)) + bias[c], with y0 = 0 (or, accumulating, y's value before the call),
 * whatever M, the row's place, the caller's row blocks and the tile width. */
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/gemm_f32.h"

#ifdef MHA_CPU_X86
#include <immintrin.h>
#define FAST_TARGET __attribute__((target("avx2,fma")))
#endif

enum { KC = 256 };   /* depth per block: a panel's block (KC x 16 floats, 16 KiB) stays in L1 */

/* ------------------------------------------------------------------ dispatch */

static int force_mode;   /* mha_f32_gemm_force */

/* OpenBLAS's own: the name of the kernel family it picked for this CPU (DYNAMIC_ARCH) */
char *openblas_get_corename(void);

int mha_openblas_avx512_kernels(void) {
    static atomic_int known = -1;   /* computed once; every thread computes the same answer */
    int v = atomic_load(&known);
    if (v < 0) {
        const char *core = openblas_get_corename();
        v = core && (strcasecmp(core, "skylakex") == 0 || strcasecmp(core, "cooperlake") == 0);
        atomic_store(&known, v);
    }
    return v;
}

int mha_f32_gemm_cpu_supported(void) {
#ifdef MHA_CPU_X86
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

static int narrow_only;   /* mha_f32_gemm_force_avx2 */

int mha_f32_gemm_wide_supported(void) { return mha_cpu_avx512(); }

void mha_f32_gemm_force_avx2(int on) { narrow_only = on; }

static int use_wide(void) { return !narrow_only && mha_f32_gemm_wide_supported(); }

int mha_f32_gemm_fast(void) { return force_mode >= 0 && mha_f32_gemm_cpu_supported(); }

int mha_f32_gemm_wide(void) { return mha_f32_gemm_fast() && use_wide(); }

void mha_f32_gemm_force(int mode) { force_mode = mode; }

/* ------------------------------------------------------------------ packing */

size_t mha_f32_packed_w_elems(int OC, int IC) {
    return (size_t)mha_f32_panels(OC) * MHA_F32_NR * (size_t)(IC > 0 ? IC : 0);
}

void mha_f32_pack_w(float *dst, const float *w, int OC, int IC, int p0, int p1) {
    for (int p = p0; p < p1; p++) {
        float *panel = dst + (size_t)p * IC * MHA_F32_NR;
        for (int j = 0; j < MHA_F32_NR; j++) {
            const int c = p * MHA_F32_NR + j;
            if (c < OC) {
                const float *row = w + (size_t)c * IC;
                for (int k = 0; k < IC; k++) panel[(size_t)k * MHA_F32_NR + j] = row[k];
            } else {
                for (int k = 0; k < IC; k++) panel[(size_t)k * MHA_F32_NR + j] = 0.0f;
            }
        }
    }
}

void mha_f32_pack_wt(float *dst, const float *w, int OC, int IC, int k0, int k1) {
    /* the panels of wt (IC, OC) = w^T: panel p holds, for each k < OC, w[k][p * NR + j]; here
     * rows [k0, k1) of every panel, reading w's rows whole */
    const int np = mha_f32_panels(IC);
    for (int k = k0; k < k1; k++) {
        const float *src = w + (size_t)k * IC;
        for (int p = 0; p < np; p++) {
            float *row = dst + ((size_t)p * OC + k) * MHA_F32_NR;
            const int j0 = p * MHA_F32_NR, nj = IC - j0 < MHA_F32_NR ? IC - j0 : MHA_F32_NR;
            for (int j = 0; j < nj; j++) row[j] = src[j0 + j];
            for (int j = nj; j < MHA_F32_NR; j++) row[j] = 0.0f;
        }
    }
}

/* ------------------------------------------------------------------ the product */

#ifdef MHA_CPU_X86
/* Lanes [0, n) of a ymm mask. */
static inline FAST_TARGET __m256i lanes_below(int n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* One micro-tile: rows [0, R) of y (stride ldy) += x (R, kc) (stride ldx) @ b (kc x 16, one
 * panel's depth block), over the first ncols (1..16) columns; first: the sums start at zero,
 * else from y; bias (the panel's ncols values, or NULL) is added after the block that ends
 * the depth. R is a constant in every call (tile_rows). The accumulators are named variables,
 * one pair per row (ROW_EACH), not an array: GCC kept an array's copy on the stack up to date
 * at every k, a store per FMA, which ran at a third of the speed. */
#define ROW_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5)
static inline __attribute__((always_inline)) FAST_TARGET void tile(const int R, int kc, const float *x,
                                                                    size_t ldx, const float *b, float *y,
                                                                    size_t ldy, int ncols, int first,
                                                                    const float *bias) {
    /* a partial panel touches its upper 8 columns only when it has some (no pointer past y's
     * or the bias's end is formed, even for a masked access) */
    const int full = ncols == MHA_F32_NR, upper = ncols > 8;
    const __m256i mlo = lanes_below(ncols), mhi = lanes_below(ncols - 8);
#define ACC_DECLARE(r) __m256 lo##r = _mm256_setzero_ps(), hi##r = _mm256_setzero_ps();
    ROW_EACH(ACC_DECLARE)
#define ACC_LOAD(r)                                                  \
    if (R > r && !first) {                                           \
        if (full) {                                                  \
            lo##r = _mm256_loadu_ps(y + r * ldy);                    \
            hi##r = _mm256_loadu_ps(y + r * ldy + 8);                \
        } else {                                                     \
            lo##r = _mm256_maskload_ps(y + r * ldy, mlo);            \
            if (upper) hi##r = _mm256_maskload_ps(y + r * ldy + 8, mhi); \
        }                                                            \
    }
    ROW_EACH(ACC_LOAD)
    for (int k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(b + (size_t)k * MHA_F32_NR);
        const __m256 b1 = _mm256_load_ps(b + (size_t)k * MHA_F32_NR + 8);
#define ACC_FMA(r)                                                   \
        if (R > r) {                                                 \
            const __m256 a = _mm256_broadcast_ss(x + r * ldx + k);   \
            lo##r = _mm256_fmadd_ps(a, b0, lo##r);                   \
            hi##r = _mm256_fmadd_ps(a, b1, hi##r);                   \
        }
        ROW_EACH(ACC_FMA)
    }
    if (bias) {
        const __m256 blo = full ? _mm256_loadu_ps(bias) : _mm256_maskload_ps(bias, mlo);
        const __m256 bhi = full ? _mm256_loadu_ps(bias + 8)
                                : upper ? _mm256_maskload_ps(bias + 8, mhi) : _mm256_setzero_ps();
#define ACC_BIAS(r)                                                  \
        if (R > r) {                                                 \
            lo##r = _mm256_add_ps(lo##r, blo);                       \
            hi##r = _mm256_add_ps(hi##r, bhi);                       \
        }
        ROW_EACH(ACC_BIAS)
    }
#define ACC_STORE(r)                                                 \
    if (R > r) {                                                     \
        if (full) {                                                  \
            _mm256_storeu_ps(y + r * ldy, lo##r);                    \
            _mm256_storeu_ps(y + r * ldy + 8, hi##r);                \
        } else {                                                     \
            _mm256_maskstore_ps(y + r * ldy, mlo, lo##r);            \
            if (upper) _mm256_maskstore_ps(y + r * ldy + 8, mhi, hi##r); \
        }                                                            \
    }
    ROW_EACH(ACC_STORE)
#undef ACC_DECLARE
#undef ACC_LOAD
#undef ACC_FMA
#undef ACC_BIAS
#undef ACC_STORE
}

/* ------------------------------------------------------------------ AVX-512 */

#define WIDE_TARGET __attribute__((target("avx512f")))
enum { WIDE_MR = MHA_F32_WIDE_MR };   /* 12 rows x 32 columns in 24 zmm accumulators */

/* tile() with zmm vectors over NP (1 or 2) panels side by side: rows [0, R) of y += x (R, kc)
 * @ the panels' depth block (b0 and b1 = b0 + IC * 16, both kc x 16), over the first ncols
 * (1..16 * NP) columns. Each element gets the same fmaf chain as in tile(), so both kernels
 * give the same bits. R and NP are constants in every call (wide_tile_rows). */
#define WIDE_ROW_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
static inline __attribute__((always_inline)) WIDE_TARGET void wide_tile(const int R, const int NP, int kc,
                                                                         const float *x, size_t ldx,
                                                                         const float *b0, const float *b1,
                                                                         float *y, size_t ldy, int ncols,
                                                                         int first, const float *bias) {
    /* the second panel's columns are touched only when there are some (no pointer past y's or
     * the bias's end is formed) */
    const int upper = NP == 2 && ncols > 16;
    const __mmask16 mlo = mha_mask16(ncols), mhi = mha_mask16(ncols - 16);
#define WACC_DECLARE(r) __m512 lo##r = _mm512_setzero_ps(), hi##r = _mm512_setzero_ps();
    WIDE_ROW_EACH(WACC_DECLARE)
#define WACC_LOAD(r)                                                        \
    if (R > r && !first) {                                                  \
        lo##r = _mm512_maskz_loadu_ps(mlo, y + r * ldy);                    \
        if (upper) hi##r = _mm512_maskz_loadu_ps(mhi, y + r * ldy + 16);    \
    }
    WIDE_ROW_EACH(WACC_LOAD)
    for (int k = 0; k < kc; k++) {
        const __m512 w0 = _mm512_load_ps(b0 + (size_t)k * MHA_F32_NR);
        const __m512 w1 = NP == 2 ? _mm512_load_ps(b1 + (size_t)k * MHA_F32_NR) : w0;
#define WACC_FMA(r)                                                         \
        if (R > r) {                                                        \
            const __m512 a = _mm512_set1_ps(x[r * ldx + k]);                \
            lo##r = _mm512_fmadd_ps(a, w0, lo##r);                          \
            if (NP == 2) hi##r = _mm512_fmadd_ps(a, w1, hi##r);             \
        }
        WIDE_ROW_EACH(WACC_FMA)
    }
    if (bias) {
        const __m512 blo = _mm512_maskz_loadu_ps(mlo, bias);
        const __m512 bhi = upper ? _mm512_maskz_loadu_ps(mhi, bias + 16) : _mm512_setzero_ps();
#define WACC_BIAS(r)                                                        \
        if (R > r) {                                                        \
            lo##r = _mm512_add_ps(lo##r, blo);                              \
            if (NP == 2) hi##r = _mm512_add_ps(hi##r, bhi);                 \
        }
        WIDE_ROW_EACH(WACC_BIAS)
    }
#define WACC_STORE(r)                                                       \
    if (R > r) {                                                            \
        _mm512_mask_storeu_ps(y + r * ldy, mlo, lo##r);                     \
        if (upper) _mm512_mask_storeu_ps(y + r * ldy + 16, mhi, hi##r);     \
    }
    WIDE_ROW_EACH(WACC_STORE)
#undef WACC_DECLARE
#undef WACC_LOAD
#undef WACC_FMA
#undef WACC_BIAS
#undef WACC_STORE
}

/* wide_tile() with R (1..WIDE_MR) and NP (1, 2) as constants */
static WIDE_TARGET void wide_tile_rows(int R, int NP, int kc, const float *x, size_t ldx, const float *b0,
                                       const float *b1, float *y, size_t ldy, int ncols, int first,
                                       const float *bias) {
#define WIDE_CASE(r)                                                                           \
    case r:                                                                                    \
        if (NP == 2) wide_tile(r, 2, kc, x, ldx, b0, b1, y, ldy, ncols, first, bias);          \
        else wide_tile(r, 1, kc, x, ldx, b0, b1, y, ldy, ncols, first, bias);                  \
        break;
    switch (R) {
        WIDE_CASE(12) WIDE_CASE(11) WIDE_CASE(10) WIDE_CASE(9) WIDE_CASE(8) WIDE_CASE(7)
        WIDE_CASE(6) WIDE_CASE(5) WIDE_CASE(4) WIDE_CASE(3) WIDE_CASE(2)
        default: WIDE_CASE(1)
    }
#undef WIDE_CASE
}

/* The product on wide_tile: panel pairs outside, row tiles inside (the pair's depth block,
 * 2 x kc x 16 floats, stays in L1 while the rows stream past). */
static WIDE_TARGET void gemm_nt_wide(int M, int OC, int IC, const float *x, size_t ldx, const float *packed_w,
                                     const float *bias, float *y, size_t ldy, int accumulate) {
    const int np = mha_f32_panels(OC);
    for (int k0 = 0; k0 < IC; k0 += KC) {
        const int kc = IC - k0 < KC ? IC - k0 : KC, first = k0 == 0 && !accumulate, last = k0 + kc == IC;
        for (int p = 0; p < np; p += 2) {
            const int NP = np - p >= 2 ? 2 : 1, c0 = p * MHA_F32_NR;
            const int ncols = OC - c0 < NP * MHA_F32_NR ? OC - c0 : NP * MHA_F32_NR;
            const float *b0 = packed_w + ((size_t)p * IC + k0) * MHA_F32_NR;
            const float *b1 = NP == 2 ? b0 + (size_t)IC * MHA_F32_NR : b0;
            for (int r0 = 0; r0 < M; r0 += WIDE_MR)
                wide_tile_rows(M - r0 < WIDE_MR ? M - r0 : WIDE_MR, NP, kc, x + (size_t)r0 * ldx + k0, ldx, b0, b1,
                               y + (size_t)r0 * ldy + c0, ldy, ncols, first, last && bias ? bias + c0 : NULL);
        }
    }
}

/* tile() with R (1..MHA_F32_MR) as a constant */
static FAST_TARGET void tile_rows(int R, int kc, const float *x, size_t ldx, const float *b, float *y,
                                  size_t ldy, int ncols, int first, const float *bias) {
    switch (R) {
    case 6: tile(6, kc, x, ldx, b, y, ldy, ncols, first, bias); break;
    case 5: tile(5, kc, x, ldx, b, y, ldy, ncols, first, bias); break;
    case 4: tile(4, kc, x, ldx, b, y, ldy, ncols, first, bias); break;
    case 3: tile(3, kc, x, ldx, b, y, ldy, ncols, first, bias); break;
    case 2: tile(2, kc, x, ldx, b, y, ldy, ncols, first, bias); break;
    default: tile(1, kc, x, ldx, b, y, ldy, ncols, first, bias); break;
    }
}
#endif

void mha_f32_gemm_nt(int M, int OC, int IC, const float *x, size_t ldx, const float *packed_w,
                     const float *bias, float *y, size_t ldy, int accumulate) {
#ifdef MHA_CPU_X86
    if (M <= 0 || OC <= 0) return;
    if (IC <= 0) {   /* an empty sum: y = bias, or y += bias */
        for (int r = 0; r < M; r++)
            for (int c = 0; c < OC; c++) {
                float *e = &y[(size_t)r * ldy + c];
                *e = accumulate ? (bias ? *e + bias[c] : *e) : (bias ? bias[c] : 0.0f);
            }
        return;
    }
    if (use_wide()) {
        gemm_nt_wide(M, OC, IC, x, ldx, packed_w, bias, y, ldy, accumulate);
        return;
    }
    const int np = mha_f32_panels(OC);
    for (int k0 = 0; k0 < IC; k0 += KC) {
        const int kc = IC - k0 < KC ? IC - k0 : KC, first = k0 == 0 && !accumulate, last = k0 + kc == IC;
        for (int p = 0; p < np; p++) {
            const int c0 = p * MHA_F32_NR, ncols = OC - c0 < MHA_F32_NR ? OC - c0 : MHA_F32_NR;
            const float *b = packed_w + ((size_t)p * IC + k0) * MHA_F32_NR;
            for (int r0 = 0; r0 < M; r0 += MHA_F32_MR)
                tile_rows(M - r0 < MHA_F32_MR ? M - r0 : MHA_F32_MR, kc, x + (size_t)r0 * ldx + k0, ldx, b,
                          y + (size_t)r0 * ldy + c0, ldy, ncols, first, last && bias ? bias + c0 : NULL);
        }
    }
#else   /* unreachable: mha_f32_gemm_cpu_supported() is 0 off x86-64 */
    (void)M, (void)OC, (void)IC, (void)x, (void)ldx, (void)packed_w, (void)bias, (void)y, (void)ldy,
        (void)accumulate;
    abort();
#endif
}
