/* kernels/cuda/attention_fused.cuh: what the two fused attention implementations share
 * (attention_flash.cu in fp32, attention_flash_tc.cu on tensor cores): their
 * arguments and the checks on them, an example's length, the dropout decision of the counter
 * RNG, the output of an all-padding query tile, the loading of a tile, and Di = rowsum(dO o O)
 * for the backward.
 * Defined once so that the two kernels cannot drift apart in what they compute. */
#ifndef MHA_KERNELS_CUDA_ATTENTION_FUSED_CUH
#define MHA_KERNELS_CUDA_ATTENTION_FUSED_CUH

#include "kernels/cuda/cuda_common.h"
#include "kernels/rng.h"

#include <cmath>

struct FusedArgs {
    int T, C, NH, hs, causal;        /* qkv is (B, T, 3C), out (B, T, C); head size hs = C / NH */
    float scale, p_drop, inv_keep;   /* 1/sqrt(hs); attention dropout and 1/(1 - p_drop) */
    uint64_t seed;
};

/* The arguments of a fused call, checked against what the kernels' grids and tiles allow. */
static FusedArgs fused_args(int B, int T, int C, int NH, int causal, float p_drop, uint64_t seed) {
    MHA_CU_REQUIRE(B <= 65535, "fused attention: more than 65535 examples in one batch (a grid "
                               "dimension): lower the batch size (train.batch_size, with "
                               "train.grad_accum to keep the effective batch; mha-predict "
                               "--batch-size)");
    MHA_CU_REQUIRE(NH > 0 && C % NH == 0, "attention: C must be a multiple of NH");
    FusedArgs a;
    a.T = T;
    a.C = C;
    a.NH = NH;
    a.hs = C / NH;
    a.causal = causal ? 1 : 0;
    a.scale = 1.0f / sqrtf((float)a.hs);
    a.p_drop = p_drop > 0.0f ? p_drop : 0.0f;
    a.inv_keep = p_drop < 1.0f ? 1.0f / (1.0f - a.p_drop) : 0.0f;
    a.seed = seed;
    MHA_CU_REQUIRE(a.hs <= 128, "fused attention supports head sizes up to 128 (C / NH); use the "
                   "materialising attention for larger heads");
    MHA_CU_REQUIRE(NH <= 65535, "fused attention: too many heads");
    return a;
}

/* lengths[b] clamped to [0, T]. */
__device__ __forceinline__ int fused_len(const int32_t *lengths, int b, int T) {
    int len = lengths[b];
    return len < 0 ? 0 : (len > T ? T : len);
}

/* Whether dropout keeps P[b, h, i, j] (bh = b * NH + h): a pure function of the seed and the
 * position, so the forward, both backward kernels and the CPU backend drop the same entries. */
__device__ __forceinline__ bool fused_kept(const FusedArgs &a, uint64_t bh, int i, int j) {
    return mha_rng_uniform(a.seed, (bh * a.T + i) * a.T + j) >= a.p_drop;
}

/* A query tile [q0, q0 + TILE) wholly in the padding: its output rows (ob, row stride C) and
 * lse entries (lb) are zeros. Called by every thread of a block of THREADS. */
template <int TILE, int THREADS>
__device__ __forceinline__ void fused_zero_query_tile(float *ob, float *lb, int q0, int T, int C, int hs) {
    for (int idx = threadIdx.x; idx < TILE * hs; idx += THREADS) {
        int r = idx / hs, d = idx % hs;
        if (q0 + r < T) ob[(size_t)(q0 + r) * C + d] = 0.0f;
    }
    for (int r = threadIdx.x; r < TILE; r += THREADS)
        if (q0 + r < T) lb[q0 + r] = 0.0f;
}

/* One value, or four consecutive ones (16-byte aligned), into a shared tile of floats or bf16. */
__device__ __forceinline__ void fused_put(float *o, float x) { *o = x; }
__device__ __forceinline__ void fused_put(__nv_bfloat16 *o, float x) { *o = __float2bfloat16_rn(x); }
__device__ __forceinline__ void fused_put4(float *o, float4 v) { *reinterpret_cast<float4 *>(o) = v; }
__device__ __forceinline__ void fused_put4(__nv_bfloat16 *o, float4 v) {
    o[0] = __float2bfloat16_rn(v.x);
    o[1] = __float2bfloat16_rn(v.y);
    o[2] = __float2bfloat16_rn(v.z);
    o[3] = __float2bfloat16_rn(v.w);
}

