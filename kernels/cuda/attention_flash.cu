/* kernels/cuda/attention_flash.cu: fused (FlashAttention-style) attention in fp32 on FFMA
 * (CUDA cores). The fp32 table's entry points are here; they hand heads of size <= 64 to the
 * tf32x3 tensor-core kernels of attention_flash_tc.cu where those run (sm_80+, their shared
 * memory fits) unless MHA_CUDA_FP32_ATTENTION=simt: see mha_cuda.h.
 *
 * Never holds a (T, T) matrix. Heads of size HS <= 128 run on kernels templated on
 * D in {16, 32, 64, 128}, the smallest that holds HS: columns HS..D-1 are zero-filled in shared
 * memory, so any HS works (the tests use HS = 4 and 8 too).
 *
 * Work layout, 256 threads = 16 x 16 (tx = thread % 16, ty = thread / 16). A thread owns rows
 * ty + 16*r and score columns tx + 16*c of a tile; the 16 threads of a row are one half-warp,
 * so row max and sum are shuffles. Tiles in shared memory are row-major with a row pitch of
 * D + 4 floats (16-byte aligned rows, conflict-free float4 reads along D).
 *
 * Forward, one block per (query tile, head, example): Q tile loaded once; for each key tile
 * below lengths[b] (and not above the diagonal when causal): S = scale * Q K^T, online softmax
 * (running max m and sum l per row; O rescaled by exp(m_old - m_new)), P with attention
 * dropout written to shared memory, O += P V. Writes out = O / l and lse = m + log(l).
 * Query tiles at or past lengths[b] only write zeros; padded rows get zeros and lse 0.
 *
 * Backward by recomputation from lse, with Di = rowsum(dO o O) precomputed (a small kernel):
 *   P = exp(scale q.k - lse_i), Z = dropout mask / (1-p), dP = (dO . v) Z,
 *   dS = P o (dP - Di); dV += (P o Z)^T dO; dQ += scale dS K; dK += scale dS^T Q.
 * Two kernels, each with a single writer per output row (no atomics, deterministic):
 *   dq:   one block per query tile, loops over its key tiles, accumulates dQ in registers;
 *   dkdv: one block per key tile, loops over the query tiles that see it, accumulates
 *         dK and dV in registers.
 * S and dP are computed in both (7 tile GEMMs per tile pair instead of 5 with atomics).
 * Blocks whose tile lies wholly in the padding return at once: padding costs no work.
 *
 * Dropout: P[b,h,i,j] is dropped when mha_rng_uniform(seed, ((b*NH + h)*T + i)*T + j) < p,
 * exactly as in backend.h and the materialising path.
 */
#include "kernels/cuda/attention_fused.cuh"

#include <cmath>
#include <cstdio>

#define FA_THREADS 256

/* Column of the thread's dd-th output value along D (P V style products). For D >= 64 each
 * thread holds runs of 4 consecutive columns (float4 reads of the value rows). */
template <int D>
__device__ __forceinline__ int fa_dcol(int dd, int tx) {
    if constexpr (D >= 64) return (dd / 4) * 64 + tx * 4 + (dd % 4);
    else return tx + 16 * dd;
}

/* acc[r][c] += sum_d A[ty + 16r][d] * B[tx + 16c][d]; A, B row-major with pitch LD. */
template <int RM, int CN, int D, int LD>
__device__ __forceinline__ void fa_rowdot(float (&acc)[RM][CN], const float *__restrict__ sA,
                                          const float *__restrict__ sB, int tx, int ty) {
#pragma unroll 4
    for (int d = 0; d < D; d += 4) {
        float4 a[RM], b[CN];
#pragma unroll
        for (int r = 0; r < RM; r++) a[r] = *reinterpret_cast<const float4 *>(sA + (ty + 16 * r) * LD + d);
#pragma unroll
        for (int c = 0; c < CN; c++) b[c] = *reinterpret_cast<const float4 *>(sB + (tx + 16 * c) * LD + d);
#pragma unroll
        for (int r = 0; r < RM; r++)
#pragma unroll
            for (int c = 0; c < CN; c++) {
                acc[r][c] = fmaf(a[r].x, b[c].x, acc[r][c]);
                acc[r][c] = fmaf(a[r].y, b[c].y, acc[r][c]);
                acc[r][c] = fmaf(a[r].z, b[c].z, acc[r][c]);
                acc[r][c] = fmaf(a[r].w, b[c].w, acc[r][c]);
            }
    }
}

