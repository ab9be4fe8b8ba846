/* kernels/cpu/attention_bf16.c: the fused attention forward of the mixed-precision CPU backend
 * (train.precision = "bf16", mha-predict --precision bf16 / int8), for the common case: no
 * attention dropout, AVX512-BF16 and the AVX-512 softmax rows available. Anything else goes
 * to the generic instantiation (attention_impl.h over mha_sgemm_bf16, in layers_f32.c).
 *
 * Same function, bit for bit, as that generic path (tests/kernels/test_cpu_bf16.c checks it),
 * with less memory traffic per head:
 *  - K^T and V are packed to bf16 once per (example, head), not once per query block;
 *  - the 1/sqrt(HS) scale is applied as the scores are read by the softmax (the generic path
 *    multiplies the score block in a pass of its own; it is the same fp32 product);
 *  - the softmax writes the probabilities straight to bf16 in the layout of the second
 *    product's packed A (mha_bf16_gemm_packed_a), instead of writing fp32 probabilities that
 *    the product then reads again to pack. */
#include <math.h>
#include <omp.h>
#include <string.h>
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/layers_bf16.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/cpu/rows_avx512.h"

#define ATT_BQ 64   /* query rows per block (a multiple of MHA_BF16_MR) */
#define SOFTMAX_DEGREE 5   /* the exp of the bf16 instantiation (layers_f32.c) */

#ifdef MHA_ROWS_AVX512
#define FAST_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

#define SOFTMAX_ROWS 4   /* rows softmax_rows_to_bf16 takes at once */

/* Score rows s (R rows of n raw products q.k, n >= 1, lds floats apart) -> p (R rows of stride
 * bf16): softmax of s * scale over [0, n), zeros in [n, stride); lse (R) = the log-sum-exps of
 * the scaled scores. Each row gets the operations of mha_softmax_row_avx512 on the scaled row,
 * in its order, whatever R is (R = 1 or SOFTMAX_ROWS, a constant once inlined); with several
 * rows interleaved, their dependency chains (the running maximum, the horizontal reductions,
 * the division and the log) overlap. s is overwritten with the unnormalised exponentials. */
FAST_TARGET static inline __attribute__((always_inline)) void
softmax_rows_body(float *s, int lds, uint16_t *p, int n, int stride, float scale, float *lse, const int R) {
    const __m512 sc = _mm512_set1_ps(scale);
    __m512 mx[SOFTMAX_ROWS], sum[SOFTMAX_ROWS], mxv[SOFTMAX_ROWS], inv[SOFTMAX_ROWS];
    float mxs[SOFTMAX_ROWS], total[SOFTMAX_ROWS];
    for (int r = 0; r < R; r++) mx[r] = _mm512_set1_ps(s[(size_t)r * lds] * scale);
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = mha_mask16(n - j);
        for (int r = 0; r < R; r++)
            mx[r] = _mm512_mask_max_ps(mx[r], m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + (size_t)r * lds + j), sc),
                                       mx[r]);
    }
    for (int r = 0; r < R; r++) {
        mxs[r] = _mm512_reduce_max_ps(mx[r]);
        mxv[r] = _mm512_set1_ps(mxs[r]);
        sum[r] = _mm512_setzero_ps();
    }
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = mha_mask16(n - j);
        for (int r = 0; r < R; r++) {
            float *sr = s + (size_t)r * lds + j;
            const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sr), sc);
            const __m512 e = rows_exp16(_mm512_sub_ps(x, mxv[r]), SOFTMAX_DEGREE);
            _mm512_mask_storeu_ps(sr, m, e);
            sum[r] = _mm512_mask_add_ps(sum[r], m, sum[r], e);
        }
    }
    for (int r = 0; r < R; r++) {
        total[r] = _mm512_reduce_add_ps(sum[r]);
        inv[r] = _mm512_set1_ps(1.0f / total[r]);
    }
    for (int j = 0; j < n; j += 16) {
        const __mmask16 m = mha_mask16(n - j);
        for (int r = 0; r < R; r++) {
            const __m256i h = (__m256i)_mm512_cvtneps_pbh(
                _mm512_mul_ps(_mm512_maskz_loadu_ps(m, s + (size_t)r * lds + j), inv[r]));
            _mm256_mask_storeu_epi16(p + (size_t)r * stride + j, m, h);
        }
    }
    for (int r = 0; r < R; r++) {
        if (stride > n) memset(p + (size_t)r * stride + n, 0, (size_t)(stride - n) * sizeof *p);
        lse[r] = mxs[r] + logf(total[r]);
    }
}

/* One row (its log-sum-exp returned), and SOFTMAX_ROWS rows of one length at once. */
FAST_TARGET static float softmax_row_to_bf16(float *s, uint16_t *p, int n, int stride, float scale) {
    float lse;
    softmax_rows_body(s, 0, p, n, stride, scale, &lse, 1);
    return lse;
}
FAST_TARGET static void softmax_rows_to_bf16(float *s, int lds, uint16_t *p, int n, int stride, float scale,
                                             float *lse) {
    softmax_rows_body(s, lds, p, n, stride, scale, lse, SOFTMAX_ROWS);
}

