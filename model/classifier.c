/* model/classifier.c: forward and backward of the classifier, written once against
 * the Backend table (docs/model.md is the specification). */
#include "model/classifier.h"
#include "kernels/rng.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Dropout sites draw independent streams from the step's seed: the embedding sum, then in
 * each layer the attention probabilities, the output projection and the feed-forward's. */
enum { SITE_EMBED = 0, SITE_ATT = 1, SITE_PROJ = 2, SITE_FFN = 3 };
static uint64_t site_seed(uint64_t seed, int layer, int site) {
    return mha_rng_u64(seed, layer < 0 ? SITE_EMBED : (uint64_t)(1 + 3 * layer + site - 1));
}

/* dinp (n) = the gradient through a dropout site, overwritten: inverted dropout's backward
 * applies its forward's mask and scale (backend.h), so one pass of dropout_forward replaces
 * zeroing dinp and accumulating into it (two passes over memory fewer). */
static void dropout_grad(const Backend *be, float *dinp, const float *dout, size_t n, float p,
                         uint64_t seed) {
    be->dropout_forward(dinp, dout, n, p, seed, 0);
}

/* bytes: the request that failed; total: every request, those after the failure counted too
 * (not made), so that the error can say what the model needs in all. */
typedef struct { const Backend *be; size_t bytes, total; int failed; } Allocator;

static void *alloc_or_flag(Allocator *a, size_t bytes) {
    a->total = bytes > SIZE_MAX - a->total ? SIZE_MAX : a->total + bytes;
    if (a->failed || bytes == 0) return NULL;
    void *p = a->be->alloc(bytes);
    if (!p) { a->failed = 1; a->bytes = bytes; }
    return p;
}

/* The forward pass's activations, for m->Bmax x m->Tmax (ids to h_losses). With
 * Backend.linear_forward_post the forward never writes attproj and fc2 (the projections go
 * straight into the residual sums), and fc1 only for the backward: a forward-only model
 * (prediction, a replica) goes without it. */
static void alloc_forward(Model *m, Allocator *A) {
    const ModelDims *d = &m->d;
    m->fused_linear = m->be->linear_forward_post != NULL;
    const int fused = m->fused_linear, fused_only = fused && m->forward_only;
    size_t N = (size_t)m->Bmax * m->Tmax, Bmax = (size_t)m->Bmax, C = d->C, F = d->F, K = d->K;
    size_t fl = sizeof(float), att_elems = Bmax * d->NH * m->Tmax * m->Tmax;
    m->ids = alloc_or_flag(A, N * sizeof(int32_t));
    m->lengths = alloc_or_flag(A, Bmax * sizeof(int32_t));
    m->labels = alloc_or_flag(A, Bmax * sizeof(int32_t));
    m->emb = alloc_or_flag(A, N * C * fl);
    m->acts = calloc((size_t)(d->L > 0 ? d->L : 1), sizeof *m->acts);
    for (int l = 0; m->acts && l < d->L; l++) {
        LayerActs *a = &m->acts[l];
        a->ln1 = alloc_or_flag(A, N * C * fl);
        a->ln1_mean = alloc_or_flag(A, N * fl);
        a->ln1_rstd = alloc_or_flag(A, N * fl);
        a->qkv = alloc_or_flag(A, 3 * N * C * fl);
        a->atty = alloc_or_flag(A, N * C * fl);
        if (d->fused_attention) a->lse = alloc_or_flag(A, Bmax * d->NH * m->Tmax * fl);
        else a->att = alloc_or_flag(A, att_elems * fl);
        if (!fused) a->attproj = alloc_or_flag(A, N * C * fl);
        a->res1 = alloc_or_flag(A, N * C * fl);
        if (!fused_only) a->fc1 = alloc_or_flag(A, N * F * fl);
        a->fch = alloc_or_flag(A, N * F * fl);
        if (!fused) a->fc2 = alloc_or_flag(A, N * C * fl);
        a->res2 = alloc_or_flag(A, N * C * fl);
        a->ln2 = alloc_or_flag(A, N * C * fl);
        a->ln2_mean = alloc_or_flag(A, N * fl);
        a->ln2_rstd = alloc_or_flag(A, N * fl);
    }
    if (d->pre_norm) {
        m->lnf = alloc_or_flag(A, N * C * fl);
        m->lnf_mean = alloc_or_flag(A, N * fl);
        m->lnf_rstd = alloc_or_flag(A, N * fl);
    }
    m->pooled = alloc_or_flag(A, Bmax * C * fl);
    m->argmax = alloc_or_flag(A, Bmax * C * sizeof(int32_t));
    m->logits = alloc_or_flag(A, Bmax * K * fl);
    m->probs = alloc_or_flag(A, Bmax * K * fl);
    m->losses = alloc_or_flag(A, Bmax * fl);
    m->h_probs = malloc(Bmax * K * fl);
    m->h_losses = malloc(Bmax * fl);
    if (!A->failed && (!m->acts || !m->h_probs || !m->h_losses)) {   /* host memory */
        A->failed = 1;
        A->bytes = Bmax * K * fl;
    }
}