/* acc[r][dd] += sum_k P[ty + 16r][k] * V[k][fa_dcol(dd)]; P pitch LDP, V pitch LDV. */
template <int RM, int D, int KK, int LDP, int LDV>
__device__ __forceinline__ void fa_rowmm(float (&acc)[RM][D / 16], const float *__restrict__ sP,
                                         const float *__restrict__ sV, int tx, int ty) {
    constexpr int DN = D / 16;
#pragma unroll 2
    for (int k = 0; k < KK; k += 4) {
        float4 p4[RM];
#pragma unroll
        for (int r = 0; r < RM; r++) p4[r] = *reinterpret_cast<const float4 *>(sP + (ty + 16 * r) * LDP + k);
#pragma unroll
        for (int q = 0; q < 4; q++) {
            float v[DN];
            const float *vrow = sV + (k + q) * LDV;
            if constexpr (D >= 64) {
#pragma unroll
                for (int g = 0; g < DN / 4; g++) {
                    float4 t = *reinterpret_cast<const float4 *>(vrow + g * 64 + tx * 4);
                    v[4 * g] = t.x;
                    v[4 * g + 1] = t.y;
                    v[4 * g + 2] = t.z;
                    v[4 * g + 3] = t.w;
                }
            } else {
#pragma unroll
                for (int dd = 0; dd < DN; dd++) v[dd] = vrow[tx + 16 * dd];
            }
#pragma unroll
            for (int r = 0; r < RM; r++) {
                float p = q == 0 ? p4[r].x : q == 1 ? p4[r].y : q == 2 ? p4[r].z : p4[r].w;
#pragma unroll
                for (int dd = 0; dd < DN; dd++) acc[r][dd] = fmaf(p, v[dd], acc[r][dd]);
            }
        }
    }
}

/* ------------------------------------------------------------------ forward */

template <int D, int BQ, int BK>
struct FaFwdCfg {
    static constexpr int LD = D + 4, LDP = BK + 4;
    static constexpr size_t smem_floats = (size_t)BQ * LD + 2 * (size_t)BK * LD + (size_t)BQ * LDP;
};

