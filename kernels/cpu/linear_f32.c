/* kernels/cpu/linear_f32.c: the fp32 linear layer's forward pass, and its backward's dinp, on
 * our own product (gemm_f32.c) where that kernel runs (mha_f32_gemm_fast: x86-64 CPUs with AVX2
 * and FMA). layers_impl.h's mha_linear_forward_post_f32 and mha_linear_backward_f32 call these
 * first and do the products through OpenBLAS when they decline.
 *
 * Threading as in linear_bf16.c: the weights are packed once per call, one panel per OpenMP
 * task (or, while they are promised fixed, once for the process: packed_cache.h); then the
 * threads take row blocks dynamically. A row's bits do not depend on its block (gemm_f32.h),
 * so blocks need no alignment beyond whole micro-tiles. */
#include <omp.h>
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/cpu/packed_cache.h"

/* Packs w (OC, IC) into dst, one panel per OpenMP task when par (an MhaPackWeights). */
static void pack_weights(void *dst, const float *w, int OC, int IC, int par) {
    const int np = mha_f32_panels(OC);
#pragma omp parallel for schedule(dynamic, 1) if (par && np > 1)
    for (int p = 0; p < np; p++) mha_f32_pack_w(dst, w, OC, IC, p, p + 1);
}

int mha_linear_forward_post_f32_own(float *out, float *pre, const float *inp, const float *w,
                                    const float *bias, int N, int IC, int OC, int act, float p_drop,
                                    uint64_t seed, const float *residual) {
    /* y = inp (N, IC) @ w (OC, IC)^T + bias (OC), kept in pre (N, OC) when asked;
     * out (N, OC) = dropout(act(y)) + residual (N, OC) */
    if (!mha_f32_gemm_fast() || N <= 0 || OC <= 0 || IC <= 0) return 0;
    const int par = (size_t)N * IC * OC >= MHA_GEMM_PAR_MIN;
    const int nt = par ? omp_get_max_threads() : 1;
    /* packed w: panels of 16 output channels, IC x 16 floats each (gemm_f32.h) */
    const float *wp = mha_packed_weights(w, OC, IC, mha_f32_packed_w_elems(OC, IC) * sizeof(float), pack_weights,
                                         par, 0);
    const int mr = mha_f32_gemm_wide() ? MHA_F32_WIDE_MR : MHA_F32_MR;   /* row blocks in whole micro-tiles */
    const int nb = par ? mha_gemm_row_blocks(N, nt, mr) : 1;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int blk = 0; blk < nb; blk++) {
        int n0, n1;
        mha_split_rows(N, blk, nb, mr, &n0, &n1);
        if (n1 <= n0) continue;
        mha_f32_gemm_nt(n1 - n0, OC, IC, inp + (size_t)n0 * IC, (size_t)IC, wp, bias, out + (size_t)n0 * OC,
                        (size_t)OC, 0);
        /* the block is still in cache */
        const size_t first = (size_t)n0 * OC;
        mha_linear_post_f32(out + first, pre ? pre + first : NULL, residual ? residual + first : NULL,
                            (size_t)(n1 - n0) * OC, act, p_drop, seed, first);
    }
    return 1;
}

/* The backward's packed w^T: one per calling thread, taken before the op's parallel region
 * and shared by its threads through a local pointer (per thread so that host threads may run
 * ops at once, as in linear_bf16.c). */
static _Thread_local MhaThreadBuffer tl_packed_wt;

const void *mha_linear_dinp_pack_f32(const float *w, int IC, int OC, int par) {
    if (!mha_f32_gemm_wide() || IC <= 0 || OC <= 0) return NULL;
    float *wt = mha_thread_buffer_try_get(&tl_packed_wt, mha_f32_packed_w_elems(IC, OC) * sizeof(float));
    if (!wt) return NULL;   /* out of memory: OpenBLAS, which needs none of ours */
    enum { ROWS = 64 };   /* rows of w per task */
#pragma omp parallel for schedule(dynamic, 1) if (par && OC > ROWS)
    for (int k0 = 0; k0 < OC; k0 += ROWS) mha_f32_pack_wt(wt, w, OC, IC, k0, k0 + ROWS < OC ? k0 + ROWS : OC);
    return wt;
}

void mha_linear_dinp_rows_f32(float *dinp, const float *dout, const void *packed_wt, int n0, int n1, int IC, int OC,
                              int accumulate) {
    /* dinp rows [n0, n1) (IC each) (+)= dout rows (OC each) @ w (OC, IC), as x @ wt^T */
    mha_f32_gemm_nt(n1 - n0, IC, OC, dout + (size_t)n0 * OC, (size_t)OC, packed_wt, NULL, dinp + (size_t)n0 * IC,
                    (size_t)IC, accumulate);
}
