/* kernels/cpu/gemm_f32.h: an fp32 matrix product of our own for the linear layer's forward
 * pass, on x86-64 CPUs with AVX2 and FMA, and for its backward's dinp where they have AVX-512
 * (gemm_f32.c).
 *
 * Why not OpenBLAS there: its AVX2 kernels (Haswell, Zen) give a row of y = x @ w^T other
 * bits at another position in their tiles, so a text's output would depend on the texts
 * batched with it. Here every element of y is one chain of FMAs over k = 0 .. IC-1 in order,
 * then + bias: the same operations for a row alone, at any position of any batch, on any
 * thread. On CPUs with AVX-512 it is also faster than OpenBLAS's AVX-512 kernels (SkylakeX),
 * which keep a row's bits with the padding rule of layers_impl.h only (shopping10's fp32
 * training step on a Sapphire Rapids VM, 2 threads: +4% with the forward's products here,
 * +6-10% in all with the backward's dinp too; docs/benchmarks.md). Its dw = dout^T @ inp stays
 * on OpenBLAS: on these tiles (x read transposed, inp packed) the step was 5-10% slower; so do
 * the attention's small products (OpenBLAS's small-matrix kernels, which do not pack, win there).
 *
 * Packed weights: for y (N, OC) = x (N, IC) @ w (OC, IC)^T + bias, w is packed in panels of
 * MHA_F32_NR output channels: panel p holds, for each k in order, the MHA_F32_NR floats
 * w[p * NR + j][k] (zeros past OC), so one panel is IC x NR floats. */
#ifndef MHA_KERNELS_CPU_GEMM_F32_H
#define MHA_KERNELS_CPU_GEMM_F32_H
#include <stddef.h>

#define MHA_F32_MR 6    /* rows of y per micro-tile */
#define MHA_F32_WIDE_MR 12   /* rows of y per AVX-512 micro-tile (two panels: 32 columns) */
#define MHA_F32_NR 16   /* output channels per panel (two ymm vectors) */

/* 1 when the fp32 linear forward runs on this kernel: the CPU has AVX2 and FMA (and
 * mha_f32_gemm_force did not say -1). */
int mha_f32_gemm_fast(void);
/* 1 when it runs on the AVX-512 tiles (mha_f32_gemm_fast, the CPU has AVX-512 and
 * mha_f32_gemm_force_avx2 did not say 1): then the linear backward's dinp = dout @ w runs on
 * this kernel too, where it beats OpenBLAS's AVX-512 kernels. */
int mha_f32_gemm_wide(void);
/* 1 when the CPU can run this kernel at all (AVX2 and FMA, x86-64). */
int mha_f32_gemm_cpu_supported(void);
/* 1 when OpenBLAS picked its AVX-512 kernels (SkylakeX, Cooperlake) for this CPU. */
int mha_openblas_avx512_kernels(void);
/* Tests: -1 leaves every product to OpenBLAS; 0 (the default) or 1 runs this kernel wherever
 * the CPU can. */
void mha_f32_gemm_force(int mode);

/* 1 when the CPU has AVX-512 (AVX512F): mha_f32_gemm_nt then runs 12 x 32 micro-tiles in zmm
 * registers, two panels at once, with the same bits as the AVX2 tiles. */
int mha_f32_gemm_wide_supported(void);
/* Tests: 1 keeps mha_f32_gemm_nt on the AVX2 tiles even where AVX-512 is there, 0 (the default)
 * lets it choose. */
void mha_f32_gemm_force_avx2(int on);

/* Panels of packed w: ceil(OC / MHA_F32_NR). */
static inline int mha_f32_panels(int OC) { return (OC + MHA_F32_NR - 1) / MHA_F32_NR; }
/* Floats of packed w for (OC, IC). */
size_t mha_f32_packed_w_elems(int OC, int IC);
/* Packs panels [p0, p1) of w (OC, IC) into dst (64-byte aligned, mha_f32_packed_w_elems
 * floats); threads may pack disjoint panel ranges at once. */
void mha_f32_pack_w(float *dst, const float *w, int OC, int IC, int p0, int p1);
/* Packs w (OC, IC)'s transpose, (IC, OC), as mha_f32_pack_w packs a matrix of that shape
 * (mha_f32_packed_w_elems(IC, OC) floats, mha_f32_panels(IC) panels), from rows [k0, k1) of w
 * (threads may pack disjoint row ranges at once): the linear backward's w for dinp = dout @ w. */
void mha_f32_pack_wt(float *dst, const float *w, int OC, int IC, int k0, int k1);
/* y (M, OC) (row stride ldy) = x (M, IC) (row stride ldx) @ w^T + bias (OC, or NULL for
 * none), w packed by mha_f32_pack_w into a buffer aligned to 64 bytes (its panels are read
 * with aligned loads); accumulate = 1: y += that instead, each element's chain of FMAs
 * starting from its value in y. Single-threaded; needs mha_f32_gemm_cpu_supported(). */
void mha_f32_gemm_nt(int M, int OC, int IC, const float *x, size_t ldx, const float *packed_w,
                     const float *bias, float *y, size_t ldy, int accumulate);

#endif
