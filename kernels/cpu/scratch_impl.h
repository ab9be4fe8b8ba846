/* kernels/cpu/scratch_impl.h: the cached scratch buffer of the calling thread, one per
 * instantiation (FN names it): grows, never shrinks; requested outside an op's parallel
 * region, whose threads then use slices of it (FN(stride64) apart, so no two threads share a
 * cache line). A template included by layers_impl.h and, for the bf16 attention alone, by
 * layers_f32.c; the includer defines REAL and FN and includes cpu_common.h. */
#include <stdio.h>
#include <stdlib.h>

static _Thread_local REAL *FN(scratch_buf) = NULL;
static _Thread_local size_t FN(scratch_cap) = 0;

static REAL *FN(scratch)(size_t n) {
    if (n > FN(scratch_cap)) {
        free(FN(scratch_buf));
        FN(scratch_buf) = mha_cpu_aligned_alloc(n * sizeof(REAL));
        if (!FN(scratch_buf)) {
            fprintf(stderr, "mha cpu kernels: out of memory for %zu bytes of scratch\n",
                    n * sizeof(REAL));
            abort();
        }
        FN(scratch_cap) = n;
    }
    return FN(scratch_buf);
}

/* per-thread scratch stride: n elements rounded up to a 64-byte multiple */
static inline size_t FN(stride64)(size_t n) {
    size_t per = 64 / sizeof(REAL);
    return (n + per - 1) / per * per;
}
