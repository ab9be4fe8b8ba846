/* data/batcher.c: epoch layout (seeded shuffle, length bucketing), truncation, [CLS],
 * and padded batches (the lengths are the padding mask). The random numbers are a splitmix64 stream seeded from
 * (seed, epoch), so the layout of an epoch is a pure function of them. */
#include "data/batcher.h"

#include <stdlib.h>
#include <string.h>

static uint64_t sm_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void shuffle_i32(int32_t *a, int n, uint64_t *rng) {
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(sm_next(rng) % (uint64_t)(i + 1));
        int32_t t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int batcher_example_length(const Batcher *b, int i) {
    int64_t raw = b->ds->offsets[i + 1] - b->ds->offsets[i];
    int64_t m = b->max_len - b->add_cls;
    int64_t len = raw == 0 ? 1 : (raw < m ? raw : m);
    return (int)len + b->add_cls;
}

/* Sort order[0..m) by (example length, position) ascending. */
static void sort_by_length(Batcher *b, int32_t *order, int m) {
    for (int k = 0; k < m; k++)
        b->keys[k] = (uint64_t)batcher_example_length(b, order[k]) << 32 | (uint32_t)k;
    qsort(b->keys, (size_t)m, sizeof *b->keys, cmp_u64);
    for (int k = 0; k < m; k++) b->tmp[k] = order[b->keys[k] & 0xFFFFFFFFu];
    memcpy(order, b->tmp, (size_t)m * sizeof *order);
}

void batcher_start_epoch(Batcher *b, int epoch, int shuffle, int start_batch) {
    int n = b->ds->n, bs = b->batch_size;
    int nb = n ? (n - 1) / bs + 1 : 0;
    b->epoch = epoch;
    b->n_batches = nb;
    for (int i = 0; i < n; i++) b->order[i] = i;
    if (shuffle && n > 0) {
        uint64_t rng = b->seed ^ (0xD1B54A32D192ED03ull * ((uint64_t)(uint32_t)epoch + 1));
        sm_next(&rng);
        shuffle_i32(b->order, n, &rng);
        if (b->bucket) {
            int64_t chunk64 = (int64_t)bs * 100;
            int chunk = chunk64 < n ? (int)chunk64 : n;
            for (int c0 = 0; c0 < n; c0 += chunk)
                sort_by_length(b, b->order + c0, n - c0 < chunk ? n - c0 : chunk);
            /* shuffle the full batches; the smaller one (if any) stays last */
            int full = n / bs;
            int32_t *perm = b->tmp + n;
            for (int k = 0; k < full; k++) perm[k] = k;
            shuffle_i32(perm, full, &rng);
            for (int k = 0; k < full; k++)
                memcpy(b->tmp + (size_t)k * bs, b->order + (size_t)perm[k] * bs, (size_t)bs * sizeof *b->tmp);
            memcpy(b->order, b->tmp, (size_t)full * bs * sizeof *b->order);
        }
    } else if (b->bucket && n > 0) {
        sort_by_length(b, b->order, n);
    }
    if (!shuffle && b->bucket && b->max_tokens > 0) {
        /* ascending lengths: a batch's T is its last example's; add examples while the
         * padded size stays within the budget */
        nb = 0;
        for (int i = 0; i < n;) {
            b->batch_start[nb++] = i;
            int cnt = 1;
            while (i + cnt < n && cnt < bs &&
                   (long)(cnt + 1) * batcher_example_length(b, b->order[i + cnt]) <= b->max_tokens)
                cnt++;
            i += cnt;
        }
        b->n_batches = nb;
    } else {
        for (int k = 0; k < nb; k++) b->batch_start[k] = k * bs;
    }
    b->batch_start[nb] = n;
    if (start_batch < 0) start_batch = 0;
    b->pos = start_batch < nb ? start_batch : nb;
}

int batcher_init(Batcher *b, const Dataset *ds, int batch_size, int max_len, int truncate,
                 int add_cls, int bucket, uint64_t seed) {
    memset(b, 0, sizeof *b);
    add_cls = add_cls != 0;
    if (!ds || batch_size < 1 || max_len < 1 + add_cls ||
        (truncate != TRUNC_HEAD && truncate != TRUNC_HEAD_TAIL))
        return MHA_EXIT_USAGE;
    b->ds = ds;
    b->batch_size = batch_size;
    b->max_len = max_len;
    b->truncate = truncate;
    b->add_cls = add_cls;
    b->bucket = bucket != 0;
    b->seed = seed;
    size_t n = (size_t)ds->n, nb = n ? (n - 1) / (size_t)batch_size + 1 : 0;
    size_t cells = (size_t)batch_size * (size_t)max_len;
    b->order = malloc((n + 1) * sizeof *b->order);
    b->batch_start = malloc((n + 1) * sizeof *b->batch_start);   /* up to n batches (max_tokens) */
    b->keys = malloc((n + 1) * sizeof *b->keys);
    b->tmp = malloc((n + nb + 1) * sizeof *b->tmp);
    b->batch.ids = malloc(cells * sizeof *b->batch.ids);
    b->batch.lengths = malloc((size_t)batch_size * sizeof *b->batch.lengths);
    b->batch.labels = malloc((size_t)batch_size * sizeof *b->batch.labels);
    b->batch.index = malloc((size_t)batch_size * sizeof *b->batch.index);
    if (!b->order || !b->batch_start || !b->keys || !b->tmp || !b->batch.ids ||
        !b->batch.lengths || !b->batch.labels || !b->batch.index) {
        batcher_free(b);
        return MHA_EXIT_DATA;
    }
    batcher_start_epoch(b, 0, 1, 0);
    return MHA_OK;
}

/* Write example i (truncated, with [CLS], [UNK] when empty) to dst; returns its length. */
static int fill_example(const Batcher *b, int i, int32_t *dst) {
    const Dataset *ds = b->ds;
    int64_t raw = ds->offsets[i + 1] - ds->offsets[i];
    const int32_t *src = raw ? ds->ids + ds->offsets[i] : NULL;  /* ids is NULL when every text is empty */
    int m = b->max_len - b->add_cls, k = 0;
    if (b->add_cls) dst[k++] = VOCAB_CLS;
    if (raw == 0) {
        dst[k++] = VOCAB_UNK;
    } else if (raw <= m) {
        memcpy(dst + k, src, (size_t)raw * sizeof *dst);
        k += (int)raw;
    } else if (b->truncate == TRUNC_HEAD) {
        memcpy(dst + k, src, (size_t)m * sizeof *dst);
        k += m;
    } else {
        int head = (m + 1) / 2, tail = m - head;
        memcpy(dst + k, src, (size_t)head * sizeof *dst);
        memcpy(dst + k + head, src + raw - tail, (size_t)tail * sizeof *dst);
        k += m;
    }
    return k;
}

void batcher_set_max_tokens(Batcher *b, long max_tokens) { b->max_tokens = max_tokens > 0 ? max_tokens : 0; }

const Batch *batcher_next(Batcher *b) {
    if (b->pos >= b->n_batches) return NULL;
    Batch *bt = &b->batch;
    int s = b->batch_start[b->pos], e = b->batch_start[b->pos + 1];
    b->pos++;
    int B = e - s, T = 1;
    for (int r = 0; r < B; r++) {
        int len = batcher_example_length(b, b->order[s + r]);
        if (len > T) T = len;
    }
    bt->B = B;
    bt->T = T;
    bt->real_tokens = 0;
    for (int r = 0; r < B; r++) {
        int i = b->order[s + r];
        int32_t *row = bt->ids + (size_t)r * T;
        int len = fill_example(b, i, row);
        for (int t = len; t < T; t++) row[t] = VOCAB_PAD;
        bt->lengths[r] = len;
        bt->labels[r] = b->ds->labels[i];
        bt->index[r] = i;
        bt->real_tokens += len;
    }
    return bt;
}

double batcher_padding_fraction(const Batcher *b) {
    double all = 0, real = 0;
    for (int k = 0; k < b->n_batches; k++) {
        int s = b->batch_start[k], e = b->batch_start[k + 1], T = 0;
        for (int r = s; r < e; r++) {
            int len = batcher_example_length(b, b->order[r]);
            real += len;
            if (len > T) T = len;
        }
        all += (double)(e - s) * T;
    }
    return all > 0 ? (all - real) / all : 0.0;
}

void batcher_free(Batcher *b) {
    if (!b) return;
    free(b->order);
    free(b->batch_start);
    free(b->keys);
    free(b->tmp);
    free(b->batch.ids);
    free(b->batch.lengths);
    free(b->batch.labels);
    free(b->batch.index);
    memset(b, 0, sizeof *b);
}
