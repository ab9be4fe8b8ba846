/* kernels/cuda/embed.cu: token + position embedding, forward and deterministic backward.
 *
 * Backward, dtok (V, C) += scatter of dout rows by token id, without float atomics (whose
 * order, and so whose rounding, changes from run to run):
 *   1. keys[n] = (id << 32) | n for the N = B*T positions, sorted by a bitonic sort on the
 *      device (keys are unique, so the sorted order is fixed). Positions sharing a token id
 *      become one contiguous segment, in increasing n.
 *   2. the sorted rows are summed in chunks of 32 positions, a thread per (chunk, channel);
 *      a segment inside one chunk is added into dtok[id] by that thread, the pieces of a
 *      segment that crosses chunks are added up in chunk order by a second pass. Each dtok
 *      row has a single writer per channel, so no races, and the result depends only on the
 *      inputs; a long segment (the comma: ~6% of all tokens) is spread over many threads.
 * The sort costs O(N log^2 N) compare-exchanges (N = 32k: 10 launches).
 * dpos (maxT, C) += sum over b: the column sums of dout seen as (B, T*C) (colsum.cuh), so
 * the B = 256 rows are spread over blocks rather than walked by one thread per (t, c).
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

/* ---- bitonic sort of 64-bit keys, P a power of two ----
 * Chunks of SORT_LOCAL keys are sorted in shared memory; merges across chunks take one global
 * launch per stride >= SORT_LOCAL and finish in shared memory. Launches: 1 up to P = 4096,
 * 3 at 8192, 6 at 16384, 10 at 32768 (with 2048-key chunks: 3, 6, 10, 15). */

#define SORT_LOCAL 4096   /* keys sorted in shared memory (32 KiB) by one block */
#define SORT_THREADS 1024 /* threads of that block: two compare-exchanges each per stage */

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
/* Launched with up to SORT_THREADS = 1024 threads: the bound keeps it within 64 registers per
 * thread (more would fail the launch with "too many resources requested"). */
__global__ void __launch_bounds__(SORT_THREADS) sort_local_kernel(unsigned long long *keys, int n_local,
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
    int threads = n_local / 2 < SORT_THREADS ? n_local / 2 : SORT_THREADS;
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

/* ---- dtok: sums of the sorted rows, in chunks of DTOK_CHUNK sorted positions ----
 * A segment (the positions of one token id) may be one row or a tenth of the batch ('，').
 * Each chunk is summed by its own threads, so a long segment costs no more time than a short
 * one: pass 1 sums every piece (the part of a segment inside one chunk); a piece that is a
 * whole segment goes straight into dtok, the pieces of a segment that crosses a chunk boundary
 * go to per-chunk slots, and pass 2 adds those up in chunk order, once per crossing segment.
 * Every dtok row is written by one thread per channel, in a fixed order. */
#define DTOK_CHUNK 32     /* sorted positions per chunk; one register each in pass 1 */
#define DTOK_THREADS 128  /* channels per block */
#define DTOK_AHEAD 8      /* chunks of a crossing segment read at once in pass 2 */
#define NO_ID 0xffffffffu /* the id of the padding keys (~0ull), never a token id (< 2^31) */

__device__ __forceinline__ unsigned int key_id(unsigned long long key) { return (unsigned int)(key >> 32); }
__device__ __forceinline__ unsigned int key_pos(unsigned long long key) { return (unsigned int)key; }

/* Pass 1: thread (chunk k = blockIdx.x, channel c). The chunk's piece that continues a segment
 * from chunk k-1 goes to cont[k] (C); the piece that starts a segment here and continues it
 * into chunk k+1 goes to open[k] (C); every other piece is a whole segment. */
__global__ void __launch_bounds__(DTOK_THREADS) embed_dtok_chunks(
    float *__restrict__ dtok, float *__restrict__ open, float *__restrict__ cont,
    const float *__restrict__ dout, const unsigned long long *__restrict__ keys, int N, int C) {
    __shared__ unsigned long long sk[DTOK_CHUNK];
    const int e0 = blockIdx.x * DTOK_CHUNK;
    const int n = min(DTOK_CHUNK, N - e0);
    for (int i = threadIdx.x; i < n; i += blockDim.x) sk[i] = keys[e0 + i];
    __syncthreads();
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    const unsigned int id_before = e0 > 0 ? key_id(keys[e0 - 1]) : NO_ID;
    const unsigned int id_after = e0 + n < N ? key_id(keys[e0 + n]) : NO_ID;
    /* every row of the chunk loaded before any is summed: 32 loads in flight, not one */
    float row[DTOK_CHUNK];
#pragma unroll
    for (int i = 0; i < DTOK_CHUNK; i++)
        row[i] = i < n ? dout[(size_t)key_pos(sk[i]) * C + c] : 0.0f;
    const size_t slot = (size_t)blockIdx.x * C + c;
    unsigned int id = key_id(sk[0]);
    int first = 0;   /* the current piece is [first, i) */
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i <= DTOK_CHUNK; i++) {
        const bool end = i >= n || key_id(sk[i]) != id;
        if (i <= n && end) {
            if (first == 0 && id == id_before) cont[slot] = acc;
            else if (i == n && id == id_after) open[slot] = acc;
            else dtok[(size_t)id * C + c] += acc;
            if (i < n) {
                id = key_id(sk[i]);
                first = i;
                acc = 0.0f;
            }
        }
        if (i < n) acc += row[i];
    }
}

