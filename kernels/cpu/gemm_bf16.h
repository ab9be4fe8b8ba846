/* kernels/cpu/gemm_bf16.h: matrix products with bf16 inputs and fp32 accumulation on the CPU
 * (train.precision = "bf16" / mha-predict --precision bf16 on the cpu device).
 *
 * C (M, N) += A (M, K) @ B (K, N): both inputs are rounded to bf16 (round to nearest even,
 * subnormals flushed to zero), each pair of products along K is added to the fp32
 * accumulator in order (odd k, then even k), as AVX512-BF16's vdpbf16ps does. On CPUs with
 * AVX512_BF16 the fast path runs that instruction; elsewhere a portable loop computes the
 * same function, except that vdpbf16ps also treats subnormal products and sums as zero
 * where the portable loop keeps them (values below 1.2e-38; the tests compare both paths
 * with each other and against a double reference). On CPUs with AMX-BF16 the fast path runs
 * tdpbf16ps on tile registers instead: the same products, added in the hardware's own order
 * (not vdpbf16ps's bits; within the same bound of the double reference). MHA_CPU_AMX=0 in the
 * environment keeps the vdpbf16ps kernels.
 *
 * B is packed once (mha_bf16_pack_b) and shared by the threads; each call of
 * mha_bf16_gemm packs its own rows of A into the caller's scratch. Packed B layout:
 * panels of MHA_BF16_NR columns; panel p holds, for each k pair kk, the 32 columns'
 * (B[2kk][n], B[2kk+1][n]) in column order: (Kp/2, NR, 2) bf16, Kp = K rounded up to even.
 * Columns past N and the k past K are zero. */
#ifndef MHA_KERNELS_CPU_GEMM_BF16_H
#define MHA_KERNELS_CPU_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <cblas.h>

#define MHA_BF16_NR 32   /* columns per panel of packed B */
#define MHA_BF16_MR 8    /* rows per micro-tile */
#define MHA_BF16_KC 256  /* depth per pass over C (even) */

/* 1 when the fast AVX512-BF16 path is used (CPU support, not forced off). */
int mha_bf16_fast(void);
/* 1 when this CPU (and OS) supports AVX512_BF16, whatever mha_bf16_force_portable says. */
int mha_bf16_cpu_supported(void);
/* Tests: force the portable path (1) or allow the fast one again (0). */
void mha_bf16_force_portable(int on);
/* 1 when this CPU has AMX-BF16, Linux lets the process use the tile registers, and
 * MHA_CPU_AMX is not "0" (asked once, on the first call). */
int mha_bf16_amx_supported(void);
/* 1 when the fast path runs its AMX kernels: mha_bf16_fast(), AMX supported, not switched off. */
int mha_bf16_amx(void);
/* Tests and benchmarks: let the fast path use AMX where supported (1, the default) or keep it
 * on the AVX512-BF16 kernels (0). */
void mha_bf16_allow_amx(int on);

/* fp32 -> bf16 bits: round to nearest even, subnormals to signed zero, NaN stays NaN. */
uint16_t mha_bf16_round(float x);
float mha_bf16_to_float(uint16_t h);

/* Elements (uint16_t) of packed B for a (K, N) matrix; the buffer must be 64-byte aligned
 * (the fast path stores and loads it with aligned zmm moves). */
size_t mha_bf16_packed_b_elems(int K, int N);
/* Packs panels [p0, p1) of B (K, N) into dst (mha_bf16_packed_b_elems(K, N) elements).
 * B(k, n) = b[k * ldb + n], or b[n * ldb + k] when trans_b (B given as (N, K)). Threads may
 * pack disjoint panel ranges in parallel. */
void mha_bf16_pack_b(uint16_t *dst, const float *b, int ldb, int trans_b, int K, int N, int p0, int p1);
/* Panels of packed B: ceil(N / MHA_BF16_NR). */
static inline int mha_bf16_panels(int N) { return (N + MHA_BF16_NR - 1) / MHA_BF16_NR; }

/* Scratch elements (uint16_t) one mha_bf16_gemm call needs for M rows. */
size_t mha_bf16_scratch_elems(int M);
/* The calling thread's scratch for an mha_bf16_gemm of M rows: grown on demand and kept for
 * the thread's life (a warm step allocates nothing); NULL when out of memory. */
uint16_t *mha_bf16_thread_scratch(int M);
/* C (M, N) (row stride ldc) = start + A (M, K) @ B, B packed by mha_bf16_pack_b for (K, N);
 * start is C itself when accumulate, else bias (N) broadcast over the rows (zeros when bias
 * is NULL; C's old contents are then never read). A(m, k) = a[m * lda + k], or
 * a[k * lda + m] when trans_a. a_row_sums (M) may be NULL; otherwise a_row_sums[m] +=
 * the sum over k of the fp32 A(m, k), in double in k order (a linear layer's bias gradient
 * when A = dout^T, fused into the pass that packs A). Single-threaded; scratch holds
 * mha_bf16_scratch_elems(M) elements, 8-byte aligned. */
void mha_bf16_gemm(int M, int N, int K, const float *a, int lda, int trans_a,
                   const uint16_t *packed_b, float *c, int ldc, int accumulate, const float *bias,
                   float *a_row_sums, uint16_t *scratch);

/* mha_bf16_gemm with A already in bf16: C (M, N) (row stride ldc) = A (M, K) @ B, or C += A @ B
 * when accumulate. a holds rows of a_stride bf16 (even, >= K rounded up to even), A(m, k) = a[m a_stride + k];
 * rows up to M rounded up to MHA_BF16_MR are read (their products are not stored) and column K
 * of an odd K must hold zero. packed_b was packed by mha_bf16_pack_b for b_rows >= K rows
 * (only its first K are used; the row after an odd K is multiplied by that zero). The same
 * depth blocks as mha_bf16_gemm, so the same sums. Single-threaded. */
void mha_bf16_gemm_packed_a(int M, int N, int K, const uint16_t *a, int a_stride,
                            const uint16_t *packed_b, int b_rows, float *c, int ldc, int accumulate);

/* cblas_sgemm's row-major contract with bf16 products (the attention's products in the CPU
 * backend's mixed precision): C = alpha A B + beta C for beta 0 (C not read) or for
 * alpha = beta = 1; other combinations go to cblas_sgemm in fp32. Packs into per-thread
 * buffers, so OpenMP threads may call it concurrently. `order` must be CblasRowMajor. */
void mha_sgemm_bf16(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE trans_a, enum CBLAS_TRANSPOSE trans_b,
                    int M, int N, int K, float alpha, const float *a, int lda, const float *b, int ldb,
                    float beta, float *c, int ldc);

#endif
