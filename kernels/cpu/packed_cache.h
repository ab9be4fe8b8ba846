/* kernels/cpu/packed_cache.h: packed weights kept across calls, for the linear layers'
 * forward products of our own (packed_cache.c): int8 (linear_int8.c), fp32 (linear_f32.c) and
 * bf16 (linear_bf16.c). Prediction multiplies the same few weight matrices batch after batch;
 * packing them at every call is work done again (6-8% of an int8 mha-predict run, and most of
 * a short text's products). */
#ifndef MHA_KERNELS_CPU_PACKED_CACHE_H
#define MHA_KERNELS_CPU_PACKED_CACHE_H
#include <stddef.h>

/* Packs w (OC, IC) into dst (64-byte aligned), over the OpenMP threads when par. */
typedef void (*MhaPackWeights)(void *dst, const float *w, int OC, int IC, int par);

/* w (OC, IC) packed by `pack` into packed_bytes, from a cache when one holds that packing of
 * these weights, else packed now (and kept, or into the calling thread's buffer, valid until
 * its next call). Entries are keyed by the weights' address, shape and `pack`.
 *  - Weights promised fixed (mha_weights_fixed): packed once for the process, shared by all
 *    threads, used without looking at the weights again.
 *  - Others, compare = 1 (int8): kept in the calling thread's cache with a copy of the weights,
 *    and used only while they hold the same bytes (compared at each call).
 *  - Others, compare = 0 (fp32, bf16: a model in training): packed at every call. */
const void *mha_packed_weights(const float *w, int OC, int IC, size_t packed_bytes, MhaPackWeights pack,
                               int par, int compare);

/* Backend.weights_fixed of the CPU tables: [p, p + bytes) is promised not to change (the
 * model's parameters in mha-predict) until the next call; p = NULL ends the promise. Each call
 * drops what was packed under the one before. Call it while no product runs. */
void mha_weights_fixed(const void *p, size_t bytes);

/* Tests: products (all threads) that took their packed weights from a cache. */
unsigned long mha_packed_cache_hits(void);
/* Tests: empties the calling thread's cache (not the promised weights' store). */
void mha_packed_cache_clear(void);

#endif
