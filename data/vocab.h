/* data/vocab.h: token <-> id map built from the training set.
 * Reserved ids [PAD]=0, [UNK]=1, [CLS]=2; the rest ordered by count descending, then
 * by the token's code points ascending; min_count and max_size (incl. reserved). */
#ifndef MHA_DATA_VOCAB_H
#define MHA_DATA_VOCAB_H

#include <stddef.h>
#include <stdint.h>
#include "data/error.h"

enum { VOCAB_PAD = 0, VOCAB_UNK = 1, VOCAB_CLS = 2, VOCAB_RESERVED = 3 };

typedef struct VocabCounter VocabCounter;  /* token -> count while reading train */
typedef struct Vocab Vocab;

VocabCounter *vocab_counter_new(void);
void vocab_counter_add(VocabCounter *c, const char *tok, int len);
void vocab_counter_free(VocabCounter *c);
/* Add one occurrence of tok and return its index in the counter (0, 1, ... in order of
 * first occurrence; stable while the counter lives), or -1 when out of memory. */
int32_t vocab_counter_intern(VocabCounter *c, const char *tok, int len);
int vocab_counter_size(const VocabCounter *c);
/* Token `idx` of the counter (NUL-terminated); *len and *count when not NULL. */
const char *vocab_counter_token(const VocabCounter *c, int32_t idx, int *len, long *count);

/* min_count <= 1 keeps every token; max_size <= 0 means no limit. NULL when out of memory. */
Vocab *vocab_build(const VocabCounter *c, int min_count, int max_size);
int vocab_size(const Vocab *v);
int32_t vocab_lookup(const Vocab *v, const char *tok, int len);  /* VOCAB_UNK when absent */
const char *vocab_token(const Vocab *v, int32_t id);              /* NUL-terminated */
void vocab_free(Vocab *v);

/* Serialisation into a malloc'd byte blob (stored in checkpoints) and back.
 * vocab_deserialize checks every length against n and fails with a message on
 * malformed input (never reads out of bounds). */
int vocab_serialize(const Vocab *v, unsigned char **out, size_t *out_len);
int vocab_deserialize(Vocab **v, const unsigned char *buf, size_t n, MhaError *err);

#endif
