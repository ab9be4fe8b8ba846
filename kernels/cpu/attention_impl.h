/* kernels/cpu/attention_impl.h: the CPU attention forward and backward, written once for any
 * scalar type: the materialising path (the (T, T) probabilities kept for the backward) and
 * the fused path (query blocks, softmax rows in scratch, the log-sum-exp kept, P recomputed in
 * the backward), with key padding from the lengths, causal masking and attention dropout.
 *
 * A template, included by layers_impl.h (every op of a type) and by layers_f32.c alone (the
 * attention again over bf16 products). The includer defines REAL, FN, GEMM, R_EXP, R_LOG and
 * R_SQRT as for layers_impl.h, includes scratch_impl.h first, and may define
 *   MHA_CLONES        a function attribute for the row helpers (default none)
 *   ATT_GEMM          the attention's products (default GEMM), e.g. mha_sgemm_bf16
 *   MHA_ATT_BQ        query rows per block of the fused attention (default 64)
 *   MHA_ROWS_FAST_DEGREE (float only) use rows_avx512.h's softmax rows, with
 *                     mha_expf_degree of this degree (R_EXP's), on rows without dropout,
 *                     when MHA_ROWS_FAST() (the includer's: CPU support, not forced off)
 * Each (b, h) is one OpenMP task, with BLAS forced single-threaded for the duration. */
#include <omp.h>
#include <string.h>
#include "kernels/backend.h"
#include "kernels/rng.h"

#ifndef MHA_CLONES
#define MHA_CLONES
#endif
#ifndef ATT_GEMM
#define ATT_GEMM GEMM
#endif
#ifndef MHA_ATT_BQ
#define MHA_ATT_BQ 64      /* query rows per block in the fused attention (includer may set) */
#endif

/* =============================== attention ===============================
 * Per (b, h): q, k, v are (T, HS) views of qkv with row stride 3C; y a (T, HS) view of
 * out with row stride C. L = lengths[b] (clamped); rows/keys >= L are padding. */

/* Row helpers (MHA_CLONES), one call per score row. Attention dropout of row i keeps key j
 * when (mha_rng_u64(seed, base + j) >> 40) >= thr, base = ((b NH + h) T + i) T. */

/* row (nz): scores in [0, n) -> softmax probabilities (times `mult`, and dropped when
 * thr > 0), zeros in [n, nz). Returns the log-sum-exp of the scores. */
static MHA_CLONES REAL FN(softmax_row)(REAL *row, int n, int nz, REAL mult, uint64_t thr,
                                       uint64_t seed, uint64_t base) {
#ifdef MHA_ROWS_FAST_DEGREE
    if (!thr && MHA_ROWS_FAST()) return mha_softmax_row_avx512(row, n, nz, mult, MHA_ROWS_FAST_DEGREE);
#endif
    REAL mx = row[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    REAL sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < n; j++) {
        REAL e = R_EXP(row[j] - mx);
        row[j] = e;
        sum += e;
    }
    const REAL inv = mult / sum;
    if (thr) {
#pragma omp simd
        for (int j = 0; j < n; j++)
            row[j] = (mha_rng_u64(seed, base + j) >> 40) >= thr ? row[j] * inv : 0;
    } else {
#pragma omp simd
        for (int j = 0; j < n; j++) row[j] *= inv;
    }
    for (int j = n; j < nz; j++) row[j] = 0;
    return mx + R_LOG(sum);
}

/* dst (n) = dropout of src (n), kept values times scale; dst == src allowed */
static MHA_CLONES void FN(dropout_row)(REAL *dst, const REAL *src, int n, uint64_t thr,
                                       REAL scale, uint64_t seed, uint64_t base) {
#pragma omp simd
    for (int j = 0; j < n; j++)
        dst[j] = (mha_rng_u64(seed, base + j) >> 40) >= thr ? src[j] * scale : 0;
}

/* dr (n): dP in, dS = P (dP - sum_j dP P) * scale out; zeros in [n, nz) */
static MHA_CLONES void FN(softmax_bwd_row)(REAL *dr, const REAL *pr, int n, int nz, REAL scale) {
    REAL D = 0;
#pragma omp simd reduction(+ : D)
    for (int j = 0; j < n; j++) D += dr[j] * pr[j];
#pragma omp simd
    for (int j = 0; j < n; j++) dr[j] = pr[j] * (dr[j] - D) * scale;
    for (int j = n; j < nz; j++) dr[j] = 0;
}

/* Fused backward, one query row: sr (n) scaled scores in, P' = dropout(exp(s - lse)) out;
 * dr (n) dP' in, dS = P (dP - D) * scale out, dP = dropout backward of dP'. */
