/* kernels/cpu/layers_bf16.h: the CPU layers whose products run in mixed precision (bf16
 * inputs, fp32 accumulation): the linear layer (linear_bf16.c) and the attention (the
 * attention_impl.h instantiated over mha_sgemm_bf16, in layers_f32.c).
 * Same contracts as the entries of kernels/backend.h. */
#ifndef MHA_KERNELS_CPU_LAYERS_BF16_H
#define MHA_KERNELS_CPU_LAYERS_BF16_H
#include <stdint.h>

void mha_linear_forward_bf16(float *out, const float *inp, const float *w, const float *bias,
                             int N, int IC, int OC);
void mha_linear_forward_post_bf16(float *out, float *pre, const float *inp, const float *w,
                                  const float *bias, int N, int IC, int OC, int act, float p_drop,
                                  uint64_t seed, const float *residual);
void mha_linear_backward_bf16(float *dinp, float *dw, float *dbias, const float *dout,
                              const float *inp, const float *w, int N, int IC, int OC,
                              int dinp_accumulate);

void mha_attention_forward_math_bf16(float *out, float *att, const float *qkv, const int32_t *lengths,
                                     int B, int T, int C, int NH, int causal, float p_drop, uint64_t seed);
void mha_attention_backward_math_bf16(float *dqkv, float *datt, const float *dout, const float *qkv,
                                      const float *att, const int32_t *lengths, int B, int T, int C, int NH,
                                      int causal, float p_drop, uint64_t seed);
void mha_attention_forward_fused_bf16(float *out, float *lse, const float *qkv, const int32_t *lengths,
                                      int B, int T, int C, int NH, int causal, float p_drop, uint64_t seed);
/* The fused forward with K, V and the probabilities packed once (attention_bf16.c): the same
 * function as mha_attention_forward_fused_bf16, bit for bit; the backend table's entry. */
void mha_attention_forward_packed_bf16(float *out, float *lse, const float *qkv, const int32_t *lengths,
                                       int B, int T, int C, int NH, int causal, float p_drop, uint64_t seed);
void mha_attention_backward_fused_bf16(float *dqkv, const float *dout, const float *out, const float *qkv,
                                       const float *lse, const int32_t *lengths, int B, int T, int C, int NH,
                                       int causal, float p_drop, uint64_t seed);

#endif
