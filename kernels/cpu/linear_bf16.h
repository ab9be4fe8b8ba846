/* kernels/cpu/linear_bf16.h: the CPU linear layer in mixed precision (bf16 products, fp32
 * accumulation); same contract as the linear entries of kernels/backend.h. */
#ifndef MHA_KERNELS_CPU_LINEAR_BF16_H
#define MHA_KERNELS_CPU_LINEAR_BF16_H

void mha_linear_forward_bf16(float *out, const float *inp, const float *w, const float *bias,
                             int N, int IC, int OC);
void mha_linear_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, int N, int IC, int OC);

#endif
