/* kernels/cuda/colsum.cuh: deterministic column reductions, shared by gemm.cu (bias
 * gradients, and through mha_cu_column_sums the position-embedding gradient of embed.cu)
 * and layernorm.cu (weight and bias gradients).
 *
 *   dst_v[c] += sum over n < N of f(n, c)[v],   v < NV
 *
 * Stage 1: blocks of 32 columns x ROWS rows; each thread sums a fixed strided subset of rows,
 * the block combines its 8 row-threads in a fixed order and writes one partial per
 * (v, row group, column). Stage 2: 32 lanes per column add the partials in a fixed order.
 * The grouping depends on N and C only, so results never depend on scheduling (no atomics).
 */
#ifndef MHA_KERNELS_CUDA_COLSUM_CUH
#define MHA_KERNELS_CUDA_COLSUM_CUH

#include "kernels/cuda/cuda_common.h"

#define MHA_COLSUM_ROWS 128   /* rows per block in stage 1 */

template <int NV, class F>
__global__ void __launch_bounds__(256) mha_colsum_stage1(float *partial, F f, int N, int C, int G) {
    __shared__ float red[NV][8][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
    const int g = blockIdx.y;
    const int n0 = g * MHA_COLSUM_ROWS;
    const int n1 = min(N, n0 + MHA_COLSUM_ROWS);
    float acc[NV];
#pragma unroll
    for (int v = 0; v < NV; v++) acc[v] = 0.0f;
    if (c < C) {
        for (int n = n0 + ty; n < n1; n += 8) {
            float val[NV];
            f(n, c, val);
#pragma unroll
            for (int v = 0; v < NV; v++) acc[v] += val[v];
        }
    }
#pragma unroll
    for (int v = 0; v < NV; v++) red[v][ty][tx] = acc[v];
    __syncthreads();
    if (ty == 0 && c < C) {
#pragma unroll
        for (int v = 0; v < NV; v++) {
            float s = 0.0f;
            for (int k = 0; k < 8; k++) s += red[v][k][tx];
            partial[((size_t)v * G + g) * C + c] = s;
        }
    }
}

struct MhaColsumDst {
    float *p[2];
};

/* Stage 2: blocks of 32 columns x 32 lanes; lane ty adds the partials g = ty, ty + 32, ... in
 * order, then thread ty == 0 adds the 32 lane sums in order. (One thread per column walking all
 * G = N / 128 partials was ~100 dependent loads at N = 12k.) */
#define MHA_COLSUM_LANES 32

template <int NV>
__global__ void __launch_bounds__(32 * MHA_COLSUM_LANES) mha_colsum_stage2(MhaColsumDst dst, const float *partial,
                                                                           int C, int G) {
    __shared__ float red[MHA_COLSUM_LANES][33];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * 32 + tx;
#pragma unroll
    for (int v = 0; v < NV; v++) {
        if (!dst.p[v]) continue;   /* the same for the whole block */
        float s = 0.0f;
        if (c < C)
            for (int g = ty; g < G; g += MHA_COLSUM_LANES) s += partial[((size_t)v * G + g) * C + c];
        red[ty][tx] = s;
        __syncthreads();
        if (ty == 0 && c < C) {
            float sum = 0.0f;
            for (int k = 0; k < MHA_COLSUM_LANES; k++) sum += red[k][tx];
            dst.p[v][c] += sum;
        }
        __syncthreads();
    }
}

/* Runs both stages; dst entries may be NULL (that sum is skipped). Uses MHA_SCRATCH_B. */
template <int NV, class F>
static void mha_colsum_run(MhaColsumDst dst, F f, int N, int C) {
    if (N <= 0 || C <= 0) return;
    int G = (N + MHA_COLSUM_ROWS - 1) / MHA_COLSUM_ROWS;
    MHA_CU_REQUIRE(G <= 65535, "column reduction: more than 8388480 rows (tokens in one batch): "
                               "lower the batch size or data.max_len (train.batch_size, with "
                               "train.grad_accum to keep the effective batch; mha-predict "
                               "--batch-size)");
    float *partial = (float *)mha_cu_scratch(MHA_SCRATCH_B, (size_t)NV * G * C * sizeof(float));
    dim3 grid((C + 31) / 32, G), block(32, 8);
    mha_launch(mha_colsum_stage1<NV, F>, grid, block)(partial, f, N, C, G);
    LAUNCH_CHECK();
    mha_launch(mha_colsum_stage2<NV>, (C + 31) / 32, dim3(32, MHA_COLSUM_LANES))(dst, partial, C, G);
    LAUNCH_CHECK();
}

#endif
