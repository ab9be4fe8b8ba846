/* kernels/cuda/cuda_common.h: what every .cu file of the CUDA backend shares.
 *
 *  - CUDA_CHECK / CUBLAS_CHECK: stop with file:line, the error, and a hint (device and
 *    programming failures are fatal: the ops return void, see kernels/backend.h).
 *  - LAUNCH_CHECK(): after every kernel launch. With MHA_CUDA_SYNC=1 in the environment it
 *    also synchronises, so an asynchronous fault is reported at the kernel that caused it.
 *  - the cuBLAS handle, a growable scratch allocator, the launch-size helpers, and the
 *    warp reductions warp_max / warp_sum (whole warp, or groups of lanes).
 *  - the declarations of the ops each file defines (C++ linkage, prefix mha_cu_).
 *
 * Everything runs on the legacy default stream, in issue order: the ops are stream-ordered,
 * and scratch buffers can be reused from one op to the next without synchronising.
 */
#ifndef MHA_KERNELS_CUDA_COMMON_H
#define MHA_KERNELS_CUDA_COMMON_H

#include <cstddef>
#include <cstdint>
#include <cstdio>

#ifdef MHA_CUDA_EMU
/* Test build only (tests/cuda/emu): the kernels compiled as host C++ and run block by block
 * on the CPU, with cudart and cuBLAS stand-ins, so their logic can be tested without a GPU. */
#include "cuda_emu.h"
#else
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>

/* mha_launch(kernel, grid, block[, smem])(args...) is kernel<<<grid, block, smem>>>(args...);
 * written as a call so that the emulation build can provide its own. */
template <class... P>
struct MhaLauncher {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    template <class... A>
    void operator()(A... args) const { kernel<<<grid, block, smem>>>(args...); }
};
template <class... P>
static inline MhaLauncher<P...> mha_launch(void (*kernel)(P...), dim3 grid, dim3 block,
                                           size_t smem = 0) {
    return MhaLauncher<P...>{kernel, grid, block, smem};
}
/* The dynamic shared memory of a kernel, as an array `name` of `type`. */
#define MHA_DYNAMIC_SMEM(type, name) extern __shared__ type name[]
#endif

extern "C" {
#include "kernels/backend.h"
}

/* ---- error reporting (backend_cuda.cu) ---- */
[[noreturn]] void mha_cu_fail_cuda(cudaError_t e, const char *what, const char *file, int line);
[[noreturn]] void mha_cu_fail_cublas(cublasStatus_t s, const char *what, const char *file, int line);
[[noreturn]] void mha_cu_fail_msg(const char *msg, const char *file, int line);
void mha_cu_launch_check(const char *file, int line);

#define CUDA_CHECK(call) do { cudaError_t mha_e_ = (call); \
    if (mha_e_ != cudaSuccess) mha_cu_fail_cuda(mha_e_, #call, __FILE__, __LINE__); } while (0)
#define CUBLAS_CHECK(call) do { cublasStatus_t mha_s_ = (call); \
    if (mha_s_ != CUBLAS_STATUS_SUCCESS) mha_cu_fail_cublas(mha_s_, #call, __FILE__, __LINE__); } while (0)
#define LAUNCH_CHECK() mha_cu_launch_check(__FILE__, __LINE__)
#define MHA_CU_REQUIRE(cond, msg) do { if (!(cond)) mha_cu_fail_msg(msg, __FILE__, __LINE__); } while (0)

/* ---- kernels with more than the default 48 KiB of dynamic shared memory ---- */
/* The most dynamic shared memory a block may opt in to on the current device. */
static inline int mha_cu_smem_optin(void) {
    static int optin = -1;
    if (optin < 0) {
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    }
    return optin;
}
/* Once per kernel (*done): fails with a message naming `what` when smem_bytes is more than
 * the device allows, else lets `kernel` use smem_bytes of dynamic shared memory. */
template <class Kernel>
static void mha_cu_prepare_smem(Kernel kernel, size_t smem_bytes, bool *done, const char *what) {
    if (*done) return;
    if (smem_bytes > (size_t)mha_cu_smem_optin()) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s needs %zu bytes of shared memory per block, this GPU allows %d: "
                 "use the materialising attention", what, smem_bytes, mha_cu_smem_optin());
        mha_cu_fail_msg(msg, __FILE__, __LINE__);
    }
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
    *done = true;
}

