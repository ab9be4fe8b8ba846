/* kernels/cpu/linear_int8.c: the linear layer's forward pass with int8 products (gemm_int8.h:
 * inputs quantized per row, weights per output channel, int32 accumulation), for inference:
 * mha_cpu_backend_int8 (mha-predict --precision int8). There is no int8 backward: that
 * table's linear_backward is the bf16/fp32 one, and nothing trains through it.
 *
 * Threading as in linear_bf16.c: the weights are quantized and packed once per call, one
 * panel per OpenMP task (or taken from the calling thread's cache of packed weights, below);
 * then the threads take row blocks of the input dynamically, each quantizing its own rows into
 * its own scratch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <omp.h>
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/cpu/layers_int8.h"

/* Buffers of the calling thread (cpu_common.h's MhaBuffer), per thread so that concurrent
 * callers (prediction workers) never share one. */
static _Thread_local MhaBuffer tl_packed;    /* the packed weights of an uncached product */
static _Thread_local MhaBuffer tl_scratch;   /* a worker's quantized rows */

/* The calling thread's packed weights, kept across calls: prediction multiplies the same few
 * weight matrices batch after batch, and quantizing and packing them at every call cost 6-8%
 * of an int8 mha-predict run with its cache-sized batches. An entry is used only while the
 * weights are the very bytes it was packed from: it keeps a copy and compares it at each call
 * (exact, whoever changed the weights and however; the comparison reads the weights once
 * more, the packing did more work than that). Entries are keyed by the weights' address and
 * shape, replaced in turn when all are taken; products whose entry would pass
 * PACKED_CACHE_MAX_BYTES are not cached. */
enum { PACKED_CACHE_ENTRIES = 32 };
#define PACKED_CACHE_MAX_BYTES ((size_t)64 << 20)
typedef struct {
    const float *w;   /* the key: the caller's weights (OC, IC), contiguous */
    int OC, IC;
    float *copy;      /* (OC, IC): the bytes they held when packed */
    void *packed;     /* mha_i8_packed_w_bytes(OC, IC) bytes, 64-byte aligned */
} PackedEntry;
static _Thread_local PackedEntry tl_cache[PACKED_CACHE_ENTRIES];
static _Thread_local int tl_cache_next;   /* the entry replaced next */

/* Packs w (OC, IC) into dst, one panel per OpenMP task when par. */
static void pack_weights(void *dst, const float *w, int OC, int IC, int par) {
    const int np = mha_i8_panels(OC);
#pragma omp parallel for schedule(dynamic, 1) if (par && np > 1)
    for (int p = 0; p < np; p++) mha_i8_pack_w(dst, w, IC, OC, IC, p, p + 1);
}

/* w (OC, IC) quantized and packed: from the calling thread's cache when it holds these bytes,
 * else packed now (and kept when it fits). */
static const void *packed_weights(const float *w, int OC, int IC, int par) {
    const size_t wbytes = (size_t)OC * IC * sizeof(float), pbytes = mha_i8_packed_w_bytes(OC, IC);
    PackedEntry *e = NULL;
    for (int i = 0; i < PACKED_CACHE_ENTRIES && !e; i++)
        if (tl_cache[i].w == w && tl_cache[i].OC == OC && tl_cache[i].IC == IC) e = &tl_cache[i];
    if (e && memcmp(e->copy, w, wbytes) == 0) return e->packed;
    if (!e && wbytes + pbytes <= PACKED_CACHE_MAX_BYTES) {
        e = &tl_cache[tl_cache_next];
        tl_cache_next = (tl_cache_next + 1) % PACKED_CACHE_ENTRIES;
        free(e->copy);
        free(e->packed);
        e->w = w, e->OC = OC, e->IC = IC;
        e->copy = malloc(wbytes);
        e->packed = mha_cpu_aligned_alloc((pbytes + 63) & ~(size_t)63);
        if (!e->copy || !e->packed) {   /* no room to keep it: pack without caching */
            free(e->copy);
            free(e->packed);
            memset(e, 0, sizeof *e);
            e = NULL;
        }
    }
    if (!e) {
        void *wp = mha_buffer_get(&tl_packed, pbytes, "an int8 workspace");
        pack_weights(wp, w, OC, IC, par);
        return wp;
    }
    pack_weights(e->packed, w, OC, IC, par);
    memcpy(e->copy, w, wbytes);
    return e->packed;
}

void mha_linear_forward_post_int8(float *out, float *pre, const float *inp, const float *w,
                                  const float *bias, int N, int IC, int OC, int act, float p_drop,
                                  uint64_t seed, const float *residual) {
    /* y = inp (N, IC) @ w (OC, IC)^T + bias (OC), kept in pre (N, OC) when asked;
     * out (N, OC) = dropout(act(y)) + residual (N, OC) */
    if (N <= 0 || OC <= 0 || IC <= 0 || IC > MHA_I8_MAX_K) {
        /* the empty cases, and depths whose int32 sums could overflow */
        mha_linear_forward_post_f32(out, pre, inp, w, bias, N, IC, OC, act, p_drop, seed, residual);
        return;
    }
    const int par = (size_t)N * IC * OC >= MHA_GEMM_PAR_MIN;
    const int nt = par ? omp_get_max_threads() : 1;
    const void *wp = packed_weights(w, OC, IC, par);
    const int nb = par ? mha_gemm_row_blocks(N, nt, MHA_I8_MR) : 1;
#pragma omp parallel for schedule(dynamic, 1) if (par)
    for (int blk = 0; blk < nb; blk++) {
        int n0, n1;
        mha_split_rows(N, blk, nb, MHA_I8_MR, &n0, &n1);
        if (n1 <= n0) continue;
        void *scratch = mha_buffer_get(&tl_scratch, mha_i8_scratch_bytes(n1 - n0, IC), "an int8 workspace");
        mha_i8_gemm(n1 - n0, OC, IC, inp + (size_t)n0 * IC, IC, wp, bias, out + (size_t)n0 * OC, OC, scratch);
        /* the block is still in cache */
        size_t first = (size_t)n0 * OC;
        mha_linear_post_f32(out + first, pre ? pre + first : NULL, residual ? residual + first : NULL,
                            (size_t)(n1 - n0) * OC, act, p_drop, seed, first);
    }
}

void mha_linear_forward_int8(float *out, const float *inp, const float *w, const float *bias,
                             int N, int IC, int OC) {
    mha_linear_forward_post_int8(out, NULL, inp, w, bias, N, IC, OC, -1, 0.0f, 0, NULL);
}
