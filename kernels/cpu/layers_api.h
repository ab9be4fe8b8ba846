/* kernels/cpu/layers_api.h: prototypes of the per-layer CPU kernels for one scalar type.
 * A template: the includer defines REAL (float or double) and FN(name) (the suffixed
 * function name), e.g. layers_f32.h and layers_f64.h. Semantics are those of the same
 * entries in kernels/backend.h, with REAL in place of float. */

void FN(linear_forward)(REAL *out, const REAL *inp, const REAL *w, const REAL *bias,
                        int N, int IC, int OC);
/* pre = inp @ w^T + bias (when pre is not NULL); out = dropout(act(pre)) + residual
 * (backend.h: linear_forward_post). */
void FN(linear_forward_post)(REAL *out, REAL *pre, const REAL *inp, const REAL *w, const REAL *bias,
                             int N, int IC, int OC, int act, REAL p_drop, uint64_t seed,
                             const REAL *residual);
/* The post-op of n consecutive output elements on one thread, the first being element `first`
 * of the layer's (N, OC) output: pre (n) = out when pre is not NULL; out = act(out) (act < 0:
 * none); dropout with p_drop (0: none), element i's counter first + i (dropout_forward with
 * offset 0 over the whole output); out += residual (n) when residual is not NULL. The same
 * values as act_forward, dropout_forward and the backend's add. */
void FN(linear_post)(REAL *out, REAL *pre, const REAL *residual, size_t n, int act, REAL p_drop,
                     uint64_t seed, uint64_t first);
void FN(linear_backward)(REAL *dinp, REAL *dw, REAL *dbias, const REAL *dout,
                         const REAL *inp, const REAL *w, int N, int IC, int OC,
                         int dinp_accumulate);
/* dst (C) += column sums of src (N, C), summed in double in row order. */
void FN(colsum_acc)(REAL *dst, const REAL *src, int N, int C);
void FN(embed_forward)(REAL *out, const int32_t *ids, const REAL *tok, const REAL *pos,
                       int B, int T, int C);
void FN(embed_backward)(REAL *dtok, REAL *dpos, const REAL *dout, const int32_t *ids,
                        int B, int T, int C);
void FN(layernorm_forward)(REAL *out, REAL *mean, REAL *rstd, const REAL *inp,
                           const REAL *w, const REAL *b, int N, int C);
void FN(layernorm_backward)(REAL *dinp, REAL *dw, REAL *db, const REAL *dout,
                            const REAL *inp, const REAL *w, const REAL *mean,
                            const REAL *rstd, int N, int C);
void FN(act_forward)(REAL *out, const REAL *inp, size_t n, int act);
void FN(act_backward)(REAL *dinp, const REAL *dout, const REAL *inp, size_t n, int act);
void FN(dropout_forward)(REAL *out, const REAL *inp, size_t n, REAL p,
                         uint64_t seed, uint64_t offset);
void FN(dropout_backward)(REAL *dinp, const REAL *dout, size_t n, REAL p,
                          uint64_t seed, uint64_t offset);
void FN(attention_forward_math)(REAL *out, REAL *att, const REAL *qkv, const int32_t *lengths,
                                int B, int T, int C, int NH, int causal,
                                REAL p_drop, uint64_t seed);
void FN(attention_backward_math)(REAL *dqkv, REAL *datt, const REAL *dout, const REAL *qkv,
                                 const REAL *att, const int32_t *lengths,
                                 int B, int T, int C, int NH, int causal,
                                 REAL p_drop, uint64_t seed);
void FN(attention_forward_fused)(REAL *out, REAL *lse, const REAL *qkv, const int32_t *lengths,
                                 int B, int T, int C, int NH, int causal,
                                 REAL p_drop, uint64_t seed);
void FN(attention_backward_fused)(REAL *dqkv, const REAL *dout, const REAL *out,
                                  const REAL *qkv, const REAL *lse, const int32_t *lengths,
                                  int B, int T, int C, int NH, int causal,
                                  REAL p_drop, uint64_t seed);
void FN(pool_forward)(REAL *out, int32_t *argmax, const REAL *inp, const int32_t *lengths,
                      int B, int T, int C, int mode);
void FN(pool_backward)(REAL *dinp, const REAL *dout, const int32_t *argmax,
                       const int32_t *lengths, int B, int T, int C, int mode);
void FN(crossentropy)(REAL *losses, REAL *probs, REAL *dlogits, const REAL *logits,
                      const int32_t *labels, int B, int K, REAL smoothing, REAL dscale);
