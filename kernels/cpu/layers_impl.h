/* kernels/cpu/layers_impl.h: the per-layer CPU kernels, written once for any scalar type.
 *
 * A template: the includer defines
 *   REAL              float or double
 *   FN(name)          the exported (suffixed) name of op `name`
 *   GEMM              cblas_sgemm or cblas_dgemm
 *   GEMV              cblas_sgemv or cblas_dgemv
 *   LINEAR_FORWARD_OWN (optional) a function with linear_forward_post's arguments that
 *                     returns 1 when it did the whole op on a product of its own, 0 to leave
 *                     it to GEMM (layers_f32.c: linear_f32.c on CPUs with AVX2 and FMA)
 *   LINEAR_DINP_PACK, LINEAR_DINP_ROWS (optional) linear_backward's dinp on that kernel:
 *                     the first packs w for it (NULL: leave dinp to GEMM), the second
 *                     multiplies a block of rows (layers_f32.h)
 *   R_EXP R_LOG R_SQRT R_ERF   math functions for REAL
 *   MHA_CLONES        (optional) a function attribute for the compute-bound row/range
 *                     helpers, e.g. target_clones for a wider instruction set
 *   and what attention_impl.h takes (ATT_GEMM, MHA_ATT_BQ, MHA_ROWS_FAST_DEGREE)
 * and includes cpu_common.h and <math.h> first. layers_f32.c builds the backend's
 * kernels from it, layers_f64.c the double reference the tests differentiate.
 * Here: linear, embedding, LayerNorm, activations, dropout, pooling, loss; the attention is in
 * attention_impl.h (included below), the per-thread scratch in scratch_impl.h.
 * Semantics: kernels/backend.h. Every matrix product is a GEMM; everything else is an
 * OpenMP loop with a contiguous inner loop. Backward ops accumulate (+=), except act_backward
 * and linear_backward's dinp when asked (backend.h).
 * Re-entrant across host threads: the scratch (the attention's, a linear layer's padded rows)
 * is one cached buffer per instantiation and per calling thread (_Thread_local), shared by the
 * threads of that call's region, so several host threads (e.g. model/evaluate.c's workers)
 * may run ops at once on their own data.
 */
#include <omp.h>
#include <stdio.h>
#include "kernels/backend.h"
#include "kernels/rng.h"

#ifndef MHA_CLONES
#define MHA_CLONES
#endif
#define MHA_CHUNK 16       /* channels per task in column reductions (one cache line of floats) */
#define MHA_BLOCK 8192     /* elements per task in elementwise loops */
#define MHA_LINEAR_ALIGN 96   /* rows per unit of the linear forward's row blocks */
#define MHA_DINP_BLOCK_ROWS (2 * MHA_LINEAR_ALIGN)   /* rows per block of the backward's dinp */
#define MHA_DW_BLOCK_ROWS 64                         /* rows (of OC) per block of its dw */

#include "kernels/cpu/scratch_impl.h"

/* acc (w <= MHA_CHUNK) = the sums over rows n of src[n * C + c], rows in order, in double. A
 * whole chunk takes the loop of fixed width, which the compiler turns into vector adds (each
 * channel's sum is still its rows in order: the same bits). */
static MHA_CLONES void FN(colsum_chunk)(double *acc, const REAL *src, int N, int C, int w) {
    double a[MHA_CHUNK] = {0};
    if (w == MHA_CHUNK) {
        for (int n = 0; n < N; n++) {
            const REAL *row = src + (size_t)n * C;
#pragma omp simd
            for (int c = 0; c < MHA_CHUNK; c++) a[c] += row[c];
        }
    } else {
        for (int n = 0; n < N; n++)
            for (int c = 0; c < w; c++) a[c] += src[(size_t)n * C + c];
    }
    for (int c = 0; c < w; c++) acc[c] = a[c];
}

/* dst (C) += column sums of src (N, C); double accumulation, parallel over channel chunks,
 * so the result does not depend on the number of threads. */
void FN(colsum_acc)(REAL *dst, const REAL *src, int N, int C) {
    int nchunk = (C + MHA_CHUNK - 1) / MHA_CHUNK;
#pragma omp parallel for schedule(static) if ((size_t)N * C >= MHA_OMP_MIN)
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * MHA_CHUNK, w = C - c0 < MHA_CHUNK ? C - c0 : MHA_CHUNK;
        double acc[MHA_CHUNK];
        FN(colsum_chunk)(acc, src + c0, N, C, w);
        for (int c = 0; c < w; c++) dst[c0 + c] += (REAL)acc[c];
    }
}

