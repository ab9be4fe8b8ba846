/* kernels/cpu/packed_cache.c: the calling thread's cache of packed weights (see
 * packed_cache.h for what it serves and its two kinds of entries).
 *
 * Compared entries (compare = 1, int8) are used only while the weights are the very bytes
 * they were packed from: an entry keeps a copy, compared at each call (exact, whoever changed
 * the weights and however; the comparison reads the weights once more, the packing did more
 * work than that), and packs from that copy, so that a write racing with the call cannot
 * leave a packing that differs from the saved bytes.
 *
 * While the weights lie in a range the caller promised not to change (mha_weights_fixed,
 * Backend.weights_fixed: mha-predict's parameters), an entry checked or packed under that
 * promise is used without the comparison (4% of an int8 mha-predict run with it). Promised
 * entries (compare = 0, fp32) exist only under a promise and keep no copy.
 *
 * Entries are keyed by the weights' address, shape and packing. A new matrix takes an empty
 * entry, or one not used in the last PACKED_CACHE_IDLE calls; else it is packed without being
 * kept: a model with more matrices than entries, used in turn, keeps hits on the entries it
 * has instead of replacing each before its next use. Each thread holds at most
 * PACKED_CACHE_MAX_BYTES (copies and packings; every prediction worker has its own), freed
 * when the thread exits. */
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
    float *copy;      /* (OC, IC): the bytes they held when packed (compared entries only) */
    void *packed;     /* the packing, 64-byte aligned */
    size_t bytes;     /* of copy and packed */
    unsigned long last_use;
    unsigned long fixed_gen;   /* copy == w known (or packed) under promise number fixed_gen (0: none) */
} PackedEntry;
typedef struct {
    PackedEntry e[PACKED_CACHE_ENTRIES];
    size_t bytes;           /* held by all entries */
    unsigned long calls;    /* products asked of this cache */
} PackedCache;
static _Thread_local PackedCache tl_cache;
static _Thread_local MhaBuffer tl_packed;   /* the packed weights of an uncached product */
static _Atomic unsigned long cache_hits;   /* mha_packed_cache_hits */

/* The promised range [fixed_lo, fixed_hi), and the promise's number (each call starts a new
 * one); set while no product runs, read by every thread. */
static _Atomic(const char *) fixed_lo, fixed_hi;
static _Atomic unsigned long fixed_gen;

void mha_weights_fixed(const void *p, size_t bytes) {
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

unsigned long mha_packed_cache_hits(void) { return cache_hits; }
void mha_packed_cache_clear(void) { cache_free(&tl_cache); }

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
    PackedCache *c = &tl_cache;
    const size_t wbytes = (size_t)OC * IC * sizeof(float), cbytes = compare ? wbytes : 0;
    const unsigned long promise = fixed_promise(w, wbytes);
    PackedEntry *e = NULL;
    if (compare || promise) {
        c->calls++;
        for (int i = 0; i < PACKED_CACHE_ENTRIES && !e; i++)
            if (c->e[i].w == w && c->e[i].OC == OC && c->e[i].IC == IC && c->e[i].pack == pack) e = &c->e[i];
        if (e) {
            e->last_use = c->calls;
            if ((promise && e->fixed_gen == promise) || (compare && memcmp(e->copy, w, wbytes) == 0)) {
                e->fixed_gen = promise;
                cache_hits++;
                return e->packed;
            }
        } else if ((e = entry_for_new(c, cbytes + pbytes)) != NULL) {
            e->copy = compare ? malloc(wbytes) : NULL;
            e->packed = mha_cpu_aligned_alloc((pbytes + 63) & ~(size_t)63);
            if ((compare && !e->copy) || !e->packed) {   /* no room to keep it: pack without caching */
                free(e->copy);
                free(e->packed);
                memset(e, 0, sizeof *e);
                e = NULL;
            } else {
                e->w = w, e->OC = OC, e->IC = IC, e->pack = pack;
                e->bytes = cbytes + pbytes, e->last_use = c->calls;
                c->bytes += e->bytes;
                pthread_once(&cache_key_once, cache_key_create);
                if (cache_key != (pthread_key_t)-1) pthread_setspecific(cache_key, c);
            }
        }
    }
    if (!e) {
        void *wp = mha_buffer_get(&tl_packed, pbytes, "the packed weights of a linear layer");
        pack(wp, w, OC, IC, par);
        return wp;
    }
    e->fixed_gen = promise;
    if (compare) {
        memcpy(e->copy, w, wbytes);   /* then packed from the copy: the two always agree */
        pack(e->packed, e->copy, OC, IC, par);
    } else {
        pack(e->packed, w, OC, IC, par);
    }
    return e->packed;
}