static MHA_CLONES void FN(fused_bwd_row)(REAL *sr, REAL *dr, int n, int nz, REAL lse, REAL D,
                                         REAL scale, uint64_t thr, REAL dscale, uint64_t seed,
                                         uint64_t base) {
#ifdef MHA_ROWS_FAST_DEGREE
    if (!thr && MHA_ROWS_FAST()) {
        mha_fused_bwd_row_avx512(sr, dr, n, nz, lse, D, scale, MHA_ROWS_FAST_DEGREE);
        return;
    }
#endif
    if (thr) {
#pragma omp simd
        for (int j = 0; j < n; j++) {
            REAL p = R_EXP(sr[j] - lse);
            int keep = (mha_rng_u64(seed, base + j) >> 40) >= thr;
            REAL m = keep ? dscale : 0;
            sr[j] = p * m;
            dr[j] = p * (dr[j] * m - D) * scale;
        }
    } else {
#pragma omp simd
        for (int j = 0; j < n; j++) {
            REAL p = R_EXP(sr[j] - lse);
            sr[j] = p;
            dr[j] = p * (dr[j] - D) * scale;
        }
    }
    for (int j = n; j < nz; j++) sr[j] = dr[j] = 0;
}

void FN(attention_forward_math)(REAL *out, REAL *att, const REAL *qkv, const int32_t *lengths,
                                int B, int T, int C, int NH, int causal,
                                REAL p_drop, uint64_t seed) {
    /* att (B, NH, T, T) = softmax(q k^T / sqrt(HS)) masked; out (B, T, C) = dropout(att) v */
    const int HS = C / NH, C3 = 3 * C;
    const REAL scale = 1 / R_SQRT((REAL)HS);
    const uint64_t thr = p_drop > 0 ? mha_drop_threshold((double)p_drop) : 0;
    const REAL dscale = p_drop < 1 ? 1 / (1 - p_drop) : 0;
    const int nthr = omp_get_max_threads();
    const size_t per = thr ? FN(stride64)((size_t)T * T) : 0;
    REAL *scr = thr ? FN(scratch)(per * (size_t)nthr) : NULL;
    const int blas = mha_blas_parallel_enter();
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH, L = mha_clamp_len(lengths[b], T);
        REAL *A = att + (size_t)bh * T * T;                   /* (T, T) */
        const REAL *q = qkv + (size_t)b * T * C3 + (size_t)h * HS;
        const REAL *k = q + C, *v = q + 2 * C;
        REAL *y = out + (size_t)b * T * C + (size_t)h * HS;   /* (T, HS), stride C */
        if (L > 0)   /* A[:L, :L] = scale * q k^T */
            ATT_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, HS, scale, q, C3, k, C3, 0, A, T);
        for (int i = 0; i < L; i++)
            FN(softmax_row)(A + (size_t)i * T, causal ? i + 1 : L, T, 1, 0, 0, 0);
        if (L < T) memset(A + (size_t)L * T, 0, (size_t)(T - L) * T * sizeof(REAL));
        for (int i = L; i < T; i++) memset(y + (size_t)i * C, 0, (size_t)HS * sizeof(REAL));
        if (L == 0) continue;
        const REAL *P = A;
        int ldp = T;
        if (thr) {   /* P' (L, L) = dropout(A[:L, :L]) in this thread's scratch */
            REAL *Pd = scr + per * (size_t)omp_get_thread_num();
            for (int i = 0; i < L; i++)
                FN(dropout_row)(Pd + (size_t)i * L, A + (size_t)i * T, L, thr, dscale, seed,
                                ((uint64_t)bh * T + i) * T);
            P = Pd;
            ldp = L;
        }
        /* y[:L] (L, HS) = P' (L, L) @ v[:L] (L, HS) */
        ATT_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, HS, L, 1, P, ldp, v, C3, 0, y, C);
    }
    mha_blas_parallel_leave(blas);
}

