/* kernels/backend.h: the table of operations every compute backend fills.
 *
 * The model (model/) is written once against this table; kernels/cpu/ fills it
 * with OpenBLAS + OpenMP (the reference) and kernels/cuda/ with cuBLAS and our
 * own kernels. All pointers passed to ops live in the backend's memory
 * (host memory for the CPU backend, device memory for CUDA), including the
 * int arrays (token ids, lengths, labels).
 *
 * Dimension letters: B batch, T padded length of this batch, C d_model,
 * NH heads, HS = C / NH head size, F d_ff, V vocab, K classes, N = B*T rows.
 *
 * Conventions (llm.c style):
 *  - outputs first, inputs after; a `d` prefix marks a gradient.
 *  - every backward op ACCUMULATES (+=) into all of its gradient outputs,
 *    parameter and activation gradients alike; the caller zeroes them. Two
 *    exceptions overwrite an activation gradient, which saves the caller a
 *    zeroing pass over it: act_backward always, and linear_backward's dinp
 *    when its caller asks (dinp_accumulate = 0). Overwritten outputs are
 *    never read first, so they may hold anything (NaN included) before.
 *  - weights are stored as PyTorch's nn.Linear does: w (OC, IC), row-major.
 *  - rows t >= lengths[b] are padding. Ops that take `lengths` do no work for
 *    padded positions and write zeros there (attention output, pooling grads).
 */
#ifndef MHA_KERNELS_BACKEND_H
#define MHA_KERNELS_BACKEND_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>

enum { MHA_ACT_RELU = 0, MHA_ACT_GELU = 1 };              /* GELU: exact erf form */
enum { MHA_POOL_MEAN = 0, MHA_POOL_CLS = 1, MHA_POOL_MAX = 2 };
#define MHA_LN_EPS 1e-5f

/* One parameter tensor for Backend.adamw: elements [offset, offset + n) of the flat buffers,
 * with its weight decay (0 for biases, LayerNorm and embeddings, as the model decides). */
typedef struct {
    size_t offset, n;
    float weight_decay;
} AdamwTensor;

