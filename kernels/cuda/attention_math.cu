/* kernels/cuda/attention_math.cu: the materialising attention (like PyTorch's math path).
 *
 * Per head h, cuBLAS strided-batched GEMMs over the batch b read q, k, v straight out of the
 * fused qkv (B, T, 3C) with leading dimension 3C (batch stride T*3C), and the (T, T) score
 * matrices of att (B, NH, T, T) with batch stride NH*T*T. Row-major (T, T) P is the
 * column-major P^T, so (see gemm.cu for the trick):
 *   S = scale * Q K^T   : gemm(T, N, m=T,  n=T, k=HS, A=K ld 3C, B=Q ld 3C)  -> att
 *   out = Pd V          : gemm(N, N, m=HS, n=T, k=T,  A=V ld 3C, B=Pd ld T)  -> out ld C
 * backward:
 *   dV  += Pd^T dout    : gemm(N, T, m=HS, n=T, k=T,  A=dout ld C, B=Pd ld T)
 *   dPd  = dout V^T     : gemm(T, N, m=T,  n=T, k=HS, A=V ld 3C, B=dout ld C) -> datt
 *   dS   = P o (dP - rowsum(P o dP)), dP = dPd o mask / (1-p)       (row kernel, in place)
 *   dQ  += scale dS K   : gemm(N, N, m=HS, n=T, k=T,  A=K ld 3C, B=dS ld T)
 *   dK  += scale dS^T Q : gemm(N, T, m=HS, n=T, k=T,  A=Q ld 3C, B=dS ld T)
 * Pd is P with attention dropout applied (the RNG counter of P[b,h,i,j] is its linear index
 * in att, as backend.h says). The forward keeps P (before dropout) in att and builds Pd in
 * scratch; the backward builds Pd in datt before datt is needed for dPd.
 */
#include "kernels/cuda/cuda_common.h"
#include "kernels/rng.h"

#include <cmath>

__device__ __forceinline__ int valid_keys(const int32_t *lengths, int b, int i, int T, int causal) {
    int len = lengths[b];
    len = len < 0 ? 0 : (len > T ? T : len);
    if (i >= len) return 0;
    return causal ? min(len, i + 1) : len;
}

/* One warp per row (b, h, i) of att, in place: scores -> probabilities, zeros where masked. */
__global__ void softmax_rows_kernel(float *att, const int32_t *lengths, int NH, int T, int causal,
                                    size_t rows) {
    const int lane = threadIdx.x & 31;
    size_t r = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    const int i = (int)(r % T);
    const int b = (int)(r / ((size_t)NH * T));
    const int nv = valid_keys(lengths, b, i, T, causal);
    float *row = att + r * T;
    if (nv == 0) {
        for (int j = lane; j < T; j += 32) row[j] = 0.0f;
        return;
    }
    float m = -INFINITY;
    for (int j = lane; j < nv; j += 32) m = fmaxf(m, row[j]);
    m = warp_max(m);
    float s = 0.0f;
    for (int j = lane; j < nv; j += 32) s += expf(row[j] - m);
    s = warp_sum(s);
    const float inv = 1.0f / s;
    for (int j = lane; j < T; j += 32) row[j] = j < nv ? expf(row[j] - m) * inv : 0.0f;
}

/* One warp per row, in place on datt: dPd -> scale-free dS. */
__global__ void softmax_backward_rows_kernel(float *datt, const float *att, const int32_t *lengths,
                                             int NH, int T, int causal, float p_drop,
                                             float inv_keep, uint64_t seed, size_t rows) {
    const int lane = threadIdx.x & 31;
    size_t r = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    const int i = (int)(r % T);
    const int b = (int)(r / ((size_t)NH * T));
    const int nv = valid_keys(lengths, b, i, T, causal);
    float *drow = datt + r * T;
    const float *prow = att + r * T;
    const uint64_t base = (uint64_t)r * T;
    if (nv == 0) {
        for (int j = lane; j < T; j += 32) drow[j] = 0.0f;
        return;
    }
    float s = 0.0f;
    for (int j = lane; j < nv; j += 32) {
        float dp = drow[j];
        if (p_drop > 0.0f) dp = mha_rng_uniform(seed, base + j) >= p_drop ? dp * inv_keep : 0.0f;
        s += prow[j] * dp;
    }
    s = warp_sum(s);
    for (int j = lane; j < T; j += 32) {
        float v = 0.0f;
        if (j < nv) {
            float dp = drow[j];
            if (p_drop > 0.0f) dp = mha_rng_uniform(seed, base + j) >= p_drop ? dp * inv_keep : 0.0f;
            v = prow[j] * (dp - s);
        }
        drow[j] = v;
    }
}

/* dst = src with dropout: kept entries scaled by 1/(1-p); counter = linear index. */
__global__ void dropout_att_kernel(float *dst, const float *src, size_t n, float p_drop,
                                   float inv_keep, uint64_t seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        dst[i] = mha_rng_uniform(seed, i) >= p_drop ? src[i] * inv_keep : 0.0f;
}