void FN(attention_backward_math)(REAL *dqkv, REAL *datt, const REAL *dout, const REAL *qkv,
                                 const REAL *att, const int32_t *lengths,
                                 int B, int T, int C, int NH, int causal,
                                 REAL p_drop, uint64_t seed) {
    const int HS = C / NH, C3 = 3 * C;
    const REAL scale = 1 / R_SQRT((REAL)HS);
    const uint64_t thr = p_drop > 0 ? mha_drop_threshold((double)p_drop) : 0;
    const REAL dscale = p_drop < 1 ? 1 / (1 - p_drop) : 0;
    const int nthr = omp_get_max_threads();
    const size_t per = thr ? FN(stride64)((size_t)T * T) : 0;
    REAL *scr = thr ? FN(scratch)(per * (size_t)nthr) : NULL;
    const int blas = mha_blas_parallel_enter();
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH, L = mha_clamp_len(lengths[b], T);
        if (L == 0) continue;
        const REAL *A = att + (size_t)bh * T * T;             /* P (T, T) */
        REAL *dA = datt + (size_t)bh * T * T;                 /* dP', then dS (T, T) */
        const REAL *q = qkv + (size_t)b * T * C3 + (size_t)h * HS;
        const REAL *k = q + C, *v = q + 2 * C;
        REAL *dq = dqkv + (size_t)b * T * C3 + (size_t)h * HS;
        REAL *dk = dq + C, *dv = dq + 2 * C;
        const REAL *dy = dout + (size_t)b * T * C + (size_t)h * HS;   /* (T, HS), stride C */
        /* dP' (L, L) = dy (L, HS) @ v^T */
        ATT_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, L, L, HS, 1, dy, C, v, C3, 0, dA, T);
        /* dv (L, HS) += P'^T (L, L) @ dy (L, HS) */
        const REAL *P = A;
        int ldp = T;
        if (thr) {
            REAL *Pd = scr + per * (size_t)omp_get_thread_num();
            for (int i = 0; i < L; i++)
                FN(dropout_row)(Pd + (size_t)i * L, A + (size_t)i * T, L, thr, dscale, seed,
                                ((uint64_t)bh * T + i) * T);
            P = Pd;
            ldp = L;
        }
        ATT_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, L, HS, L, 1, P, ldp, dy, C, 1, dv, C3);
        /* dP = dropout backward of dP';  dS = P * (dP - rowsum(dP * P)) * scale */
        for (int i = 0; i < L; i++) {
            REAL *dr = dA + (size_t)i * T;
            int n = causal ? i + 1 : L;
            if (thr) FN(dropout_row)(dr, dr, n, thr, dscale, seed, ((uint64_t)bh * T + i) * T);
            FN(softmax_bwd_row)(dr, A + (size_t)i * T, n, L, scale);
        }
        /* dq (L, HS) += dS (L, L) @ k;  dk (L, HS) += dS^T @ q */
        ATT_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, HS, L, 1, dA, T, k, C3, 1, dq, C3);
        ATT_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, L, HS, L, 1, dA, T, q, C3, 1, dk, C3);
    }
    mha_blas_parallel_leave(blas);
}

void FN(attention_forward_fused)(REAL *out, REAL *lse, const REAL *qkv, const int32_t *lengths,
                                 int B, int T, int C, int NH, int causal,
                                 REAL p_drop, uint64_t seed) {
    /* out (B, T, C) as the math path; lse (B, NH, T) = log sum_j exp(score_ij), 0 on padded
     * rows. Query blocks of MHA_ATT_BQ rows against keys [0, kend): scratch (BQ, L) per thread. */
    const int HS = C / NH, C3 = 3 * C;
    const REAL scale = 1 / R_SQRT((REAL)HS);
    const uint64_t thr = p_drop > 0 ? mha_drop_threshold((double)p_drop) : 0;
    const REAL dscale = p_drop < 1 ? 1 / (1 - p_drop) : 0;
    const int nthr = omp_get_max_threads();
    const size_t per = FN(stride64)((size_t)MHA_ATT_BQ * T);
    REAL *scr = FN(scratch)(per * (size_t)nthr);
    const int blas = mha_blas_parallel_enter();
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH, L = mha_clamp_len(lengths[b], T);
        const REAL *q = qkv + (size_t)b * T * C3 + (size_t)h * HS;
        const REAL *k = q + C, *v = q + 2 * C;
        REAL *y = out + (size_t)b * T * C + (size_t)h * HS;   /* (T, HS), stride C */
        REAL *ls = lse + (size_t)bh * T;                      /* (T) */
        REAL *S = scr + per * (size_t)omp_get_thread_num();   /* (bq, kend) */
        for (int i = L; i < T; i++) {
            memset(y + (size_t)i * C, 0, (size_t)HS * sizeof(REAL));
            ls[i] = 0;
        }
        for (int i0 = 0; i0 < L; i0 += MHA_ATT_BQ) {
            const int bq = L - i0 < MHA_ATT_BQ ? L - i0 : MHA_ATT_BQ;
            const int kend = causal ? i0 + bq : L;
            /* S (bq, kend) = scale * q[i0:i0+bq] @ k[:kend]^T */
            ATT_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, bq, kend, HS, scale,
                 q + (size_t)i0 * C3, C3, k, C3, 0, S, kend);
            /* S -> P' = dropout(softmax(S)) row by row */
            for (int r = 0; r < bq; r++) {
                const int i = i0 + r;
                ls[i] = FN(softmax_row)(S + (size_t)r * kend, causal ? i + 1 : kend, kend,
                                        thr ? dscale : 1, thr, seed, ((uint64_t)bh * T + i) * T);
            }
            /* y[i0:i0+bq] (bq, HS) = P' (bq, kend) @ v[:kend] (kend, HS) */
            ATT_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, HS, kend, 1, S, kend, v, C3, 0,
                 y + (size_t)i0 * C, C);
        }
    }
    mha_blas_parallel_leave(blas);
}