typedef struct Backend {
    const char *name;                                      /* "cpu" or "cuda" */
    int bf16;        /* 1: mixed precision, the products take bf16 inputs (train.precision) */
    int int8;        /* 1: inference only, the linear layers' forward products run in int8 */

    /* ---- memory: alloc returns NULL when out of memory ---- */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void (*to_device)(void *dst, const void *host_src, size_t bytes);
    void (*to_host)(void *host_dst, const void *src, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes);   /* within the backend */
    void (*zero)(void *p, size_t bytes);
    void (*sync)(void);
    /* A copy to the host that does not wait: the bytes of src, as the ops queued before this
     * call leave them, reach host_dst by the next to_host_wait(), which waits for the ops
     * queued before the latest such copy, not for those queued after it. host_dst is not to
     * be read before that. Copies land in the order they were asked for; at most
     * MHA_ASYNC_COPY_BYTES (16 copies) are held pending, and a copy that finds no room, or a
     * larger one, first delivers those pending (the larger one then waits, as to_host does).
     * The trainer reads each update's loss and gradient norm this way, one update late, so
     * that the device has the next update's work while the host logs the last. */
    void (*to_host_async)(void *host_dst, const void *src, size_t bytes);
    void (*to_host_wait)(void);

    /* ---- linear layer ----
     * out (N, OC) = inp (N, IC) @ w^T + bias;  w (OC, IC), bias (OC) or NULL. out overwritten. */
    void (*linear_forward)(float *out, const float *inp, const float *w, const float *bias,
                           int N, int IC, int OC);
    /* dinp (N, IC) += dout @ w (dinp_accumulate = 1) or = dout @ w (0: overwritten);
     * dw (OC, IC) += dout^T @ inp;  dbias (OC) += column sums of dout.
     * dinp or dbias may be NULL (not needed). */
    void (*linear_backward)(float *dinp, float *dw, float *dbias, const float *dout,
                            const float *inp, const float *w, int N, int IC, int OC,
                            int dinp_accumulate);

    /* ---- embeddings ----
     * out (B, T, C) = tok[ids[b,t]] + pos[t];  tok (V, C), pos (maxT, C) with maxT >= T. */
    void (*embed_forward)(float *out, const int32_t *ids, const float *tok, const float *pos,
                          int B, int T, int C);
    /* dtok (V, C) += scatter of dout by ids;  dpos (maxT, C) += sum over b (dpos may be NULL).
     * Deterministic: the result does not depend on thread scheduling. */
    void (*embed_backward)(float *dtok, float *dpos, const float *dout, const int32_t *ids,
                           int B, int T, int C);

    /* ---- LayerNorm over the last dim, eps = MHA_LN_EPS ----
     * out (N, C); saves mean (N), rstd (N) for backward. */
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, int N, int C);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, int N, int C);

    /* ---- elementwise ---- */
    void (*act_forward)(float *out, const float *inp, size_t n, int act);
    /* dinp (n) = dout * act'(inp): overwritten, and may be dout itself (in place) */
    void (*act_backward)(float *dinp, const float *dout, const float *inp, size_t n, int act);
    void (*add)(float *out, const float *a, const float *b, size_t n);      /* out = a + b */
    void (*accumulate)(float *dst, const float *src, size_t n);             /* dst += src */
    /* Inverted dropout with a counter-based RNG: element i is kept when
     * mha_rng_uniform(seed, offset + i) >= p, and scaled by 1/(1-p). p == 0 copies. */
    void (*dropout_forward)(float *out, const float *inp, size_t n, float p,
                            uint64_t seed, uint64_t offset);
    /* dinp += dout * keep / (1 - p): into a zeroed dinp, the same values as dropout_forward
     * of dout with the same seed and offset (the model uses that to skip the zeroing). */
    void (*dropout_backward)(float *dinp, const float *dout, size_t n, float p,
                             uint64_t seed, uint64_t offset);

    /* ---- multi-head self-attention on the fused qkv ----
     * qkv (B, T, 3C): columns [0,C) are q, [C,2C) k, [2C,3C) v; head h uses columns
     * h*HS .. h*HS+HS-1 of each. out (B, T, C) with heads concatenated the same way.
     * Scores scaled by 1/sqrt(HS); key j of example b is valid when j < lengths[b]
     * (and j <= i when causal). Query rows i >= lengths[b] get zeros.
     * Attention dropout (p_drop > 0) drops probability P[b,h,i,j] when
     * mha_rng_uniform(seed, ((b*NH + h)*T + i)*T + j) < p_drop, scaling kept ones by 1/(1-p).
     *
     * Materialising path: att (B, NH, T, T) holds the softmax probabilities (before
     * dropout; zeros at masked entries). datt is scratch of the same size.
     * Fused path: never holds (T, T); lse (B, NH, T) saves the log-sum-exp per query row. */
    void (*attention_forward_math)(float *out, float *att, const float *qkv, const int32_t *lengths,
                                   int B, int T, int C, int NH, int causal,
                                   float p_drop, uint64_t seed);
    void (*attention_backward_math)(float *dqkv, float *datt, const float *dout, const float *qkv,
                                    const float *att, const int32_t *lengths,
                                    int B, int T, int C, int NH, int causal,
                                    float p_drop, uint64_t seed);
    void (*attention_forward_fused)(float *out, float *lse, const float *qkv, const int32_t *lengths,
                                    int B, int T, int C, int NH, int causal,
                                    float p_drop, uint64_t seed);
    void (*attention_backward_fused)(float *dqkv, const float *dout, const float *out,
                                     const float *qkv, const float *lse, const int32_t *lengths,
                                     int B, int T, int C, int NH, int causal,
                                     float p_drop, uint64_t seed);

    /* ---- pooling over real tokens t < lengths[b] ----
     * out (B, C) from inp (B, T, C). MEAN: average; CLS: row t = 0; MAX: per-channel max,
     * argmax (B, C) records the winning t (argmax may be NULL for other modes). */
    void (*pool_forward)(float *out, int32_t *argmax, const float *inp, const int32_t *lengths,
                         int B, int T, int C, int mode);
    void (*pool_backward)(float *dinp, const float *dout, const int32_t *argmax,
                          const int32_t *lengths, int B, int T, int C, int mode);

    /* ---- softmax cross-entropy with label smoothing eps ----
     * logits (B, K), labels (B) -> losses (B) (per example, unscaled), probs (B, K);
     * dlogits (B, K) += (probs - target) * dscale where target = (1-eps)*onehot + eps/K.
     * dlogits may be NULL (evaluation). */
    void (*crossentropy)(float *losses, float *probs, float *dlogits, const float *logits,
                         const int32_t *labels, int B, int K, float smoothing, float dscale);

    /* ---- optimizer ----
     * One update is queued without the host reading anything back: stats (2 doubles) and
     * grad_scale (1 float) live in backend memory.
     * sum_into: *acc += the sum of x (n) in index order, in double (the update's loss sum,
     * stats[0], one batch at a time).
     * grad_norm: stats[1] = sum of squares of g (n) in double (the global norm is its square
     * root); *grad_scale = mha_grad_scale(stats[0], stats[1], clip_norm) (below): the
     * clipping factor, NaN when the update is to be skipped. */
    void (*sum_into)(double *acc, const float *x, size_t n);
    void (*grad_norm)(double *stats, float *grad_scale, const float *g, size_t n, float clip_norm);
    /* AdamW as torch.optim.AdamW on the tensors[0..n_tensors) of the flat buffers p, g, m, v
     * (one call for the whole model, as PyTorch's multi-tensor path): each gradient element is
     * multiplied by *grad_scale first (gradient clipping; 1 for none), then p -= lr*wd*p with
     * the tensor's own wd, the m, v moments, and the bias-corrected step at t (1-based).
     * Elements outside every tensor are not touched, and none at all when *grad_scale is not
     * finite (a skipped update). grad_scale is in backend memory. */
    void (*adamw)(float *p, const float *g, float *m, float *v, const AdamwTensor *tensors,
                  int n_tensors, float lr, float beta1, float beta2, float eps, const float *grad_scale, int t);
    void (*scale)(float *x, size_t n, float s);                             /* x *= s */

    /* ---- optional (NULL when the backend has none) ----
     * The most device memory the backend ever held at once through alloc() and its own
     * scratch buffers, in bytes (the CUDA backend; library workspaces are not counted). */
    size_t (*peak_bytes)(void);
    /* A linear layer fused with what follows it in the model (training and inference):
     *   y = inp (N, IC) @ w (OC, IC)^T + bias (OC);   pre (N, OC) = y when pre is not NULL
     *   (the activation's input, which act_backward reads);
     *   out (N, OC) = dropout(act(y)) + residual (N, OC),
     * act = MHA_ACT_RELU or MHA_ACT_GELU, or -1 for none; dropout as dropout_forward with
     * p_drop, seed and offset 0 (p_drop 0: none); residual may be NULL. The same values, bit
     * for bit, as linear_forward, act_forward, dropout_forward and add in turn, in fewer passes
     * over memory (the CPU applies the rest to each block of rows right after its product,
     * while it is in cache; CUDA in one kernel after the GEMM). out must not alias inp, pre
     * or residual. */
    void (*linear_forward_post)(float *out, float *pre, const float *inp, const float *w,
                                const float *bias, int N, int IC, int OC, int act, float p_drop,
                                uint64_t seed, const float *residual);
    /* A promise from the caller (inference): the bytes [p, p + bytes), the model's parameters,
     * do not change until the next call; p NULL ends it. The backend may then use what it
     * derived from them earlier without checking them again (the CPU tables: the packed
     * weights of their int8, fp32 and bf16 products of our own, kernels/cpu/packed_cache.h).
     * Called while no op runs. */
    void (*weights_fixed)(const void *p, size_t bytes);
    /* The kernel behind attention_*_fused for heads of size hs, in a few words for the
     * start-up line (CUDA: "tf32x3 tensor cores", "FFMA", "bf16 tensor cores", or "FFMA: the
     * bf16 tiles do not fit this GPU's shared memory"). */
    const char *(*attention_kernel)(int hs);
} Backend;