/* ---- shared state (backend_cuda.cu) ---- */
cublasHandle_t mha_cu_cublas(void);

/* Scratch memory owned by the backend, one growable buffer per slot. Contents do not survive
 * from one op to the next (another op may use the same slot). Fails fatally when the device
 * is out of memory. */
enum {
    MHA_SCRATCH_A = 0,      /* general: partial sums, attention row statistics */
    MHA_SCRATCH_B = 1,      /* general: a second buffer for ops that need two */
    MHA_SCRATCH_ATT = 2,    /* the dropped probabilities of the materialising attention */
    MHA_SCRATCH_H0 = 3,     /* bf16 copies of GEMM operands (mixed precision, gemm_bf16.cu) */
    MHA_SCRATCH_H1 = 4,
    MHA_SCRATCH_H2 = 5,
    MHA_SCRATCH_COUNT
};
void *mha_cu_scratch(int slot, size_t bytes);

/* ---- launch-size helpers ---- */
static inline unsigned int mha_cu_blocks(size_t n, unsigned int threads, unsigned int cap = 65535u * 8u) {
    size_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > cap) b = cap;   /* kernels use grid-stride loops beyond this */
    return (unsigned int)b;
}

/* ---- warp reductions over groups of LANES lanes (32: the whole warp; 16: each half): every
 * lane of the warp must call them; each lane gets its group's result ---- */
template <int LANES = 32>
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <int LANES = 32>
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = LANES / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- ops, by file ---- */
/* gemm.cu */
void mha_cu_linear_forward(float *out, const float *inp, const float *w, const float *bias,
                           int N, int IC, int OC);
/* Backend.linear_forward_post: the GEMM, then mha_cu_linear_epilogue */
void mha_cu_linear_forward_post(float *out, float *pre, const float *inp, const float *w,
                                const float *bias, int N, int IC, int OC, int act, float p_drop,
                                uint64_t seed, const float *residual);
void mha_cu_linear_backward(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC,
                            int dinp_accumulate);
/* out (N, OC) += bias (OC) broadcast over rows. */
void mha_cu_add_bias(float *out, const float *bias, int N, int OC);
/* dst[c] += sum over rows n < N of src[n*ld + c], c < C; deterministic order. */
void mha_cu_column_sums(float *dst, const float *src, int N, int C, int ld);
/* embed.cu */
void mha_cu_embed_forward(float *out, const int32_t *ids, const float *tok, const float *pos,
                          int B, int T, int C);
void mha_cu_embed_backward(float *dtok, float *dpos, const float *dout, const int32_t *ids,
                           int B, int T, int C);
/* layernorm.cu */
void mha_cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
void mha_cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);
/* elementwise.cu */
void mha_cu_act_forward(float *out, const float *inp, size_t n, int act);
void mha_cu_act_backward(float *dinp, const float *dout, const float *inp, size_t n, int act);
void mha_cu_add(float *out, const float *a, const float *b, size_t n);
void mha_cu_accumulate(float *dst, const float *src, size_t n);
void mha_cu_dropout_forward(float *out, const float *inp, size_t n, float p, uint64_t seed,
                            uint64_t offset);
void mha_cu_dropout_backward(float *dinp, const float *dout, size_t n, float p, uint64_t seed,
                             uint64_t offset);
void mha_cu_scale(float *x, size_t n, float s);
/* out (N, OC) holding inp @ w^T: += bias (OC) when not NULL; pre = out when not NULL;
 * act (-1: none); dropout p_drop with seed, offset 0 (0: none); += residual (N, OC) when not
 * NULL. One launch (none when there is nothing to do). */
void mha_cu_linear_epilogue(float *out, float *pre, const float *bias, int N, int OC, int act,
                            float p_drop, uint64_t seed, const float *residual);
/* attention_math.cu */
void mha_cu_attention_forward_math(float *out, float *att, const float *qkv, const int32_t *lengths,
                                   int B, int T, int C, int NH, int causal, float p_drop,
                                   uint64_t seed);
void mha_cu_attention_backward_math(float *dqkv, float *datt, const float *dout, const float *qkv,
                                    const float *att, const int32_t *lengths, int B, int T, int C,
                                    int NH, int causal, float p_drop, uint64_t seed);