void FN(attention_backward_fused)(REAL *dqkv, const REAL *dout, const REAL *out,
                                  const REAL *qkv, const REAL *lse, const int32_t *lengths,
                                  int B, int T, int C, int NH, int causal,
                                  REAL p_drop, uint64_t seed) {
    /* Recomputes P = exp(scale q k^T - lse) per query block; D_i = dy_i . y_i;
     * dS = P * (dP - D) * scale. Scratch: two (BQ, L) tiles per thread. */
    const int HS = C / NH, C3 = 3 * C;
    const REAL scale = 1 / R_SQRT((REAL)HS);
    const uint64_t thr = p_drop > 0 ? mha_drop_threshold((double)p_drop) : 0;
    const REAL dscale = p_drop < 1 ? 1 / (1 - p_drop) : 0;
    const int nthr = omp_get_max_threads();
    const size_t per = FN(stride64)((size_t)MHA_ATT_BQ * T);
    REAL *scr = FN(scratch)(2 * per * (size_t)nthr);
    const int blas = mha_blas_parallel_enter();
#pragma omp parallel for schedule(dynamic, 1)
    for (int bh = 0; bh < B * NH; bh++) {
        const int b = bh / NH, h = bh % NH, L = mha_clamp_len(lengths[b], T);
        const REAL *q = qkv + (size_t)b * T * C3 + (size_t)h * HS;
        const REAL *k = q + C, *v = q + 2 * C;
        REAL *dq = dqkv + (size_t)b * T * C3 + (size_t)h * HS;
        REAL *dk = dq + C, *dv = dq + 2 * C;
        const REAL *dy = dout + (size_t)b * T * C + (size_t)h * HS;   /* (T, HS), stride C */
        const REAL *y = out + (size_t)b * T * C + (size_t)h * HS;
        const REAL *ls = lse + (size_t)bh * T;
        REAL *S = scr + 2 * per * (size_t)omp_get_thread_num();     /* P, then P' (bq, kend) */
        REAL *dS = S + per;                                          /* dP', then dS */
        for (int i0 = 0; i0 < L; i0 += MHA_ATT_BQ) {
            const int bq = L - i0 < MHA_ATT_BQ ? L - i0 : MHA_ATT_BQ;
            const int kend = causal ? i0 + bq : L;
            const REAL *qb = q + (size_t)i0 * C3, *dyb = dy + (size_t)i0 * C;
            /* S (bq, kend) = scale * qb @ k^T;  dS (bq, kend) = dyb @ v^T */
            ATT_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, bq, kend, HS, scale, qb, C3, k, C3, 0,
                 S, kend);
            ATT_GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, bq, kend, HS, 1, dyb, C, v, C3, 0,
                 dS, kend);
            for (int r = 0; r < bq; r++) {
                const int i = i0 + r;
                const REAL *dyi = dyb + (size_t)r * C, *yi = y + (size_t)i * C;
                REAL D = 0;
#pragma omp simd reduction(+ : D)
                for (int c = 0; c < HS; c++) D += dyi[c] * yi[c];
                FN(fused_bwd_row)(S + (size_t)r * kend, dS + (size_t)r * kend,
                                  causal ? i + 1 : kend, kend, ls[i], D, scale, thr, dscale,
                                  seed, ((uint64_t)bh * T + i) * T);
            }
            /* dv[:kend] += P'^T @ dyb;  dq[i0:] += dS @ k[:kend];  dk[:kend] += dS^T @ qb */
            ATT_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, kend, HS, bq, 1, S, kend, dyb, C, 1,
                 dv, C3);
            ATT_GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, bq, HS, kend, 1, dS, kend, k, C3, 1,
                 dq + (size_t)i0 * C3, C3);
            ATT_GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, kend, HS, bq, 1, dS, kend, qb, C3, 1,
                 dk, C3);
        }
    }
    mha_blas_parallel_leave(blas);
}

