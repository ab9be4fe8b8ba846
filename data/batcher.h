/* data/batcher.h: length-bucketed, shuffled, padded batches.
 * Each epoch visits every example exactly once; the order is a pure function of
 * (seed, epoch), so a resumed run sees the same batches. Each batch is padded only
 * to its own longest example. The padding mask travels as the lengths: in row r, tokens
 * [0, lengths[r]) are real and the rest padding; every masked op (attention keys and
 * queries, pooling) reads the lengths, so no (B, T) mask is stored. */
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
    int32_t *index;           /* (B) example index in the dataset */
    long real_tokens;         /* sum of lengths */
} Batch;

typedef struct {
    const Dataset *ds;
    int batch_size, max_len, truncate, add_cls, bucket;
    long max_tokens;            /* evaluation order: cap on B x T per batch (0: none) */
    uint64_t seed;
    int epoch, pos, n_batches;  /* data-order state: epoch and next batch within it */
    int32_t *order;             /* (n) example order for this epoch, grouped into batches */
    int32_t *batch_start;       /* (n_batches+1), room for n + 1 (max_tokens cuts) */
    Batch batch;                /* buffers reused by batcher_next */
    uint64_t *keys;             /* (n) scratch: sort keys while laying out an epoch */
    int32_t *tmp;               /* (n + ceil(n / batch_size) + 1) scratch of shuffled epochs */
} Batcher;

/* add_cls: prepend [CLS] (counts toward max_len). bucket = 0: random batches.
 * TRUNC_HEAD keeps the first m tokens, TRUNC_HEAD_TAIL the first ceil(m/2) and the last
 * floor(m/2), where m = max_len - add_cls. Lays out epoch 0 (shuffled). Returns 0, or
 * MHA_EXIT_USAGE for bad arguments (batch_size < 1, max_len < 1 + add_cls, bad truncate),
 * MHA_EXIT_DATA when out of memory. */
int batcher_init(Batcher *b, const Dataset *ds, int batch_size, int max_len, int truncate,
                 int add_cls, int bucket, uint64_t seed);
/* Lay out epoch `epoch` (shuffled when shuffle != 0; evaluation uses shuffle = 0 but
 * still buckets) and set pos = start_batch.
 * shuffle, bucket: the examples shuffled by (seed, epoch), cut into chunks of 100 batches,
 *   each chunk sorted by length and cut into batches, the full batches shuffled; the one
 *   smaller batch (when batch_size does not divide n) comes last.
 * shuffle, no bucket: shuffled examples cut into batches in order.
 * no shuffle: sorted by length (ties by index) when bucketing, else in file order. */
void batcher_start_epoch(Batcher *b, int epoch, int shuffle, int start_batch);
/* Evaluation order only (batcher_start_epoch with shuffle = 0 and bucketing): cut the sorted
 * examples into batches of at most batch_size examples whose padded size B x T stays within
 * max_tokens (a batch holds at least one example, however long); 0 (the default) cuts every
 * batch_size examples. Takes effect at the next batcher_start_epoch. Smaller batches of long
 * texts keep a CPU forward pass's activations in cache. */
void batcher_set_max_tokens(Batcher *b, long max_tokens);
/* Next batch of the epoch, or NULL at its end. The Batch is owned by the batcher. */
const Batch *batcher_next(Batcher *b);
/* Example length after truncation (and [CLS]). */
int batcher_example_length(const Batcher *b, int i);
/* Padded positions / all positions over the batches of the epoch laid out last. */
double batcher_padding_fraction(const Batcher *b);
void batcher_free(Batcher *b);

#endif
