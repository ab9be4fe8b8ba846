/* data/overlap.c: dataset_overlap and dataset_repeats (see overlap.h). The examples become keys
 * sorted by (hash of their token ids, the token ids themselves, label, index): copies of one
 * text are then neighbours even when other texts share their hash (FNV-1a collisions, which a
 * crafted file can chain), so each example is compared with its neighbour or found by binary
 * search, never scanned against a run of colliding texts. O(n log n) comparisons of keys (a
 * token comparison only on equal hashes); 16 bytes per example of the sorted set.
 * OVERLAP_HASH_MASK (tests only) keeps that many low bits of the hash, to make collisions. */
#include "data/overlap.h"
#include <stdlib.h>
#include <string.h>

#ifndef OVERLAP_HASH_MASK
#define OVERLAP_HASH_MASK UINT64_MAX
#endif

typedef struct {
    uint64_t hash;
    int32_t label, index;   /* an example of the sorted set with this hash and label */
} Key;

/* (an example without tokens never touches ids, which is NULL in a set of only such examples) */
static uint64_t tokens_hash(const Dataset *d, int i) {
    const size_t n = (size_t)(d->offsets[i + 1] - d->offsets[i]) * sizeof *d->ids;
    const uint64_t h = n ? mha_fnv1a(MHA_FNV1A_START, d->ids + d->offsets[i], n) : MHA_FNV1A_START;
    return h & OVERLAP_HASH_MASK;
}

/* A total order on texts: shorter first, then by their ids. 0: the same token ids. */
static int tokens_cmp(const Dataset *a, int i, const Dataset *b, int j) {
    const int64_t na = a->offsets[i + 1] - a->offsets[i], nb = b->offsets[j + 1] - b->offsets[j];
    if (na != nb) return na < nb ? -1 : 1;
    for (int64_t k = 0; k < na; k++) {
        const int32_t x = a->ids[a->offsets[i] + k], y = b->ids[b->offsets[j] + k];
        if (x != y) return x < y ? -1 : 1;
    }
    return 0;
}

/* qsort has no context argument: the set being sorted (one sort at a time per thread) */
static _Thread_local const Dataset *sorting;

static int key_cmp(const void *x, const void *y) {
    const Key *a = x, *b = y;
    if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
    const int t = tokens_cmp(sorting, a->index, sorting, b->index);
    if (t) return t;
    if (a->label != b->label) return a->label < b->label ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

/* d's examples as keys sorted by key_cmp, or NULL when out of memory */
static Key *sorted_keys(const Dataset *d) {
    Key *keys = malloc((size_t)d->n * sizeof *keys);
    if (!keys) return NULL;
    for (int i = 0; i < d->n; i++) keys[i] = (Key){tokens_hash(d, i), d->labels[i], i};
    sorting = d;
    qsort(keys, (size_t)d->n, sizeof *keys, key_cmp);
    sorting = NULL;
    return keys;
}

int dataset_overlap(const Dataset *train, const Dataset *other, Overlap *out) {
    memset(out, 0, sizeof *out);
    if (train->n <= 0 || other->n <= 0) return 0;
    Key *keys = sorted_keys(train);
    if (!keys) return -1;
    /* once per distinct (text, label): its copies are neighbours */
    int n = 0;
    for (int i = 0; i < train->n; i++)
        if (n == 0 || keys[n - 1].hash != keys[i].hash || keys[n - 1].label != keys[i].label ||
            tokens_cmp(train, keys[n - 1].index, train, keys[i].index) != 0)
            keys[n++] = keys[i];
    for (int e = 0; e < other->n; e++) {
        if (other->offsets[e + 1] == other->offsets[e]) continue;   /* no tokens: nothing to repeat */
        const uint64_t h = tokens_hash(other, e);
        int lo = 0, hi = n;   /* the first key not before (h, e's text) */
        while (lo < hi) {
            const int mid = lo + (hi - lo) / 2;
            const int before = keys[mid].hash != h ? keys[mid].hash < h
                                                   : tokens_cmp(train, keys[mid].index, other, e) < 0;
            if (before) lo = mid + 1;
            else hi = mid;
        }
        int shared = 0, labelled = 0;   /* the keys of e's text: one per label */
        for (int k = lo; k < n && keys[k].hash == h && tokens_cmp(train, keys[k].index, other, e) == 0; k++) {
            shared = 1;
            labelled |= keys[k].label == other->labels[e];
        }
        out->shared += shared;
        out->same_label += labelled;
    }
    free(keys);
    return 0;
}

int dataset_repeats(const Dataset *d, Repeats *out) {
    memset(out, 0, sizeof *out);
    if (d->n <= 1) return 0;
    Key *keys = sorted_keys(d);
    if (!keys) return -1;
    /* a text's copies are neighbours, its lowest label first */
    for (int k = 1, mixed = 0; k < d->n; k++) {
        const Key *prev = &keys[k - 1], *cur = &keys[k];
        if (d->offsets[cur->index + 1] == d->offsets[cur->index]) continue;   /* no tokens */
        if (prev->hash != cur->hash || tokens_cmp(d, prev->index, d, cur->index) != 0) {
            mixed = 0;   /* the first copy of another text */
            continue;
        }
        out->repeats++;
        if (cur->label != prev->label && !mixed) {
            mixed = 1;
            out->conflicting++;
        }
    }
    free(keys);
    return 0;
}
