/* kernels/cpu/linear_bf16.c: the linear layer of the CPU backend in mixed precision
 * (train.precision = "bf16" on the cpu): the same contract as linear_forward/backward in
 * kernels/backend.h, with both inputs of each product rounded to bf16 and fp32 accumulation
 * (gemm_bf16.c). Weights, activations and gradients stay fp32 in memory.
 *
 * Threading follows the fp32 layer (layers_impl.h): the matrix that every row block
 * multiplies (the weights, or the layer input for dw) is packed once, over all threads (the
 * forward's weights, while promised fixed, once for all calls: packed_cache.h); then the
 * OpenMP threads take row blocks dynamically, each packing its own rows. */
#include <stdio.h>
#include <omp.h>
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/cpu/layers_bf16.h"
#include "kernels/cpu/packed_cache.h"

/* ---- workspaces: grown on demand, kept by their thread (a step allocates nothing) ---- */

static uint16_t *buffer_get(MhaThreadBuffer *b, size_t elems) {
    return mha_thread_buffer_get(b, elems * sizeof(uint16_t), "a bf16 workspace");
}

/* Packed B of the current product(s): one per calling thread, taken before the op's parallel
 * regions and shared by their threads through a local pointer. Per thread (not global) so that
 * several host threads may run linear ops at once (model/evaluate.c's workers). */
static _Thread_local MhaThreadBuffer tl_packed_b[2];

/* The calling OpenMP thread's packed rows of A (gemm_bf16.c keeps one buffer per thread). */
static uint16_t *thread_scratch(int rows) {
    uint16_t *s = mha_bf16_thread_scratch(rows);
    if (!s) {
        fprintf(stderr, "mha: out of memory (%zu MiB for a bf16 workspace)\n",
                (mha_bf16_scratch_elems(rows) * 2) >> 20);
        exit(1);
    }
    return s;
}

/* Packs B (K, N) into dst over the threads, one panel per task. */
static void pack_parallel(uint16_t *dst, const float *b, int ldb, int trans_b, int K, int N, int par) {
    const int np = mha_bf16_panels(N);
#pragma omp parallel for schedule(dynamic, 1) if (par && np > 1)
    for (int p = 0; p < np; p++) mha_bf16_pack_b(dst, b, ldb, trans_b, K, N, p, p + 1);
}

/* The forward's packing of w (OC, IC) as B = w^T (IC, OC), an MhaPackWeights. */
static void pack_weights(void *dst, const float *w, int OC, int IC, int par) {
    pack_parallel(dst, w, IC, 1, IC, OC, par);
}

void mha_linear_forward_post_bf16(float *out, float *pre, const float *inp, const float *w,
                                  const float *bias, int N, int IC, int OC, int act, float p_drop,
                                  uint64_t seed, const float *residual) {
    /* y = inp (N, IC) @ w (OC, IC)^T + bias (OC), kept in pre (N, OC) when asked;
     * out (N, OC) = dropout(act(y)) + residual (N, OC) */
    if (N <= 0 || OC <= 0 || IC <= 0) {   /* the empty cases */
        mha_linear_forward_post_f32(out, pre, inp, w, bias, N, IC, OC, act, p_drop, seed, residual);
        return;
    }
    const int par = (size_t)N * IC * OC >= MHA_GEMM_PAR_MIN;
    const int nt = par ? omp_get_max_threads() : 1;
    /* B (IC, OC): B(k, n) = w[n * IC + k]; kept while the weights are promised fixed */
    const uint16_t *wp = mha_packed_weights(w, OC, IC, mha_bf16_packed_b_elems(IC, OC) * sizeof(uint16_t),
                                            pack_weights, par, 0);
    const int nb = par ? mha_gemm_row_blocks(N, nt, MHA_BF16_MR) : 1;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int blk = 0; blk < nb; blk++) {
        int n0, n1;
        mha_split_rows(N, blk, nb, MHA_BF16_MR, &n0, &n1);
        if (n1 <= n0) continue;
        mha_bf16_gemm(n1 - n0, OC, IC, inp + (size_t)n0 * IC, IC, 0, wp, out + (size_t)n0 * OC, OC,
                      0, bias, NULL, thread_scratch(n1 - n0));
        /* the block is still in cache */
        size_t first = (size_t)n0 * OC;
        mha_linear_post_f32(out + first, pre ? pre + first : NULL, residual ? residual + first : NULL,
                            (size_t)(n1 - n0) * OC, act, p_drop, seed, first);
    }
}

