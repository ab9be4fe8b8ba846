/* kernels/cpu/layers_f32.c: instantiates layers_impl.h for float (the CPU backend):
 * cblas_sgemm/sgemv, and vectorisable polynomial exp and erf (cpu_common.h) in the softmax and
 * GELU loops; and attention_impl.h once more with bf16 products (mixed precision). */
/* GCC does not if-convert float selects (the clamps in mha_expf/mha_erff) under its default
 * -ftrapping-math, which keeps those loops scalar. Nothing here reads FP exception flags,
 * so trapping math is off for this file (clang's default already). It must precede every
 * function so the inline helpers get the same options and still inline; it reaches named
 * functions (the *_range / *_row helpers), not OpenMP-outlined loop bodies. Values are
 * unchanged (no reassociation, no contraction). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
#endif
#include <math.h>
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/cpu/cpu_common.h"

#define REAL float
#define FN(name) mha_##name##_f32
#define GEMM cblas_sgemm
#define GEMV cblas_sgemv
/* the forward's product on our own kernel on every CPU with AVX2 and FMA (batch invariant, and
 * faster than OpenBLAS's AVX-512 kernels where those run) */
#define LINEAR_FORWARD_OWN mha_linear_forward_post_f32_own
/* and the backward's dinp on its AVX-512 tiles (faster than OpenBLAS's there) */
#define LINEAR_DINP_PACK mha_linear_dinp_pack_f32
#define LINEAR_DINP_ROWS mha_linear_dinp_rows_f32
#define R_EXP(x) mha_expf(x)
#define R_LOG(x) logf(x)
#define R_SQRT(x) sqrtf(x)
#define R_ERF(x) mha_erff(x)
/* Compute-bound helpers also get AVX-512 and AVX2/FMA clones (cpu_common.h). */
#define MHA_CLONES MHA_CPU_CLONES
/* Softmax rows without dropout and LayerNorm rows: AVX-512 intrinsics when the CPU has them
 * (rows_avx512.h). */
#include "kernels/cpu/rows_avx512.h"
#ifdef MHA_ROWS_AVX512
#define MHA_ROWS_FAST_DEGREE 7
#define MHA_LN_ROW_FAST mha_layernorm_row_avx512
#endif
static int rows_force_portable;
void mha_rows_force_portable(int on) { rows_force_portable = on; }
#define MHA_ROWS_FAST() (!rows_force_portable && mha_cpu_avx512())
int mha_rows_fast(void) {
#ifdef MHA_ROWS_AVX512
    return MHA_ROWS_FAST();
#else
    return 0;
#endif
}
#include "kernels/cpu/layers_impl.h"

/* The attention again, its products in bf16 (mha_sgemm_bf16): mha_attention_*_bf16, used by
 * the mixed-precision table (mha_cpu_backend_bf16). Softmax and its statistics stay fp32. */
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/layers_bf16.h"
#undef FN
#undef ATT_GEMM
#undef R_EXP
#define R_EXP(x) mha_expf_bf16(x)
#ifdef MHA_ROWS_FAST_DEGREE
#undef MHA_ROWS_FAST_DEGREE
#define MHA_ROWS_FAST_DEGREE 5
#endif
#undef MHA_ATT_BQ
/* Every query block packs K and V again for its products: with 256-row blocks (scratch
 * 256 x T floats per thread) texts up to 256 tokens pack them once per head. */
#define MHA_ATT_BQ 256
#define FN(name) mha_##name##_bf16
#define ATT_GEMM mha_sgemm_bf16
#include "kernels/cpu/scratch_impl.h"
#include "kernels/cpu/attention_impl.h"

int mha_f32_rows_batch_invariant(void) { return mha_f32_gemm_fast() || mha_openblas_avx512_kernels(); }