/* One thread's workspaces, grown on demand, kept until the thread exits. */
static _Thread_local MhaThreadBuffer tl_scores, tl_probs, tl_keys, tl_values;

void mha_attention_forward_packed_bf16(float *out, float *lse, const float *qkv, const int32_t *lengths,
                                       int B, int T, int C, int NH, int causal, float p_drop,
                                       uint64_t seed) {
    if (p_drop > 0 || !mha_bf16_fast() || !mha_rows_fast() || B <= 0 || T <= 0 || NH <= 0) {
        mha_attention_forward_fused_bf16(out, lse, qkv, lengths, B, T, C, NH, causal, p_drop, seed);
        return;
    }
    /* out (B, T, C), lse (B, NH, T) as in attention_impl.h's fused forward */
    const int HS = C / NH, C3 = 3 * C, Tp = (T + 1) & ~1;
    const float scale = 1 / sqrtf((float)HS);
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH, L = mha_clamp_len(lengths[b], T);
        const float *q = qkv + (size_t)b * T * C3 + (size_t)h * HS;
        const float *k = q + C, *v = q + 2 * C;
        float *y = out + (size_t)b * T * C + (size_t)h * HS;   /* (T, HS), stride C */
        float *ls = lse + (size_t)bh * T;                      /* (T) */
        for (int i = L; i < T; i++) {
            memset(y + (size_t)i * C, 0, (size_t)HS * sizeof *y);
            ls[i] = 0;
        }
        if (L == 0) continue;
        float *S = mha_thread_buffer_get(&tl_scores, (size_t)ATT_BQ * T * sizeof *S, "attention scores");
        uint16_t *P = mha_thread_buffer_get(&tl_probs, (size_t)ATT_BQ * Tp * sizeof *P, "attention probabilities");
        uint16_t *Kp = mha_thread_buffer_get(&tl_keys, mha_bf16_packed_b_elems(HS, T) * sizeof *Kp, "packed keys");
        uint16_t *Vp = mha_thread_buffer_get(&tl_values, mha_bf16_packed_b_elems(T, HS) * sizeof *Vp, "packed values");
        uint16_t *scratch = mha_bf16_thread_scratch(ATT_BQ);
        if (!scratch) {
            fprintf(stderr, "mha: out of memory (a bf16 workspace of the attention)\n");
            exit(1);
        }
        /* B (HS, L) = k[:L]^T and B (L, HS) = v[:L], each packed once for every query block */
        mha_bf16_pack_b(Kp, k, C3, 1, HS, L, 0, mha_bf16_panels(L));
        mha_bf16_pack_b(Vp, v, C3, 0, L, HS, 0, mha_bf16_panels(HS));
        for (int i0 = 0; i0 < L; i0 += ATT_BQ) {
            const int bq = L - i0 < ATT_BQ ? L - i0 : ATT_BQ;
            const int kend = causal ? i0 + bq : L, stride = (kend + 1) & ~1;
            /* S (bq, kend) = q[i0:i0+bq] @ k[:kend]^T (unscaled) */
            mha_bf16_gemm(bq, kend, HS, q + (size_t)i0 * C3, C3, 0, Kp, S, kend, 0, NULL, NULL, scratch);
            /* P (bq, stride) bf16 = softmax(scale S) row by row (SOFTMAX_ROWS at once where the
             * rows have one length); rows up to the micro-tile zero */
            int r0 = 0;
            if (!causal)
                for (; r0 + SOFTMAX_ROWS <= bq; r0 += SOFTMAX_ROWS)
                    softmax_rows_to_bf16(S + (size_t)r0 * kend, kend, P + (size_t)r0 * stride, kend, stride, scale,
                                         ls + i0 + r0);
            for (int r = r0; r < bq; r++) {
                const int i = i0 + r;
                ls[i] = softmax_row_to_bf16(S + (size_t)r * kend, P + (size_t)r * stride,
                                            causal ? i + 1 : kend, stride, scale);
            }
            const int bqp = (bq + MHA_BF16_MR - 1) / MHA_BF16_MR * MHA_BF16_MR;
            if (bqp > bq) memset(P + (size_t)bq * stride, 0, (size_t)(bqp - bq) * stride * sizeof *P);
            /* y[i0:i0+bq] (bq, HS) = P (bq, kend) @ v[:kend] (kend, HS) */
            mha_bf16_gemm_packed_a(bq, HS, kend, P, stride, Vp, L, y + (size_t)i0 * C, C, 0);
        }
    }
}

#else   /* no AVX-512 rows in this build: the generic path */

void mha_attention_forward_packed_bf16(float *out, float *lse, const float *qkv, const int32_t *lengths,
                                       int B, int T, int C, int NH, int causal, float p_drop,
                                       uint64_t seed) {
    mha_attention_forward_fused_bf16(out, lse, qkv, lengths, B, T, C, NH, causal, p_drop, seed);
}

#endif