/* ================================ linear ================================ */

/* Batch invariance: with OpenBLAS's AVX-512 kernels (SkylakeX, Cooperlake) a row's output
 * here does not depend on N, on the rows around it or on the thread count, so a text gets the
 * same bits alone or in any batch (mha_f32_rows_batch_invariant; tests/kernels/test_cpu_ops.c,
 * tests/model/test_evaluate.c). Two things could break that, and are kept out:
 *  - OpenBLAS 0.3.21 sends small products to a "small-matrix" kernel whose rows depend on the
 *    call's shape. For this call (TN in its column-major terms) that happens while
 *    OC x rows <= 1200 and OC x rows x IC <= 1e6 (and IC >= 32); a call with fewer rows than
 *    linear_min_rows() runs on a zero-padded copy instead, at most MHA_LINEAR_ALIGN rows.
 *    Weights that would need more (OC <= 12 and OC x IC <= ~10^4: a classifier head) are
 *    multiplied row by row with GEMV, every row the same call whatever the batch.
 *  - Its AVX2 kernels (Haswell, Zen) give a row other bits at another position in a 12-row
 *    tile. On every x86-64 CPU with AVX2 and FMA the float forward runs on our own product
 *    instead (LINEAR_FORWARD_OWN: linear_f32.c, gemm_f32.c; faster than OpenBLAS's AVX-512
 *    kernels too), the same FMA chain for every row; so this code runs elsewhere, and in the
 *    tests that force OpenBLAS. Here, without it, only the thread count is kept out: row
 *    blocks start at multiples of MHA_LINEAR_ALIGN rows, so a row keeps its position in the
 *    tiles on any thread count. */
static int FN(linear_min_rows)(int IC, int OC) {
    if (IC < 32) return 1;
    const long by_count = 1200 / OC + 1;                                      /* OC x rows > 1200 */
    const long by_size = (long)(1000000 / ((double)OC * IC)) + 1;              /* > 1e6 multiply-adds */
    return (int)(by_count < by_size ? by_count : by_size);
}

/* rows [n0, n1) of the product through OpenBLAS, as one call of at least min_rows rows (a
 * zero-padded copy in `pad`, min_rows * (IC + OC) elements, when n1 - n0 is fewer) */
static void FN(linear_gemm_rows)(REAL *out, const REAL *inp, const REAL *w, const REAL *bias,
                                 int n0, int n1, int IC, int OC, int min_rows, REAL *pad) {
    const int rows = n1 - n0, M = rows < min_rows ? min_rows : rows;
    const REAL *x = inp + (size_t)n0 * IC;
    REAL *y = out + (size_t)n0 * OC;
    if (rows < min_rows) {
        REAL *x_pad = pad, *y_pad = pad + (size_t)min_rows * IC;
        memcpy(x_pad, x, (size_t)rows * IC * sizeof(REAL));
        memset(x_pad + (size_t)rows * IC, 0, (size_t)(M - rows) * IC * sizeof(REAL));
        x = x_pad;
        y = y_pad;
    }
    REAL beta = 0;
    if (bias) {
        for (int n = 0; n < M; n++) memcpy(y + (size_t)n * OC, bias, (size_t)OC * sizeof(REAL));
        beta = 1;
    }
    GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, M, OC, IC, 1, x, IC, w, IC, beta, y, OC);
    if (rows < min_rows) memcpy(out + (size_t)n0 * OC, y, (size_t)rows * OC * sizeof(REAL));
}

