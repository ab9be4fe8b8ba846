/* kernels/cuda/attention_flash_tc.cu: fused (FlashAttention-style) attention with its matrix
 * products on tensor cores (WMMA, fp32 accumulators), in two precisions:
 *   bf16   (train.precision = "bf16"): operands rounded to bf16, 16x16x16 steps;
 *   tf32x3 (the fp32 model, heads of size <= 64): fp32 operands, each split into a tf32 "big"
 *          part and the tf32 rounding of what is left ("small"), a * b taken as
 *          big*small + small*big + big*big in three 16x16x8 steps (the dropped small*small is
 *          about 2^-22 of the product): fp32 accuracy on tensor cores, the method of CUTLASS's
 *          OpMultiplyAddFastF32 and of PyTorch's fp32 memory-efficient attention. The scores'
 *          steps are each summed apart (TcTf32x3::mma_apart).
 * Everything else (online softmax, log-sum-exp, dropout, masks, dS) is fp32 in both.
 *
 * The same function and interface as attention_flash.cu (the fp32 FFMA kernel): key padding
 * from lengths, causal option, attention dropout by the counter RNG, lse saved for a backward
 * by recomputation, += into dqkv, padded queries/keys cost no work, one writer per output
 * row (no atomics, deterministic). In bf16 only the operands of the products are rounded:
 * Q, K, V, dO when a tile is loaded, P (after dropout) and dS before their products.
 * Heads of size HS <= 128 (bf16) or <= 64 (tf32x3: its fp32 tiles and split fragments would
 * not fit at 128) run on kernels templated on D in {16, 32, 64, 128} (columns HS..D-1
 * zero-filled in shared memory). Needs sm_80 (bf16 and tf32 WMMA); tf32x3 also needs the
 * shared memory of its D (mha_cu_tf32x3_fits: more than the 99 KiB of sm_86/89 at D = 64).
 *
 * Work layout: 128 threads = 4 warps; tiles of 64 queries x 64 keys. Warp w owns the 16 rows
 * 16w..16w+15 of the tile (queries in the forward and dQ kernels, keys in the dK/dV kernel):
 * its score, probability and output rows in shared memory are touched by that warp only, so
 * within a tile only __syncwarp() separates its steps; __syncthreads() guards the shared
 * K/V (or Q/dO) tiles. For the fp32 elementwise steps lane l takes row l/2 of the warp's 16
 * and the columns of parity l%2 (the two lanes of a row combine by one shuffle).
 *
 * Shared-memory tiles (row-major, pitches chosen for WMMA: a multiple of 16 bytes, every
 * fragment pointer 32-byte aligned, every buffer 128-aligned); E is bf16 or float:
 *   Q, K, V, dO tiles  E (64, D + PAD)      PAD = 8 bf16 or 4 floats
 *   S, dP scores       fp32 (64, 64 + 4)    (WMMA stores, read by the lanes)
 *   P, dS operands     E (64, 64 + PAD)     (written by the lanes, WMMA matrix_a)
 *   O staging          fp32 (64, D + 4)     (forward: O rescaled by the lanes, the output)
 * In the tf32x3 backward the operand tiles P o Z and dS are fp32 of the score tiles' pitch and
 * take their places (FbPitch::kAlias): element (r, c) of P o Z / dS is element (r, c) of S / dP,
 * which the one lane that owns it reads before it writes it there, and the warp's rows are its
 * own until the __syncthreads() that starts the next tile or the staging. A bf16 operand row
 * (144 bytes) does not line up with an fp32 score row (272 bytes): written over the scores it
 * would land in earlier rows that other lanes and warps have still to read, so bf16 keeps them
 * apart.
 * tf32x3 at D = 64: 102 KiB (forward), 102 KiB (dQ), 102.5 KiB (dK/dV) per block: two blocks
 * per SM on sm_90 (228 KiB, 1 KiB of it per block reserved); 119 and 136.5 KiB, one block,
 * with P o Z and dS apart.
 *
 * Forward, one block per (query tile, head, example): S = Q K^T (K read as a col_major
 * matrix_b), online softmax per row (m, l in fp32), O += P V into accumulator fragments held
 * across the key tiles. A row's reference maximum m moves only when a score passes it by more
 * than FB_REBASE, and only then does the warp take O through shared memory to rescale its rows
 * (O = O * alpha): with scores of one scale, never (the first tile sets m while O is zeros).
 * dQ kernel, one block per query tile: S = Q K^T, dP = dO V^T, dS = P o (dP Z - Di),
 *   dQ += dS K (accumulated in fragments across key tiles).
 * dK/dV kernel, one block per key tile: S^T = K Q^T, dP^T = V dO^T, dV += (P o Z)^T dO,
 *   dK += dS^T Q (accumulated in fragments across query tiles).
 * Di = rowsum(dO o O) in fp32, with dO rounded to bf16 in bf16 (so that dP - Di cancels as
 * the rounded dP product does; fused_rowdot_do_o_kernel in attention_fused.cuh).
 *
 * The host emulation (tests/cuda/emu) provides nvcuda::wmma (bf16 and tf32) and the bf16
 * stand-ins, so this file also runs there (every thread holding whole fragments: logic,
 * masks, layouts and the tf32 split only).
 */
#include "kernels/cuda/attention_fused.cuh"

#ifndef MHA_CUDA_EMU
#include <mma.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <type_traits>

namespace wmma = nvcuda::wmma;

#define FB_WARPS 4
#define FB_THREADS (32 * FB_WARPS)
#define FB_TILE 64                      /* queries and keys per tile: 16 rows per warp */
#define FB_ROUND(bytes) (((bytes) + 127) / 128 * 128)
/* The forward's online softmax moves a row's reference maximum only when a score passes it by
 * more than this (natural log): p = exp(s - m) <= e^8 ~ 3000, and the running O is rescaled
 * only on those tiles instead of on every tile where a row's maximum grows. */
