/* kernels/profile.h: a Backend that wraps another and times every op by family
 * (GEMM, attention, LayerNorm, elementwise, embedding/pooling/loss, optimizer), counting
 * the floating-point work of the matrix products. Used by mha-train --profile. */
#ifndef MHA_KERNELS_PROFILE_H
#define MHA_KERNELS_PROFILE_H

#include "kernels/backend.h"

enum { PROF_GEMM = 0, PROF_ATTENTION, PROF_LAYERNORM, PROF_ELEMENTWISE, PROF_EMBED_POOL_LOSS,
       PROF_OPTIMIZER, PROF_MEMORY, PROF_FAMILIES };

typedef struct {
    double seconds[PROF_FAMILIES];
    double flops[PROF_FAMILIES];   /* multiply-adds x 2 of GEMMs and attention products */
    long calls[PROF_FAMILIES];
} ProfileCounters;

/* The profiling wrapper around `inner` (one per process). */
const Backend *profile_backend(const Backend *inner);
ProfileCounters *profile_counters(void);
const char *profile_family_name(int family);

#endif