/* Threading of the products: see mha_gemm_row_blocks in cpu_common.h. */
void FN(linear_forward_post)(REAL *out, REAL *pre, const REAL *inp, const REAL *w, const REAL *bias,
                             int N, int IC, int OC, int act, REAL p_drop, uint64_t seed,
                             const REAL *residual) {
    /* y = inp (N, IC) @ w (OC, IC)^T + bias (OC), kept in pre (N, OC) when asked;
     * out (N, OC) = dropout(act(y)) + residual (N, OC) */
    if (N <= 0 || OC <= 0) return;
#ifdef LINEAR_FORWARD_OWN
    if (LINEAR_FORWARD_OWN(out, pre, inp, w, bias, N, IC, OC, act, p_drop, seed, residual)) return;
#endif
    if (IC <= 0) {
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) out[(size_t)n * OC + o] = bias ? bias[o] : 0;
        FN(linear_post)(out, pre, residual, (size_t)N * OC, act, p_drop, seed, 0);
        return;
    }
    /* blocks of whole units of MHA_LINEAR_ALIGN rows; only the last block can end in a partial
     * unit, and only a block of that unit alone can be shorter than min_rows: it alone uses the
     * padded copy. Weights that need more padding than a unit go row by row (GEMV). */
    const int min_rows = FN(linear_min_rows)(IC, OC), by_row = min_rows > MHA_LINEAR_ALIGN;
    const int tail = N % MHA_LINEAR_ALIGN;
    const int par = (size_t)N * IC * OC >= MHA_GEMM_PAR_MIN;
    const int nb = par ? mha_gemm_row_blocks(N, omp_get_max_threads(), MHA_LINEAR_ALIGN) : 1;
    const int short_block = nb == 1 ? N < min_rows : tail != 0 && tail < min_rows;
    REAL *pad = !by_row && short_block ? FN(scratch)((size_t)min_rows * (IC + OC)) : NULL;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int blk = 0; blk < nb; blk++) {
        int n0, n1;
        mha_split_rows(N, blk, nb, MHA_LINEAR_ALIGN, &n0, &n1);
        if (n1 <= n0) continue;
        if (!by_row) FN(linear_gemm_rows)(out, inp, w, bias, n0, n1, IC, OC, min_rows, pad);
        else
            for (int n = n0; n < n1; n++) {   /* y_n (OC) = w (OC, IC) @ x_n (IC) + bias */
                REAL *y = out + (size_t)n * OC;
                if (bias) memcpy(y, bias, (size_t)OC * sizeof(REAL));
                else memset(y, 0, (size_t)OC * sizeof(REAL));
                GEMV(CblasRowMajor, CblasNoTrans, OC, IC, 1, w, IC, inp + (size_t)n * IC, 1, 1, y, 1);
            }
        /* the block is still in cache */
        size_t first = (size_t)n0 * OC;
        FN(linear_post)(out + first, pre ? pre + first : NULL, residual ? residual + first : NULL,
                        (size_t)(n1 - n0) * OC, act, p_drop, seed, first);
    }
}

void FN(linear_forward)(REAL *out, const REAL *inp, const REAL *w, const REAL *bias,
                        int N, int IC, int OC) {
    FN(linear_forward_post)(out, NULL, inp, w, bias, N, IC, OC, -1, 0, 0, NULL);
}

void FN(linear_backward)(REAL *dinp, REAL *dw, REAL *dbias, const REAL *dout,
                         const REAL *inp, const REAL *w, int N, int IC, int OC,
                         int dinp_accumulate) {
    if (N <= 0 || IC <= 0) return;
    if (OC <= 0) {   /* empty product: an overwritten dinp is zeros */
        if (dinp && !dinp_accumulate) memset(dinp, 0, (size_t)N * IC * sizeof(REAL));
        return;
    }
    /* dinp: blocks of its N rows; dw: blocks of its OC rows (no reduction across blocks). The
     * blocks follow from the shapes alone, never from the thread count, so that every element
     * gets the same bits on any number of cores (a run resumed on another machine goes on
     * exactly; tests/kernels/test_cpu_ops.c). Sizes measured with OpenBLAS on AVX2 (N 4032,
     * IC x OC of 128 x 128 to 512, 1 and 2 threads): within 3% (dinp) and 10% (dw) of the best
     * split for each shape. */
    const int par = (size_t)N * IC * OC >= MHA_GEMM_PAR_MIN;
    const int nbx = dinp ? (par ? (N + MHA_DINP_BLOCK_ROWS - 1) / MHA_DINP_BLOCK_ROWS : 1) : 0;
    const int nbw = dw ? (par ? (OC + MHA_DW_BLOCK_ROWS - 1) / MHA_DW_BLOCK_ROWS : 1) : 0;
#ifdef LINEAR_DINP_PACK
    const void *packed_wt = dinp ? LINEAR_DINP_PACK(w, IC, OC, par) : NULL;   /* NULL: dinp through GEMM */
#endif
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int task = 0; task < nbx + nbw; task++) {
        int lo, hi;
        if (task < nbx) {
            /* dinp (N, IC) (+)= dout (N, OC) @ w (OC, IC); beta 0: dinp is not read */
            mha_split_rows(N, task, nbx, MHA_DINP_BLOCK_ROWS, &lo, &hi);
            if (hi <= lo) continue;
#ifdef LINEAR_DINP_PACK
            if (packed_wt) {
                LINEAR_DINP_ROWS(dinp, dout, packed_wt, lo, hi, IC, OC, dinp_accumulate);
                continue;
            }
#endif
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, hi - lo, IC, OC, 1, dout + (size_t)lo * OC, OC, w, IC,
                 dinp_accumulate ? 1 : 0, dinp + (size_t)lo * IC, IC);
        } else {
            /* dw (OC, IC) += dout^T (OC, N) @ inp (N, IC) */
            mha_split_rows(OC, task - nbx, nbw, MHA_DW_BLOCK_ROWS, &lo, &hi);
            if (hi <= lo) continue;
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, hi - lo, IC, N, 1, dout + lo, OC, inp, IC, 1,
                 dw + (size_t)lo * IC, IC);
        }
    }
    /* dbias (OC) += column sums of dout */
    if (dbias) FN(colsum_acc)(dbias, dout, N, OC);
}

