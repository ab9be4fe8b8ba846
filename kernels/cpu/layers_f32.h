/* kernels/cpu/layers_f32.h: the float instantiation of the layer kernels (layers_impl.h),
 * named mha_<op>_f32; backend_cpu.c puts them in the Backend table. */
#ifndef MHA_KERNELS_CPU_LAYERS_F32_H
#define MHA_KERNELS_CPU_LAYERS_F32_H
#include <stddef.h>
#include <stdint.h>

#define REAL float
#define FN(name) mha_##name##_f32
#include "kernels/cpu/layers_api.h"
#undef FN
#undef REAL

/* on = 1 runs the portable softmax rows even where the AVX-512 rows (rows_avx512.h) could
 * run, so that tests compare the two on one machine; 0 (the default) picks by CPU. */
void mha_rows_force_portable(int on);
/* 1 when the AVX-512 softmax rows run (the CPU has them and they are not forced off). */
int mha_rows_fast(void);
/* 1 when the linear forward gives each row the same bits whatever the rows around it, N and
 * the thread count (a text the same output alone or in any batch): it runs on our own
 * product (gemm_f32.h: x86-64 CPUs with AVX2 and FMA), or OpenBLAS runs its AVX-512 kernels
 * (SkylakeX, Cooperlake: only where tests force OpenBLAS). Both are tested. Elsewhere (no
 * AVX2 and FMA, or another architecture) OpenBLAS's kernels may give a row other bits at
 * another position in a tile. See layers_impl.h. */
int mha_f32_rows_batch_invariant(void);
/* The fp32 linear forward on our own product (linear_f32.c): returns 1 when it ran (the CPU
 * has AVX2 and FMA: mha_f32_gemm_fast), 0 when it left the op to OpenBLAS. Same contract as
 * mha_linear_forward_post_f32. */
int mha_linear_forward_post_f32_own(float *out, float *pre, const float *inp, const float *w,
                                    const float *bias, int N, int IC, int OC, int act, float p_drop,
                                    uint64_t seed, const float *residual);
/* The fp32 linear backward's dinp on our own product (linear_f32.c), where it runs on the
 * AVX-512 tiles (mha_f32_gemm_wide): first w (OC, IC) packed transposed, over the OpenMP
 * threads when par, into the calling thread's buffer (valid until its next call), or NULL when
 * the product is left to OpenBLAS (also when that buffer cannot grow); then rows [n0, n1) of
 * dinp (N, IC) (+)= dout (N, OC) @ w (accumulate = 0 overwrites them). Each element is one
 * chain of FMAs over OC in order (from its old value when accumulating), whatever the rows
 * around it and the thread count. */
const void *mha_linear_dinp_pack_f32(const float *w, int IC, int OC, int par);
void mha_linear_dinp_rows_f32(float *dinp, const float *dout, const void *packed_wt, int n0, int n1, int IC, int OC,
                              int accumulate);

#endif