static void gemm_sb(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                    const float *A, int lda, long long sA, const float *B, int ldb, long long sB,
                    float beta, float *Cm, int ldc, long long sC, int batch) {
    CUBLAS_CHECK(cublasSgemmStridedBatched(mha_cu_cublas(), ta, tb, m, n, k, &alpha, A, lda, sA, B,
                                           ldb, sB, &beta, Cm, ldc, sC, batch));
}

static void launch_rows_check(size_t rows) {
    MHA_CU_REQUIRE(rows / 8 + 1 < (size_t)INT32_MAX, "attention: too many rows");
}

void mha_cu_attention_forward_math(float *out, float *att, const float *qkv, const int32_t *lengths,
                                   int B, int T, int C, int NH, int causal, float p_drop,
                                   uint64_t seed) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    MHA_CU_REQUIRE(NH > 0 && C % NH == 0, "attention: C must be a multiple of NH");
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const int C3 = 3 * C;
    const long long sQKV = (long long)T * C3, sATT = (long long)NH * T * T, sOUT = (long long)T * C;
    for (int h = 0; h < NH; h++)
        gemm_sb(CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, scale, qkv + C + h * HS, C3, sQKV,
                qkv + h * HS, C3, sQKV, 0.0f, att + (size_t)h * T * T, T, sATT, B);
    const size_t rows = (size_t)B * NH * T;
    launch_rows_check(rows);
    mha_launch(softmax_rows_kernel, (unsigned int)((rows + 7) / 8), 256)(att, lengths, NH, T, causal, rows);
    LAUNCH_CHECK();
    const float *P = att;
    if (p_drop > 0.0f) {
        const size_t n = rows * T;
        float *pd = (float *)mha_cu_scratch(MHA_SCRATCH_ATT, n * sizeof(float));
        float inv_keep = p_drop < 1.0f ? 1.0f / (1.0f - p_drop) : 0.0f;
        mha_launch(dropout_att_kernel, mha_cu_blocks(n, 256), 256)(pd, att, n, p_drop, inv_keep, seed);
        LAUNCH_CHECK();
        P = pd;
    }
    for (int h = 0; h < NH; h++)
        gemm_sb(CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, 1.0f, qkv + 2 * C + h * HS, C3, sQKV,
                P + (size_t)h * T * T, T, sATT, 0.0f, out + h * HS, C, sOUT, B);
}

void mha_cu_attention_backward_math(float *dqkv, float *datt, const float *dout, const float *qkv,
                                    const float *att, const int32_t *lengths, int B, int T, int C,
                                    int NH, int causal, float p_drop, uint64_t seed) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    MHA_CU_REQUIRE(NH > 0 && C % NH == 0, "attention: C must be a multiple of NH");
    const int HS = C / NH;
    const float scale = 1.0f / sqrtf((float)HS);
    const int C3 = 3 * C;
    const long long sQKV = (long long)T * C3, sATT = (long long)NH * T * T, sOUT = (long long)T * C;
    const size_t rows = (size_t)B * NH * T;
    launch_rows_check(rows);
    const float inv_keep = p_drop < 1.0f ? 1.0f / (1.0f - p_drop) : 0.0f;

    /* dV += Pd^T dout, with Pd built in datt when there is dropout. */
    const float *Pd = att;
    if (p_drop > 0.0f) {
        const size_t n = rows * T;
        mha_launch(dropout_att_kernel, mha_cu_blocks(n, 256), 256)(datt, att, n, p_drop, inv_keep, seed);
        LAUNCH_CHECK();
        Pd = datt;
    }
    for (int h = 0; h < NH; h++)
        gemm_sb(CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, 1.0f, dout + h * HS, C, sOUT,
                Pd + (size_t)h * T * T, T, sATT, 1.0f, dqkv + 2 * C + h * HS, C3, sQKV, B);
    /* dPd = dout V^T into datt (overwrites Pd, no longer needed). */
    for (int h = 0; h < NH; h++)
        gemm_sb(CUBLAS_OP_T, CUBLAS_OP_N, T, T, HS, 1.0f, qkv + 2 * C + h * HS, C3, sQKV,
                dout + h * HS, C, sOUT, 0.0f, datt + (size_t)h * T * T, T, sATT, B);
    mha_launch(softmax_backward_rows_kernel, (unsigned int)((rows + 7) / 8), 256)(
        datt, att, lengths, NH, T, causal, p_drop, inv_keep, seed, rows);
    LAUNCH_CHECK();
    for (int h = 0; h < NH; h++) {
        gemm_sb(CUBLAS_OP_N, CUBLAS_OP_N, HS, T, T, scale, qkv + C + h * HS, C3, sQKV,
                datt + (size_t)h * T * T, T, sATT, 1.0f, dqkv + h * HS, C3, sQKV, B);
        gemm_sb(CUBLAS_OP_N, CUBLAS_OP_T, HS, T, T, scale, qkv + h * HS, C3, sQKV,
                datt + (size_t)h * T * T, T, sATT, 1.0f, dqkv + C + h * HS, C3, sQKV, B);
    }
}
