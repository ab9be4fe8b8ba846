/* data/overlap.h: examples of a dev or test set that repeat a training example, token for
 * token (duplicates across the splits, as in ChnSentiCorp's standard split, where 28% of the
 * dev and test reviews also occur in train): a model's score on them measures what it
 * remembers more than how it does on new text; and repeats within one set (14% of
 * ChnSentiCorp's training examples are copies, 24 of its texts with both labels). */
#ifndef MHA_DATA_OVERLAP_H
#define MHA_DATA_OVERLAP_H

#include "data/dataset.h"

typedef struct {
    long shared;       /* examples of `other` whose token ids (untruncated) are a training example's */
    long same_label;   /* of those, the ones with the label of such a training example */
} Overlap;

/* Counts other's examples that repeat one of train's (same token ids, so the same text as far
 * as the vocabulary sees it; examples without tokens never count). 0, or -1 when out of
 * memory (out is then zeros). */
int dataset_overlap(const Dataset *train, const Dataset *other, Overlap *out);

/* 1 when count examples of n are 1% or more of them: when mha-train notes an overlap or repeats. */
static inline int overlap_noteworthy(long count, long n) {
    return n > 0 && count > 0 && (int64_t)count * 100 >= (int64_t)n;
}

typedef struct {
    long repeats;       /* examples whose token ids are those of an earlier example of the set */
    long conflicting;   /* distinct texts (token sequences) that occur with more than one label */
} Repeats;

/* Counts the repeated examples within d (the extra copies of each text; examples without
 * tokens never count) and the texts whose copies disagree on the label. 0, or -1 when out of
 * memory (out is then zeros). */
int dataset_repeats(const Dataset *d, Repeats *out);

#endif