template <int D, int BQ, int BK>
__global__ void __launch_bounds__(FA_THREADS)
fa_forward_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv,
                  const int32_t *__restrict__ lengths, FusedArgs a) {
    using Cfg = FaFwdCfg<D, BQ, BK>;
    constexpr int LD = Cfg::LD, LDP = Cfg::LDP;
    constexpr int RM = BQ / 16, CN = BK / 16, DN = D / 16;
    MHA_DYNAMIC_SMEM(float4, fa_smem4);
    float *sQ = reinterpret_cast<float *>(fa_smem4);
    float *sK = sQ + BQ * LD;
    float *sV = sK + BK * LD;
    float *sP = sV + BK * LD;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int q0 = blockIdx.x * BQ, h = blockIdx.y, b = blockIdx.z;
    const int T = a.T, C = a.C, hs = a.hs, C3 = 3 * C;
    const int len = fused_len(lengths, b, T);
    const float *qb = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    float *ob = out + (size_t)b * T * C + (size_t)h * hs;
    float *lb = lse + ((size_t)b * a.NH + h) * T;

    if (q0 >= len) {   /* all padding: zeros */
        fused_zero_query_tile<BQ, FA_THREADS>(ob, lb, q0, T, C, hs);
        return;
    }

    fused_load_tile<BQ, D, LD, FA_THREADS>(sQ, qb, C3, q0, len, hs);

    float o[RM][DN], m[RM], l[RM];
#pragma unroll
    for (int r = 0; r < RM; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int dd = 0; dd < DN; dd++) o[r][dd] = 0.0f;
    }
    const uint64_t bh = (uint64_t)b * a.NH + h;
    const int kv_end = a.causal ? min(len, q0 + BQ) : len;

    for (int j0 = 0; j0 < kv_end; j0 += BK) {
        __syncthreads();
        fused_load_tile<BK, D, LD, FA_THREADS>(sK, qb + C, C3, j0, len, hs);
        fused_load_tile<BK, D, LD, FA_THREADS>(sV, qb + 2 * C, C3, j0, len, hs);
        __syncthreads();

        float s[RM][CN];
#pragma unroll
        for (int r = 0; r < RM; r++)
#pragma unroll
            for (int c = 0; c < CN; c++) s[r][c] = 0.0f;
        fa_rowdot<RM, CN, D, LD>(s, sQ, sK, tx, ty);

#pragma unroll
        for (int r = 0; r < RM; r++) {
            const int i = q0 + ty + 16 * r;
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < CN; c++) {
                const int j = j0 + tx + 16 * c;
                const bool ok = j < len && (!a.causal || j <= i);
                s[r][c] = ok ? s[r][c] * a.scale : -INFINITY;
                mx = fmaxf(mx, s[r][c]);
            }
            mx = warp_max<16>(mx);   /* the row's half-warp */
            const float mnew = fmaxf(m[r], mx);
            float alpha = 1.0f, sum = 0.0f;
            if (mnew != -INFINITY) {
                alpha = expf(m[r] - mnew);   /* m = -inf -> 0 */
#pragma unroll
                for (int c = 0; c < CN; c++) {
                    float p = expf(s[r][c] - mnew);   /* masked: exp(-inf) = 0 */
                    s[r][c] = p;
                    sum += p;
                }
            } else {
#pragma unroll
                for (int c = 0; c < CN; c++) s[r][c] = 0.0f;
            }
            sum = warp_sum<16>(sum);
            l[r] = l[r] * alpha + sum;
            m[r] = mnew;
#pragma unroll
            for (int dd = 0; dd < DN; dd++) o[r][dd] *= alpha;
#pragma unroll
            for (int c = 0; c < CN; c++) {
                float p = s[r][c];
                if (a.p_drop > 0.0f && p != 0.0f) {
                    const int j = j0 + tx + 16 * c;
                    p = fused_kept(a, bh, i, j) ? p * a.inv_keep : 0.0f;
                }
                sP[(ty + 16 * r) * LDP + tx + 16 * c] = p;
            }
        }
        __syncthreads();
        fa_rowmm<RM, D, BK, LDP, LD>(o, sP, sV, tx, ty);
    }

#pragma unroll
    for (int r = 0; r < RM; r++) {
        const int i = q0 + ty + 16 * r;
        if (i >= T) continue;
        const bool valid = i < len && l[r] > 0.0f;
        const float inv = valid ? 1.0f / l[r] : 0.0f;
#pragma unroll
        for (int dd = 0; dd < DN; dd++) {
            const int d = fa_dcol<D>(dd, tx);
            if (d < hs) ob[(size_t)i * C + d] = valid ? o[r][dd] * inv : 0.0f;
        }
        if (tx == 0) lb[i] = valid ? m[r] + logf(l[r]) : 0.0f;
    }
}

/* ------------------------------------------------------------------ backward */

template <int D, int BQ, int BK>
struct FaDqCfg {
    static constexpr int LD = D + 4, LDS = BK + 4;
    static constexpr size_t smem_floats = 2 * (size_t)BQ * LD + 2 * (size_t)BK * LD + (size_t)BQ * LDS;
};

