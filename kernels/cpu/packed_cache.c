/* kernels/cpu/packed_cache.c: caches of packed weights (see packed_cache.h for what they
 * serve).
 *
 * Promised weights (mha_weights_fixed: mha-predict's parameters) are packed once for the whole
 * process: one store, shared by every thread (each prediction worker would otherwise hold its
 * own packing of the whole model), filled under a lock on first use and emptied when a new
 * promise is made or the promise ends, which happens while no product runs. An entry there is
 * used without looking at the weights again (trusted; 4% of an int8 mha-predict run was the
 * comparison below).
 *
 * Other weights: compared entries (compare = 1, int8) sit in a cache of the calling thread and
 * are used only while the weights are the very bytes they were packed from: an entry keeps a
 * copy, compared at each call (exact, whoever changed the weights and however; the comparison
 * reads the weights once more, the packing did more work than that), and packs from that copy,
 * so that a write racing with the call cannot leave a packing that differs from the saved
 * bytes. Without compare (fp32, bf16: weights in training) nothing is kept.
 *
 * Entries are keyed by the weights' address, shape and packing. In a thread's cache a new
 * matrix takes an empty entry, or one not used in the last PACKED_CACHE_IDLE calls; else it is
 * packed without being kept: a model with more matrices than entries, used in turn, keeps hits
 * on the entries it has instead of replacing each before its next use. Each thread holds at
 * most PACKED_CACHE_MAX_BYTES (copies and packings), freed when the thread exits; the shared
 * store holds at most that much too (beyond it, a matrix is packed at every call). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/packed_cache.h"

enum { PACKED_CACHE_ENTRIES = 32, PACKED_CACHE_IDLE = 2 * PACKED_CACHE_ENTRIES };
#define PACKED_CACHE_MAX_BYTES ((size_t)256 << 20)
typedef struct {
    const float *w;   /* the key: the caller's weights (OC, IC), contiguous ... */
    int OC, IC;
    MhaPackWeights pack;   /* ... and the packing */
    MhaBuffer copy;     /* (OC, IC): the bytes they held when packed (a thread's entries only) */
    MhaBuffer packed;   /* the packing */
    size_t bytes;       /* of copy and packed */
    unsigned long last_use;
} PackedEntry;
typedef struct {
    PackedEntry e[PACKED_CACHE_ENTRIES];
    size_t bytes;           /* held by all entries */
    unsigned long calls;    /* products asked of this cache */
    MhaBuffer uncached;     /* the packed weights of a product not kept (a thread's cache only) */
} PackedCache;
static _Thread_local PackedCache tl_cache;
static _Thread_local MhaThreadExit tl_cache_at_exit;   /* frees tl_cache when the thread exits */
static PackedCache fixed_store;   /* the promised weights' packings, shared; under fixed_lock */
static pthread_mutex_t fixed_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic unsigned long cache_hits;   /* mha_packed_cache_hits */

/* The promised range [fixed_lo, fixed_hi); set while no product runs, read by every thread. */
static _Atomic(const char *) fixed_lo, fixed_hi;

static void cache_free(void *cache);

void mha_weights_fixed(const void *p, size_t bytes) {
    pthread_mutex_lock(&fixed_lock);
    cache_free(&fixed_store);   /* packed under the promise before: no product runs now */
    fixed_lo = p;
    fixed_hi = p ? (const char *)p + bytes : NULL;
    pthread_mutex_unlock(&fixed_lock);
}

/* 1 when w (bytes) lies in the promised range. */
static int promised(const float *w, size_t bytes) {
    const char *lo = fixed_lo, *hi = fixed_hi, *a = (const char *)w;
    return lo && a >= lo && a + bytes <= hi;
}

static void entry_free(PackedCache *c, PackedEntry *e) {
    mha_buffer_free(&e->copy);
    mha_buffer_free(&e->packed);
    c->bytes -= e->bytes;
    memset(e, 0, sizeof *e);
}

