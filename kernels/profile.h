/* kernels/profile.h: a Backend that wraps another and times every op by family
 * (GEMM, attention, LayerNorm, elementwise, embedding/pooling/loss, optimizer), counting
 * the floating-point work of the matrix products, and the table it reports. Used by
 * mha-train --profile. */
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

/* The report on stderr after `total` seconds of training (data_seconds of them batching,
 * `tokens` real tokens): each op family's time, calls and GFLOP/s, the peak device memory,
 * and the whole step's GEMM and attention work per second against a ceiling: the wrapped
 * backend's linear layer (sgemm, or the bf16 GEMM in mixed precision) timed on an
 * N x C x F product. After profile_backend. */
void profile_print_report(double total, double data_seconds, long tokens, int N, int C, int F);

#endif