/* dQ for one query tile. */
template <int D, int BQ, int BK>
__global__ void __launch_bounds__(FA_THREADS)
fa_backward_dq_kernel(float *__restrict__ dqkv, const float *__restrict__ dout,
                      const float *__restrict__ qkv, const float *__restrict__ lse,
                      const float *__restrict__ Di, const int32_t *__restrict__ lengths, FusedArgs a) {
    using Cfg = FaDqCfg<D, BQ, BK>;
    constexpr int LD = Cfg::LD, LDS = Cfg::LDS;
    constexpr int RM = BQ / 16, CN = BK / 16, DN = D / 16;
    MHA_DYNAMIC_SMEM(float4, fa_smem4);
    float *sQ = reinterpret_cast<float *>(fa_smem4);
    float *sdO = sQ + BQ * LD;
    float *sK = sdO + BQ * LD;
    float *sV = sK + BK * LD;
    float *sS = sV + BK * LD;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int q0 = blockIdx.x * BQ, h = blockIdx.y, b = blockIdx.z;
    const int T = a.T, C = a.C, hs = a.hs, C3 = 3 * C;
    const int len = fused_len(lengths, b, T);
    if (q0 >= len) return;   /* padded queries: no gradient */
    const float *qb = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *dob = dout + (size_t)b * T * C + (size_t)h * hs;
    const uint64_t bh = (uint64_t)b * a.NH + h;
    const float *lb = lse + bh * T;
    const float *db = Di + bh * T;

    fused_load_tile<BQ, D, LD, FA_THREADS>(sQ, qb, C3, q0, len, hs);
    fused_load_tile<BQ, D, LD, FA_THREADS>(sdO, dob, C, q0, len, hs);
    float row_lse[RM], row_D[RM];
#pragma unroll
    for (int r = 0; r < RM; r++) {
        const int i = q0 + ty + 16 * r;
        row_lse[r] = i < len ? lb[i] : 0.0f;
        row_D[r] = i < len ? db[i] : 0.0f;
    }
    float dq[RM][DN];
#pragma unroll
    for (int r = 0; r < RM; r++)
#pragma unroll
        for (int dd = 0; dd < DN; dd++) dq[r][dd] = 0.0f;

    const int kv_end = a.causal ? min(len, q0 + BQ) : len;
    for (int j0 = 0; j0 < kv_end; j0 += BK) {
        __syncthreads();
        fused_load_tile<BK, D, LD, FA_THREADS>(sK, qb + C, C3, j0, len, hs);
        fused_load_tile<BK, D, LD, FA_THREADS>(sV, qb + 2 * C, C3, j0, len, hs);
        __syncthreads();
        float s[RM][CN], dp[RM][CN];
#pragma unroll
        for (int r = 0; r < RM; r++)
#pragma unroll
            for (int c = 0; c < CN; c++) {
                s[r][c] = 0.0f;
                dp[r][c] = 0.0f;
            }
        fa_rowdot<RM, CN, D, LD>(s, sQ, sK, tx, ty);
        fa_rowdot<RM, CN, D, LD>(dp, sdO, sV, tx, ty);
#pragma unroll
        for (int r = 0; r < RM; r++) {
            const int i = q0 + ty + 16 * r;
#pragma unroll
            for (int c = 0; c < CN; c++) {
                const int j = j0 + tx + 16 * c;
                const bool ok = i < len && j < len && (!a.causal || j <= i);
                float ds = 0.0f;
                if (ok) {
                    const float p = expf(s[r][c] * a.scale - row_lse[r]);
                    float g = dp[r][c];
                    if (a.p_drop > 0.0f)
                        g = fused_kept(a, bh, i, j) ? g * a.inv_keep : 0.0f;
                    ds = p * (g - row_D[r]);
                }
                sS[(ty + 16 * r) * LDS + tx + 16 * c] = ds;
            }
        }
        __syncthreads();
        fa_rowmm<RM, D, BK, LDS, LD>(dq, sS, sK, tx, ty);
    }

    float *dqb = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
#pragma unroll
    for (int r = 0; r < RM; r++) {
        const int i = q0 + ty + 16 * r;
        if (i >= len) continue;
#pragma unroll
        for (int dd = 0; dd < DN; dd++) {
            const int d = fa_dcol<D>(dd, tx);
            if (d < hs) dqb[(size_t)i * C3 + d] += a.scale * dq[r][dd];
        }
    }
}