#define FB_REBASE 8.0f

/* c += t, element by element (c and t of one fragment type, so their elements correspond).
 *
 * Sums that run over the keys (O) or the queries (dQ, dK, dV) are never carried through a chain
 * of mma operations longer than one 64-row tile: each tile's products go into a zeroed
 * accumulator, which is then added here, in fp32 with rounding to nearest. Tensor cores
 * truncate when they accumulate (see MHA_EMU_MMA in tests/cuda/emu/cuda_emu_bf16.h), and a
 * running sum carried through every tile's mma operations drifts with each of them: under the
 * emulation's model of that, the tf32x3 output at T = 1024 was 1.2e-5 to 2e-5 off before this,
 * 1.8e-6 to 2.1e-6 after (the FFMA kernel: 0.85e-6 to 1.3e-6). In tf32x3 the score sums over
 * d go further: no chain longer than one k step (TcTf32x3::mma_apart). */
template <class Acc>
__device__ __forceinline__ void fb_add(Acc &c, const Acc &t) {
#pragma unroll
    for (int e = 0; e < c.num_elements; e++) c.x[e] += t.x[e];
}

/* The two precisions: E, the element type of the operand tiles in shared memory; KS, the k
 * of one WMMA step; cvt, a float into an operand tile; A and B<Layout>, an operand as the
 * kernels hold it (one fragment, or the big and small fragments); load and mma. */
struct TcBf16 {
    typedef __nv_bfloat16 E;
    static constexpr int KS = 16, PAD = 8;
    static constexpr bool kRoundDo = true;   /* Di from bf16(dO), as the dP product sees it */
    static constexpr int kUnrollOuter = 16;  /* the score loops over 16-key blocks: unrolled */
    typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;
    struct A {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> f;
    };
    template <class L>
    struct B {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, E, L> f;
    };
    static __device__ __forceinline__ E cvt(float x) { return __float2bfloat16_rn(x); }
    template <class Op>
    static __device__ __forceinline__ void load(Op &o, const E *p, unsigned ldm) {
        wmma::load_matrix_sync(o.f, p, ldm);
    }
    template <class L>
    static __device__ __forceinline__ void mma(Acc &c, const A &a, const B<L> &b) {
        wmma::mma_sync(c, a.f, b.f, c);
    }
    /* the score products: as mma (bf16 products are exact in fp32, and the operands' rounding,
     * 2^-9, outweighs how the sum is accumulated) */
    template <class L>
    static __device__ __forceinline__ void mma_apart(Acc &c, const A &a, const B<L> &b) { mma(c, a, b); }
};

/* x with its low 13 mantissa bits cleared: a tf32 value held in a float */
static __device__ __forceinline__ float tf32_bits(float x) {
    return __uint_as_float(__float_as_uint(x) & 0xffffe000u);
}

struct TcTf32x3 {
    typedef float E;
    static constexpr int KS = 8, PAD = 4;
    static constexpr bool kRoundDo = false;
    static constexpr int kUnrollOuter = 1;   /* kept rolled: the split operands need the registers */
    typedef wmma::fragment<wmma::accumulator, 16, 16, 8, float> Acc;
    struct A {
        wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> big, small;
    };
    template <class L>
    struct B {
        wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, L> big, small;
    };
    static __device__ __forceinline__ E cvt(float x) { return x; }
    /* loads the fp32 values into big, then splits each element x: big = tf32(x),
     * small = tf32(x - big) (x - big is exact in fp32). The same operation on every element,
     * which is all a kernel may do to a fragment's elements. */
    template <class Op>
    static __device__ __forceinline__ void load(Op &o, const E *p, unsigned ldm) {
        wmma::load_matrix_sync(o.big, p, ldm);
#pragma unroll
        for (int t = 0; t < o.big.num_elements; t++) {
            /* cvt.rna.tf32 leaves the low 13 bits of its 32-bit result undocumented: cleared
             * here (as CUTLASS's tfloat32_t does) so that x - hi is exactly what big misses */
            const float x = o.big.x[t], hi = tf32_bits(wmma::__float_to_tf32(x));
            o.big.x[t] = hi;
            o.small.x[t] = wmma::__float_to_tf32(x - hi);
        }
    }
    /* the small products first, into the running sum, then the big one */
    template <class L>
    static __device__ __forceinline__ void mma(Acc &c, const A &a, const B<L> &b) {
        wmma::mma_sync(c, a.big, b.small, c);
        wmma::mma_sync(c, a.small, b.big, c);
        wmma::mma_sync(c, a.big, b.big, c);
    }
    /* c += a b for the score products S = Q K^T and dP = dO V^T, whose errors exp() and the
     * cancellation in dP - Di magnify: the step's three products go into a zeroed accumulator,
     * added to c in fp32 with rounding to nearest, so that no sum runs through a chain longer
     * than one k step (the tensor cores truncate as they accumulate: see fb_add). Under the
     * emulation's truncation model, with keys growing along the sequence (test_cuda_ops'
     * key_ramp 16, HS 64), dQKV went from 2.1e-5 of the CPU to 3.8e-6 (the FFMA kernel: 1.9e-6)
     * and O from 9.0e-6 to 3.6e-6; causal with key_ramp 12, dQKV 1.7e-5 -> 2.2e-6. The P V,
     * dS K, dS^T Q and (P o Z)^T dO products keep mma: on the key_ramp 24 case, taking only
     * them apart gave 9.5e-6 -> 9.1e-6, and on top of this 1.7e-6 -> 1.4e-6. Cost: one more
     * fragment, and ptxas spills 16 to 32 bytes (stored plus loaded) in some tf32x3 backward
     * kernels (kernels/cuda/README.md, "Score products"). */
    template <class L>
    static __device__ __forceinline__ void mma_apart(Acc &c, const A &a, const B<L> &b) {
        Acc t;
        wmma::fill_fragment(t, 0.0f);
        mma(t, a, b);
        fb_add(c, t);
    }
};