/* =============================== embedding =============================== */

void FN(embed_forward)(REAL *out, const int32_t *ids, const REAL *tok, const REAL *pos,
                       int B, int T, int C) {
    /* out (B, T, C) = tok (V, C)[ids (B, T)] + pos (maxT, C)[t] */
    int BT = B * T;
#pragma omp parallel for schedule(static) if ((size_t)BT * C >= MHA_OMP_MIN)
    for (int bt = 0; bt < BT; bt++) {
        REAL *o = out + (size_t)bt * C;
        const REAL *tr = tok + (size_t)ids[bt] * C;
        if (pos) {
            const REAL *pr = pos + (size_t)(bt % T) * C;
            for (int c = 0; c < C; c++) o[c] = tr[c] + pr[c];
        } else {
            for (int c = 0; c < C; c++) o[c] = tr[c];
        }
    }
}

void FN(embed_backward)(REAL *dtok, REAL *dpos, const REAL *dout, const int32_t *ids,
                        int B, int T, int C) {
    /* dtok (V, C) += scatter of dout (B, T, C) by ids: each task owns a chunk of channels and
     * walks all positions in order, so every sum has a fixed order whatever the threads. */
    int BT = B * T;
    int nchunk = (C + MHA_CHUNK - 1) / MHA_CHUNK;
#pragma omp parallel for schedule(static) if ((size_t)BT * C >= MHA_OMP_MIN)
    for (int ch = 0; ch < nchunk; ch++) {
        int c0 = ch * MHA_CHUNK, w = C - c0 < MHA_CHUNK ? C - c0 : MHA_CHUNK;
        for (int bt = 0; bt < BT; bt++) {
            REAL *d = dtok + (size_t)ids[bt] * C + c0;
            const REAL *g = dout + (size_t)bt * C + c0;
            for (int c = 0; c < w; c++) d[c] += g[c];
        }
    }
    /* dpos (maxT, C) rows t < T += sum over b of dout[b, t] */
    if (dpos) {
#pragma omp parallel for schedule(static) if ((size_t)BT * C >= MHA_OMP_MIN)
        for (int t = 0; t < T; t++) {
            REAL *d = dpos + (size_t)t * C;
            for (int b = 0; b < B; b++) {
                const REAL *g = dout + ((size_t)b * T + t) * C;
                for (int c = 0; c < C; c++) d[c] += g[c];
            }
        }
    }
}

/* =============================== layernorm =============================== */

/* One row: o (C) = (x - m) * rs * w + b; *m_out, *rs_out = the row's mean and 1 / std. */
static MHA_CLONES void FN(layernorm_row)(REAL *o, REAL *m_out, REAL *rs_out, const REAL *x,
                                         const REAL *w, const REAL *b, int C) {
    REAL s = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; c++) s += x[c];
    REAL m = s / (REAL)C;
    REAL v = 0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) {
        REAL d = x[c] - m;
        v += d * d;
    }
    v /= (REAL)C;
    REAL rs = 1 / R_SQRT(v + (REAL)MHA_LN_EPS);
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * rs * w[c] + b[c];
    *m_out = m;
    *rs_out = rs;
}

