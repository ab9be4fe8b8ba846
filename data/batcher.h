/* data/batcher.h: length-bucketed, shuffled, padded batches with masks.
 * Each epoch visits every example exactly once; the order is a pure function of
 * (seed, epoch), so a resumed run sees the same batches. Each batch is padded only
 * to its own longest example. */
#ifndef MHA_DATA_BATCHER_H
#define MHA_DATA_BATCHER_H

#include <stdint.h>
#include "data/dataset.h"

enum { TRUNC_HEAD = 0, TRUNC_HEAD_TAIL = 1 };

typedef struct {
    int B, T;                 /* examples in this batch, padded length (<= max_len) */
    int32_t *ids;             /* (B, T) token ids, VOCAB_PAD after each length */
    int32_t *lengths;         /* (B) real tokens per example (>= 1: an empty text gets [UNK]) */
    int32_t *labels;          /* (B) */
    uint8_t *mask;            /* (B, T) 1 = real token, 0 = padding */
    int32_t *index;           /* (B) example index in the dataset */
    long real_tokens;         /* sum of lengths */
} Batch;

typedef struct {
    const Dataset *ds;
    int batch_size, max_len, truncate, add_cls, bucket;
    uint64_t seed;
    int epoch, pos, n_batches;  /* data-order state: epoch and next batch within it */
    int32_t *order;             /* (n) example order for this epoch, grouped into batches */
    int32_t *batch_start;       /* (n_batches+1) */
    Batch batch;                /* buffers reused by batcher_next */
} Batcher;

/* add_cls: prepend [CLS] (counts toward max_len). bucket = 0: random batches. */
int batcher_init(Batcher *b, const Dataset *ds, int batch_size, int max_len, int truncate,
                 int add_cls, int bucket, uint64_t seed);
/* Lay out epoch `epoch` (shuffled when shuffle != 0; evaluation uses shuffle = 0 but
 * still buckets) and set pos = start_batch. */
void batcher_start_epoch(Batcher *b, int epoch, int shuffle, int start_batch);
/* Next batch of the epoch, or NULL at its end. The Batch is owned by the batcher. */
const Batch *batcher_next(Batcher *b);
/* Example length after truncation (and [CLS]). */
int batcher_example_length(const Batcher *b, int i);
/* Padded positions / all positions over one epoch's batches. */
double batcher_padding_fraction(Batcher *b);
void batcher_free(Batcher *b);

#endif
