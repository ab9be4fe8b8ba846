/* kernels/cpu/gemm_int8.h: the linear layer's product with int8 inputs and int32 accumulation
 * on the CPU, for inference (mha-predict --precision int8).
 *
 * y (M, N) = x (M, K) @ W (N, K)^T + bias, computed as
 *   y[m][n] = (float)(acc[m][n] - 128 * wsum[n]) * (sx[m] * sw[n]) + bias[n]
 *   acc[m][n] = sum_k xu[m][k] * wq[n][k]      (exact, int32)
 * where each row of x is quantized symmetrically on its own (dynamic, per token):
 *   sx[m] = max_k |x[m][k]| / 127,  xq = rint(x * (127 / max_k |x[m][k]|)) in [-127, 127]
 *   (nearest even; a row whose max is below 2^-100 is scaled by 2^100 first),  xu = xq + 128
 * and each row of W (an output column) likewise: sw[n], wq[n][k] in [-127, 127] (int8),
 * wsum[n] = sum_k wq[n][k]; K <= MHA_I8_MAX_K. A NaN in a row is ignored by its max and
 * quantizes to +127 (an all-NaN row to zeros): int8 does not propagate NaN. The +128 makes x unsigned, as AVX512-VNNI's vpdpbusd wants
 * (unsigned x signed bytes); subtracting 128 wsum undoes it exactly. A row of zeros has scale
 * 0 and quantizes to zeros.
 *
 * The fast path (x86-64 with AVX512_VNNI, AVX512BW and AVX512VL, chosen at run time) and the portable C
 * path compute bit-identical results: the integer part is exact, and the float steps (the
 * quantization's x * (127 / max), rounded to nearest even; the scaling) are the same
 * operations in the same order.
 *
 * Packed W (mha_i8_pack_w): panels of MHA_I8_NR output columns; panel p holds, for each group
 * of 4 k (kq), the 32 columns' 4 bytes (wq[n][4kq..4kq+3]) in column order: (Kp/4, NR, 4),
 * Kp = K rounded up to a multiple of 4, zeros past K and past N; then sw (Np floats) and wsum
 * (Np int32), Np = panels * NR. */
#ifndef MHA_KERNELS_CPU_GEMM_INT8_H
#define MHA_KERNELS_CPU_GEMM_INT8_H

#include <stddef.h>
#include <stdint.h>

#define MHA_I8_NR 32   /* output columns per panel */
#define MHA_I8_MR 8    /* rows per micro-tile */
/* The deepest product: |acc| <= 255 * 127 * K must fit in int32 (K < 66312). Deeper layers
 * run in fp32 (linear_int8.c). */
#define MHA_I8_MAX_K 65536

/* 1 when the fast AVX512-VNNI path is used (CPU support, not forced off). */
int mha_i8_fast(void);
/* 1 when this CPU (and OS) support AVX512_VNNI, whatever mha_i8_force_portable says. */
int mha_i8_cpu_supported(void);
/* Tests: force the portable path (1) or allow the fast one again (0). */
void mha_i8_force_portable(int on);
/* 1 when this CPU has AMX-INT8 and the process may use it (cpu_features.h: mha_cpu_amx). */
int mha_i8_amx_supported(void);
/* 1 when the fast path runs its AMX kernels (16 rows x 32 columns per tile step; the same
 * bits as the AVX512-VNNI kernels: the sums are exact). */
int mha_i8_amx(void);
/* Tests and benchmarks: let the fast path use AMX where supported (1, the default) or not (0). */
void mha_i8_allow_amx(int on);

static inline int mha_i8_panels(int N) { return (N + MHA_I8_NR - 1) / MHA_I8_NR; }
/* Bytes of packed W for W (N, K); the buffer must be 64-byte aligned. */
size_t mha_i8_packed_w_bytes(int N, int K);
/* Quantizes and packs panels [p0, p1) of W (N, K) (row stride ldw) into dst. Threads may pack
 * disjoint panel ranges in parallel. */
void mha_i8_pack_w(void *dst, const float *w, int ldw, int N, int K, int p0, int p1);

/* Scratch bytes one mha_i8_gemm call needs for M rows. */
size_t mha_i8_scratch_bytes(int M, int K);
/* y (M, N) (row stride ldy) = x (M, K) (row stride ldx) @ W^T + bias (N, may be NULL), W packed
 * by mha_i8_pack_w for (N, K). Single-threaded; scratch holds mha_i8_scratch_bytes(M, K)
 * bytes, 64-byte aligned. */
void mha_i8_gemm(int M, int N, int K, const float *x, int ldx, const void *packed_w, const float *bias,
                 float *y, int ldy, void *scratch);

/* One row of x quantized as above: xu (K, uint8), returns the scale sx (0 for a zero row).
 * Exposed for the tests. */
float mha_i8_quantize_row(uint8_t *xu, const float *x, int K);

#endif