/* The LayerNorm backward walks rows in blocks of this many: each block sums its rows' weight
 * and bias gradients (in double, rows in order) while it computes their input gradients, and
 * the blocks' sums are then added in block order. The order depends on N alone, not on the
 * threads. */
#define MHA_LN_BLOCK_ROWS 64

/* Rows [n0, n1): d (C) += rs * (g w - mean(g w) - xhat * mean(g w xhat)) for each row (when d
 * is not NULL), and pw (C) = sum of g * xhat, pb (C) = sum of g over the rows. */
static MHA_CLONES void FN(layernorm_bwd_block)(REAL *d, double *pw, double *pb, const REAL *g, const REAL *x,
                                               const REAL *w, const REAL *mean, const REAL *rstd, int n0,
                                               int n1, int C) {
    for (int c = 0; c < C; c++) pw[c] = 0, pb[c] = 0;
    for (int n = n0; n < n1; n++) {
        const REAL *gr = g + (size_t)n * C, *xr = x + (size_t)n * C;
        const REAL m = mean[n], rs = rstd[n];
        if (d) {
            REAL sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
            for (int c = 0; c < C; c++) {
                REAL gw = gr[c] * w[c];
                sg += gw;
                sgx += gw * (xr[c] - m) * rs;
            }
            sg /= (REAL)C;
            sgx /= (REAL)C;
            REAL *dr = d + (size_t)n * C;
#pragma omp simd
            for (int c = 0; c < C; c++) {
                REAL xh = (xr[c] - m) * rs;
                dr[c] += (gr[c] * w[c] - sg - xh * sgx) * rs;
                pw[c] += gr[c] * xh;
                pb[c] += gr[c];
            }
        } else {
#pragma omp simd
            for (int c = 0; c < C; c++) {
                pw[c] += gr[c] * ((xr[c] - m) * rs);
                pb[c] += gr[c];
            }
        }
    }
}

void FN(layernorm_forward)(REAL *out, REAL *mean, REAL *rstd, const REAL *inp,
                           const REAL *w, const REAL *b, int N, int C) {
    /* out (N, C) = (inp - mean) * rstd * w + b; mean, rstd (N) */
#ifdef MHA_LN_ROW_FAST
    if (C > 0 && C % 16 == 0 && MHA_ROWS_FAST()) {   /* rows_avx512.h */
#pragma omp parallel for schedule(static) if ((size_t)N * C >= MHA_OMP_MIN)
        for (int n = 0; n < N; n++)
            MHA_LN_ROW_FAST(out + (size_t)n * C, mean ? mean + n : NULL, rstd ? rstd + n : NULL,
                            inp + (size_t)n * C, w, b, C, MHA_LN_EPS);
        return;
    }
#endif
#pragma omp parallel for schedule(static) if ((size_t)N * C >= MHA_OMP_MIN)
    for (int n = 0; n < N; n++) {
        REAL m, rs;
        FN(layernorm_row)(out + (size_t)n * C, &m, &rs, inp + (size_t)n * C, w, b, C);
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = rs;
    }
}

void FN(layernorm_backward)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout,
                            const REAL *inp, const REAL *w, const REAL *mean,
                            const REAL *rstd, int N, int C) {
    /* dinp (N, C) += rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * w;
     * dw (C) += sum_n dout * xhat, db (C) += sum_n dout */
    if (N <= 0 || C <= 0) return;
    const int nblk = (N + MHA_LN_BLOCK_ROWS - 1) / MHA_LN_BLOCK_ROWS;
    const size_t per = FN(stride64)(2 * (size_t)C * sizeof(double) / sizeof(REAL));   /* a block's sums */
    REAL *scr = FN(scratch)(per * (size_t)nblk);
#pragma omp parallel if ((size_t)N * C >= MHA_OMP_MIN)
    {
#pragma omp for schedule(static)
        for (int bi = 0; bi < nblk; bi++) {
            double *pw = (double *)(void *)(scr + per * (size_t)bi), *pb = pw + C;
            const int n0 = bi * MHA_LN_BLOCK_ROWS, n1 = n0 + MHA_LN_BLOCK_ROWS < N ? n0 + MHA_LN_BLOCK_ROWS : N;
            FN(layernorm_bwd_block)(dinp, pw, pb, dout, inp, w, mean, rstd, n0, n1, C);
        }
        /* the blocks' sums, in block order (after the loop's barrier) */
#pragma omp for schedule(static)
        for (int c = 0; c < C; c++) {
            double sw = 0, sb = 0;
            for (int bi = 0; bi < nblk; bi++) {
                const double *pw = (const double *)(const void *)(scr + per * (size_t)bi);
                sw += pw[c];
                sb += pw[C + c];
            }
            if (dw) dw[c] += (REAL)sw;
            if (db) db[c] += (REAL)sb;
        }
    }
}