template <int D, int BK, int BQ>
struct FaDkvCfg {
    static constexpr int LD = D + 4, LDS = BQ + 4;
    static constexpr size_t smem_floats = 2 * (size_t)BK * LD + 2 * (size_t)BQ * LD + 2 * (size_t)BK * LDS;
};

/* dK and dV for one key tile. Rows of the thread tiles are keys, columns queries. */
template <int D, int BK, int BQ>
__global__ void __launch_bounds__(FA_THREADS)
fa_backward_dkdv_kernel(float *__restrict__ dqkv, const float *__restrict__ dout,
                        const float *__restrict__ qkv, const float *__restrict__ lse,
                        const float *__restrict__ Di, const int32_t *__restrict__ lengths, FusedArgs a) {
    using Cfg = FaDkvCfg<D, BK, BQ>;
    constexpr int LD = Cfg::LD, LDS = Cfg::LDS;
    constexpr int RK = BK / 16, CQ = BQ / 16, DN = D / 16;
    MHA_DYNAMIC_SMEM(float4, fa_smem4);
    float *sK = reinterpret_cast<float *>(fa_smem4);
    float *sV = sK + BK * LD;
    float *sQ = sV + BK * LD;
    float *sdO = sQ + BQ * LD;
    float *sPZ = sdO + BQ * LD;
    float *sdS = sPZ + BK * LDS;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int j0 = blockIdx.x * BK, h = blockIdx.y, b = blockIdx.z;
    const int T = a.T, C = a.C, hs = a.hs, C3 = 3 * C;
    const int len = fused_len(lengths, b, T);
    if (j0 >= len) return;   /* padded keys: no gradient */
    const float *qb = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *dob = dout + (size_t)b * T * C + (size_t)h * hs;
    const uint64_t bh = (uint64_t)b * a.NH + h;
    const float *lb = lse + bh * T;
    const float *db = Di + bh * T;

    fused_load_tile<BK, D, LD, FA_THREADS>(sK, qb + C, C3, j0, len, hs);
    fused_load_tile<BK, D, LD, FA_THREADS>(sV, qb + 2 * C, C3, j0, len, hs);
    float dk[RK][DN], dv[RK][DN];
#pragma unroll
    for (int r = 0; r < RK; r++)
#pragma unroll
        for (int dd = 0; dd < DN; dd++) {
            dk[r][dd] = 0.0f;
            dv[r][dd] = 0.0f;
        }

    const int i_start = a.causal ? (j0 / BQ) * BQ : 0;
    for (int i0 = i_start; i0 < len; i0 += BQ) {
        __syncthreads();
        fused_load_tile<BQ, D, LD, FA_THREADS>(sQ, qb, C3, i0, len, hs);
        fused_load_tile<BQ, D, LD, FA_THREADS>(sdO, dob, C, i0, len, hs);
        __syncthreads();
        float st[RK][CQ], dpt[RK][CQ];
#pragma unroll
        for (int r = 0; r < RK; r++)
#pragma unroll
            for (int c = 0; c < CQ; c++) {
                st[r][c] = 0.0f;
                dpt[r][c] = 0.0f;
            }
        fa_rowdot<RK, CQ, D, LD>(st, sK, sQ, tx, ty);
        fa_rowdot<RK, CQ, D, LD>(dpt, sV, sdO, tx, ty);
        float col_lse[CQ], col_D[CQ];
#pragma unroll
        for (int c = 0; c < CQ; c++) {
            const int i = i0 + tx + 16 * c;
            col_lse[c] = i < len ? lb[i] : 0.0f;
            col_D[c] = i < len ? db[i] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < RK; r++) {
            const int j = j0 + ty + 16 * r;
#pragma unroll
            for (int c = 0; c < CQ; c++) {
                const int i = i0 + tx + 16 * c;
                const bool ok = i < len && j < len && (!a.causal || j <= i);
                float pz = 0.0f, ds = 0.0f;
                if (ok) {
                    const float p = expf(st[r][c] * a.scale - col_lse[c]);
                    float z = 1.0f;
                    if (a.p_drop > 0.0f)
                        z = fused_kept(a, bh, i, j) ? a.inv_keep : 0.0f;
                    pz = p * z;
                    ds = p * (dpt[r][c] * z - col_D[c]);
                }
                sPZ[(ty + 16 * r) * LDS + tx + 16 * c] = pz;
                sdS[(ty + 16 * r) * LDS + tx + 16 * c] = ds;
            }
        }
        __syncthreads();
        fa_rowmm<RK, D, BQ, LDS, LD>(dv, sPZ, sdO, tx, ty);
        fa_rowmm<RK, D, BQ, LDS, LD>(dk, sdS, sQ, tx, ty);
    }

    float *dkb = dqkv + (size_t)b * T * C3 + C + (size_t)h * hs;
    float *dvb = dkb + C;
#pragma unroll
    for (int r = 0; r < RK; r++) {
        const int j = j0 + ty + 16 * r;
        if (j >= len) continue;
#pragma unroll
        for (int dd = 0; dd < DN; dd++) {
            const int d = fa_dcol<D>(dd, tx);
            if (d < hs) {
                dkb[(size_t)j * C3 + d] += a.scale * dk[r][dd];
                dvb[(size_t)j * C3 + d] += dv[r][dd];
            }
        }
    }
}