/* t = A B for one tile's products, in a zeroed accumulator: A (16 x 64) row-major at a with
 * pitch lda, B (64 x 16) row-major at b with pitch ldb. The k loop is kept rolled where the
 * registers are short (tf32x3 at D >= 64: P::kUnrollOuter). */
template <class P, int D>
__device__ __forceinline__ void fb_tile_product(typename P::Acc &t, const typename P::E *a, int lda,
                                                const typename P::E *b, int ldb) {
    constexpr int KS = P::KS, NTK = FB_TILE / KS;
    [[maybe_unused]] constexpr int kUnroll = D >= 64 ? P::kUnrollOuter : 16;
    wmma::fill_fragment(t, 0.0f);
#pragma unroll (kUnroll)
    for (int kk = 0; kk < NTK; kk++) {
        typename P::A xa;
        typename P::template B<wmma::row_major> yb;
        P::load(xa, a + kk * KS, lda);
        P::load(yb, b + kk * KS * ldb, ldb);
        P::mma(t, xa, yb);
    }
}

/* Element type of the dynamic shared memory: 128-byte alignment for the WMMA pointers. */
struct alignas(128) FbSmemChunk {
    unsigned char bytes[128];
};

/* Pitches (in elements) and tile sizes (in bytes) shared by the three kernels. */
template <class P, int D>
struct FbPitch {
    static constexpr int H = D + P::PAD;           /* E Q/K/V/dO tiles */
    static constexpr int S = FB_TILE + 4;          /* fp32 score tiles */
    static constexpr int Pp = FB_TILE + P::PAD;    /* E P / dS tiles */
    static constexpr int O = D + 4;                /* fp32 output accumulator / staging */
    static constexpr size_t es = sizeof(typename P::E);
    static constexpr size_t tile_h = FB_ROUND((size_t)FB_TILE * H * es);
    static constexpr size_t tile_s = FB_ROUND((size_t)FB_TILE * S * 4);
    static constexpr size_t tile_p = FB_ROUND((size_t)FB_TILE * Pp * es);
    static constexpr size_t tile_o = FB_ROUND((size_t)FB_TILE * O * 4);
    /* The backward's operand tiles (P o Z, dS) may take the places of the score tiles (S, dP),
     * element (r, c) over element (r, c): fp32 of the same pitch (tf32x3, not bf16). */
    static constexpr bool kAlias = std::is_same<typename P::E, float>::value && Pp == S;
    static_assert(!kAlias || tile_p == tile_s, "an operand tile over a score tile fills it exactly");
    static_assert((H * es) % 16 == 0 && (Pp * es) % 16 == 0 && S % 4 == 0 && O % 4 == 0, "WMMA ldm");
    static_assert((16 * H * es) % 32 == 0 && (16 * Pp * es) % 32 == 0 && (16 * S * 4) % 32 == 0 &&
                  (16 * O * 4) % 32 == 0 && (P::KS * H * es) % 32 == 0 && (P::KS * Pp * es) % 32 == 0,
                  "16-row and KS-row steps keep fragment pointers 32-byte aligned");
    static_assert((P::KS * es) % 32 == 0, "KS-column steps keep fragment pointers 32-byte aligned");
    /* the fp32 (64, D + 4) staging of the backward results fits over the two score tiles */
    static_assert(tile_o <= 2 * tile_s, "staging fits over S and dP");
};

/* ------------------------------------------------------------------ forward */

template <class P, int D>
struct FbFwdCfg {
    using Pi = FbPitch<P, D>;
    static constexpr size_t oQ = 0, oK = oQ + Pi::tile_h, oV = oK + Pi::tile_h, oS = oV + Pi::tile_h,
                            oP = oS + Pi::tile_s, oO = oP + Pi::tile_p, bytes = oO + Pi::tile_o;
};

template <class P, int D>
__global__ void __launch_bounds__(FB_THREADS)
fb_forward_kernel(float *__restrict__ out, float *__restrict__ lse, const float *__restrict__ qkv,
                  const int32_t *__restrict__ lengths, FusedArgs a) {
    using Cfg = FbFwdCfg<P, D>;
    using Pi = FbPitch<P, D>;
    using E = typename P::E;
    constexpr int LDH = Pi::H, LDS = Pi::S, LDP = Pi::Pp, LDO = Pi::O, KS = P::KS;
    /* 16-wide blocks of D and of the tile (output columns); KS-deep steps along them (k) */
    constexpr int DN = D / 16, DKS = D / KS, NT = FB_TILE / 16, HALF = FB_TILE / 2;
    MHA_DYNAMIC_SMEM(FbSmemChunk, fb_smem);
    unsigned char *base = reinterpret_cast<unsigned char *>(fb_smem);
    E *sQ = reinterpret_cast<E *>(base + Cfg::oQ);           /* (64, D+PAD) */
    E *sK = reinterpret_cast<E *>(base + Cfg::oK);           /* (64, D+PAD) */
    E *sV = reinterpret_cast<E *>(base + Cfg::oV);           /* (64, D+PAD) */
    float *sS = reinterpret_cast<float *>(base + Cfg::oS);   /* (64, 68) */
    E *sP = reinterpret_cast<E *>(base + Cfg::oP);           /* (64, 64+PAD) */
    float *sO = reinterpret_cast<float *>(base + Cfg::oO);       /* (64, D+4) */

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q0 = blockIdx.x * FB_TILE, h = blockIdx.y, b = blockIdx.z;
    const int T = a.T, C = a.C, hs = a.hs, C3 = 3 * C;
    const int len = fused_len(lengths, b, T);
    const float *qb = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    float *ob = out + (size_t)b * T * C + (size_t)h * hs;
    float *lb = lse + ((size_t)b * a.NH + h) * T;

    if (q0 >= len) {   /* all padding: zeros */
        fused_zero_query_tile<FB_TILE, FB_THREADS>(ob, lb, q0, T, C, hs);
        return;
    }

    const int wr = warp * 16;                       /* the warp's first row in the tile */
    const int row = wr + (lane >> 1), lc = lane & 1; /* the lane's row, its column parity */
    const int i = q0 + row;
    float *sSw = sS + wr * LDS, *sOw = sO + wr * LDO;
    E *sPw = sP + wr * LDP;

    fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sQ, qb, C3, q0, len, hs);
    typename P::Acc oacc[DN];   /* the warp's O rows (16 x D), unnormalised, relative to m */
