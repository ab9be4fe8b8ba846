/* kernels/cpu/cpu_features.h: which x86-64 instruction sets the fast CPU paths may use, asked
 * once in one place. The answers are flags libgcc (or compiler-rt) filled in at startup from
 * cpuid, set only when the OS also saves the zmm state, so any thread may ask at any time and
 * asking costs a load. Elsewhere (or with another compiler) every answer is 0 and the portable
 * paths run. */
#ifndef MHA_KERNELS_CPU_FEATURES_H
#define MHA_KERNELS_CPU_FEATURES_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MHA_CPU_X86 1
#endif

/* AVX-512 F, BW and VL: what every zmm kernel here assumes. */
static inline int mha_cpu_avx512(void) {
#ifdef MHA_CPU_X86
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

/* ... and vdpbf16ps (gemm_bf16.c; its AMX kernels ask for AMX there: the OS must grant it). */
static inline int mha_cpu_avx512_bf16(void) {
#ifdef MHA_CPU_X86
    return mha_cpu_avx512() && __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

/* ... and vpdpbusd (gemm_int8.c). */
static inline int mha_cpu_avx512_vnni(void) {
#ifdef MHA_CPU_X86
    return mha_cpu_avx512() && __builtin_cpu_supports("avx512vnni");
#else
    return 0;
#endif
}

#endif
