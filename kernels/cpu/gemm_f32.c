/* kernels/cpu/gemm_f32.c: the fp32 product of the linear forward on AVX2 + FMA CPUs (see
 * gemm_f32.h for why, the function computed and the packed layout).
 *
 * A micro-tile of MHA_F32_MR (6) rows x MHA_F32_NR (16) columns of y lives in 12 ymm
 * accumulators; per k it loads the panel's 16 weights (two vectors) and broadcasts x[r][k]
 * of each row into one FMA per vector. Rows past a multiple of 6 run the same code with fewer
 * rows, columns past OC are zero weights whose sums are never stored, and the depth is cut
 * into blocks of KC whose partial sums go through y unchanged (a float stored and loaded), so
 * an element's value is always fma(x[r][IC-1], w[c][IC-1], ... fma(x[r][0], w[c][0], 0)) +
 * bias[c], whatever M, the row's place and the caller's row blocks. */
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

int mha_f32_gemm_fast(void) {
    if (force_mode < 0 || !mha_f32_gemm_cpu_supported()) return 0;
    return force_mode > 0 || !mha_openblas_avx512_kernels();
}

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
                     const float *bias, float *y, size_t ldy) {
#ifdef MHA_CPU_X86
    if (M <= 0 || OC <= 0) return;
    if (IC <= 0) {   /* an empty sum: y = bias */
        for (int r = 0; r < M; r++)
            for (int c = 0; c < OC; c++) y[(size_t)r * ldy + c] = bias ? bias[c] : 0.0f;
        return;
    }
    const int np = mha_f32_panels(OC);
    for (int k0 = 0; k0 < IC; k0 += KC) {
        const int kc = IC - k0 < KC ? IC - k0 : KC, first = k0 == 0, last = k0 + kc == IC;
        for (int p = 0; p < np; p++) {
            const int c0 = p * MHA_F32_NR, ncols = OC - c0 < MHA_F32_NR ? OC - c0 : MHA_F32_NR;
            const float *b = packed_w + ((size_t)p * IC + k0) * MHA_F32_NR;
            for (int r0 = 0; r0 < M; r0 += MHA_F32_MR)
                tile_rows(M - r0 < MHA_F32_MR ? M - r0 : MHA_F32_MR, kc, x + (size_t)r0 * ldx + k0, ldx, b,
                          y + (size_t)r0 * ldy + c0, ldy, ncols, first, last && bias ? bias + c0 : NULL);
        }
    }
#else   /* unreachable: mha_f32_gemm_cpu_supported() is 0 off x86-64 */
    (void)M, (void)OC, (void)IC, (void)x, (void)ldx, (void)packed_w, (void)bias, (void)y, (void)ldy;
    abort();
#endif
}