#pragma unroll
    for (int n = 0; n < DN; n++) wmma::fill_fragment(oacc[n], 0.0f);

    /* m: the lane's row's reference for the exponentials, p = exp(s - m); l = sum of its p */
    float m = -INFINITY, l = 0.0f;
    const uint64_t bh = (uint64_t)b * a.NH + h;
    const int kv_end = a.causal ? min(len, q0 + FB_TILE) : len;

    for (int j0 = 0; j0 < kv_end; j0 += FB_TILE) {
        __syncthreads();   /* every warp is done with the previous K, V (and Q, the first time) */
        fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sK, qb + C, C3, j0, len, hs);
        fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sV, qb + 2 * C, C3, j0, len, hs);
        __syncthreads();

        /* S (16 x 64 per warp) = Q K^T; K (key, d) read as the col_major (d, key) matrix_b. The
         * k steps outermost, so that each Q fragment is loaded (tf32x3: and split) once per
         * tile; every S block still sums its k steps in order 0, 1, ... */
        {
            typename P::Acc sc[NT];
#pragma unroll
            for (int n = 0; n < NT; n++) wmma::fill_fragment(sc[n], 0.0f);
#pragma unroll (P::kUnrollOuter)
            for (int kk = 0; kk < DKS; kk++) {
                typename P::A qa;
                P::load(qa, sQ + wr * LDH + kk * KS, LDH);
#pragma unroll
                for (int n = 0; n < NT; n++) {
                    typename P::template B<wmma::col_major> kb;
                    P::load(kb, sK + n * 16 * LDH + kk * KS, LDH);
                    P::mma_apart(sc[n], qa, kb);
                }
            }
#pragma unroll
            for (int n = 0; n < NT; n++)
                wmma::store_matrix_sync(sSw + n * 16, sc[n], LDS, wmma::mem_row_major);
        }
        __syncwarp();

        /* online softmax in fp32 on the lane's half row (columns lc, lc + 2, ...) */
        float s[HALF];
        float mx = -INFINITY;