/* The interface of this table as the programs and their CUDA module (kernels/cuda_loader.c)
 * must share it: MHA_BACKEND_ABI is raised whenever a field of Backend changes meaning or
 * order, and the size of the table counts too. The loader refuses a module built with
 * another. */
#define MHA_BACKEND_ABI 2
#define MHA_BACKEND_ABI_ID ((unsigned long)MHA_BACKEND_ABI << 16 | (unsigned long)sizeof(Backend))

/* Bytes Backend.to_host_async may hold pending. */
#define MHA_ASYNC_COPY_BYTES 4096

/* Examples per batch the cuda backend takes: its attention kernels put them on gridDim.z. */
#define MHA_CUDA_MAX_BATCH 65535

#ifdef __CUDACC__
#define MHA_HOST_DEVICE __host__ __device__
#else
#define MHA_HOST_DEVICE
#endif
/* The gradient multiplier of an update whose loss sum is loss_sum and whose gradients' sum of
 * squares is sumsq: NaN (skip the update) when either is not finite; clip_norm / (norm + 1e-6)
 * when clip_norm > 0 and norm = sqrt(sumsq) exceeds it (torch's clip_grad_norm_); else 1. The
 * backends' grad_norm computes it where the stats are, the trainer again from the copies it
 * reads back, so both agree. */