/* ============================== elementwise ==============================
 * Compute-bound loops run as ranges [i0, i1) of MHA_BLOCK elements, one call per task, so
 * the helpers can carry MHA_CLONES. Dropout keeps element i when the top 24 bits k of
 * mha_rng_u64(seed, offset + i) satisfy k >= ceil(p 2^24), which is exactly
 * mha_rng_uniform(seed, offset + i) >= p (see mha_drop_threshold), in integers so it vectorises. */

static MHA_CLONES void FN(gelu_fwd_range)(REAL *out, const REAL *inp, size_t i0, size_t i1) {
    const REAL s = (REAL)0.70710678118654752440;   /* 1/sqrt(2) */
#pragma omp simd
    for (size_t i = i0; i < i1; i++) {
        REAL x = inp[i];
        out[i] = (REAL)0.5 * x * (1 + R_ERF(x * s));
    }
}

static MHA_CLONES void FN(relu_residual_range)(REAL *out, const REAL *residual, size_t n, int relu) {
    if (relu) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = out[i] > 0 ? out[i] : 0;
    }
    if (residual) {
#pragma omp simd
        for (size_t i = 0; i < n; i++) out[i] = residual[i] + out[i];
    }
}

static MHA_CLONES void FN(gelu_bwd_range)(REAL *dinp, const REAL *dout, const REAL *inp,
                                          size_t i0, size_t i1) {
    const REAL s = (REAL)0.70710678118654752440;   /* 1/sqrt(2) */
    const REAL k = (REAL)0.39894228040143267794;   /* 1/sqrt(2 pi) */
#pragma omp simd
    for (size_t i = i0; i < i1; i++) {
        REAL x = inp[i];
        REAL cdf = (REAL)0.5 * (1 + R_ERF(x * s));
        REAL pdf = k * R_EXP((REAL)-0.5 * x * x);
        dinp[i] = dout[i] * (cdf + x * pdf);   /* dinp may be dout: one index at a time */
    }
}

/* dst[i] (+)= keep(i) ? src[i] * scale : 0 over [i0, i1); accumulate selects += */
static MHA_CLONES void FN(dropout_range)(REAL *dst, const REAL *src, size_t i0, size_t i1,
                                         uint64_t thr, REAL scale, uint64_t seed,
                                         uint64_t offset, int accumulate) {
    if (accumulate) {
#pragma omp simd
        for (size_t i = i0; i < i1; i++)
            dst[i] += (mha_rng_u64(seed, offset + i) >> 40) >= thr ? src[i] * scale : 0;
    } else {
#pragma omp simd
        for (size_t i = i0; i < i1; i++)
            dst[i] = (mha_rng_u64(seed, offset + i) >> 40) >= thr ? src[i] * scale : 0;
    }
}

void FN(linear_post)(REAL *out, REAL *pre, const REAL *residual, size_t n, int act, REAL p_drop,
                     uint64_t seed, uint64_t first) {
    if (pre) memcpy(pre, out, n * sizeof(REAL));
    if (act == MHA_ACT_GELU) FN(gelu_fwd_range)(out, out, 0, n);
    if (p_drop > 0) {   /* dropout_apply's threshold and scale, on this block's counters */
        if (act == MHA_ACT_RELU) FN(relu_residual_range)(out, NULL, n, 1);
        FN(dropout_range)(out, out, 0, n, mha_drop_threshold((double)p_drop),
                          p_drop < 1 ? 1 / (1 - p_drop) : 0, seed, first, 0);
        if (residual) FN(relu_residual_range)(out, residual, n, 0);
    } else if (act == MHA_ACT_RELU || residual) {
        FN(relu_residual_range)(out, residual, n, act == MHA_ACT_RELU);
    }
}

