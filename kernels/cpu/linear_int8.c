/* kernels/cpu/linear_int8.c: the linear layer's forward pass with int8 products (gemm_int8.h:
 * inputs quantized per row, weights per output channel, int32 accumulation), for inference:
 * mha_cpu_backend_int8 (mha-predict --precision int8). There is no int8 backward: that
 * table's linear_backward is the bf16/fp32 one, and nothing trains through it.
 *
 * Threading as in linear_bf16.c: the weights are quantized and packed once per call, one
 * panel per OpenMP task (or taken from the calling thread's cache of packed weights, below);
 * then the threads take row blocks of the input dynamically, each quantizing its own rows into
 * its own scratch. */
#include <pthread.h>
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
 * weights are the very bytes it was packed from: it keeps a copy, compared at each call (exact,
 * whoever changed the weights and however; the comparison reads the weights once more, the
 * packing did more work than that), and packs from that copy, so that a write racing with
 * the call cannot leave a packing that differs from the saved bytes.
 *
 * While the weights lie in a range the caller promised not to change (mha_i8_weights_fixed,
 * Backend.weights_fixed: mha-predict's parameters), an entry checked or packed under that
 * promise is used without the comparison (4% of an int8 mha-predict run with it).
 *
 * Entries are keyed by the weights' address and shape. A new matrix takes an empty entry, or
 * one not used in the last PACKED_CACHE_IDLE calls; else it is packed without being kept: a
 * model with more matrices than entries, used in turn, keeps hits on the entries it has instead
 * of replacing each before its next use. Each thread holds at most PACKED_CACHE_MAX_BYTES
 * (copies and packings; every prediction worker has its own), freed when the thread exits. */
enum { PACKED_CACHE_ENTRIES = 32, PACKED_CACHE_IDLE = 2 * PACKED_CACHE_ENTRIES };
#define PACKED_CACHE_MAX_BYTES ((size_t)256 << 20)
typedef struct {
    const float *w;   /* the key: the caller's weights (OC, IC), contiguous */
    int OC, IC;
    float *copy;      /* (OC, IC): the bytes they held when packed */
    void *packed;     /* mha_i8_packed_w_bytes(OC, IC) bytes, 64-byte aligned */
    size_t bytes;     /* of copy and packed */
    unsigned long last_use;
    unsigned long fixed_gen;   /* copy == w known under promise number fixed_gen (0: none) */
} PackedEntry;
typedef struct {
    PackedEntry e[PACKED_CACHE_ENTRIES];
    size_t bytes;           /* held by all entries */
    unsigned long calls;    /* products asked of this cache */
} PackedCache;
static _Thread_local PackedCache tl_cache;
static _Atomic unsigned long cache_hits;   /* mha_i8_packed_cache_hits */

/* The promised range [fixed_lo, fixed_hi), and the promise's number (each call starts a new
 * one); set while no product runs, read by every thread. */
static _Atomic(const char *) fixed_lo, fixed_hi;
static _Atomic unsigned long fixed_gen;

void mha_i8_weights_fixed(const void *p, size_t bytes) {
    fixed_lo = p;
    fixed_hi = p ? (const char *)p + bytes : NULL;
    fixed_gen++;
}

/* The promise w (bytes) lies under, or 0 when none covers it. */
static unsigned long fixed_promise(const float *w, size_t bytes) {
    const char *lo = fixed_lo, *hi = fixed_hi, *a = (const char *)w;
    return lo && a >= lo && a + bytes <= hi ? fixed_gen : 0;
}

static pthread_key_t cache_key;   /* its destructor frees a thread's entries when it exits */
static pthread_once_t cache_key_once = PTHREAD_ONCE_INIT;

static void entry_free(PackedCache *c, PackedEntry *e) {
    free(e->copy);
    free(e->packed);
    c->bytes -= e->bytes;
    memset(e, 0, sizeof *e);
}

static void cache_free(void *cache) {
    PackedCache *c = cache;
    for (int i = 0; i < PACKED_CACHE_ENTRIES; i++) entry_free(c, &c->e[i]);
}

static void cache_key_create(void) {
    if (pthread_key_create(&cache_key, cache_free) != 0) cache_key = (pthread_key_t)-1;
}

unsigned long mha_i8_packed_cache_hits(void) { return cache_hits; }
void mha_i8_packed_cache_clear(void) { cache_free(&tl_cache); }

/* Packs w (OC, IC) into dst, one panel per OpenMP task when par. */
static void pack_weights(void *dst, const float *w, int OC, int IC, int par) {
    const int np = mha_i8_panels(OC);
#pragma omp parallel for schedule(dynamic, 1) if (par && np > 1)
    for (int p = 0; p < np; p++) mha_i8_pack_w(dst, w, IC, OC, IC, p, p + 1);
}

/* An entry for a new matrix of `bytes`, or NULL: empty ones first, else the longest idle one
 * if idle long enough, within the thread's byte budget. */
static PackedEntry *entry_for_new(PackedCache *c, size_t bytes) {
    PackedEntry *pick = NULL;
    for (int i = 0; i < PACKED_CACHE_ENTRIES; i++) {
        PackedEntry *e = &c->e[i];
        if (!e->w) { pick = e; break; }
        if (c->calls - e->last_use > PACKED_CACHE_IDLE && (!pick || e->last_use < pick->last_use)) pick = e;
    }
    if (!pick || c->bytes - pick->bytes + bytes > PACKED_CACHE_MAX_BYTES) return NULL;
    entry_free(c, pick);
    return pick;
}

/* w (OC, IC) quantized and packed: from the calling thread's cache when it holds these bytes,
 * else packed now (and kept when an entry is free). */
static const void *packed_weights(const float *w, int OC, int IC, int par) {
    PackedCache *c = &tl_cache;
    const size_t wbytes = (size_t)OC * IC * sizeof(float), pbytes = mha_i8_packed_w_bytes(OC, IC);
    c->calls++;
    const unsigned long promise = fixed_promise(w, wbytes);
    PackedEntry *e = NULL;
    for (int i = 0; i < PACKED_CACHE_ENTRIES && !e; i++)
        if (c->e[i].w == w && c->e[i].OC == OC && c->e[i].IC == IC) e = &c->e[i];
    if (e) {
        e->last_use = c->calls;
        if ((promise && e->fixed_gen == promise) || memcmp(e->copy, w, wbytes) == 0) {
            e->fixed_gen = promise;
            cache_hits++;
            return e->packed;
        }
    } else if ((e = entry_for_new(c, wbytes + pbytes)) != NULL) {
        e->copy = malloc(wbytes);
        e->packed = mha_cpu_aligned_alloc((pbytes + 63) & ~(size_t)63);
        if (!e->copy || !e->packed) {   /* no room to keep it: pack without caching */
            free(e->copy);
            free(e->packed);
            memset(e, 0, sizeof *e);
            e = NULL;
        } else {
            e->w = w, e->OC = OC, e->IC = IC, e->bytes = wbytes + pbytes, e->last_use = c->calls;
            c->bytes += e->bytes;
            pthread_once(&cache_key_once, cache_key_create);
            if (cache_key != (pthread_key_t)-1) pthread_setspecific(cache_key, c);
        }
    }
    if (!e) {
        void *wp = mha_buffer_get(&tl_packed, pbytes, "an int8 workspace");
        pack_weights(wp, w, OC, IC, par);
        return wp;
    }
    memcpy(e->copy, w, wbytes);   /* then packed from the copy: the two always agree */
    e->fixed_gen = promise;
    pack_weights(e->packed, e->copy, OC, IC, par);
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
