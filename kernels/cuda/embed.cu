/* kernels/cuda/embed.cu: token + position embedding, forward and deterministic backward.
 *
 * Backward, dtok (V, C) += scatter of dout rows by token id, without float atomics (whose
 * order, and so whose rounding, changes from run to run):
 *   1. keys[n] = (id << 32) | n for the N = B*T positions, sorted by a bitonic sort on the
 *      device (keys are unique, so the sorted order is fixed). Positions sharing a token id
 *      become one contiguous segment, in increasing n.
 *   2. one block per segment start sums its rows with 8 row-lanes x 32 channels, combines the
 *      lanes in a fixed order, and adds the sum once into dtok[id]. Each dtok row has a single
 *      writer, so no races, and the result depends only on the inputs.
 * The sort costs O(N log^2 N) compare-exchanges (N = 32k: about 15 launches, well under a
 * millisecond); blocks at non-start positions return at once.
 * dpos (maxT, C) += sum over b: one thread per (t, c), summing b in order.
 */
#include "kernels/cuda/cuda_common.h"

__global__ void embed_forward_kernel(float *out, const int32_t *ids, const float *tok,
                                     const float *pos, int T, int C, size_t total) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t n = i / C;
        int c = (int)(i - n * C);
        int t = (int)(n % T);
        float v = tok[(size_t)ids[n] * C + c];
        if (pos) v += pos[(size_t)t * C + c];
        out[i] = v;
    }
}

void mha_cu_embed_forward(float *out, const int32_t *ids, const float *tok, const float *pos,
                          int B, int T, int C) {
    size_t total = (size_t)B * T * C;
    if (!total) return;
    mha_launch(embed_forward_kernel, mha_cu_blocks(total, 256), 256)(out, ids, tok, pos, T, C, total);
    LAUNCH_CHECK();
}

__global__ void embed_dpos_kernel(float *dpos, const float *dout, int B, int T, int C) {
    size_t total = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int b = 0; b < B; b++) s += dout[(size_t)b * total + i];
        dpos[i] += s;
    }
}

/* ---- bitonic sort of 64-bit keys, P a power of two ---- */

#define SORT_LOCAL 2048   /* keys sorted in shared memory by one block of SORT_LOCAL/2 threads */

__global__ void sort_init_kernel(unsigned long long *keys, const int32_t *ids, int N, int P) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < P; i += gridDim.x * blockDim.x)
        keys[i] = i < N ? (((unsigned long long)(uint32_t)ids[i]) << 32) | (unsigned int)i
                        : ~0ull;
}

__device__ __forceinline__ void cmp_swap(unsigned long long &a, unsigned long long &b, bool asc) {
    if ((a > b) == asc) {
        unsigned long long t = a;
        a = b;
        b = t;
    }
}

/* kmax == 0: sort each chunk of n_local keys completely (all k up to n_local). Otherwise
 * finish the merge of size kmax for the strides j < n_local. */
/* Launched with SORT_LOCAL / 2 = 1024 threads: the bound keeps it within 64 registers per
 * thread (more would fail the launch with "too many resources requested"). */
__global__ void __launch_bounds__(SORT_LOCAL / 2) sort_local_kernel(unsigned long long *keys, int n_local,
                                                                 int kmax) {
    __shared__ unsigned long long s[SORT_LOCAL];
    const int base = blockIdx.x * n_local;
    for (int i = threadIdx.x; i < n_local; i += blockDim.x) s[i] = keys[base + i];
    __syncthreads();
    const int half = n_local / 2;
    int k_first = kmax ? kmax : 2, k_last = kmax ? kmax : n_local;
    for (int k = k_first; k <= k_last; k <<= 1) {
        for (int j = (kmax ? n_local : k) / 2; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < half; t += blockDim.x) {
                int i = (t / j) * 2 * j + (t % j);
                bool asc = ((base + i) & k) == 0;
                cmp_swap(s[i], s[i + j], asc);
            }
            __syncthreads();
        }
    }
    for (int i = threadIdx.x; i < n_local; i += blockDim.x) keys[base + i] = s[i];
}

__global__ void sort_global_step(unsigned long long *keys, int P, int k, int j) {
    int half = P / 2;
    for (int t = blockIdx.x * blockDim.x + threadIdx.x; t < half; t += gridDim.x * blockDim.x) {
        int i = (t / j) * 2 * j + (t % j);
        bool asc = (i & k) == 0;
        unsigned long long a = keys[i], b = keys[i + j];
        if ((a > b) == asc) {
            keys[i] = b;
            keys[i + j] = a;
        }
    }
}

static void sort_keys(unsigned long long *keys, int P) {
    int n_local = P < SORT_LOCAL ? P : SORT_LOCAL;
    int blocks = P / n_local;
    int threads = n_local / 2;
    mha_launch(sort_local_kernel, blocks, threads)(keys, n_local, 0);
    LAUNCH_CHECK();
    for (int k = 2 * n_local; k <= P; k <<= 1) {
        for (int j = k / 2; j >= n_local; j >>= 1) {
            mha_launch(sort_global_step, mha_cu_blocks((size_t)P / 2, 256), 256)(keys, P, k, j);
            LAUNCH_CHECK();
        }
        mha_launch(sort_local_kernel, blocks, threads)(keys, n_local, k);
        LAUNCH_CHECK();
    }
}

/* One block per sorted position; only segment starts work. */
__global__ void __launch_bounds__(256) embed_dtok_segments(float *dtok, const float *dout,
                                                          const unsigned long long *keys,
                                                          int N, int C) {
    __shared__ float red[8][33];
    const int s = blockIdx.x;
    const unsigned int id = (unsigned int)(keys[s] >> 32);
    if (s > 0 && (unsigned int)(keys[s - 1] >> 32) == id) return;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (int c0 = 0; c0 < C; c0 += 32) {
        const int c = c0 + tx;
        float acc = 0.0f;
        for (int e = s + ty; e < N; e += 8) {
            unsigned long long k2 = keys[e];
            if ((unsigned int)(k2 >> 32) != id) break;
            if (c < C) acc += dout[(size_t)(unsigned int)k2 * C + c];
        }
        red[ty][tx] = acc;
        __syncthreads();
        if (ty == 0 && c < C) {
            float sum = 0.0f;
            for (int r = 0; r < 8; r++) sum += red[r][tx];
            dtok[(size_t)id * C + c] += sum;
        }
        __syncthreads();
    }
}

void mha_cu_embed_backward(float *dtok, float *dpos, const float *dout, const int32_t *ids,
                           int B, int T, int C) {
    const int N = B * T;
    if (N <= 0 || C <= 0) return;
    if (dpos) {
        mha_launch(embed_dpos_kernel, mha_cu_blocks((size_t)T * C, 256), 256)(dpos, dout, B, T, C);
        LAUNCH_CHECK();
    }
    if (!dtok) return;
    MHA_CU_REQUIRE(N <= (1 << 30), "embedding backward: more than 2^30 positions");
    int P = 2;
    while (P < N) P <<= 1;
    unsigned long long *keys =
        (unsigned long long *)mha_cu_scratch(MHA_SCRATCH_A, (size_t)P * sizeof(unsigned long long));
    mha_launch(sort_init_kernel, mha_cu_blocks((size_t)P, 256), 256)(keys, ids, N, P);
    LAUNCH_CHECK();
    sort_keys(keys, P);
    mha_launch(embed_dtok_segments, N, dim3(32, 8))(dtok, dout, keys, N, C);
    LAUNCH_CHECK();
}