/* The backward pass's gradient scratch (dx to dlogits). */
static void alloc_backward(Model *m, Allocator *A) {
    const ModelDims *d = &m->d;
    size_t N = (size_t)m->Bmax * m->Tmax, Bmax = (size_t)m->Bmax, C = d->C, F = d->F, K = d->K;
    size_t fl = sizeof(float), att_elems = Bmax * d->NH * m->Tmax * m->Tmax;
    m->dx = alloc_or_flag(A, N * C * fl);
    m->dy = alloc_or_flag(A, N * C * fl);
    m->dz = alloc_or_flag(A, N * C * fl);
    m->dqkv = alloc_or_flag(A, 3 * N * C * fl);
    m->dff = alloc_or_flag(A, N * F * fl);
    if (!d->fused_attention) m->datt = alloc_or_flag(A, att_elems * fl);
    m->dpooled = alloc_or_flag(A, Bmax * C * fl);
    m->dlogits = alloc_or_flag(A, Bmax * K * fl);
}

/* bytes as "512 bytes", "12.3 KiB", "4.0 GiB", "1.5 TiB" ... */
static const char *human_bytes(char *buf, size_t len, size_t bytes) {
    static const char *unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (bytes < 1024) {
        snprintf(buf, len, "%zu bytes", bytes);
        return buf;
    }
    double v = bytes / 1024.0;
    int u = 0;
    while (v >= 1023.95 && u < 5) { v /= 1024.0; u++; }
    snprintf(buf, len, "%.1f %s", v, unit[u]);
    return buf;
}

/* The advice follows what takes the memory: the parameters (and their gradients), which only
 * a smaller model shrinks, or the activations of a batch. */
static int out_of_memory(const Model *m, const Allocator *A, MhaError *err) {
    char one[32], all[32], par[32];
    const size_t param_bytes = m->lay.total * sizeof(float) * (m->forward_only ? 1 : 2);
    const int model_bound = 2 * param_bytes >= A->total;
    const char *smaller = model_bound ? "model.d_model, model.d_ff, model.n_layers or data.max_vocab"
                          : m->forward_only ? "mha-predict --batch-size" : "train.batch_size or data.max_len";
    return mha_fail(err, MHA_EXIT_DATA,
                    "%s backend: out of memory allocating %s, one buffer of the %s a model with %d "
                    "layer%s needs at batch %d x %d tokens, %s of it for its %zu parameters%s (try a smaller %s)",
                    m->be->name, human_bytes(one, sizeof one, A->bytes), human_bytes(all, sizeof all, A->total),
                    m->d.L, m->d.L == 1 ? "" : "s", m->Bmax, m->Tmax, human_bytes(par, sizeof par, param_bytes),
                    m->lay.total, m->forward_only ? "" : " and their gradients", smaller);
}

/* The cpu backend's buffers are address space that the kernel may overcommit. Training
 * touches all of its parameters' memory: the parameters, their gradients, AdamW's two moments
 * and the copy of the best parameters, 5 times the parameters' bytes; buffers that each fit
 * but together exceed the machine's memory would be killed by the OOM killer once touched
 * (exit 137, without a word), so that is refused before anything is touched. The activations
 * are not counted: a batch touches them only up to its longest example, which data.max_len
 * bounds far above in most runs. */