/* ------------------------------------------------------------------ launchers */

template <int D, int BQ, int BK>
static void fa_forward_launch(float *out, float *lse, const float *qkv, const int32_t *lengths,
                              int B, const FusedArgs &a) {
    static bool ready = false;
    const size_t smem = FaFwdCfg<D, BQ, BK>::smem_floats * sizeof(float);
    mha_cu_prepare_smem(fa_forward_kernel<D, BQ, BK>, smem, &ready, "fused attention");
    dim3 grid((a.T + BQ - 1) / BQ, a.NH, B);
    mha_launch(fa_forward_kernel<D, BQ, BK>, grid, FA_THREADS, smem)(out, lse, qkv, lengths, a);
    LAUNCH_CHECK();
}

/* Whether both backward kernels' tiles fit the shared memory a block may have on this GPU. */
template <int D, int BQ, int BK, int BK2, int BQ2>
static bool fa_backward_fits(void) {
    const size_t most = (size_t)mha_cu_smem_optin();
    return FaDqCfg<D, BQ, BK>::smem_floats * sizeof(float) <= most &&
           FaDkvCfg<D, BK2, BQ2>::smem_floats * sizeof(float) <= most;
}

template <int D, int BQ, int BK, int BK2, int BQ2>
static void fa_backward_launch(float *dqkv, const float *dout, const float *qkv, const float *lse,
                               const float *Di, const int32_t *lengths, int B, const FusedArgs &a) {
    static bool ready_dq = false, ready_dkv = false;
    const size_t smem_dq = FaDqCfg<D, BQ, BK>::smem_floats * sizeof(float);
    const size_t smem_dkv = FaDkvCfg<D, BK2, BQ2>::smem_floats * sizeof(float);
    mha_cu_prepare_smem(fa_backward_dq_kernel<D, BQ, BK>, smem_dq, &ready_dq, "fused attention");
    mha_cu_prepare_smem(fa_backward_dkdv_kernel<D, BK2, BQ2>, smem_dkv, &ready_dkv, "fused attention");
    dim3 grid_q((a.T + BQ - 1) / BQ, a.NH, B);
    mha_launch(fa_backward_dq_kernel<D, BQ, BK>, grid_q, FA_THREADS, smem_dq)(dqkv, dout, qkv, lse, Di, lengths, a);
    LAUNCH_CHECK();
    dim3 grid_k((a.T + BK2 - 1) / BK2, a.NH, B);
    mha_launch(fa_backward_dkdv_kernel<D, BK2, BQ2>, grid_k, FA_THREADS, smem_dkv)(dqkv, dout, qkv, lse, Di, lengths, a);
    LAUNCH_CHECK();
}

