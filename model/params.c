/* model/params.c: parameter layout (names, shapes, offsets, decay flags) and
 * initialisation. The layout order is docs/model.md's; nothing else defines it. */
#include "model/params.h"
#include "kernels/backend.h"
#include "kernels/rng.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void model_dims_from_config(ModelDims *d, const Config *c, int vocab_size, int n_classes) {
    memset(d, 0, sizeof *d);
    d->V = vocab_size;
    d->P = c->max_len;
    d->C = c->d_model;
    d->NH = c->n_heads;
    d->F = c->d_ff;
    d->L = c->n_layers;
    d->K = n_classes;
    d->pre_norm = strcmp(c->norm, "pre") == 0;
    d->act = strcmp(c->activation, "gelu") == 0 ? MHA_ACT_GELU : MHA_ACT_RELU;
    d->pool = strcmp(c->pooling, "cls") == 0   ? MHA_POOL_CLS
              : strcmp(c->pooling, "max") == 0 ? MHA_POOL_MAX
                                               : MHA_POOL_MEAN;
    d->learned_pos = strcmp(c->position, "sinusoidal") != 0;
    d->causal = c->causal;
    d->fused_attention = strcmp(c->attention, "math") != 0;
    d->dropout = c->dropout;
    d->attn_dropout = c->attn_dropout;
    d->label_smoothing = c->label_smoothing;
}

/* Appends one tensor and returns its offset. */
static size_t add(ParamLayout *lay, const char *name, int rows, int cols, int kind, int decay) {
    ParamInfo *p = &lay->t[lay->n++];
    snprintf(p->name, sizeof p->name, "%s", name);
    p->rows = rows;
    p->cols = cols;
    p->numel = (size_t)rows * (size_t)cols;
    p->offset = lay->total;
    p->kind = kind;
    p->decay = decay;
    lay->total += p->numel;
    return p->offset;
}

void param_layout_build(ParamLayout *lay, const ModelDims *d, int decay_embeddings, int decay_norms) {
    memset(lay, 0, sizeof *lay);
    int max_tensors = 2 + 12 * d->L + 4;
    lay->t = calloc((size_t)max_tensors, sizeof *lay->t);
    lay->layer = calloc((size_t)(d->L > 0 ? d->L : 1), sizeof *lay->layer);
    if (!lay->t || !lay->layer) { fprintf(stderr, "mha: out of memory\n"); abort(); }
    int C = d->C, F = d->F, de = decay_embeddings, dn = decay_norms;
    lay->tok_emb = add(lay, "tok_emb", d->V, C, PARAM_KIND_EMBEDDING, de);
    lay->pos_emb = d->learned_pos ? add(lay, "pos_emb", d->P, C, PARAM_KIND_EMBEDDING, de) : SIZE_MAX;
    for (int l = 0; l < d->L; l++) {
        LayerOffsets *o = &lay->layer[l];
        char n[32];
#define ADD(field, rows, cols, kind, decay) \
    (snprintf(n, sizeof n, "layers.%d." #field, l), o->field = add(lay, n, rows, cols, kind, decay))
        ADD(qkv_w, 3 * C, C, PARAM_KIND_WEIGHT, 1);
        ADD(qkv_b, 3 * C, 1, PARAM_KIND_BIAS, 0);
        ADD(proj_w, C, C, PARAM_KIND_WEIGHT, 1);
        ADD(proj_b, C, 1, PARAM_KIND_BIAS, 0);
        ADD(ln1_w, C, 1, PARAM_KIND_NORM, dn);
        ADD(ln1_b, C, 1, PARAM_KIND_BIAS, 0);
        ADD(fc1_w, F, C, PARAM_KIND_WEIGHT, 1);
        ADD(fc1_b, F, 1, PARAM_KIND_BIAS, 0);
        ADD(fc2_w, C, F, PARAM_KIND_WEIGHT, 1);
        ADD(fc2_b, C, 1, PARAM_KIND_BIAS, 0);
        ADD(ln2_w, C, 1, PARAM_KIND_NORM, dn);
        ADD(ln2_b, C, 1, PARAM_KIND_BIAS, 0);
#undef ADD
    }
    if (d->pre_norm) {
        lay->lnf_w = add(lay, "lnf_w", C, 1, PARAM_KIND_NORM, dn);
        lay->lnf_b = add(lay, "lnf_b", C, 1, PARAM_KIND_BIAS, 0);
    } else {
        lay->lnf_w = lay->lnf_b = SIZE_MAX;
    }
    lay->head_w = add(lay, "head_w", d->K, C, PARAM_KIND_WEIGHT, 1);
    lay->head_b = add(lay, "head_b", d->K, 1, PARAM_KIND_BIAS, 0);
}

void param_layout_free(ParamLayout *lay) {
    free(lay->t);
    free(lay->layer);
    memset(lay, 0, sizeof *lay);
}

/* Standard normal from two counter-RNG uniforms (Box-Muller). */
static float normal(uint64_t seed, uint64_t i) {
    double u1 = ((double)(mha_rng_u64(seed, 2 * i) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(mha_rng_u64(seed, 2 * i + 1) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

/* PyTorch's defaults, as the articles' model gets them: nn.Embedding N(0, 1),
 * nn.Linear weight and bias U(-1/sqrt(in), 1/sqrt(in)), LayerNorm weight 1 bias 0. */
void params_init(float *host, const ParamLayout *lay, uint64_t seed) {
    for (int k = 0; k < lay->n; k++) {
        const ParamInfo *p = &lay->t[k];
        float *w = host + p->offset;
        uint64_t s = mha_rng_u64(seed, 0x1000 + (uint64_t)k);
        if (p->kind == PARAM_KIND_EMBEDDING) {
            for (size_t i = 0; i < p->numel; i++) w[i] = normal(s, i);
        } else if (p->kind == PARAM_KIND_NORM) {
            for (size_t i = 0; i < p->numel; i++) w[i] = 1.0f;
        } else if (strstr(p->name, "ln") && p->kind == PARAM_KIND_BIAS) {
            memset(w, 0, p->numel * sizeof *w);               /* LayerNorm bias */
        } else {
            /* fan_in: the weight's columns; a bias takes its weight's (the tensor before it). */
            int fan_in = p->kind == PARAM_KIND_WEIGHT ? p->cols : lay->t[k - 1].cols;
            float bound = 1.0f / sqrtf((float)fan_in);
            for (size_t i = 0; i < p->numel; i++)
                w[i] = (2.0f * mha_rng_uniform(s, i) - 1.0f) * bound;
        }
    }
}

void sinusoidal_table(float *out, int P, int C) {
    for (int t = 0; t < P; t++)
        for (int i = 0; 2 * i < C; i++) {
            double freq = pow(10000.0, -(2.0 * i) / C);
            out[(size_t)t * C + 2 * i] = (float)sin(t * freq);
            if (2 * i + 1 < C) out[(size_t)t * C + 2 * i + 1] = (float)cos(t * freq);
        }
}
