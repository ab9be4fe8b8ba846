/* kernels/cpu/cpu_features.h: which x86-64 instruction sets the fast CPU paths may use, asked
 * once in one place. The answers are flags libgcc (or compiler-rt) filled in at startup from
 * cpuid, set only when the OS also saves the zmm state, so any thread may ask at any time and
 * asking costs a load. Elsewhere (or with another compiler) every answer is 0 and the portable
 * paths run. */
#ifndef MHA_KERNELS_CPU_FEATURES_H
#define MHA_KERNELS_CPU_FEATURES_H

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define MHA_CPU_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif
/* The AMX kernels also need a compiler that knows the tile instructions (GCC >= 11, Clang >= 12):
 * meson defines MHA_NO_AMX when its test program does not build, and mha_cpu_amx then says 0. */
#if defined(MHA_CPU_X86) && !defined(MHA_NO_AMX)
#define MHA_CPU_X86_AMX 1
#endif
#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
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

#ifdef MHA_CPU_X86
/* Lanes [0, n) of a 16-lane AVX-512 mask, n clamped to [0, 16] (the tail of a row). */
static inline __mmask16 mha_mask16(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}
#endif

/* ... and vdpbf16ps (gemm_bf16.c). */
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

/* ldtilecfg's 64-byte operand (palette 1): bytes per row and rows of each of the 8 tiles. */
typedef struct {
    unsigned char palette, start_row, reserved[14];
    unsigned short colsb[16];
    unsigned char rows[16];
} MhaAmxTileConfig;

#ifdef MHA_CPU_X86_AMX
/* ldtilecfg with the whole 64-byte operand named: GCC 12's _tile_loadconfig names only its
 * first 8 bytes, so the compiler may drop the stores to the rest (seen at -O3 on a copy). */
static inline void mha_amx_load_config(const MhaAmxTileConfig *cfg) {
    __asm__ volatile("ldtilecfg %0" : : "m"(*cfg));
}
/* A compiler barrier: _tile_loadd names no memory operand, so without it the stores that fill
 * a buffer could be moved after (or, for a local buffer, dropped before) the tile loads. */
static inline void mha_amx_memory_barrier(void) { __asm__ volatile("" : : : "memory"); }
#endif

/* AMX tile registers with bf16 (tdpbf16ps, gemm_bf16.c) and int8 (tdpbusd, gemm_int8.c)
 * products: the CPU has AMX-TILE, AMX-BF16 and AMX-INT8 (Intel Xeon Sapphire Rapids and later)
 * and AVX-512, Linux lets this process use the tile state (a process must ask once:
 * arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), which this does), and the environment
 * does not say MHA_CPU_AMX=0. Unlike the flags above this is not a load: each file that asks
 * keeps its own answer, found on its first call (threads racing there find the same one). */
static inline int mha_cpu_amx(void) {
    static int answer = -1;   /* -1: not asked yet */
    int a = __atomic_load_n(&answer, __ATOMIC_ACQUIRE);
    if (a >= 0) return a;
    a = 0;
#if defined(MHA_CPU_X86_AMX) && defined(__linux__) && defined(SYS_arch_prctl)
    unsigned eax, ebx, ecx, edx;
    const char *env = getenv("MHA_CPU_AMX");
    const unsigned amx = (1u << 22) | (1u << 24) | (1u << 25);   /* cpuid 7.0 edx: BF16, TILE, INT8 */
    if (mha_cpu_avx512() && !(env && strcmp(env, "0") == 0) && __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) &&
        (edx & amx) == amx)
        a = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#endif
    __atomic_store_n(&answer, a, __ATOMIC_RELEASE);
    return a;
}

#endif