/* Pass 2: thread (chunk k = blockIdx.x, channel c), working only where a segment starts in
 * chunk k and continues into k+1: open[k] + cont[k+1] + cont[k+2] + ..., in that order. */
__global__ void __launch_bounds__(DTOK_THREADS) embed_dtok_crossing(
    float *__restrict__ dtok, const float *__restrict__ open, const float *__restrict__ cont,
    const unsigned long long *__restrict__ keys, int N, int C) {
    const int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int k = blockIdx.x;
    const int e0 = k * DTOK_CHUNK, e_end = min(e0 + DTOK_CHUNK, N);
    const unsigned int id = key_id(keys[e_end - 1]);
    if (e_end >= N || key_id(keys[e_end]) != id) return;   /* ends in this chunk */
    if (e0 > 0 && key_id(keys[e0 - 1]) == id) return;      /* began in an earlier chunk */
    const int chunks = (N + DTOK_CHUNK - 1) / DTOK_CHUNK;
    float sum = open[(size_t)k * C + c];
    /* cont[k+1] + cont[k+2] + ... in order, up to the chunk where the segment ends; DTOK_AHEAD
     * chunks at a time, so that their loads are in flight together (a frequent token spans
     * ~70 chunks at N = 32k, one dependent load each if walked one by one) */
    for (int k1 = k + 1;; k1 += DTOK_AHEAD) {
        bool more[DTOK_AHEAD];   /* the segment continues past chunk k1 + u */
        float part[DTOK_AHEAD];
#pragma unroll
        for (int u = 0; u < DTOK_AHEAD; u++) {
            const int next = (k1 + u + 1) * DTOK_CHUNK;
            more[u] = next < N && key_id(keys[next]) == id;
            part[u] = k1 + u < chunks ? cont[(size_t)(k1 + u) * C + c] : 0.0f;
        }
        int u = 0;
        for (; u < DTOK_AHEAD; u++) {
            sum += part[u];
            if (!more[u]) break;
        }
        if (u < DTOK_AHEAD) break;
    }
    dtok[(size_t)id * C + c] += sum;
}

void mha_cu_embed_backward(float *dtok, float *dpos, const float *dout, const int32_t *ids,
                           int B, int T, int C) {
    const int N = B * T;
    if (N <= 0 || C <= 0) return;
    if (dpos) mha_cu_column_sums(dpos, dout, B, T * C, T * C);   /* dout as (B, T*C): sums over b */
    if (!dtok) return;
    MHA_CU_REQUIRE(N <= (1 << 30), "embedding backward: more than 2^30 positions");
    int P = 2;
    while (P < N) P <<= 1;
    unsigned long long *keys =
        (unsigned long long *)mha_cu_scratch(MHA_SCRATCH_A, (size_t)P * sizeof(unsigned long long));
    mha_launch(sort_init_kernel, mha_cu_blocks((size_t)P, 256), 256)(keys, ids, N, P);
    LAUNCH_CHECK();
    sort_keys(keys, P);
#ifdef MHA_CUDA_EMU
    /* the emulation runs blocks one after another, so two writers of one dtok row would still
     * add up right: check the order itself (device memory is host memory there) */
    for (int i = 1; i < N; i++)   /* the N real keys are distinct and come first */
        if (keys[i - 1] >= keys[i]) {
            fprintf(stderr, "embed.cu: keys not sorted at %d of %d\n", i, N);
            abort();
        }
#endif
    const int chunks = (N + DTOK_CHUNK - 1) / DTOK_CHUNK;
    float *open = (float *)mha_cu_scratch(MHA_SCRATCH_B, 2 * (size_t)chunks * C * sizeof(float));
    float *cont = open + (size_t)chunks * C;   /* open, cont: (chunks, C) each */
    const int threads = C < DTOK_THREADS ? (C + 31) / 32 * 32 : DTOK_THREADS;
    const dim3 grid((unsigned int)chunks, (unsigned int)((C + threads - 1) / threads));
    mha_launch(embed_dtok_chunks, grid, threads)(dtok, open, cont, dout, keys, N, C);
    LAUNCH_CHECK();
    mha_launch(embed_dtok_crossing, grid, threads)(dtok, open, cont, keys, N, C);
    LAUNCH_CHECK();
}
