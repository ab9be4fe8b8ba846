/* model/classifier.h: the Transformer classifier (docs/model.md) on a backend:
 * parameters, gradients and activations in backend memory, forward and backward
 * written once against the Backend table. */
#ifndef MHA_MODEL_CLASSIFIER_H
#define MHA_MODEL_CLASSIFIER_H

#include <stdint.h>
#include "kernels/backend.h"
#include "model/params.h"

/* Activations of one encoder block; every (N, .) tensor has N = B*T rows. */
typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd; /* (N, C), (N), (N): LN1 output (post: after the attention residual) */
    float *qkv;                       /* (N, 3C) fused projection */
    float *atty;                      /* (N, C) attention output, heads concatenated */
    float *att;                       /* (B, NH, T, T) probabilities, math path only */
    float *lse;                       /* (B, NH, T) log-sum-exp, fused path only */
    float *attproj;                   /* (N, C) output projection, after dropout (*) */
    float *res1;                      /* (N, C) first residual sum */
    float *fc1;                       /* (N, F) before the activation (**) */
    float *fch;                       /* (N, F) after the activation */
    float *fc2;                       /* (N, C) second projection, after dropout (*)
                                       * (*) only when the model does NOT fuse its linear
                                       * layers; NULL when it does (Model.fused_linear): the
                                       * projections then go straight into res1, res2;
                                       * (**) NULL in forward-only models that fuse */
    float *res2;                      /* (N, C) second residual sum */
    float *ln2, *ln2_mean, *ln2_rstd; /* (N, C), (N), (N): post-LN: LN2(res2), the block's
                                       * output; pre-LN: LN2(res1), the feed-forward's input
                                       * (res2 is then the block's output) */
} LayerActs;

typedef struct Model {
    ModelDims d;
    const Backend *be;      /* fixed at creation: the activations are allocated for its ops */
    int fused_linear;       /* be has linear_forward_post: each linear layer is one call */
    ParamLayout lay;
    float *params;          /* (lay.total) */
    float *grads;           /* (lay.total); NULL in a forward-only model */
    float *pos_table;       /* (P, C) sinusoidal table, or NULL with learned positions */

    /* activations, sized for Bmax x Tmax */
    int Bmax, Tmax;
    int B, T;               /* shape of the last forward */
    int32_t *ids, *lengths, *labels;  /* (B, T), (B), (B) in backend memory */
    float *emb;             /* (N, C) embedding sum after dropout */
    LayerActs *acts;        /* (L) */
    float *lnf, *lnf_mean, *lnf_rstd;  /* (N, C), (N), (N) pre-LN final norm */
    float *pooled;          /* (B, C) */
    int32_t *argmax;        /* (B, C) max pooling winners */
    float *logits, *probs, *losses;    /* (B, K), (B, K), (B) */
    /* gradient scratch */
    float *dx, *dy, *dz;    /* (N, C) each: the backward's rotating scratch (model_backward
                             * says which holds what at each step) */
    float *dqkv;            /* (N, 3C) */
    float *dff;             /* (N, F): d fch, then d fc1 in place */
    float *datt;            /* (B, NH, T, T) math path scratch */
    float *dpooled, *dlogits; /* (B, C), (B, K) */
    /* host copies of the last forward's outputs */
    float *h_probs, *h_losses;  /* (Bmax, K), (Bmax) */
    /* data-parallel evaluation (model/evaluate.c): see model_replicas */
    struct Model *replicas;     /* (n_replicas) forward-only replicas, freed with the model */
    int n_replicas;
    const struct Model *replica_of;  /* in a replica: the model whose params it reads */
    int forward_only;           /* no gradients, no backward buffers (prediction, replicas) */
    int backward_ready;         /* the last forward kept what model_backward reads (train, labels) */
    int loss_ready;             /* the last forward had labels (model_loss_sum) */
} Model;

/* Allocates parameters (uninitialised), gradients and activations for batches of up to
 * Bmax examples of up to Tmax tokens. Returns 0, or MHA_EXIT_DATA with a message naming
 * the bytes requested when the backend is out of memory. */
int model_create(Model *m, const ModelDims *d, const Backend *be, int Bmax, int Tmax,
                 int decay_embeddings, int decay_norms, MhaError *err);
/* A model for forward passes only (prediction, evaluation): no gradients (grads NULL), no
 * backward buffers, no fc1 on a fusing backend; model_backward aborts. */
int model_create_forward_only(Model *m, const ModelDims *d, const Backend *be, int Bmax, int Tmax,
                              MhaError *err);
void model_destroy(Model *m);
/* Grows m->replicas to n forward-only replicas of m, for threads running forward passes
 * at once (model/evaluate.c): each has its own activations (Bmax x Tmax) and reads m's
 * parameters, shared and not copied, so it always runs m's current weights. A replica has
 * no gradients (forward, model_attention_weights only); model_destroy(m) frees them.
 * Returns how many m has: fewer than n when memory runs out. */
int model_replicas(Model *m, int n);
/* Initialise parameters on the host with the seed and upload them. */
void model_init_params(Model *m, uint64_t seed);

/* Forward on a host batch (ids (B, T), lengths (B), labels (B) or NULL).
 * train == 0: fills h_probs (B, K), and h_losses (B) when labels are given (the device's
 * probs and losses are there either way).
 * train != 0: dropout with dropout_seed, and what model_backward needs; nothing is copied to
 * the host, so a training step queues its forward and backward without waiting for the
 * device: add up the loss with model_loss_accumulate (or read it with model_loss_sum) after
 * model_backward. */
void model_forward(Model *m, const int32_t *ids, const int32_t *lengths, const int32_t *labels,
                   int B, int T, int train, uint64_t dropout_seed);
/* The sum of the last forward's per-example losses, also copied to h_losses (B). Waits for
 * the device. The forward must have had labels (else it aborts with a message). */
double model_loss_sum(Model *m);
/* *acc += the sum of the last forward's per-example losses, in backend memory (acc there too),
 * without waiting for the device (Backend.sum_into: the same bits as model_loss_sum). */
void model_loss_accumulate(Model *m, double *acc);
/* Backward of the last forward (which must have had labels and train != 0; after a forward
 * with train = 0 it aborts with a message), accumulating into m->grads the gradient of
 * loss_scale * (sum of the losses). */
void model_backward(Model *m, float loss_scale, uint64_t dropout_seed);
void model_zero_grads(Model *m);

/* Attention probabilities of example `row` of the last forward pass, real length len:
 * out (L, NH, len, len) on the host. Only the materialising path keeps them: returns -1
 * when the model runs the fused path. */
int model_attention_weights(const Model *m, int row, int len, float *out);

#endif
