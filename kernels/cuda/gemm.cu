/* kernels/cuda/gemm.cu: the linear layer on cuBLAS, bias add and bias gradient; the fused
 * linear layer (Backend.linear_forward_post: the GEMM, then elementwise.cu's epilogue).
 *
 * Row-major trick: a row-major (R, S) matrix is the column-major (S, R) matrix with the same
 * memory, so row-major Y = X W^T becomes column-major Y^T = W^T(cm) X^T(cm):
 *   out (N, OC)  = inp (N, IC) @ w^T   ->  gemm(T, N, m=OC, n=N, k=IC, w ld IC, inp ld IC, out ld OC)
 *   dinp (N, IC) (+)= dout @ w          ->  gemm(N, N, m=IC, n=N, k=OC, w ld IC, dout ld OC,
 *                                           beta 1, or 0 when the caller asks to overwrite)
 *   dw (OC, IC) += dout^T @ inp         ->  gemm(N, T, m=IC, n=OC, k=N, inp ld IC, dout ld OC, beta 1)
 * With beta = 0 cuBLAS never reads the output, so it may hold garbage (NaN) before.
 */
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/colsum.cuh"

__global__ void add_bias_kernel(float *out, const float *bias, size_t total, int OC) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] += bias[i % OC];
}

__global__ void set_bias_kernel(float *out, const float *bias, size_t total, int OC) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = bias ? bias[i % OC] : 0.0f;
}

void mha_cu_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                           int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    size_t total = (size_t)N * OC;
    if (IC <= 0) {   /* empty product: out = bias (or 0) */
        mha_launch(set_bias_kernel, mha_cu_blocks(total, 256), 256)(out, bias, total, OC);
        LAUNCH_CHECK();
        return;
    }
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(mha_cu_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, w, IC,
                             inp, IC, &zero, out, OC));
    if (bias) {
        mha_launch(add_bias_kernel, mha_cu_blocks(total, 256), 256)(out, bias, total, OC);
        LAUNCH_CHECK();
    }
}

void mha_cu_linear_forward_post(float *out, float *pre, const float *inp, const float *w,
                                const float *bias, int N, int IC, int OC, int act, float p_drop,
                                uint64_t seed, const float *residual) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) {   /* empty product: y = bias (or 0) */
        mha_cu_linear_forward(out, inp, w, bias, N, IC, OC);
        mha_cu_linear_epilogue(out, pre, NULL, N, OC, act, p_drop, seed, residual);
        return;
    }
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(mha_cu_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, &one, w, IC,
                             inp, IC, &zero, out, OC));
    mha_cu_linear_epilogue(out, pre, bias, N, OC, act, p_drop, seed, residual);
}

void mha_cu_add_bias(float *out, const float *bias, int N, int OC) {
    size_t total = (size_t)N * OC;
    mha_launch(add_bias_kernel, mha_cu_blocks(total, 256), 256)(out, bias, total, OC);
    LAUNCH_CHECK();
}

struct ColumnOf {
    const float *src;
    int ld;
    __device__ void operator()(int n, int c, float *v) const { v[0] = src[(size_t)n * ld + c]; }
};

void mha_cu_column_sums(float *dst, const float *src, int N, int C, int ld) {
    MhaColsumDst d = {{dst, nullptr}};
    mha_colsum_run<1>(d, ColumnOf{src, ld}, N, C);
}

void mha_cu_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC,
                            int dinp_accumulate) {
    if (N <= 0 || IC < 0) return;
    if (OC <= 0) {   /* empty product: an overwritten dinp is zeros */
        if (dinp && !dinp_accumulate && IC > 0)
            CUDA_CHECK(cudaMemsetAsync(dinp, 0, (size_t)N * IC * sizeof(float), 0));
        return;
    }
    const float one = 1.0f, beta_dinp = dinp_accumulate ? 1.0f : 0.0f;   /* beta 0: dinp not read */
    if (IC > 0) {
        if (dinp)
            CUBLAS_CHECK(cublasSgemm(mha_cu_cublas(), CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, &one, w,
                                     IC, dout, OC, &beta_dinp, dinp, IC));
        if (dw)
            CUBLAS_CHECK(cublasSgemm(mha_cu_cublas(), CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, &one,
                                     inp, IC, dout, OC, &one, dw, IC));
    }
    if (dbias) mha_cu_column_sums(dbias, dout, N, OC, OC);
}