static int exceeds_host_memory(const Model *m, MhaError *err) {
    if (m->forward_only || strcmp(m->be->name, "cpu") != 0) return 0;   /* a device allocation fails when it does not fit */
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || page <= 0) return 0;
    const double host = (double)pages * (double)page, params = (double)m->lay.total * sizeof(float);
    if (5.0 * params <= host) return 0;
    char n[32], h[32];
    return mha_fail(err, MHA_EXIT_DATA,
                    "%s backend: training a model of %zu parameters (%d layer%s) needs %s for them, their "
                    "gradients, AdamW's two moments and the best model's copy, more than this machine's %s of "
                    "memory (try a smaller model.d_model, model.d_ff, model.n_layers or data.max_vocab)",
                    m->be->name, m->lay.total, m->d.L, m->d.L == 1 ? "" : "s",
                    human_bytes(n, sizeof n, 5.0 * params > (double)SIZE_MAX ? SIZE_MAX : (size_t)(5.0 * params)),
                    human_bytes(h, sizeof h, (size_t)host));
}

static int create(Model *m, const ModelDims *d, const Backend *be, int Bmax, int Tmax,
                  int decay_embeddings, int decay_norms, int forward_only, MhaError *err) {
    memset(m, 0, sizeof *m);   /* model_destroy-able on every return */
    /* The CUDA attention kernels take a batch's examples as gridDim.z, at most 65535: said
     * here, before anything is allocated, rather than as a failed launch mid-run. */
    if (strcmp(be->name, "cuda") == 0 && Bmax > MHA_CUDA_MAX_BATCH)
        return mha_fail(err, MHA_EXIT_USAGE, "batches of %d examples: the cuda backend runs at most %d per "
                        "batch (a GPU grid limit); use a smaller train.batch_size (mha-predict: --batch-size)",
                        Bmax, MHA_CUDA_MAX_BATCH);
    m->d = *d;
    m->be = be;
    m->Bmax = Bmax;
    m->Tmax = Tmax;
    m->forward_only = forward_only;
    param_layout_build(&m->lay, d, decay_embeddings, decay_norms);
    Allocator A = {be, 0, 0, 0};
    size_t C = d->C, fl = sizeof(float);
    m->params = alloc_or_flag(&A, m->lay.total * fl);
    if (!forward_only) m->grads = alloc_or_flag(&A, m->lay.total * fl);
    if (!d->learned_pos) {
        m->pos_table = alloc_or_flag(&A, (size_t)d->P * C * fl);
        float *h = malloc((size_t)d->P * C * fl);
        if (h && m->pos_table) { sinusoidal_table(h, d->P, (int)C); be->to_device(m->pos_table, h, (size_t)d->P * C * fl); }
        free(h);
    }
    alloc_forward(m, &A);
    if (!forward_only) alloc_backward(m, &A);
    if (A.failed || exceeds_host_memory(m, err)) {
        int rc = A.failed ? out_of_memory(m, &A, err) : MHA_EXIT_DATA;
        model_destroy(m);
        return rc;
    }
    if (m->grads) be->zero(m->grads, m->lay.total * fl);
    return 0;
}

int model_create(Model *m, const ModelDims *d, const Backend *be, int Bmax, int Tmax,
                 int decay_embeddings, int decay_norms, MhaError *err) {
    return create(m, d, be, Bmax, Tmax, decay_embeddings, decay_norms, 0, err);
}

int model_create_forward_only(Model *m, const ModelDims *d, const Backend *be, int Bmax, int Tmax,
                              MhaError *err) {
    return create(m, d, be, Bmax, Tmax, 0, 0, 1, err);
}

/* One forward-only replica r of m (see model_replicas). */
static int replica_create(Model *r, const Model *m) {
    memset(r, 0, sizeof *r);
    r->d = m->d;
    r->be = m->be;
    r->Bmax = m->Bmax;
    r->Tmax = m->Tmax;
    r->replica_of = m;
    r->forward_only = 1;
    param_layout_build(&r->lay, &m->d, 0, 0);   /* the same offsets (decay flags aside) */
    r->params = m->params;
    r->pos_table = m->pos_table;
    Allocator A = {m->be, 0, 0, 0};
    alloc_forward(r, &A);
    if (A.failed) {
        model_destroy(r);
        return -1;
    }
    return 0;
}