void mha_linear_forward_bf16(float *out, const float *inp, const float *w, const float *bias,
                             int N, int IC, int OC) {
    mha_linear_forward_post_bf16(out, NULL, inp, w, bias, N, IC, OC, -1, 0.0f, 0, NULL);
}

void mha_linear_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, int N, int IC, int OC,
                              int dinp_accumulate) {
    if (N <= 0 || IC <= 0 || OC <= 0) {   /* empty shapes: as in fp32 (dinp zeroed or kept) */
        mha_linear_backward_f32(dinp, dw, dbias, dout, inp, w, N, IC, OC, dinp_accumulate);
        return;
    }
    const int par = (size_t)N * IC * OC >= MHA_GEMM_PAR_MIN;
    const int nt = par ? omp_get_max_threads() : 1;
    /* dinp: B (OC, IC) = w as stored;  dw: B (N, IC) = inp as stored */
    uint16_t *wp = dinp ? buffer_get(&tl_packed_b[0], mha_bf16_packed_b_elems(OC, IC)) : NULL;
    uint16_t *ip = dw ? buffer_get(&tl_packed_b[1], mha_bf16_packed_b_elems(N, IC)) : NULL;
    const int np = mha_bf16_panels(IC);
    const int npx = dinp ? np : 0, npw = dw ? np : 0;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int task = 0; task < npx + npw; task++) {
        if (task < npx) mha_bf16_pack_b(wp, w, IC, 0, OC, IC, task, task + 1);
        else mha_bf16_pack_b(ip, inp, IC, 0, N, IC, task - npx, task - npx + 1);
    }
    /* dinp: blocks of its N rows; dw: blocks of its OC rows (no reduction across blocks) */
    const int nbx = dinp ? (par ? mha_gemm_row_blocks(N, nt, MHA_BF16_MR) : 1) : 0;
    /* dw tasks: 4 per thread when each keeps at least one micro-tile of rows, else 1 per thread */
    const int dw_tasks = OC >= 4 * nt * MHA_BF16_MR ? 4 * nt : (OC >= nt * MHA_BF16_MR ? nt : 1);
    const int nbw = dw ? (par ? dw_tasks : 1) : 0;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int task = 0; task < nbx + nbw; task++) {
        int lo, hi;
        if (task < nbx) {
            /* dinp (N, IC) (+)= dout (N, OC) @ w (OC, IC) */
            mha_split_rows(N, task, nbx, MHA_BF16_MR, &lo, &hi);
            if (hi > lo)
                mha_bf16_gemm(hi - lo, IC, OC, dout + (size_t)lo * OC, OC, 0, wp, dinp + (size_t)lo * IC, IC,
                              dinp_accumulate, NULL, NULL, thread_scratch(hi - lo));
        } else {
            /* dw (OC, IC) += dout^T (OC, N) @ inp (N, IC); dbias (OC) += the row sums of
             * dout^T, taken while packing it */
            mha_split_rows(OC, task - nbx, nbw, MHA_BF16_MR, &lo, &hi);
            if (hi > lo)
                mha_bf16_gemm(hi - lo, IC, N, dout + lo, OC, 1, ip, dw + (size_t)lo * IC, IC,
                              1, NULL, dbias ? dbias + lo : NULL, thread_scratch(hi - lo));
        }
    }
    /* without dw, dbias (OC) += column sums of dout on their own (same order: double, rows in order) */
    if (dbias && !dw) mha_colsum_acc_f32(dbias, dout, N, OC);
}