#pragma unroll
        for (int t = 0; t < HALF; t++) {
            const int c = lc + 2 * t, j = j0 + c;
            const bool ok = j < len && (!a.causal || j <= i);
            s[t] = ok ? sS[row * LDS + c] * a.scale : -INFINITY;
            mx = fmaxf(mx, s[t]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        /* The reference moves only when the row's maximum passes it by more than
         * FB_REBASE (then p <= e^FB_REBASE, far from overflow), and O is rescaled only then;
         * the first finite maximum always sets it. */
        const bool rebase = mx > m + FB_REBASE;
        const float mnew = rebase ? mx : m;
        const float alpha = rebase ? expf(m - mnew) : 1.0f;   /* m = -inf -> 0 */
        float sum = 0.0f;
#pragma unroll
        for (int t = 0; t < HALF; t++) {
            const float p = mnew != -INFINITY ? expf(s[t] - mnew) : 0.0f;   /* masked: 0 */
            s[t] = p;
            sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        /* l = 0: O is still zeros; rows in the padding (i >= len) are never written out */
        const bool rescale = rebase && l > 0.0f && i < len;
        l = l * alpha + sum;
        m = mnew;
#pragma unroll
        for (int t = 0; t < HALF; t++) {
            float p = s[t];
            const int c = lc + 2 * t;
            if (a.p_drop > 0.0f && p != 0.0f) {
                const int j = j0 + c;
                p = fused_kept(a, bh, i, j) ? p * a.inv_keep : 0.0f;
            }
            sP[row * LDP + c] = P::cvt(p);
        }
        /* O *= alpha row by row, through shared memory (a fragment's rows are not the
         * kernel's to know), when a row of the warp moved its reference */
        if (__any_sync(0xffffffffu, rescale)) {
#pragma unroll
            for (int n = 0; n < DN; n++)
                wmma::store_matrix_sync(sOw + n * 16, oacc[n], LDO, wmma::mem_row_major);
            __syncwarp();
            for (int d = lc; d < D; d += 2) sO[row * LDO + d] *= alpha;
            __syncwarp();
#pragma unroll
            for (int n = 0; n < DN; n++)
                wmma::load_matrix_sync(oacc[n], sOw + n * 16, LDO, wmma::mem_row_major);
        }
        __syncwarp();

        /* O (16 x D per warp) += P V (the tile's product summed apart: fb_add); V (key, d) is
         * the row_major matrix_b */
#pragma unroll
        for (int n = 0; n < DN; n++) {
            typename P::Acc pv;
            fb_tile_product<P, D>(pv, sPw, LDP, sV + n * 16, LDH);
            fb_add(oacc[n], pv);
        }
    }

#pragma unroll
    for (int n = 0; n < DN; n++)
        wmma::store_matrix_sync(sOw + n * 16, oacc[n], LDO, wmma::mem_row_major);
    __syncwarp();
    if (i < T) {
        const bool valid = i < len && l > 0.0f;
        const float inv = valid ? 1.0f / l : 0.0f;
        for (int d = lc; d < hs; d += 2) ob[(size_t)i * C + d] = valid ? sO[row * LDO + d] * inv : 0.0f;
        if (lc == 0) lb[i] = valid ? m + logf(l) : 0.0f;
    }
}

/* ------------------------------------------------------------------ backward: dQ */

/* dS over dP where it can be (FbPitch::kAlias: tf32x3), after it otherwise (bf16) */
template <class P, int D>
struct FbDqCfg {
    using Pi = FbPitch<P, D>;
    static constexpr size_t oQ = 0, odO = oQ + Pi::tile_h, oK = odO + Pi::tile_h, oV = oK + Pi::tile_h,
                            oS = oV + Pi::tile_h, oDP = oS + Pi::tile_s,
                            odS = Pi::kAlias ? oDP : oDP + Pi::tile_s, bytes = odS + Pi::tile_p;
};

template <class P, int D>
__global__ void __launch_bounds__(FB_THREADS)
fb_backward_dq_kernel(float *__restrict__ dqkv, const float *__restrict__ dout,
                      const float *__restrict__ qkv, const float *__restrict__ lse,
                      const float *__restrict__ Di, const int32_t *__restrict__ lengths, FusedArgs a) {
    using Cfg = FbDqCfg<P, D>;
    using Pi = FbPitch<P, D>;
    using E = typename P::E;
    constexpr int LDH = Pi::H, LDS = Pi::S, LDP = Pi::Pp, LDO = Pi::O, KS = P::KS;
    constexpr int DN = D / 16, DKS = D / KS, NT = FB_TILE / 16, HALF = FB_TILE / 2;
    MHA_DYNAMIC_SMEM(FbSmemChunk, fb_smem);
    unsigned char *base = reinterpret_cast<unsigned char *>(fb_smem);
    E *sQ = reinterpret_cast<E *>(base + Cfg::oQ);             /* (64, D+PAD) queries */
    E *sdO = reinterpret_cast<E *>(base + Cfg::odO);           /* (64, D+PAD) */
    E *sK = reinterpret_cast<E *>(base + Cfg::oK);             /* (64, D+PAD) keys */
    E *sV = reinterpret_cast<E *>(base + Cfg::oV);             /* (64, D+PAD) */
    float *sS = reinterpret_cast<float *>(base + Cfg::oS);     /* (64, 68) */
    float *sDP = reinterpret_cast<float *>(base + Cfg::oDP);   /* (64, 68) */
    E *sdS = reinterpret_cast<E *>(base + Cfg::odS);           /* (64, 64+PAD); tf32x3: over sDP */
    float *sStage = sS;                                           /* (64, D+4) after the loop */
    static_assert(Cfg::odS != Cfg::oDP || (std::is_same<E, float>::value && LDP == LDS),
                  "dS over dP only element (r, c) over element (r, c)");

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int q0 = blockIdx.x * FB_TILE, h = blockIdx.y, b = blockIdx.z;
    const int T = a.T, C = a.C, hs = a.hs, C3 = 3 * C;
    const int len = fused_len(lengths, b, T);
    if (q0 >= len) return;   /* padded queries: no gradient */
    const float *qb = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *dob = dout + (size_t)b * T * C + (size_t)h * hs;
    const uint64_t bh = (uint64_t)b * a.NH + h;

    const int wr = warp * 16;
    const int row = wr + (lane >> 1), lc = lane & 1;
    const int i = q0 + row;
    float *sSw = sS + wr * LDS, *sDPw = sDP + wr * LDS;
    E *sdSw = sdS + wr * LDP;
    const float row_lse = i < len ? lse[bh * T + i] : 0.0f;
    const float row_D = i < len ? Di[bh * T + i] : 0.0f;

    fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sQ, qb, C3, q0, len, hs);
    fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sdO, dob, C, q0, len, hs);
    typename P::Acc dq[DN];
#pragma unroll
    for (int n = 0; n < DN; n++) wmma::fill_fragment(dq[n], 0.0f);

    const int kv_end = a.causal ? min(len, q0 + FB_TILE) : len;
    for (int j0 = 0; j0 < kv_end; j0 += FB_TILE) {
        __syncthreads();
        fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sK, qb + C, C3, j0, len, hs);
        fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sV, qb + 2 * C, C3, j0, len, hs);
        __syncthreads();

        /* S = Q K^T and dP = dO V^T (16 x 64 per warp) */
#pragma unroll (P::kUnrollOuter)
        for (int n = 0; n < NT; n++) {
            typename P::Acc sc, pc;
            wmma::fill_fragment(sc, 0.0f);
            wmma::fill_fragment(pc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < DKS; kk++) {
                typename P::A xa;
                typename P::template B<wmma::col_major> yb;
                P::load(xa, sQ + wr * LDH + kk * KS, LDH);
                P::load(yb, sK + n * 16 * LDH + kk * KS, LDH);
                P::mma_apart(sc, xa, yb);
                P::load(xa, sdO + wr * LDH + kk * KS, LDH);
                P::load(yb, sV + n * 16 * LDH + kk * KS, LDH);
                P::mma_apart(pc, xa, yb);
            }
            wmma::store_matrix_sync(sSw + n * 16, sc, LDS, wmma::mem_row_major);
            wmma::store_matrix_sync(sDPw + n * 16, pc, LDS, wmma::mem_row_major);
        }
        __syncwarp();

        /* dS = P o (dP Z - Di) in fp32, stored as an operand (bf16: rounded; tf32x3: split at
         * load). In tf32x3 dS[row][c] is dP[row][c]: this lane reads it before writing it, and no
         * other lane reads it. */
#pragma unroll 4
        for (int t = 0; t < HALF; t++) {
            const int c = lc + 2 * t, j = j0 + c;
            const bool ok = i < len && j < len && (!a.causal || j <= i);
            float ds = 0.0f;
            if (ok) {
                const float p = expf(sS[row * LDS + c] * a.scale - row_lse);
                float g = sDP[row * LDS + c];
                if (a.p_drop > 0.0f)
                    g = fused_kept(a, bh, i, j) ? g * a.inv_keep : 0.0f;
                ds = p * (g - row_D);
            }
            sdS[row * LDP + c] = P::cvt(ds);
        }
        __syncwarp();

        /* dQ (16 x D per warp) += dS K (the tile's product summed apart: fb_add); K (key, d) is
         * the row_major matrix_b */