void FN(act_forward)(REAL *out, const REAL *inp, size_t n, int act) {
    if (act == MHA_ACT_GELU) {
        const size_t nb = (n + MHA_BLOCK - 1) / MHA_BLOCK;
#pragma omp parallel for schedule(static) if (nb > 1)
        for (size_t bi = 0; bi < nb; bi++) {
            size_t i0 = bi * MHA_BLOCK, i1 = i0 + MHA_BLOCK < n ? i0 + MHA_BLOCK : n;
            FN(gelu_fwd_range)(out, inp, i0, i1);
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n >= MHA_OMP_MIN)
        for (size_t i = 0; i < n; i++) out[i] = inp[i] > 0 ? inp[i] : 0;
    }
}

void FN(act_backward)(REAL *dinp, const REAL *dout, const REAL *inp, size_t n, int act) {
    if (act == MHA_ACT_GELU) {
        const size_t nb = (n + MHA_BLOCK - 1) / MHA_BLOCK;
#pragma omp parallel for schedule(static) if (nb > 1)
        for (size_t bi = 0; bi < nb; bi++) {
            size_t i0 = bi * MHA_BLOCK, i1 = i0 + MHA_BLOCK < n ? i0 + MHA_BLOCK : n;
            FN(gelu_bwd_range)(dinp, dout, inp, i0, i1);
        }
    } else {
#pragma omp parallel for simd schedule(static) if (n >= MHA_OMP_MIN)
        for (size_t i = 0; i < n; i++) {
            REAL g = dout[i];   /* loaded unconditionally: the loop vectorises (a select) */
            dinp[i] = inp[i] > 0 ? g : 0;
        }
    }
}

static void FN(dropout_apply)(REAL *dst, const REAL *src, size_t n, REAL p, uint64_t seed,
                              uint64_t offset, int accumulate) {
    const uint64_t thr = mha_drop_threshold((double)p);
    const REAL scale = p < 1 ? 1 / (1 - p) : 0;
    const size_t nb = (n + MHA_BLOCK - 1) / MHA_BLOCK;
#pragma omp parallel for schedule(static) if (nb > 1)
    for (size_t bi = 0; bi < nb; bi++) {
        size_t i0 = bi * MHA_BLOCK, i1 = i0 + MHA_BLOCK < n ? i0 + MHA_BLOCK : n;
        FN(dropout_range)(dst, src, i0, i1, thr, scale, seed, offset, accumulate);
    }
}

void FN(dropout_forward)(REAL *out, const REAL *inp, size_t n, REAL p,
                         uint64_t seed, uint64_t offset) {
    /* out = inp * keep / (1 - p), keep when uniform(seed, offset + i) >= p */
    if (p <= 0) {
        if (out != inp) memcpy(out, inp, n * sizeof(REAL));
        return;
    }
    FN(dropout_apply)(out, inp, n, p, seed, offset, 0);
}

void FN(dropout_backward)(REAL *dinp, const REAL *dout, size_t n, REAL p,
                          uint64_t seed, uint64_t offset) {
    if (p <= 0) {
#pragma omp parallel for simd schedule(static) if (n >= MHA_OMP_MIN)
        for (size_t i = 0; i < n; i++) dinp[i] += dout[i];
        return;
    }
    FN(dropout_apply)(dinp, dout, n, p, seed, offset, 1);
}

#include "kernels/cpu/attention_impl.h"

/* ================================ pooling ================================ */