/* Frees a cache's entries and its buffer (also a thread's cache when the thread exits). */
static void cache_free(void *cache) {
    PackedCache *c = cache;
    for (int i = 0; i < PACKED_CACHE_ENTRIES; i++) entry_free(c, &c->e[i]);
    mha_buffer_free(&c->uncached);
}

unsigned long mha_packed_cache_hits(void) { return cache_hits; }
void mha_packed_cache_clear(void) { cache_free(&tl_cache); }

/* An entry of c for (w, OC, IC, pack), or NULL. */
static PackedEntry *entry_find(PackedCache *c, const float *w, int OC, int IC, MhaPackWeights pack) {
    for (int i = 0; i < PACKED_CACHE_ENTRIES; i++)
        if (c->e[i].w == w && c->e[i].OC == OC && c->e[i].IC == IC && c->e[i].pack == pack) return &c->e[i];
    return NULL;
}

/* e (from entry_for_new) takes the key and memory for copy_bytes + pbytes; NULL (e emptied)
 * when there is no memory for it. */
static PackedEntry *entry_take(PackedCache *c, PackedEntry *e, const float *w, int OC, int IC,
                               MhaPackWeights pack, size_t copy_bytes, size_t pbytes) {
    if ((copy_bytes && !mha_buffer_try_get(&e->copy, copy_bytes)) || !mha_buffer_try_get(&e->packed, pbytes)) {
        mha_buffer_free(&e->copy);
        mha_buffer_free(&e->packed);
        memset(e, 0, sizeof *e);
        return NULL;
    }
    e->w = w, e->OC = OC, e->IC = IC, e->pack = pack;
    e->bytes = copy_bytes + pbytes, e->last_use = c->calls;
    c->bytes += e->bytes;
    return e;
}

/* The shared packing of promised weights: found, or made now (under the lock, so each matrix
 * is packed once); NULL when the store is full. */
static const void *fixed_packed(const float *w, int OC, int IC, size_t pbytes, MhaPackWeights pack, int par) {
    pthread_mutex_lock(&fixed_lock);
    PackedCache *c = &fixed_store;
    c->calls++;
    PackedEntry *e = entry_find(c, w, OC, IC, pack);
    const void *packed = NULL;
    if (e) {
        cache_hits++;
        packed = e->packed.p;
    } else {
        for (int i = 0; i < PACKED_CACHE_ENTRIES && !e; i++)
            if (!c->e[i].w) e = &c->e[i];
        if (e && c->bytes + pbytes <= PACKED_CACHE_MAX_BYTES &&
            (e = entry_take(c, e, w, OC, IC, pack, 0, pbytes)) != NULL) {
            pack(e->packed.p, w, OC, IC, par);
            packed = e->packed.p;
        }
    }
    pthread_mutex_unlock(&fixed_lock);
    return packed;
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

const void *mha_packed_weights(const float *w, int OC, int IC, size_t pbytes, MhaPackWeights pack, int par,
                               int compare) {
    const size_t wbytes = (size_t)OC * IC * sizeof(float);
    if (promised(w, wbytes)) {
        const void *packed = fixed_packed(w, OC, IC, pbytes, pack, par);
        if (packed) return packed;
    }
    PackedCache *c = &tl_cache;
    mha_at_thread_exit(&tl_cache_at_exit, cache_free, c);
    PackedEntry *e = NULL;
    if (compare) {
        c->calls++;
        e = entry_find(c, w, OC, IC, pack);
        if (e) {
            e->last_use = c->calls;
            if (memcmp(e->copy.p, w, wbytes) == 0) {
                cache_hits++;
                return e->packed.p;
            }
        } else if ((e = entry_for_new(c, wbytes + pbytes)) != NULL) {
            e = entry_take(c, e, w, OC, IC, pack, wbytes, pbytes);   /* NULL: no room, not kept */
        }
    }
    if (!e) {
        void *wp = mha_buffer_get(&c->uncached, pbytes, "the packed weights of a linear layer");
        pack(wp, w, OC, IC, par);
        return wp;
    }
    memcpy(e->copy.p, w, wbytes);   /* then packed from the copy: the two always agree */
    pack(e->packed.p, e->copy.p, OC, IC, par);
    return e->packed.p;
}
