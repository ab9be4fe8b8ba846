/* kernels/cpu/rows_avx512.h: the attention's per-row softmax loops for float written with
 * AVX-512 intrinsics, for rows without attention dropout (the common case: model.attn_dropout
 * defaults to 0, and prediction never drops), and the LayerNorm forward's row (at the end).
 *
 * Why: score rows are short (a text's length, often 20-100 keys), and the compiler's
 * vectorised loops spend most of such a row in scalar remainder iterations and horizontal
 * reductions through memory. Here each loop runs 16 lanes at a time with a masked last
 * vector, and each reduction is folded once per row.
 *
 * Same function as the portable rows in attention_impl.h: the exp below performs
 * mha_expf_degree's operations in the same order (separate multiplies and adds, as the
 * C11 build does not contract; meson.build also says -ffp-contract=off), so each exp(s - max)
 * is the same float; the sum is reduced in another order (16 partial lanes), so the
 * probabilities and the log-sum-exp may differ by an ulp or so.
 * Included by layers_f32.c; attention_impl.h's row helpers call these at run time when the CPU
 * has AVX-512 (mha_cpu_avx512()) and mha_rows_force_portable(1) did not switch them off;
 * tests/kernels/test_cpu_ops.c checks both paths against double and against each other. */
#ifndef MHA_KERNELS_CPU_ROWS_AVX512_H
#define MHA_KERNELS_CPU_ROWS_AVX512_H

#include <math.h>
#include <string.h>
#include "kernels/cpu/cpu_features.h"

#ifdef MHA_CPU_X86
#define MHA_ROWS_AVX512 1
#include <immintrin.h>
#define ROWS_TARGET __attribute__((target("avx512f")))

/* 16 lanes of mha_expf_degree(x, degree) (degree 7 or 5), the same operations in order. */
ROWS_TARGET static inline __m512 rows_exp16(__m512 x, int degree) {
    const __m512 hi = _mm512_set1_ps(88.0f), lo = _mm512_set1_ps(-87.3f);
    const __m512 shifter = _mm512_set1_ps(12582912.0f);
    __m512 xc = _mm512_min_ps(hi, x);                  /* x > hi ? hi : x */
    xc = _mm512_max_ps(lo, xc);                        /* xc < lo ? lo : xc */
    __m512 t = _mm512_add_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)), shifter);
    __m512 n = _mm512_sub_ps(t, shifter);
    __m512 r = _mm512_sub_ps(xc, _mm512_mul_ps(n, _mm512_set1_ps(0.693359375f)));
    r = _mm512_sub_ps(r, _mm512_mul_ps(n, _mm512_set1_ps(-2.12194440e-4f)));
    __m512 p = _mm512_set1_ps(1.0f / 120.0f);
    if (degree >= 7) {
        p = _mm512_set1_ps(1.0f / 5040.0f);
        p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 720.0f));
        p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 120.0f));
    }
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(0.5f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ), y);   /* x < lo: 0 */
}

/* row (nz): scores in [0, n) (n >= 1) -> softmax probabilities times mult, zeros in [n, nz).
 * Returns the log-sum-exp of the scores. */
ROWS_TARGET static inline float mha_softmax_row_avx512(float *row, int n, int nz, float mult, int degree) {
    __m512 mx = _mm512_set1_ps(row[0]);
    for (int j = 0; j < n; j += 16) {                  /* row[j] > mx ? row[j] : mx */
        const __mmask16 m = mha_mask16(n - j);
        mx = _mm512_mask_max_ps(mx, m, _mm512_maskz_loadu_ps(m, row + j), mx);
    }
    const float mxs = _mm512_reduce_max_ps(mx);
    const __m512 mxv = _mm512_set1_ps(mxs);
    __m512 sum = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = mha_mask16(n - j);
        __m512 e = rows_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + j), mxv), degree);
        _mm512_mask_storeu_ps(row + j, m, e);
        sum = _mm512_mask_add_ps(sum, m, sum, e);
    }
    const float s = _mm512_reduce_add_ps(sum);
    const __m512 inv = _mm512_set1_ps(mult / s);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = mha_mask16(n - j);
        _mm512_mask_storeu_ps(row + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, row + j), inv));
    }
    if (nz > n) memset(row + n, 0, (size_t)(nz - n) * sizeof *row);
    return mxs + logf(s);
}

/* Fused attention backward, one query row without dropout: sr (n) scaled scores in,
 * P = exp(s - lse) out; dr (n) dP in, dS = P (dP - D) scale out; zeros in [n, nz). */
ROWS_TARGET static inline void mha_fused_bwd_row_avx512(float *sr, float *dr, int n, int nz, float lse,
                                                        float D, float scale, int degree) {
    const __m512 lsev = _mm512_set1_ps(lse), Dv = _mm512_set1_ps(D), sc = _mm512_set1_ps(scale);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = mha_mask16(n - j);
        __m512 p = rows_exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sr + j), lsev), degree);
        __m512 d = _mm512_maskz_loadu_ps(m, dr + j);
        _mm512_mask_storeu_ps(sr + j, m, p);
        _mm512_mask_storeu_ps(dr + j, m, _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(d, Dv)), sc));
    }
    if (nz > n) {
        memset(sr + n, 0, (size_t)(nz - n) * sizeof *sr);
        memset(dr + n, 0, (size_t)(nz - n) * sizeof *dr);
    }
}

/* LayerNorm forward of one row of C floats (C a multiple of 16): o = (x - m) * rs * w + b with
 * m the row's mean and rs = 1 / sqrt(var + eps), the variance from x - m (two passes, as
 * layers_impl.h's portable row; its sums run in another order: 16 lanes, folded once). m_out,
 * rs_out may be NULL. (Four rows interleaved were 5% faster in prediction but slower in
 * training, where the rows come from L2: not kept.) */
ROWS_TARGET static inline void mha_layernorm_row_avx512(float *o, float *m_out, float *rs_out, const float *x,
                                                        const float *w, const float *b, int C, float eps) {
    __m512 acc = _mm512_loadu_ps(x);
    for (int c = 16; c < C; c += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + c));
    const float m = _mm512_reduce_add_ps(acc) / (float)C;
    const __m512 mv = _mm512_set1_ps(m);
    acc = _mm512_setzero_ps();
    for (int c = 0; c < C; c += 16) {
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + c), mv);
        acc = _mm512_add_ps(acc, _mm512_mul_ps(d, d));
    }
    const float rs = 1 / sqrtf(_mm512_reduce_add_ps(acc) / (float)C + eps);
    const __m512 rsv = _mm512_set1_ps(rs);
    for (int c = 0; c < C; c += 16) {
        const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + c), mv);
        _mm512_storeu_ps(o + c, _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(d, rsv), _mm512_loadu_ps(w + c)),
                                              _mm512_loadu_ps(b + c)));
    }
    if (m_out) *m_out = m;
    if (rs_out) *rs_out = rs;
}
#endif

#endif