#pragma unroll
        for (int n = 0; n < DN; n++) {
            typename P::Acc t;
            fb_tile_product<P, D>(t, sdSw, LDP, sK + n * 16, LDH);
            fb_add(dq[n], t);
        }
    }

    __syncthreads();   /* the staging covers other warps' S and dP (tf32x3: dS) rows */
#pragma unroll
    for (int n = 0; n < DN; n++)
        wmma::store_matrix_sync(sStage + wr * LDO + n * 16, dq[n], LDO, wmma::mem_row_major);
    __syncwarp();
    float *dqb = dqkv + (size_t)b * T * C3 + (size_t)h * hs;
    if (i < len)
        for (int d = lc; d < hs; d += 2) dqb[(size_t)i * C3 + d] += a.scale * sStage[row * LDO + d];
}

/* ------------------------------------------------------------------ backward: dK, dV */

/* P o Z over S and dS over dP where they can be (FbPitch::kAlias: tf32x3), after them
 * otherwise (bf16) */
template <class P, int D>
struct FbDkvCfg {
    using Pi = FbPitch<P, D>;
    static constexpr size_t oK = 0, oV = oK + Pi::tile_h, oQ = oV + Pi::tile_h, odO = oQ + Pi::tile_h,
                            oS = odO + Pi::tile_h, oDP = oS + Pi::tile_s,
                            oPZ = Pi::kAlias ? oS : oDP + Pi::tile_s,
                            odS = Pi::kAlias ? oDP : oPZ + Pi::tile_p, oL = odS + Pi::tile_p,
                            oDi = oL + FB_ROUND(FB_TILE * 4), bytes = oDi + FB_ROUND(FB_TILE * 4);
};

/* Rows of the warp tiles are keys, columns queries. */
template <class P, int D>
__global__ void __launch_bounds__(FB_THREADS)
fb_backward_dkdv_kernel(float *__restrict__ dqkv, const float *__restrict__ dout,
                        const float *__restrict__ qkv, const float *__restrict__ lse,
                        const float *__restrict__ Di, const int32_t *__restrict__ lengths, FusedArgs a) {
    using Cfg = FbDkvCfg<P, D>;
    using Pi = FbPitch<P, D>;
    using E = typename P::E;
    constexpr int LDH = Pi::H, LDS = Pi::S, LDP = Pi::Pp, LDO = Pi::O, KS = P::KS;
    constexpr int DN = D / 16, DKS = D / KS, NT = FB_TILE / 16, HALF = FB_TILE / 2;
    MHA_DYNAMIC_SMEM(FbSmemChunk, fb_smem);
    unsigned char *base = reinterpret_cast<unsigned char *>(fb_smem);
    E *sK = reinterpret_cast<E *>(base + Cfg::oK);             /* (64, D+PAD) keys */
    E *sV = reinterpret_cast<E *>(base + Cfg::oV);             /* (64, D+PAD) */
    E *sQ = reinterpret_cast<E *>(base + Cfg::oQ);             /* (64, D+PAD) queries */
    E *sdO = reinterpret_cast<E *>(base + Cfg::odO);           /* (64, D+PAD) */
    float *sS = reinterpret_cast<float *>(base + Cfg::oS);     /* (64 keys, 68) S^T */
    float *sDP = reinterpret_cast<float *>(base + Cfg::oDP);   /* (64 keys, 68) dP^T */
    E *sPZ = reinterpret_cast<E *>(base + Cfg::oPZ);           /* (64 keys, 64+PAD) (P o Z)^T */
    E *sdS = reinterpret_cast<E *>(base + Cfg::odS);           /* (64 keys, 64+PAD) dS^T */
    float *sL = reinterpret_cast<float *>(base + Cfg::oL);        /* (64) lse of the queries */
    float *sDi = reinterpret_cast<float *>(base + Cfg::oDi);      /* (64) Di of the queries */
    float *sStage = sS;                                           /* (64, D+4) after the loop */
    /* tf32x3: sPZ over sS, sdS over sDP */
    static_assert((Cfg::oPZ != Cfg::oS && Cfg::odS != Cfg::oDP) ||
                      (Cfg::oPZ == Cfg::oS && Cfg::odS == Cfg::oDP && std::is_same<E, float>::value &&
                       LDP == LDS),
                  "P o Z over S and dS over dP only element (r, c) over element (r, c)");

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int j0 = blockIdx.x * FB_TILE, h = blockIdx.y, b = blockIdx.z;
    const int T = a.T, C = a.C, hs = a.hs, C3 = 3 * C;
    const int len = fused_len(lengths, b, T);
    if (j0 >= len) return;   /* padded keys: no gradient */
    const float *qb = qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *dob = dout + (size_t)b * T * C + (size_t)h * hs;
    const uint64_t bh = (uint64_t)b * a.NH + h;
    const float *lb = lse + bh * T;
    const float *db = Di + bh * T;

    const int wr = warp * 16;
    const int row = wr + (lane >> 1), lc = lane & 1;
    const int j = j0 + row;   /* the lane's key */
    float *sSw = sS + wr * LDS, *sDPw = sDP + wr * LDS;
    E *sPZw = sPZ + wr * LDP, *sdSw = sdS + wr * LDP;

    fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sK, qb + C, C3, j0, len, hs);
    fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sV, qb + 2 * C, C3, j0, len, hs);
    typename P::Acc dk[DN], dv[DN];
