/* kernels/cuda/gemm_bf16.cu: the linear layer in mixed precision (train.precision = "bf16").
 *
 * The fp32 operands are rounded to bf16 (round to nearest even) into the backend's scratch
 * buffers by a conversion kernel, then multiplied by cublasGemmEx with bf16 A and B, fp32
 * accumulation (CUBLAS_COMPUTE_32F) and an fp32 output. Master weights, gradients and bias
 * stay fp32: the bias add and the bias gradient (column sums of the fp32 dout) are the fp32
 * ones of gemm.cu, and backward keeps gemm.cu's contract (beta = 1 on the fp32 gradients,
 * beta = 0 on dinp when the caller asks to overwrite it).
 * Same row-major trick and shapes as gemm.cu:
 *   out (N, OC)  = inp (N, IC) @ w^T   ->  gemm(T, N, m=OC, n=N, k=IC)
 *   dinp (N, IC) (+)= dout @ w          ->  gemm(N, N, m=IC, n=N, k=OC, beta 1 or 0)
 *   dw (OC, IC) += dout^T @ inp         ->  gemm(N, T, m=IC, n=OC, k=N, beta 1)
 */
#include "kernels/cuda/cuda_common.h"

__global__ void to_bf16_kernel(__nv_bfloat16 *__restrict__ dst, const float *__restrict__ src,
                               size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = __float2bfloat16_rn(src[i]);
}

/* A bf16 copy (n) of src (n) in scratch slot `slot`, valid until the next op. */
static const __nv_bfloat16 *to_bf16(int slot, const float *src, size_t n) {
    __nv_bfloat16 *dst = (__nv_bfloat16 *)mha_cu_scratch(slot, n * sizeof(__nv_bfloat16));
    mha_launch(to_bf16_kernel, mha_cu_blocks(n, 256), 256)(dst, src, n);
    LAUNCH_CHECK();
    return dst;
}

/* C (m, n; column-major, ld ldc, fp32) = A op B + beta C with bf16 A, B and fp32 accumulation. */
static void gemm_bf16(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                      const __nv_bfloat16 *A, int lda, const __nv_bfloat16 *B, int ldb, float beta,
                      float *C, int ldc) {
    const float one = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(mha_cu_cublas(), ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B,
                              CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

void mha_cu_linear_forward_bf16(float *out, const float *inp, const float *w, const float *bias,
                                int N, int IC, int OC) {
    if (N <= 0 || OC <= 0) return;
    if (IC <= 0) {   /* empty product: out = bias (or 0), as in fp32 */
        mha_cu_linear_forward(out, inp, w, bias, N, IC, OC);
        return;
    }
    const __nv_bfloat16 *w16 = to_bf16(MHA_SCRATCH_H0, w, (size_t)OC * IC);     /* (OC, IC) */
    const __nv_bfloat16 *x16 = to_bf16(MHA_SCRATCH_H1, inp, (size_t)N * IC);    /* (N, IC) */
    gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w16, IC, x16, IC, 0.0f, out, OC);
    if (bias) mha_cu_add_bias(out, bias, N, OC);
}

void mha_cu_linear_forward_post_bf16(float *out, float *pre, const float *inp, const float *w,
                                     const float *bias, int N, int IC, int OC, int act, float p_drop,
                                     uint64_t seed, const float *residual) {
    if (N <= 0 || OC <= 0 || IC <= 0) {   /* the empty cases, as in fp32 */
        mha_cu_linear_forward_post(out, pre, inp, w, bias, N, IC, OC, act, p_drop, seed, residual);
        return;
    }
    const __nv_bfloat16 *w16 = to_bf16(MHA_SCRATCH_H0, w, (size_t)OC * IC);     /* (OC, IC) */
    const __nv_bfloat16 *x16 = to_bf16(MHA_SCRATCH_H1, inp, (size_t)N * IC);    /* (N, IC) */
    gemm_bf16(CUBLAS_OP_T, CUBLAS_OP_N, OC, N, IC, w16, IC, x16, IC, 0.0f, out, OC);
    mha_cu_linear_epilogue(out, pre, bias, N, OC, act, p_drop, seed, residual);
}

void mha_cu_linear_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                                 const float *inp, const float *w, int N, int IC, int OC,
                                 int dinp_accumulate) {
    if (N <= 0 || IC < 0 || OC <= 0) {   /* empty shapes: as in fp32 (dinp zeroed or kept) */
        mha_cu_linear_backward(dinp, dw, dbias, dout, inp, w, N, IC, OC, dinp_accumulate);
        return;
    }
    if (IC > 0 && (dinp || dw)) {
        const __nv_bfloat16 *d16 = to_bf16(MHA_SCRATCH_H0, dout, (size_t)N * OC);   /* (N, OC) */
        if (dinp) {
            const __nv_bfloat16 *w16 = to_bf16(MHA_SCRATCH_H1, w, (size_t)OC * IC);  /* (OC, IC) */
            gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_N, IC, N, OC, w16, IC, d16, OC,
                      dinp_accumulate ? 1.0f : 0.0f, dinp, IC);   /* beta 0: dinp not read */
        }
        if (dw) {
            const __nv_bfloat16 *x16 = to_bf16(MHA_SCRATCH_H2, inp, (size_t)N * IC); /* (N, IC) */
            gemm_bf16(CUBLAS_OP_N, CUBLAS_OP_T, IC, OC, N, x16, IC, d16, OC, 1.0f, dw, IC);
        }
    }
    if (dbias) mha_cu_column_sums(dbias, dout, N, OC, OC);
}