int model_replicas(Model *m, int n) {
    if (n <= m->n_replicas) return m->n_replicas;
    Model *grown = realloc(m->replicas, (size_t)n * sizeof *grown);
    if (!grown) return m->n_replicas;
    m->replicas = grown;
    while (m->n_replicas < n && replica_create(&m->replicas[m->n_replicas], m) == 0) m->n_replicas++;
    return m->n_replicas;
}

void model_destroy(Model *m) {
    const Backend *be = m->be;
    if (!be) return;
    for (int i = 0; i < m->n_replicas; i++) model_destroy(&m->replicas[i]);
    free(m->replicas);
    if (m->replica_of) m->params = m->pos_table = NULL;   /* the model's, not this replica's */
    void *ptrs[] = {m->params, m->grads, m->pos_table, m->ids, m->lengths, m->labels, m->emb,
                    m->lnf, m->lnf_mean, m->lnf_rstd, m->pooled, m->argmax, m->logits, m->probs,
                    m->losses, m->dx, m->dy, m->dz, m->dqkv, m->dff, m->datt,
                    m->dpooled, m->dlogits};
    for (size_t i = 0; i < sizeof ptrs / sizeof *ptrs; i++)
        if (ptrs[i]) be->free(ptrs[i]);
    if (m->acts)
        for (int l = 0; l < m->d.L; l++) {
            LayerActs *a = &m->acts[l];
            void *lp[] = {a->ln1, a->ln1_mean, a->ln1_rstd, a->qkv, a->atty, a->att, a->lse,
                          a->attproj, a->res1, a->fc1, a->fch, a->fc2, a->res2, a->ln2,
                          a->ln2_mean, a->ln2_rstd};
            for (size_t i = 0; i < sizeof lp / sizeof *lp; i++)
                if (lp[i]) be->free(lp[i]);
        }
    free(m->acts);
    free(m->h_probs);
    free(m->h_losses);
    param_layout_free(&m->lay);
    memset(m, 0, sizeof *m);
}

void model_init_params(Model *m, uint64_t seed) {
    float *h = malloc(m->lay.total * sizeof(float));
    if (!h) { fprintf(stderr, "mha: out of memory\n"); abort(); }
    params_init(h, &m->lay, seed);
    m->be->to_device(m->params, h, m->lay.total * sizeof(float));
    free(h);
}

void model_zero_grads(Model *m) {
    if (m->grads) m->be->zero(m->grads, m->lay.total * sizeof(float));
}

/* The input of layer l: the embeddings, or the previous layer's output. */
static const float *layer_input(const Model *m, int l) {
    if (l == 0) return m->emb;
    const LayerActs *p = &m->acts[l - 1];
    return m->d.pre_norm ? p->res2 : p->ln2;
}
static const float *encoder_output(const Model *m) {
    return m->d.pre_norm ? m->lnf : layer_input(m, m->d.L);
}

static void attention_forward(Model *m, LayerActs *a, const float *qkv, float p, uint64_t seed) {
    const ModelDims *d = &m->d;
    if (d->fused_attention)
        m->be->attention_forward_fused(a->atty, a->lse, qkv, m->lengths, m->B, m->T, d->C, d->NH,
                                       d->causal, p, seed);
    else
        m->be->attention_forward_math(a->atty, a->att, qkv, m->lengths, m->B, m->T, d->C, d->NH,
                                      d->causal, p, seed);
}

static void attention_backward(Model *m, LayerActs *a, const float *datty, float p, uint64_t seed) {
    const ModelDims *d = &m->d;
    if (d->fused_attention)
        m->be->attention_backward_fused(m->dqkv, datty, a->atty, a->qkv, a->lse, m->lengths, m->B,
                                        m->T, d->C, d->NH, d->causal, p, seed);
    else
        m->be->attention_backward_math(m->dqkv, m->datt, datty, a->qkv, a->att, m->lengths, m->B,
                                       m->T, d->C, d->NH, d->causal, p, seed);
}

/* res (N, OC) = residual + dropout(inp (N, IC) @ w^T + b): one call when the model fuses
 * (Backend.linear_forward_post), else three with the linear output in lin (N, OC). */