#pragma unroll
    for (int n = 0; n < DN; n++) {
        wmma::fill_fragment(dk[n], 0.0f);
        wmma::fill_fragment(dv[n], 0.0f);
    }

    const int i_start = a.causal ? j0 : 0;   /* j0 is a multiple of the query tile */
    for (int i0 = i_start; i0 < len; i0 += FB_TILE) {
        __syncthreads();
        fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sQ, qb, C3, i0, len, hs);
        fused_load_tile<FB_TILE, D, LDH, FB_THREADS>(sdO, dob, C, i0, len, hs);
        for (int r = threadIdx.x; r < FB_TILE; r += FB_THREADS) {
            const int ii = i0 + r;
            sL[r] = ii < len ? lb[ii] : 0.0f;
            sDi[r] = ii < len ? db[ii] : 0.0f;
        }
        __syncthreads();

        /* S^T = K Q^T and dP^T = V dO^T (16 keys x 64 queries per warp) */
#pragma unroll (P::kUnrollOuter)
        for (int n = 0; n < NT; n++) {
            typename P::Acc sc, pc;
            wmma::fill_fragment(sc, 0.0f);
            wmma::fill_fragment(pc, 0.0f);
#pragma unroll
            for (int kk = 0; kk < DKS; kk++) {
                typename P::A xa;
                typename P::template B<wmma::col_major> yb;
                P::load(xa, sK + wr * LDH + kk * KS, LDH);
                P::load(yb, sQ + n * 16 * LDH + kk * KS, LDH);
                P::mma_apart(sc, xa, yb);
                P::load(xa, sV + wr * LDH + kk * KS, LDH);
                P::load(yb, sdO + n * 16 * LDH + kk * KS, LDH);
                P::mma_apart(pc, xa, yb);
            }
            wmma::store_matrix_sync(sSw + n * 16, sc, LDS, wmma::mem_row_major);
            wmma::store_matrix_sync(sDPw + n * 16, pc, LDS, wmma::mem_row_major);
        }
        __syncwarp();

        /* P o Z and dS = P o (dP Z - Di) in fp32, stored as operands (bf16: rounded; tf32x3:
         * split at load). In tf32x3 (P o Z)[row][c] is S[row][c] and dS[row][c] is dP[row][c]:
         * this lane reads them before writing them, and no other lane reads them. */
#pragma unroll 4
        for (int t = 0; t < HALF; t++) {
            const int c = lc + 2 * t, ii = i0 + c;
            const bool ok = ii < len && j < len && (!a.causal || j <= ii);
            float pz = 0.0f, ds = 0.0f;
            if (ok) {
                const float p = expf(sS[row * LDS + c] * a.scale - sL[c]);
                float z = 1.0f;
                if (a.p_drop > 0.0f)
                    z = fused_kept(a, bh, ii, j) ? a.inv_keep : 0.0f;
                pz = p * z;
                ds = p * (sDP[row * LDS + c] * z - sDi[c]);
            }
            sPZ[row * LDP + c] = P::cvt(pz);
            sdS[row * LDP + c] = P::cvt(ds);
        }
        __syncwarp();

        /* dV += (P o Z)^T dO and dK += dS^T Q (16 keys x D per warp; each tile's product summed
         * apart: fb_add); dO, Q (query, d) row_major */
#pragma unroll
        for (int n = 0; n < DN; n++) {
            typename P::Acc t;
            fb_tile_product<P, D>(t, sPZw, LDP, sdO + n * 16, LDH);
            fb_add(dv[n], t);
            fb_tile_product<P, D>(t, sdSw, LDP, sQ + n * 16, LDH);
            fb_add(dk[n], t);
        }
    }

    __syncthreads();   /* the staging covers other warps' S and dP (tf32x3: P o Z, dS) rows */
    float *dkb = dqkv + (size_t)b * T * C3 + C + (size_t)h * hs;
    float *dvb = dkb + C;
#pragma unroll
    for (int n = 0; n < DN; n++)
        wmma::store_matrix_sync(sStage + wr * LDO + n * 16, dk[n], LDO, wmma::mem_row_major);
    __syncwarp();
    if (j < len)
        for (int d = lc; d < hs; d += 2) dkb[(size_t)j * C3 + d] += a.scale * sStage[row * LDO + d];
    __syncwarp();
#pragma unroll
    for (int n = 0; n < DN; n++)
        wmma::store_matrix_sync(sStage + wr * LDO + n * 16, dv[n], LDO, wmma::mem_row_major);
    __syncwarp();
    if (j < len)
        for (int d = lc; d < hs; d += 2) dvb[(size_t)j * C3 + d] += sStage[row * LDO + d];
}

/* ------------------------------------------------------------------ launchers */

/* The most shared memory one block of the three kernels of precision P at D takes. */
template <class P, int D>
static constexpr size_t fb_smem_most() {
    return std::max(FbFwdCfg<P, D>::bytes, std::max(FbDqCfg<P, D>::bytes, FbDkvCfg<P, D>::bytes));
}

/* Whether the three kernels of precision P for heads of size hs fit this GPU's shared memory. */
template <class P>
static int fb_fits(int hs) {
    const size_t need = hs <= 16 ? fb_smem_most<P, 16>() : hs <= 32 ? fb_smem_most<P, 32>()
                      : hs <= 64 ? fb_smem_most<P, 64>() : fb_smem_most<P, 128>();
    return need <= (size_t)mha_cu_smem_optin();
}

int mha_cu_tf32x3_fits(int hs) {
    return hs >= 1 && hs <= MHA_CU_TF32X3_MAX_HS && fb_fits<TcTf32x3>(hs);
}

int mha_cu_bf16_attention_fits(int hs) { return hs >= 1 && hs <= 128 && fb_fits<TcBf16>(hs); }

template <class P, int D>
static void fb_forward_launch(float *out, float *lse, const float *qkv, const int32_t *lengths,
                              int B, const FusedArgs &a, const char *what) {
    static bool ready = false;
    const size_t smem = FbFwdCfg<P, D>::bytes;
    mha_cu_prepare_smem(fb_forward_kernel<P, D>, smem, &ready, what);
    dim3 grid((a.T + FB_TILE - 1) / FB_TILE, a.NH, B);
    mha_launch(fb_forward_kernel<P, D>, grid, FB_THREADS, smem)(out, lse, qkv, lengths, a);
    LAUNCH_CHECK();
}