void mha_cu_attention_forward_fused(float *out, float *lse, const float *qkv, const int32_t *lengths,
                                    int B, int T, int C, int NH, int causal, float p_drop,
                                    uint64_t seed) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    FusedArgs a = fused_args(B, T, C, NH, causal, p_drop, seed);
    if (mha_cu_fp32_attention_tc(a.hs)) {
        mha_cu_attention_forward_fused_tf32x3(out, lse, qkv, lengths, B, T, C, NH, causal, p_drop, seed);
        return;
    }
    if (a.hs <= 16) fa_forward_launch<16, 64, 64>(out, lse, qkv, lengths, B, a);
    else if (a.hs <= 32) fa_forward_launch<32, 64, 64>(out, lse, qkv, lengths, B, a);
    else if (a.hs <= 64) fa_forward_launch<64, 64, 64>(out, lse, qkv, lengths, B, a);
    else fa_forward_launch<128, 64, 32>(out, lse, qkv, lengths, B, a);
}

void mha_cu_attention_backward_fused(float *dqkv, const float *dout, const float *out,
                                     const float *qkv, const float *lse, const int32_t *lengths,
                                     int B, int T, int C, int NH, int causal, float p_drop,
                                     uint64_t seed) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    FusedArgs a = fused_args(B, T, C, NH, causal, p_drop, seed);
    if (mha_cu_fp32_attention_tc(a.hs)) {
        mha_cu_attention_backward_fused_tf32x3(dqkv, dout, out, qkv, lse, lengths, B, T, C, NH, causal,
                                               p_drop, seed);
        return;
    }
    const float *Di = fused_rowdot_do_o<false>(dout, out, lengths, B, a);   /* (B, NH, T) */
    /* Tiles (BQ, BK) of the dq kernel and (BK2, BQ2) of the dkdv kernel. Where they do not fit
     * the GPU's shared memory (sm_86/89: 99 KiB per block; at D = 64 the dkdv kernel needs
     * 102 KiB, at D = 128 both need 108-117 KiB), the tile held in registers is halved. */
    if (a.hs <= 16) fa_backward_launch<16, 64, 64, 64, 64>(dqkv, dout, qkv, lse, Di, lengths, B, a);
    else if (a.hs <= 32) fa_backward_launch<32, 64, 64, 64, 64>(dqkv, dout, qkv, lse, Di, lengths, B, a);
    else if (a.hs <= 64) {
        if (fa_backward_fits<64, 64, 64, 64, 64>())
            fa_backward_launch<64, 64, 64, 64, 64>(dqkv, dout, qkv, lse, Di, lengths, B, a);
        else fa_backward_launch<64, 64, 64, 64, 32>(dqkv, dout, qkv, lse, Di, lengths, B, a);
    } else {
        if (fa_backward_fits<128, 64, 32, 64, 32>())
            fa_backward_launch<128, 64, 32, 64, 32>(dqkv, dout, qkv, lse, Di, lengths, B, a);
        else fa_backward_launch<128, 32, 32, 32, 32>(dqkv, dout, qkv, lse, Di, lengths, B, a);
    }
}