static void linear_residual(const Model *m, float *res, float *lin, const float *inp,
                            const float *w, const float *b, int N, int IC, int OC,
                            const float *residual, float p, uint64_t seed) {
    const Backend *be = m->be;
    if (m->fused_linear) {
        be->linear_forward_post(res, NULL, inp, w, b, N, IC, OC, -1, p, seed, residual);
        return;
    }
    size_t n = (size_t)N * OC;
    be->linear_forward(lin, inp, w, b, N, IC, OC);
    be->dropout_forward(lin, lin, n, p, seed, 0);
    be->add(res, residual, lin, n);
}

/* h (N, OC) = act(pre), pre = inp (N, IC) @ w^T + b kept for the backward when `train`;
 * one call when the model fuses (Backend.linear_forward_post). */
static void linear_act(const Model *m, int train, float *h, float *pre, const float *inp,
                       const float *w, const float *b, int N, int IC, int OC, int act) {
    const Backend *be = m->be;
    if (m->fused_linear) {
        be->linear_forward_post(h, train ? pre : NULL, inp, w, b, N, IC, OC, act, 0.0f, 0, NULL);
        return;
    }
    be->linear_forward(pre, inp, w, b, N, IC, OC);
    be->act_forward(h, pre, (size_t)N * OC, act);
}

void model_forward(Model *m, const int32_t *ids, const int32_t *lengths, const int32_t *labels,
                   int B, int T, int train, uint64_t dropout_seed) {
    const Backend *be = m->be;
    const ModelDims *d = &m->d;
    const ParamLayout *L = &m->lay;
    float *W = m->params;
    int C = d->C, F = d->F, K = d->K, N = B * T;
    m->B = B;
    m->T = T;
    be->to_device(m->ids, ids, (size_t)N * sizeof(int32_t));
    be->to_device(m->lengths, lengths, (size_t)B * sizeof(int32_t));
    if (labels) be->to_device(m->labels, labels, (size_t)B * sizeof(int32_t));
    else be->zero(m->labels, (size_t)B * sizeof(int32_t));
    float p = train ? d->dropout : 0.0f, pa = train ? d->attn_dropout : 0.0f;
    size_t NC = (size_t)N * C;

    const float *pos = d->learned_pos ? W + L->pos_emb : m->pos_table;
    be->embed_forward(m->emb, m->ids, W + L->tok_emb, pos, B, T, C);
    be->dropout_forward(m->emb, m->emb, NC, p, site_seed(dropout_seed, -1, SITE_EMBED), 0);

    m->backward_ready = train && labels && !m->forward_only;
    m->loss_ready = labels != NULL;
    for (int l = 0; l < d->L; l++) {
        LayerActs *a = &m->acts[l];
        const LayerOffsets *o = &L->layer[l];
        const float *x = layer_input(m, l);
        if (!d->pre_norm) {  /* x = LN1(x + attn(x)); x = LN2(x + ffn(x)) */
            be->linear_forward(a->qkv, x, W + o->qkv_w, W + o->qkv_b, N, C, 3 * C);
            attention_forward(m, a, a->qkv, pa, site_seed(dropout_seed, l, SITE_ATT));
            /* res1 = x + dropout(atty @ proj_w^T + proj_b) */
            linear_residual(m, a->res1, a->attproj, a->atty, W + o->proj_w, W + o->proj_b, N, C, C,
                            x, p, site_seed(dropout_seed, l, SITE_PROJ));
            be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, a->res1, W + o->ln1_w, W + o->ln1_b, N, C);
            linear_act(m, train, a->fch, a->fc1, a->ln1, W + o->fc1_w, W + o->fc1_b, N, C, F, d->act);
            linear_residual(m, a->res2, a->fc2, a->fch, W + o->fc2_w, W + o->fc2_b, N, F, C,
                            a->ln1, p, site_seed(dropout_seed, l, SITE_FFN));
            be->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, W + o->ln2_w, W + o->ln2_b, N, C);
        } else {             /* x = x + attn(LN1(x)); x = x + ffn(LN2(x)) */
            be->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, W + o->ln1_w, W + o->ln1_b, N, C);
            be->linear_forward(a->qkv, a->ln1, W + o->qkv_w, W + o->qkv_b, N, C, 3 * C);
            attention_forward(m, a, a->qkv, pa, site_seed(dropout_seed, l, SITE_ATT));
            linear_residual(m, a->res1, a->attproj, a->atty, W + o->proj_w, W + o->proj_b, N, C, C,
                            x, p, site_seed(dropout_seed, l, SITE_PROJ));
            be->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res1, W + o->ln2_w, W + o->ln2_b, N, C);
            linear_act(m, train, a->fch, a->fc1, a->ln2, W + o->fc1_w, W + o->fc1_b, N, C, F, d->act);
            linear_residual(m, a->res2, a->fc2, a->fch, W + o->fc2_w, W + o->fc2_b, N, F, C,
                            a->res1, p, site_seed(dropout_seed, l, SITE_FFN));
        }
    }
    if (d->pre_norm)
        be->layernorm_forward(m->lnf, m->lnf_mean, m->lnf_rstd, layer_input(m, d->L),
                              W + L->lnf_w, W + L->lnf_b, N, C);
    be->pool_forward(m->pooled, m->argmax, encoder_output(m), m->lengths, B, T, C, d->pool);
    be->linear_forward(m->logits, m->pooled, W + L->head_w, W + L->head_b, B, C, K);
    be->crossentropy(m->losses, m->probs, NULL, m->logits, m->labels, B, K, d->label_smoothing, 0.0f);
    if (train) return;   /* the trainer adds up the losses after the backward (model_loss_accumulate) */
    be->to_host(m->h_probs, m->probs, (size_t)B * K * sizeof(float));
    if (labels) be->to_host(m->h_losses, m->losses, (size_t)B * sizeof(float));
}

