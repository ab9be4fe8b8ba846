/* kernels/cpu/scratch_impl.h: the cached scratch buffer of the calling thread, one per
 * instantiation (FN names it): grows, never shrinks, freed when the thread exits; requested
 * outside an op's parallel region, whose threads then use slices of it (FN(stride64) apart, so
 * no two threads share a cache line). A template included by layers_impl.h and, for the bf16
 * attention alone, by layers_f32.c; the includer defines REAL and FN and includes
 * cpu_common.h. */

static _Thread_local MhaThreadBuffer FN(scratch_buf);

static REAL *FN(scratch)(size_t n) {
    return mha_thread_buffer_get(&FN(scratch_buf), n * sizeof(REAL), "the scratch of a CPU op");
}

/* per-thread scratch stride: n elements rounded up to a 64-byte multiple */
static inline size_t FN(stride64)(size_t n) {
    size_t per = 64 / sizeof(REAL);
    return (n + per - 1) / per * per;
}
