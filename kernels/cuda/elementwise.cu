/* kernels/cuda/elementwise.cu: activations, add, accumulate, dropout, scale, and the linear
 * layer's epilogue (bias, activation, dropout and residual in one pass after the GEMM).
 * Grid-stride loops over size_t indices; dropout_backward accumulates (+=) into dinp,
 * act_backward overwrites it (and may run in place, dinp == dout).
 * Dropout uses kernels/rng.h exactly as backend.h says: element i is kept when
 * mha_rng_uniform(seed, offset + i) >= p, and scaled by 1/(1-p).
 */
#include "kernels/cuda/cuda_common.h"
#include "kernels/rng.h"

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
         i += (size_t)gridDim.x * blockDim.x)

__device__ __forceinline__ float gelu(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
}

__device__ __forceinline__ float gelu_grad(float x) {
    /* d/dx x*Phi(x) = Phi(x) + x*phi(x) */
    float cdf = 0.5f * (1.0f + erff(x * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * expf(-0.5f * x * x);
    return cdf + x * pdf;
}

__global__ void act_forward_kernel(float *out, const float *inp, size_t n, int act) {
    if (act == MHA_ACT_GELU) {
        GRID_STRIDE(i, n) out[i] = gelu(inp[i]);
    } else {
        GRID_STRIDE(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
    }
}

__global__ void act_backward_kernel(float *dinp, const float *dout, const float *inp, size_t n,
                                    int act) {
    if (act == MHA_ACT_GELU) {
        GRID_STRIDE(i, n) dinp[i] = dout[i] * gelu_grad(inp[i]);   /* dinp may be dout */
    } else {
        GRID_STRIDE(i, n) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
    }
}

void mha_cu_act_forward(float *out, const float *inp, size_t n, int act) {
    if (!n) return;
    MHA_CU_REQUIRE(act == MHA_ACT_RELU || act == MHA_ACT_GELU, "act_forward: unknown activation");
    mha_launch(act_forward_kernel, mha_cu_blocks(n, 256), 256)(out, inp, n, act);
    LAUNCH_CHECK();
}

void mha_cu_act_backward(float *dinp, const float *dout, const float *inp, size_t n, int act) {
    if (!n) return;
    MHA_CU_REQUIRE(act == MHA_ACT_RELU || act == MHA_ACT_GELU, "act_backward: unknown activation");
    mha_launch(act_backward_kernel, mha_cu_blocks(n, 256), 256)(dinp, dout, inp, n, act);
    LAUNCH_CHECK();
}

__global__ void add_kernel(float *out, const float *a, const float *b, size_t n) {
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void accumulate_kernel(float *dst, const float *src, size_t n) {
    GRID_STRIDE(i, n) dst[i] += src[i];
}

__global__ void scale_kernel(float *x, size_t n, float s) {
    GRID_STRIDE(i, n) x[i] *= s;
}

void mha_cu_add(float *out, const float *a, const float *b, size_t n) {
    if (!n) return;
    mha_launch(add_kernel, mha_cu_blocks(n, 256), 256)(out, a, b, n);
    LAUNCH_CHECK();
}

void mha_cu_accumulate(float *dst, const float *src, size_t n) {
    if (!n) return;
    mha_launch(accumulate_kernel, mha_cu_blocks(n, 256), 256)(dst, src, n);
    LAUNCH_CHECK();
}

void mha_cu_scale(float *x, size_t n, float s) {
    if (!n) return;
    mha_launch(scale_kernel, mha_cu_blocks(n, 256), 256)(x, n, s);
    LAUNCH_CHECK();
}

__global__ void dropout_forward_kernel(float *out, const float *inp, size_t n, float p,
                                       float inv_keep, uint64_t seed, uint64_t offset) {
    GRID_STRIDE(i, n) {
        bool keep = mha_rng_uniform(seed, offset + i) >= p;
        out[i] = keep ? inp[i] * inv_keep : 0.0f;
    }
}

__global__ void dropout_backward_kernel(float *dinp, const float *dout, size_t n, float p,
                                        float inv_keep, uint64_t seed, uint64_t offset) {
    GRID_STRIDE(i, n) {
        bool keep = mha_rng_uniform(seed, offset + i) >= p;
        if (keep) dinp[i] += dout[i] * inv_keep;
    }
}

void mha_cu_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t seed,
                            uint64_t offset) {
    if (!n) return;
    if (p <= 0.0f) {
        if (out != inp)
            CUDA_CHECK(cudaMemcpyAsync(out, inp, n * sizeof(float), cudaMemcpyDeviceToDevice, 0));
        return;
    }
    float inv_keep = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    mha_launch(dropout_forward_kernel, mha_cu_blocks(n, 256), 256)(out, inp, n, p, inv_keep, seed, offset);
    LAUNCH_CHECK();
}

void mha_cu_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t seed,
                             uint64_t offset) {
    if (!n) return;
    if (p <= 0.0f) {
        mha_cu_accumulate(dinp, dout, n);
        return;
    }
    float inv_keep = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
    mha_launch(dropout_backward_kernel, mha_cu_blocks(n, 256), 256)(dinp, dout, n, p, inv_keep, seed, offset);
    LAUNCH_CHECK();
}

/* The linear layer's epilogue on out (N, OC), which holds inp @ w^T: per element, the value
 * each separate kernel would store, in their order (add_bias_kernel, act_forward_kernel,
 * dropout_forward_kernel, add_kernel), so Backend.linear_forward_post is bit for bit
 * linear_forward + act_forward + dropout_forward + add. __fmul_rn and __fadd_rn keep the
 * compiler from fusing the dropout's product or the activation's last product with the
 * residual add into one multiply-add: each is rounded first, as when it was stored. */
__global__ void linear_epilogue_kernel(float *out, float *pre, const float *bias, size_t n, int OC,
                                       int act, float p, float inv_keep, uint64_t seed,
                                       const float *residual) {
    GRID_STRIDE(i, n) {
        float y = out[i];
        if (bias) y += bias[i % OC];
        if (pre) pre[i] = y;
        if (act == MHA_ACT_GELU) y = gelu(y);
        else if (act == MHA_ACT_RELU) y = y > 0.0f ? y : 0.0f;
        if (p > 0.0f) y = mha_rng_uniform(seed, i) >= p ? __fmul_rn(y, inv_keep) : 0.0f;
        if (residual) y = __fadd_rn(residual[i], y);
        out[i] = y;
    }
}

void mha_cu_linear_epilogue(float *out, float *pre, const float *bias, int N, int OC, int act,
                            float p_drop, uint64_t seed, const float *residual) {
    size_t n = (size_t)N * OC;
    MHA_CU_REQUIRE(act < 0 || act == MHA_ACT_RELU || act == MHA_ACT_GELU,
                   "linear_forward_post: unknown activation");
    if (!n || (!bias && !pre && act < 0 && p_drop <= 0.0f && !residual)) return;
    float inv_keep = p_drop < 1.0f ? 1.0f / (1.0f - p_drop) : 0.0f;
    mha_launch(linear_epilogue_kernel, mha_cu_blocks(n, 256), 256)(out, pre, bias, n, OC, act, p_drop,
                                                                  inv_keep, seed, residual);
    LAUNCH_CHECK();
}