static inline MHA_HOST_DEVICE float mha_grad_scale(double loss_sum, double sumsq, float clip_norm) {
    double norm = sqrt(sumsq);
    if (!isfinite(loss_sum) || !isfinite(norm)) return NAN;
    if (clip_norm > 0.0f && norm > clip_norm) return (float)(clip_norm / (norm + 1e-6));
    return 1.0f;
}

/* The CPU backend; threads <= 0 means all cores. Sets OpenMP and OpenBLAS thread
 * counts so they do not oversubscribe each other. */
const Backend *mha_cpu_backend(int threads);
/* The CPU backend in mixed precision: the products of the linear layers and of the attention
 * take bf16 inputs with fp32 accumulation (kernels/cpu/gemm_bf16.h, layers_bf16.h);
 * everything else is the fp32 backend. NULL, with a
 * reason in `why`, when the CPU lacks AVX512_BF16 (the portable bf16 loop would be slower
 * than fp32). */
const Backend *mha_cpu_backend_bf16(int threads, char *why, size_t why_len);
/* The CPU backend for inference with int8 linear layers (mha-predict --precision int8): each
 * linear forward quantizes its input per row and its weights per output channel to int8 and
 * multiplies them with int32 accumulation (kernels/cpu/gemm_int8.h); the rest is the bf16
 * table (the fp32 one on a CPU without AVX512_BF16). Forward only: nothing may train through
 * it. Its bf16 flag is that of the table it builds on. NULL, with a reason in `why`, when
 * the CPU lacks AVX512_VNNI (or mha_i8_force_portable switched the fast path off). */
const Backend *mha_cpu_backend_int8(int threads, char *why, size_t why_len);

/* Called first in main(): when neither OMP_WAIT_POLICY nor GOMP_SPINCOUNT is set, sets
 * OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT=2000 and re-executes the program (OpenMP reads
 * them only at load time). A waiting thread then spins (2,000 of libgomp's spins: about 20 us
 * by its estimate; none with more threads than cores; libomp ignores the count) and sleeps: it
 * catches the next parallel region of a step without the cost of a wake-up, and does not take
 * the cores from other processes for long. Measured on a 2-core VM, 2 threads, shopping10, 300 updates:
 * - alone: bf16 training 190-211k tokens/s against 165-179k with no spinning (PASSIVE alone),
 *   fp32 102-104k against 94-95k; spinning for minutes (ACTIVE) 196-219k;
 * - two trainings at once: 98-104k each against 106-112k passive, 84-88k with 5000 spins;
 * - an older measurement, with libgomp's default spinning (300,000) on a busy machine:
 *   4.1k tokens/s against 22.9k passive.
 * OMP_WAIT_POLICY=ACTIVE keeps spinning on a dedicated machine; either variable set by the
 * user is left as it is. */
void mha_cpu_set_thread_wait(char **argv);

/* The CUDA backend, or NULL when the binary was built without CUDA, no device is visible, the
 * programs' CUDA module cannot be opened (kernels/cuda_loader.c), or the GPU cannot run its
 * kernels (before sm_80); `why` (may be NULL) receives a one-line reason.
 * tf32: the fp32 GEMMs may use TF32 tensor cores (cuBLAS's math mode of the backend's one
 * handle: it holds for the fp32 table from this call on, until a call with the other value).
 * bf16: mixed precision (train.precision = "bf16"): the linear layers' GEMMs and the fused
 * attention's products take bf16 inputs with fp32 accumulation; parameters, gradients,
 * optimizer state, activations, LayerNorm and softmax statistics stay fp32. The fp32 and the
 * bf16 tables can be used side by side (they share memory and the device). */
const Backend *mha_cuda_backend(int tf32, int bf16, char *why, size_t why_len);
/* 1 when a CUDA device is visible (whether or not this build can use it); 0 without CUDA. */
int mha_cuda_device_visible(void);

#endif
