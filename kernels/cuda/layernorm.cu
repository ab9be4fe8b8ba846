/* kernels/cuda/layernorm.cu: LayerNorm over the last dim, one warp per row, fp32 statistics.
 *
 * Forward: two passes over the row (mean, then the centred variance, as torch does) and a
 * third to write; saves mean and rstd = 1/sqrt(var + eps) per row.
 * Backward: dinp += rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w, one warp per
 * row; dw += sum_n dout * xhat and db += sum_n dout via the deterministic column reduction
 * of colsum.cuh (no atomics).
 */
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/colsum.cuh"

__global__ void layernorm_forward_kernel(float *out, float *mean, float *rstd, const float *inp,
                                         const float *w, const float *b, int N, int C) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        v += d * d;
    }
    const float r = rsqrtf(warp_sum(v) / C + MHA_LN_EPS);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float y = (x[c] - m) * r;
        if (w) y *= w[c];
        if (b) y += b[c];
        o[c] = y;
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

void mha_cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C) {
    if (N <= 0 || C <= 0) return;
    const int rows_per_block = 8;
    mha_launch(layernorm_forward_kernel, (N + rows_per_block - 1) / rows_per_block, 32 * rows_per_block)(
        out, mean, rstd, inp, w, b, N, C);
    LAUNCH_CHECK();
}

__global__ void layernorm_backward_dinp_kernel(float *dinp, const float *dout, const float *inp,
                                               const float *w, const float *mean,
                                               const float *rstd, int N, int C) {
    const int lane = threadIdx.x & 31;
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    const float *dy = dout + (size_t)row * C;
    const float m = mean[row], r = rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float g = dy[c] * (w ? w[c] : 1.0f);
        sg += g;
        sgx += g * (x[c] - m) * r;
    }
    const float mg = warp_sum(sg) / C, mgx = warp_sum(sgx) / C;
    float *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) {
        float g = dy[c] * (w ? w[c] : 1.0f);
        float xhat = (x[c] - m) * r;
        dx[c] += r * (g - mg - xhat * mgx);
    }
}

struct LnParamGrads {
    const float *dout, *inp, *mean, *rstd;
    int C;
    __device__ void operator()(int n, int c, float *v) const {
        size_t i = (size_t)n * C + c;
        float dy = dout[i];
        v[0] = dy * (inp[i] - mean[n]) * rstd[n];
        v[1] = dy;
    }
};

void mha_cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C) {
    if (N <= 0 || C <= 0) return;
    if (dinp) {
        const int rows_per_block = 8;
        mha_launch(layernorm_backward_dinp_kernel, (N + rows_per_block - 1) / rows_per_block,
                                         32 * rows_per_block)(dinp, dout, inp, w, mean, rstd, N, C);
        LAUNCH_CHECK();
    }
    if (dw || db) {
        MhaColsumDst d = {{dw, db}};
        mha_colsum_run<2>(d, LnParamGrads{dout, inp, mean, rstd, C}, N, C);
    }
}
