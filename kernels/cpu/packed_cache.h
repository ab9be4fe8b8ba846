/* kernels/cpu/packed_cache.h: the calling thread's cache of packed weights for the linear
 * layers' forward products of our own (packed_cache.c): the int8 product (linear_int8.c) and
 * the fp32 one (linear_f32.c). Prediction multiplies the same few weight matrices batch after
 * batch; packing them at every call is work done again (6-8% of an int8 mha-predict run, and
 * most of a short text's products). */
#ifndef MHA_KERNELS_CPU_PACKED_CACHE_H
#define MHA_KERNELS_CPU_PACKED_CACHE_H
#include <stddef.h>

/* Packs w (OC, IC) into dst (64-byte aligned), over the OpenMP threads when par. */
typedef void (*MhaPackWeights)(void *dst, const float *w, int OC, int IC, int par);

/* w (OC, IC) packed by `pack` into packed_bytes: from the calling thread's cache when it holds
 * that packing of these weights, else packed now (into an entry, kept, or into the thread's
 * buffer, valid until its next call). Entries are keyed by the weights' address, shape and
 * `pack`.
 *  - compare = 1: an entry keeps a copy of the weights it was packed from and is used only
 *    while they hold the same bytes (compared at each call, unless promised, below).
 *  - compare = 0: entries are made and used only under a promise (mha_weights_fixed); other
 *    weights (a model in training) are packed at every call, at no cost beyond that. */
const void *mha_packed_weights(const float *w, int OC, int IC, size_t packed_bytes, MhaPackWeights pack,
                               int par, int compare);

/* Backend.weights_fixed of the CPU tables: while [p, p + bytes) is promised not to change
 * (mha-predict's parameters), a packing of weights inside it, made or checked under that
 * promise, is used without looking at the weights again. p = NULL ends the promise; each call
 * starts a new one. Call it while no product runs. */
void mha_weights_fixed(const void *p, size_t bytes);

/* Tests: products (all threads) that took their packed weights from a cache. */
unsigned long mha_packed_cache_hits(void);
/* Tests: empties the calling thread's cache. */
void mha_packed_cache_clear(void);

#endif