void FN(pool_forward)(REAL *out, int32_t *argmax, const REAL *inp, const int32_t *lengths,
                      int B, int T, int C, int mode) {
    /* out (B, C) from inp (B, T, C) over t < L; L == 0 gives zeros (argmax -1) */
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= MHA_OMP_MIN)
    for (int b = 0; b < B; b++) {
        const int L = mha_clamp_len(lengths[b], T);
        const REAL *x = inp + (size_t)b * T * C;
        REAL *o = out + (size_t)b * C;
        if (L == 0) {
            memset(o, 0, (size_t)C * sizeof(REAL));
            if (mode == MHA_POOL_MAX && argmax)
                for (int c = 0; c < C; c++) argmax[(size_t)b * C + c] = -1;
            continue;
        }
        if (mode == MHA_POOL_CLS) {
            memcpy(o, x, (size_t)C * sizeof(REAL));
        } else if (mode == MHA_POOL_MAX) {
            int32_t *am = argmax + (size_t)b * C;
            memcpy(o, x, (size_t)C * sizeof(REAL));
            for (int c = 0; c < C; c++) am[c] = 0;
            for (int t = 1; t < L; t++) {
                const REAL *xr = x + (size_t)t * C;
                for (int c = 0; c < C; c++)
                    if (xr[c] > o[c]) {
                        o[c] = xr[c];
                        am[c] = t;
                    }
            }
        } else {
            memcpy(o, x, (size_t)C * sizeof(REAL));
            for (int t = 1; t < L; t++) {
                const REAL *xr = x + (size_t)t * C;
                for (int c = 0; c < C; c++) o[c] += xr[c];
            }
            const REAL inv = 1 / (REAL)L;
            for (int c = 0; c < C; c++) o[c] *= inv;
        }
    }
}

void FN(pool_backward)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                       const int32_t *lengths, int B, int T, int C, int mode) {
    /* dinp (B, T, C) += route of dout (B, C); padded rows untouched */
#pragma omp parallel for schedule(static) if ((size_t)B * T * C >= MHA_OMP_MIN)
    for (int b = 0; b < B; b++) {
        const int L = mha_clamp_len(lengths[b], T);
        REAL *d = dinp + (size_t)b * T * C;
        const REAL *g = dout + (size_t)b * C;
        if (L == 0) continue;
        if (mode == MHA_POOL_CLS) {
            for (int c = 0; c < C; c++) d[c] += g[c];
        } else if (mode == MHA_POOL_MAX) {
            const int32_t *am = argmax + (size_t)b * C;
            for (int c = 0; c < C; c++)
                if (am[c] >= 0 && am[c] < L) d[(size_t)am[c] * C + c] += g[c];
        } else {
            const REAL inv = 1 / (REAL)L;
            for (int t = 0; t < L; t++) {
                REAL *dr = d + (size_t)t * C;
                for (int c = 0; c < C; c++) dr[c] += g[c] * inv;
            }
        }
    }
}

/* ============================= cross-entropy ============================= */

void FN(crossentropy)(REAL *losses, REAL *probs, REAL *dlogits, const REAL *logits,
                      const int32_t *labels, int B, int K, REAL smoothing, REAL dscale) {
    /* losses (B) = (1-eps) (-log p_y) + eps mean_k (-log p_k); probs (B, K);
     * dlogits (B, K) += (probs - target) * dscale. A label outside [0, K) gives a NaN loss. */
    const REAL eps = smoothing;
#pragma omp parallel for schedule(static) if ((size_t)B * K >= MHA_OMP_MIN)
    for (int b = 0; b < B; b++) {
        const REAL *l = logits + (size_t)b * K;
        REAL mx = l[0];
        for (int k = 1; k < K; k++) mx = l[k] > mx ? l[k] : mx;
        /* The loss is accumulated in double as log(s) + (max - l[y]): for a confident
         * prediction s = 1 + small, and lse - l[y] in float would cancel to ~1e-7 absolute. */
        double s = 0, sl = 0;
        for (int k = 0; k < K; k++) {
            s += (double)R_EXP(l[k] - mx);
            sl += (double)(mx - l[k]);
        }
        const double log_s = log(s);
        const REAL lse = mx + (REAL)log_s;
        const int y = labels[b];
        const int ok = y >= 0 && y < K;
        if (losses)
            losses[b] = ok ? (REAL)((1 - (double)eps) * (log_s + (double)(mx - l[y])) +
                                    (double)eps * (log_s + sl / K))
                           : (REAL)NAN;
        for (int k = 0; k < K; k++) {
            REAL p = R_EXP(l[k] - lse);
            if (probs) probs[(size_t)b * K + k] = p;
            if (dlogits) {
                REAL target = eps / (REAL)K + (k == y ? 1 - eps : 0);
                dlogits[(size_t)b * K + k] += (p - target) * dscale;
            }
        }
    }
}
