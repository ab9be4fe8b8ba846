/* kernels/cuda/pool.cu: pooling over the real tokens t < lengths[b], forward and backward.
 * One thread per (b, c) (c fastest, so reads of a row are coalesced), except the mean
 * backward, one thread per element. Padded positions are never touched (backward += 0).
 * MAX keeps the first t of the maximum (strict >), and records it in argmax (B, C); an
 * example with no real token pools to zeros (argmax -1).
 */
#include "kernels/cuda/cuda_common.h"

#include <cmath>

__device__ __forceinline__ int pool_len(const int32_t *lengths, int b, int T) {
    int len = lengths[b];
    return len < 0 ? 0 : (len > T ? T : len);
}

__global__ void pool_forward_kernel(float *out, int32_t *argmax, const float *inp,
                                    const int32_t *lengths, int B, int T, int C, int mode) {
    const size_t total = (size_t)B * C;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int b = (int)(idx / C), c = (int)(idx % C);
        const int len = pool_len(lengths, b, T);
        const float *x = inp + (size_t)b * T * C + c;
        if (len == 0) {   /* no real token: zeros (argmax -1) */
            out[idx] = 0.0f;
            if (mode == MHA_POOL_MAX && argmax) argmax[idx] = -1;
        } else if (mode == MHA_POOL_CLS) {
            out[idx] = x[0];
        } else if (mode == MHA_POOL_MAX) {
            float m = -INFINITY;
            int am = 0;
            for (int t = 0; t < len; t++) {
                float v = x[(size_t)t * C];
                if (v > m) {
                    m = v;
                    am = t;
                }
            }
            out[idx] = m;
            if (argmax) argmax[idx] = am;
        } else {
            float s = 0.0f;
            for (int t = 0; t < len; t++) s += x[(size_t)t * C];
            out[idx] = s / (float)len;
        }
    }
}

__global__ void pool_backward_mean_kernel(float *dinp, const float *dout, const int32_t *lengths,
                                          int B, int T, int C) {
    const size_t total = (size_t)B * T * C;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t row = idx / C;
        const int c = (int)(idx - row * C);
        const int b = (int)(row / T), t = (int)(row % T);
        const int len = pool_len(lengths, b, T);
        if (t < len) dinp[idx] += dout[(size_t)b * C + c] / (float)len;
    }
}

__global__ void pool_backward_pick_kernel(float *dinp, const float *dout, const int32_t *argmax,
                                          const int32_t *lengths, int B, int T, int C, int mode) {
    const size_t total = (size_t)B * C;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const int b = (int)(idx / C), c = (int)(idx % C);
        const int len = pool_len(lengths, b, T);
        if (len <= 0) continue;
        int t = 0;
        if (mode == MHA_POOL_MAX) {
            t = argmax[idx];
            if (t < 0 || t >= len) continue;
        }
        dinp[((size_t)b * T + t) * C + c] += dout[idx];
    }
}

void mha_cu_pool_forward(float *out, int32_t *argmax, const float *inp, const int32_t *lengths,
                         int B, int T, int C, int mode) {
    if (B <= 0 || C <= 0 || T <= 0) return;
    MHA_CU_REQUIRE(mode == MHA_POOL_MEAN || mode == MHA_POOL_CLS || mode == MHA_POOL_MAX,
                   "pool_forward: unknown mode");
    mha_launch(pool_forward_kernel, mha_cu_blocks((size_t)B * C, 256), 256)(out, argmax, inp, lengths, B, T,
                                                                    C, mode);
    LAUNCH_CHECK();
}

void mha_cu_pool_backward(float *dinp, const float *dout, const int32_t *argmax,
                          const int32_t *lengths, int B, int T, int C, int mode) {
    if (B <= 0 || C <= 0 || T <= 0) return;
    MHA_CU_REQUIRE(mode == MHA_POOL_MEAN || mode == MHA_POOL_CLS || mode == MHA_POOL_MAX,
                   "pool_backward: unknown mode");
    MHA_CU_REQUIRE(mode != MHA_POOL_MAX || argmax, "pool_backward: MAX needs argmax");
    if (mode == MHA_POOL_MEAN) {
        mha_launch(pool_backward_mean_kernel, mha_cu_blocks((size_t)B * T * C, 256), 256)(dinp, dout, lengths,
                                                                                 B, T, C);
    } else {
        mha_launch(pool_backward_pick_kernel, mha_cu_blocks((size_t)B * C, 256), 256)(dinp, dout, argmax,
                                                                              lengths, B, T, C, mode);
    }
    LAUNCH_CHECK();
}