/* attention_flash.cu */
void mha_cu_attention_forward_fused(float *out, float *lse, const float *qkv, const int32_t *lengths,
                                    int B, int T, int C, int NH, int causal, float p_drop,
                                    uint64_t seed);
void mha_cu_attention_backward_fused(float *dqkv, const float *dout, const float *out,
                                     const float *qkv, const float *lse, const int32_t *lengths,
                                     int B, int T, int C, int NH, int causal, float p_drop,
                                     uint64_t seed);
/* gemm_bf16.cu: the linear layer with bf16 operands, fp32 accumulation and fp32 output
 * (same contract as gemm.cu, including += in backward and dinp_accumulate) */
void mha_cu_linear_forward_bf16(float *out, const float *inp, const float *w, const float *bias,
                                int N, int IC, int OC);
void mha_cu_linear_forward_post_bf16(float *out, float *pre, const float *inp, const float *w,
                                     const float *bias, int N, int IC, int OC, int act, float p_drop,
                                     uint64_t seed, const float *residual);
void mha_cu_linear_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                                 const float *inp, const float *w, int N, int IC, int OC,
                                 int dinp_accumulate);
/* attention_flash_tc.cu: the fused attention with tensor-core products (WMMA), fp32 softmax
 * statistics and accumulation; same contract as attention_flash.cu. bf16: the mixed-precision
 * table's (HS <= 128; where its tiles do not fit the GPU's shared memory, mha_cu_bf16_attention_fits,
 * it runs the fp32 FFMA kernels instead). tf32x3: fp32 accuracy from three tf32 products per product, HS <= 64;
 * mha_cu_attention_*_fused (the fp32 table's) route to it when mha_cu_fp32_attention_tc(hs). */
void mha_cu_attention_forward_fused_bf16(float *out, float *lse, const float *qkv,
                                         const int32_t *lengths, int B, int T, int C, int NH,
                                         int causal, float p_drop, uint64_t seed);
void mha_cu_attention_backward_fused_bf16(float *dqkv, const float *dout, const float *out,
                                          const float *qkv, const float *lse,
                                          const int32_t *lengths, int B, int T, int C, int NH,
                                          int causal, float p_drop, uint64_t seed);
#define MHA_CU_TF32X3_MAX_HS 64
void mha_cu_attention_forward_fused_tf32x3(float *out, float *lse, const float *qkv,
                                           const int32_t *lengths, int B, int T, int C, int NH,
                                           int causal, float p_drop, uint64_t seed);
void mha_cu_attention_backward_fused_tf32x3(float *dqkv, const float *dout, const float *out,
                                            const float *qkv, const float *lse,
                                            const int32_t *lengths, int B, int T, int C, int NH,
                                            int causal, float p_drop, uint64_t seed);
/* 1 when the tf32x3 kernels for heads of size hs fit this GPU: hs <= 64 and the shared memory
 * of all three within its opt-in limit (sm_86/89 allow 99 KiB: enough for D = 16 and 32) */
int mha_cu_tf32x3_fits(int hs);
/* 1 when the bf16 kernels for heads of size hs fit this GPU (sm_86/89: not for hs 65-128) */
int mha_cu_bf16_attention_fits(int hs);
/* backend_cuda.cu: 1 when the fp32 fused attention of heads of size hs runs on the tf32x3
 * kernels under the current setting (mha_cuda_fp32_attention_kernel in mha_cuda.h), 0 for
 * FFMA */
int mha_cu_fp32_attention_tc(int hs);
/* pool.cu */
void mha_cu_pool_forward(float *out, int32_t *argmax, const float *inp, const int32_t *lengths,
                         int B, int T, int C, int mode);
void mha_cu_pool_backward(float *dinp, const float *dout, const int32_t *argmax,
                          const int32_t *lengths, int B, int T, int C, int mode);
/* loss.cu */
void mha_cu_crossentropy(float *losses, float *probs, float *dlogits, const float *logits,
                         const int32_t *labels, int B, int K, float smoothing, float dscale);
/* adamw.cu */
void mha_cu_adamw(float *p, const float *g, float *m, float *v, const AdamwTensor *tensors,
                  int n_tensors, float lr, float beta1, float beta2, float eps, const float *grad_scale, int t);
/* reduce.cu */
void mha_cu_grad_norm(double *stats, float *grad_scale, const float *g, size_t n, float clip_norm);
void mha_cu_sum_into(double *acc, const float *x, size_t n);

#endif
