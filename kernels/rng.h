/* kernels/rng.h: counter-based random numbers shared by the CPU and CUDA backends.
 * The value for (seed, counter) is a pure function, so dropout masks repeat exactly
 * for a seed on any backend and can be regenerated in backward instead of stored. */
#ifndef MHA_KERNELS_RNG_H
#define MHA_KERNELS_RNG_H
#include <stdint.h>

#ifdef __CUDACC__
#define MHA_HD __host__ __device__ __forceinline__
#else
#define MHA_HD static inline
#endif

/* splitmix64 finaliser of seed and counter: a well-mixed 64-bit value. */
MHA_HD uint64_t mha_rng_u64(uint64_t seed, uint64_t counter) {
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + counter + 0x632BE59BD9B4E019ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 bits, exactly representable in float. */
MHA_HD float mha_rng_uniform(uint64_t seed, uint64_t counter) {
    return (float)(mha_rng_u64(seed, counter) >> 40) * (1.0f / 16777216.0f);
}
#endif