double model_loss_sum(Model *m) {
    if (!m->loss_ready) {
        fprintf(stderr, "mha: internal error: model_loss_sum after a forward pass without labels\n");
        abort();
    }
    m->be->to_host(m->h_losses, m->losses, (size_t)m->B * sizeof(float));
    double sum = 0.0;
    for (int b = 0; b < m->B; b++) sum += m->h_losses[b];
    return sum;
}

void model_loss_accumulate(Model *m, double *acc) {
    if (!m->loss_ready) {
        fprintf(stderr, "mha: internal error: model_loss_accumulate after a forward pass without labels\n");
        abort();
    }
    m->be->sum_into(acc, m->losses, (size_t)m->B);
}

void model_backward(Model *m, float loss_scale, uint64_t dropout_seed) {
    if (!m->backward_ready) {
        fprintf(stderr, "mha: internal error: model_backward after a forward pass with train = 0 or without "
                "labels, or of a forward-only model\n");
        abort();
    }
    const Backend *be = m->be;
    const ModelDims *d = &m->d;
    const ParamLayout *L = &m->lay;
    const float *W = m->params;
    float *G = m->grads;
    int B = m->B, T = m->T, C = d->C, F = d->F, K = d->K, N = B * T;
    size_t NC = (size_t)N * C, fl = sizeof(float);
    float p = d->dropout, pa = d->attn_dropout;

    be->zero(m->dlogits, (size_t)B * K * fl);
    be->crossentropy(m->losses, m->probs, m->dlogits, m->logits, m->labels, B, K,
                     d->label_smoothing, loss_scale);
    be->linear_backward(m->dpooled, G + L->head_w, G + L->head_b, m->dlogits, m->pooled,
                        W + L->head_w, B, C, K, 0);
    float *dcur = m->dx, *dy = m->dy, *dz = m->dz;
    be->zero(dcur, NC * fl);
    be->pool_backward(dcur, m->dpooled, m->argmax, m->lengths, B, T, C, d->pool);
    if (d->pre_norm) {
        be->zero(dy, NC * fl);
        be->layernorm_backward(dy, G + L->lnf_w, G + L->lnf_b, dcur, layer_input(m, d->L),
                               W + L->lnf_w, m->lnf_mean, m->lnf_rstd, N, C);
        float *t = dcur; dcur = dy; dy = t;
    }
    for (int l = d->L - 1; l >= 0; l--) {
        LayerActs *a = &m->acts[l];
        const LayerOffsets *o = &L->layer[l];
        const float *x = layer_input(m, l);
        if (!d->pre_norm) {
            /* dcur = d ln2 -> dy = d res2 */
            be->zero(dy, NC * fl);
            be->layernorm_backward(dy, G + o->ln2_w, G + o->ln2_b, dcur, a->res2, W + o->ln2_w,
                                   a->ln2_mean, a->ln2_rstd, N, C);
            /* res2 = ln1 + drop(fc2): dz = d fc2 */
            dropout_grad(be, dz, dy, NC, p, site_seed(dropout_seed, l, SITE_FFN));
            /* dff = d fch, then d fc1 in place */
            be->linear_backward(m->dff, G + o->fc2_w, G + o->fc2_b, dz, a->fch, W + o->fc2_w, N, F, C, 0);
            be->act_backward(m->dff, m->dff, a->fc1, (size_t)N * F, d->act);
            /* dy += fc1 backward: dy = d ln1 */
            be->linear_backward(dy, G + o->fc1_w, G + o->fc1_b, m->dff, a->ln1, W + o->fc1_w, N, C, F, 1);
            be->zero(dcur, NC * fl);
            be->layernorm_backward(dcur, G + o->ln1_w, G + o->ln1_b, dy, a->res1, W + o->ln1_w,
                                   a->ln1_mean, a->ln1_rstd, N, C);
            /* res1 = x + drop(attproj): dz = d attproj, dy = d atty */
            dropout_grad(be, dz, dcur, NC, p, site_seed(dropout_seed, l, SITE_PROJ));
            be->linear_backward(dy, G + o->proj_w, G + o->proj_b, dz, a->atty, W + o->proj_w, N, C, C, 0);
            be->zero(m->dqkv, 3 * NC * fl);
            attention_backward(m, a, dy, pa, site_seed(dropout_seed, l, SITE_ATT));
            /* dcur (= d res1, the residual path) += qkv backward: d x */
            be->linear_backward(dcur, G + o->qkv_w, G + o->qkv_b, m->dqkv, x, W + o->qkv_w, N, C, 3 * C, 1);
        } else {
            /* dcur = d res2; res2 = res1 + drop(fc2) */
            dropout_grad(be, dz, dcur, NC, p, site_seed(dropout_seed, l, SITE_FFN));
            /* dff = d fch, then d fc1 in place */
            be->linear_backward(m->dff, G + o->fc2_w, G + o->fc2_b, dz, a->fch, W + o->fc2_w, N, F, C, 0);
            be->act_backward(m->dff, m->dff, a->fc1, (size_t)N * F, d->act);
            be->linear_backward(dy, G + o->fc1_w, G + o->fc1_b, m->dff, a->ln2, W + o->fc1_w, N, C, F, 0);
            /* dcur += LN2 backward: d res1 */
            be->layernorm_backward(dcur, G + o->ln2_w, G + o->ln2_b, dy, a->res1, W + o->ln2_w,
                                   a->ln2_mean, a->ln2_rstd, N, C);
            /* res1 = x + drop(attproj) */
            dropout_grad(be, dz, dcur, NC, p, site_seed(dropout_seed, l, SITE_PROJ));
            be->linear_backward(dy, G + o->proj_w, G + o->proj_b, dz, a->atty, W + o->proj_w, N, C, C, 0);
            be->zero(m->dqkv, 3 * NC * fl);
            attention_backward(m, a, dy, pa, site_seed(dropout_seed, l, SITE_ATT));
            be->linear_backward(dz, G + o->qkv_w, G + o->qkv_b, m->dqkv, a->ln1, W + o->qkv_w, N, C, 3 * C, 0);
            /* dcur += LN1 backward: d x */
            be->layernorm_backward(dcur, G + o->ln1_w, G + o->ln1_b, dz, x, W + o->ln1_w,
                                   a->ln1_mean, a->ln1_rstd, N, C);
        }
    }
    dropout_grad(be, dy, dcur, NC, p, site_seed(dropout_seed, -1, SITE_EMBED));
    be->embed_backward(G + L->tok_emb, d->learned_pos ? G + L->pos_emb : NULL, dy, m->ids, B, T, C);
}

int model_attention_weights(const Model *m, int row, int len, float *out) {
    const ModelDims *d = &m->d;
    if (d->fused_attention) return -1;
    int T = m->T;
    for (int l = 0; l < d->L; l++)
        for (int h = 0; h < d->NH; h++)
            for (int i = 0; i < len; i++) {
                /* att (B, NH, T, T): row i of head h of example `row` */
                const float *src = m->acts[l].att + (((size_t)row * d->NH + h) * T + i) * T;
                float *dst = out + (((size_t)l * d->NH + h) * len + i) * len;
                m->be->to_host(dst, src, (size_t)len * sizeof(float));
            }
    return 0;
}