template <class P, int D>
static void fb_backward_launch(float *dqkv, const float *dout, const float *qkv, const float *lse,
                               const float *Di, const int32_t *lengths, int B, const FusedArgs &a,
                               const char *what) {
    static bool ready_dq = false, ready_dkv = false;
    const size_t smem_dq = FbDqCfg<P, D>::bytes, smem_dkv = FbDkvCfg<P, D>::bytes;
    mha_cu_prepare_smem(fb_backward_dq_kernel<P, D>, smem_dq, &ready_dq, what);
    mha_cu_prepare_smem(fb_backward_dkdv_kernel<P, D>, smem_dkv, &ready_dkv, what);
    dim3 grid((a.T + FB_TILE - 1) / FB_TILE, a.NH, B);
    mha_launch(fb_backward_dq_kernel<P, D>, grid, FB_THREADS, smem_dq)(dqkv, dout, qkv, lse, Di, lengths, a);
    LAUNCH_CHECK();
    mha_launch(fb_backward_dkdv_kernel<P, D>, grid, FB_THREADS, smem_dkv)(dqkv, dout, qkv, lse, Di, lengths, a);
    LAUNCH_CHECK();
}

void mha_cu_attention_forward_fused_bf16(float *out, float *lse, const float *qkv,
                                         const int32_t *lengths, int B, int T, int C, int NH,
                                         int causal, float p_drop, uint64_t seed) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    FusedArgs a = fused_args(B, T, C, NH, causal, p_drop, seed);
    if (!mha_cu_bf16_attention_fits(a.hs)) {   /* D = 128 on sm_86/89: the fp32 FFMA kernels */
        mha_cu_attention_forward_fused(out, lse, qkv, lengths, B, T, C, NH, causal, p_drop, seed);
        return;
    }
    const char *what = "bf16 fused attention";
    if (a.hs <= 16) fb_forward_launch<TcBf16, 16>(out, lse, qkv, lengths, B, a, what);
    else if (a.hs <= 32) fb_forward_launch<TcBf16, 32>(out, lse, qkv, lengths, B, a, what);
    else if (a.hs <= 64) fb_forward_launch<TcBf16, 64>(out, lse, qkv, lengths, B, a, what);
    else fb_forward_launch<TcBf16, 128>(out, lse, qkv, lengths, B, a, what);
}

void mha_cu_attention_backward_fused_bf16(float *dqkv, const float *dout, const float *out,
                                          const float *qkv, const float *lse,
                                          const int32_t *lengths, int B, int T, int C, int NH,
                                          int causal, float p_drop, uint64_t seed) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    FusedArgs a = fused_args(B, T, C, NH, causal, p_drop, seed);
    if (!mha_cu_bf16_attention_fits(a.hs)) {
        mha_cu_attention_backward_fused(dqkv, dout, out, qkv, lse, lengths, B, T, C, NH, causal,
                                        p_drop, seed);
        return;
    }
    const char *what = "bf16 fused attention";
    const float *Di = fused_rowdot_do_o<TcBf16::kRoundDo>(dout, out, lengths, B, a);   /* (B, NH, T) */
    if (a.hs <= 16) fb_backward_launch<TcBf16, 16>(dqkv, dout, qkv, lse, Di, lengths, B, a, what);
    else if (a.hs <= 32) fb_backward_launch<TcBf16, 32>(dqkv, dout, qkv, lse, Di, lengths, B, a, what);
    else if (a.hs <= 64) fb_backward_launch<TcBf16, 64>(dqkv, dout, qkv, lse, Di, lengths, B, a, what);
    else fb_backward_launch<TcBf16, 128>(dqkv, dout, qkv, lse, Di, lengths, B, a, what);
}

void mha_cu_attention_forward_fused_tf32x3(float *out, float *lse, const float *qkv,
                                           const int32_t *lengths, int B, int T, int C, int NH,
                                           int causal, float p_drop, uint64_t seed) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    FusedArgs a = fused_args(B, T, C, NH, causal, p_drop, seed);
    MHA_CU_REQUIRE(a.hs <= MHA_CU_TF32X3_MAX_HS, "tf32x3 fused attention: head size above 64");
    const char *what = "tf32x3 fused attention";
    if (a.hs <= 16) fb_forward_launch<TcTf32x3, 16>(out, lse, qkv, lengths, B, a, what);
    else if (a.hs <= 32) fb_forward_launch<TcTf32x3, 32>(out, lse, qkv, lengths, B, a, what);
    else fb_forward_launch<TcTf32x3, 64>(out, lse, qkv, lengths, B, a, what);
}

void mha_cu_attention_backward_fused_tf32x3(float *dqkv, const float *dout, const float *out,
                                            const float *qkv, const float *lse,
                                            const int32_t *lengths, int B, int T, int C, int NH,
                                            int causal, float p_drop, uint64_t seed) {
    if (B <= 0 || T <= 0 || C <= 0) return;
    FusedArgs a = fused_args(B, T, C, NH, causal, p_drop, seed);
    MHA_CU_REQUIRE(a.hs <= MHA_CU_TF32X3_MAX_HS, "tf32x3 fused attention: head size above 64");
    const char *what = "tf32x3 fused attention";
    const float *Di = fused_rowdot_do_o<TcTf32x3::kRoundDo>(dout, out, lengths, B, a);   /* (B, NH, T) */
    if (a.hs <= 16) fb_backward_launch<TcTf32x3, 16>(dqkv, dout, qkv, lse, Di, lengths, B, a, what);
    else if (a.hs <= 32) fb_backward_launch<TcTf32x3, 32>(dqkv, dout, qkv, lse, Di, lengths, B, a, what);
    else fb_backward_launch<TcTf32x3, 64>(dqkv, dout, qkv, lse, Di, lengths, B, a, what);
}