/* Rows [row0, row0 + R) of one head's slice (columns 0 .. hs - 1 of rows `stride` floats
 * apart at g) into an R x D shared tile of pitch LD (E: float, or bf16 rounded to nearest);
 * rows >= nrows and columns >= hs are zeros. Called by every thread of a block of THREADS.
 * Four columns per load (float4) when the head size, the stride and g allow it (a head size
 * that is a multiple of 4 in a 16-byte aligned tensor); one otherwise. LD * sizeof(E) must be
 * a multiple of 16 and s 16-byte aligned. */
template <int R, int D, int LD, int THREADS, class E>
__device__ __forceinline__ void fused_load_tile(E *__restrict__ s, const float *__restrict__ g,
                                                size_t stride, int row0, int nrows, int hs) {
    static_assert(D % 4 == 0 && (LD * sizeof(E)) % 16 == 0, "float4 rows");
    if ((hs & 3) == 0 && (stride & 3) == 0 && ((uintptr_t)g & 15) == 0) {
        constexpr int D4 = D / 4;
        for (int idx = threadIdx.x; idx < R * D4; idx += THREADS) {
            const int r = idx / D4, d = idx % D4 * 4, i = row0 + r;
            float4 v;
            if (i < nrows && d < hs) v = *reinterpret_cast<const float4 *>(g + (size_t)i * stride + d);
            else v.x = v.y = v.z = v.w = 0.0f;
            fused_put4(s + r * LD + d, v);
        }
        return;
    }
#pragma unroll 1   /* the rare path: not unrolled, so that it costs the kernels no registers */
    for (int idx = threadIdx.x; idx < R * D; idx += THREADS) {
        const int r = idx / D, d = idx % D, i = row0 + r;
        fused_put(s + r * LD + d, (i < nrows && d < hs) ? g[(size_t)i * stride + d] : 0.0f);
    }
}

/* Di (B, NH, T) = sum_d dO[b,i,h,d] * O[b,i,h,d] for i < len, 0 for padding; one warp per
 * (b, h, i). ROUND_DO (the bf16 kernels): dO rounded to bf16 first, as in their dP = dO V^T
 * product, so that dP - Di cancels as exactly as it can: for a query with a single key,
 * dS = P (dP - Di) is then 0 up to summation order, where an fp32 Di would leave the bf16
 * rounding of dO as noise of the size of the gradient itself. */
template <bool ROUND_DO>
__global__ void fused_rowdot_do_o_kernel(float *__restrict__ Di, const float *__restrict__ dout,
                                         const float *__restrict__ out,
                                         const int32_t *__restrict__ lengths, int T, int C, int NH,
                                         int hs, size_t rows) {
    const int lane = threadIdx.x & 31;
    size_t r = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    const int i = (int)(r % T);
    const int h = (int)((r / T) % NH);
    const int b = (int)(r / ((size_t)T * NH));
    float s = 0.0f;
    if (i < fused_len(lengths, b, T)) {
        const size_t base = ((size_t)b * T + i) * C + (size_t)h * hs;
        for (int d = lane; d < hs; d += 32) {
            float g = dout[base + d];
            if (ROUND_DO) g = __bfloat162float(__float2bfloat16_rn(g));
            s += g * out[base + d];
        }
    }
    s = warp_sum(s);
    if (lane == 0) Di[r] = s;
}

/* Launches fused_rowdot_do_o_kernel over the B * NH * T rows into scratch; returns Di. */
template <bool ROUND_DO>
static float *fused_rowdot_do_o(const float *dout, const float *out, const int32_t *lengths, int B,
                                const FusedArgs &a) {
    const size_t rows = (size_t)B * a.NH * a.T;
    float *Di = (float *)mha_cu_scratch(MHA_SCRATCH_A, rows * sizeof(float));   /* (B, NH, T) */
    mha_launch(fused_rowdot_do_o_kernel<ROUND_DO>, (unsigned int)((rows + 7) / 8), 256)(
        Di, dout, out, lengths, a.T, a.C, a.NH, a.hs, rows);
    LAUNCH_CHECK();
    return Di;
}

#endif
