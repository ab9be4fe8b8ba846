/* data/overlap.c: dataset_overlap and dataset_repeats (see overlap.h). The examples are hashed
 * (FNV-1a over their token ids) and sorted by (hash, label); for the overlap, the training
 * examples are kept once per distinct (tokens, label) and each example of the other set looks
 * up its hash; tokens are always compared exactly, so hash collisions never count.
 * O((n + m) log n) time, 16 bytes per training example. */
#include "data/overlap.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t hash;
    int32_t label, index;   /* a training example with this hash and label */
} Key;

/* (an example without tokens never touches ids, which is NULL in a set of only such examples) */
static uint64_t tokens_hash(const Dataset *d, int i) {
    uint64_t h = 0xcbf29ce484222325ull;
    const size_t n = (size_t)(d->offsets[i + 1] - d->offsets[i]) * sizeof *d->ids;
    if (n == 0) return h;
    const unsigned char *p = (const unsigned char *)(d->ids + d->offsets[i]);
    for (size_t k = 0; k < n; k++) h = (h ^ p[k]) * 0x100000001b3ull;
    return h;
}

static int same_tokens(const Dataset *a, int i, const Dataset *b, int j) {
    const int64_t na = a->offsets[i + 1] - a->offsets[i], nb = b->offsets[j + 1] - b->offsets[j];
    return na == nb && (na == 0 || memcmp(a->ids + a->offsets[i], b->ids + b->offsets[j], (size_t)na * sizeof *a->ids) == 0);
}

static int key_cmp(const void *x, const void *y) {
    const Key *a = x, *b = y;
    if (a->hash != b->hash) return a->hash < b->hash ? -1 : 1;
    if (a->label != b->label) return a->label < b->label ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

/* d's examples as keys sorted by (hash, label, index), or NULL when out of memory */
static Key *sorted_keys(const Dataset *d) {
    Key *keys = malloc((size_t)d->n * sizeof *keys);
    if (!keys) return NULL;
    for (int i = 0; i < d->n; i++) keys[i] = (Key){tokens_hash(d, i), d->labels[i], i};
    qsort(keys, (size_t)d->n, sizeof *keys, key_cmp);
    return keys;
}

int dataset_overlap(const Dataset *train, const Dataset *other, Overlap *out) {
    memset(out, 0, sizeof *out);
    if (train->n <= 0 || other->n <= 0) return 0;
    Key *keys = sorted_keys(train);
    if (!keys) return -1;
    /* once per distinct (tokens, label): many copies of one short text stay one entry */
    int n = 0;
    for (int i = 0; i < train->n; i++) {
        int dup = 0;
        for (int j = n - 1; j >= 0 && keys[j].hash == keys[i].hash && keys[j].label == keys[i].label && !dup; j--)
            dup = same_tokens(train, keys[j].index, train, keys[i].index);
        if (!dup) keys[n++] = keys[i];
    }
    for (int e = 0; e < other->n; e++) {
        if (other->offsets[e + 1] == other->offsets[e]) continue;   /* no tokens: nothing to repeat */
        const uint64_t h = tokens_hash(other, e);
        int lo = 0, hi = n;   /* the first key with this hash */
        while (lo < hi) {
            const int mid = lo + (hi - lo) / 2;
            if (keys[mid].hash < h) lo = mid + 1;
            else hi = mid;
        }
        int shared = 0, labelled = 0;
        for (int k = lo; k < n && keys[k].hash == h; k++)
            if (same_tokens(train, keys[k].index, other, e)) {
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
    int *reps = malloc((size_t)d->n * sizeof *reps);   /* the distinct texts of one hash: their first key */
    char *mixed = malloc((size_t)d->n);                  /* per distinct text: seen with another label */
    if (!keys || !reps || !mixed) {
        free(keys), free(reps), free(mixed);
        return -1;
    }
    for (int g = 0; g < d->n;) {   /* one group of equal hashes at a time, labels ascending */
        int end = g, nr = 0;
        while (end < d->n && keys[end].hash == keys[g].hash) end++;
        for (int k = g; k < end; k++) {
            if (d->offsets[keys[k].index + 1] == d->offsets[keys[k].index]) continue;   /* no tokens */
            int r = 0;
            while (r < nr && !same_tokens(d, keys[reps[r]].index, d, keys[k].index)) r++;
            if (r == nr) {   /* a text not seen before in this group */
                reps[nr] = k;
                mixed[nr++] = 0;
                continue;
            }
            out->repeats++;
            if (keys[k].label != keys[reps[r]].label && !mixed[r]) {
                mixed[r] = 1;
                out->conflicting++;
            }
        }
        g = end;
    }
    free(keys), free(reps), free(mixed);
    return 0;
}
