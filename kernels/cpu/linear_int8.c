/* kernels/cpu/linear_int8.c: the linear layer's forward pass with int8 products (gemm_int8.h:
 * inputs quantized per row, weights per output channel, int32 accumulation), for inference:
 * mha_cpu_backend_int8 (mha-predict --precision int8). There is no int8 backward: that
 * table's linear_backward is the bf16/fp32 one, and nothing trains through it.
 *
 * Threading as in linear_bf16.c: the weights are quantized and packed once per call, one
 * panel per OpenMP task (or taken from the calling thread's cache of packed weights,
 * packed_cache.h, whose entries here are compared with the weights at each call unless they
 * are promised fixed); then the threads take row blocks of the input dynamically, each
 * quantizing its own rows into its own scratch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/cpu/layers_int8.h"
#include "kernels/cpu/packed_cache.h"

/* A worker's quantized rows (cpu_common.h's MhaThreadBuffer), per thread so that concurrent
 * callers (prediction workers) never share one. */
static _Thread_local MhaThreadBuffer tl_scratch;

/* Packs w (OC, IC) into dst, one panel per OpenMP task when par (an MhaPackWeights). */
static void pack_weights(void *dst, const float *w, int OC, int IC, int par) {
    const int np = mha_i8_panels(OC);
#pragma omp parallel for schedule(dynamic, 1) if (par && np > 1)
    for (int p = 0; p < np; p++) mha_i8_pack_w(dst, w, IC, OC, IC, p, p + 1);
}

void mha_linear_forward_post_int8(float *out, float *pre, const float *inp, const float *w,
                                  const float *bias, int N, int IC, int OC, int act, float p_drop,
                                  uint64_t seed, const float *residual) {
    /* y = inp (N, IC) @ w (OC, IC)^T + bias (OC), kept in pre (N, OC) when asked;
     * out (N, OC) = dropout(act(y)) + residual (N, OC) */
    if (N <= 0 || OC <= 0 || IC <= 0 || IC > MHA_I8_MAX_K) {
        /* the empty cases, and depths whose int32 sums could overflow */
        mha_linear_forward_post_f32(out, pre, inp, w, bias, N, IC, OC, act, p_drop, seed, residual);
        return;
    }
    const int par = (size_t)N * IC * OC >= MHA_GEMM_PAR_MIN;
    const int nt = par ? omp_get_max_threads() : 1;
    const void *wp = mha_packed_weights(w, OC, IC, mha_i8_packed_w_bytes(OC, IC), pack_weights, par, 1);
    const int nb = par ? mha_gemm_row_blocks(N, nt, MHA_I8_MR) : 1;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int blk = 0; blk < nb; blk++) {
        int n0, n1;
        mha_split_rows(N, blk, nb, MHA_I8_MR, &n0, &n1);
        if (n1 <= n0) continue;
        void *scratch = mha_thread_buffer_get(&tl_scratch, mha_i8_scratch_bytes(n1 - n0, IC), "an int8 workspace");
        mha_i8_gemm(n1 - n0, OC, IC, inp + (size_t)n0 * IC, IC, wp, bias, out + (size_t)n0 * OC, OC, scratch);
        /* the block is still in cache */
        size_t first = (size_t)n0 * OC;
        mha_linear_post_f32(out + first, pre ? pre + first : NULL, residual ? residual + first : NULL,
                            (size_t)(n1 - n0) * OC, act, p_drop, seed, first);
    }
}

void mha_linear_forward_int8(float *out, const float *inp, const float *w, const float *bias,
                             int N, int IC, int OC) {
    mha_linear_forward_post_int8(out, NULL, inp, w, bias, N, IC, OC, -1, 0.0f, 0, NULL);
}
