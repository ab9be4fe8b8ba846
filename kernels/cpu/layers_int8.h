/* kernels/cpu/layers_int8.h: the CPU layer that runs in int8 at inference (linear_int8.c):
 * the linear layer's forward pass with int8 products (kernels/cpu/gemm_int8.h). Same
 * contracts as linear_forward and linear_forward_post in kernels/backend.h, up to the
 * quantization's rounding. */
#ifndef MHA_KERNELS_CPU_LAYERS_INT8_H
#define MHA_KERNELS_CPU_LAYERS_INT8_H
#include <stddef.h>
#include <stdint.h>

void mha_linear_forward_int8(float *out, const float *inp, const float *w, const float *bias,
                             int N, int IC, int OC);
void mha_linear_forward_post_int8(float *out, float *pre, const float *inp, const float *w,
                                  const float *bias, int N, int IC, int OC, int act, float p_drop,
                                  uint64_t seed, const float *residual);
#endif
