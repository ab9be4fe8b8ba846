/* model/params.h: the classifier's dimensions and parameter layout.
 * All parameters live in one contiguous float buffer (llm.c style); gradients and
 * AdamW moments share the same layout. The order and names are those of docs/model.md
 * and of the PyTorch fixtures in tests/fixtures. */
#ifndef MHA_MODEL_PARAMS_H
#define MHA_MODEL_PARAMS_H

#include <stddef.h>
#include <stdint.h>
#include "model/config.h"

typedef struct {
    int V, P, C, NH, F, L, K;   /* vocab, position rows (max_len), d_model, heads, d_ff, layers, classes */
    int pre_norm;               /* 0: post-LN (the articles), 1: pre-LN with a final LayerNorm */
    int act;                    /* MHA_ACT_RELU | MHA_ACT_GELU */
    int pool;                   /* MHA_POOL_MEAN | MHA_POOL_CLS | MHA_POOL_MAX */
    int learned_pos;            /* 1: pos_emb parameter, 0: fixed sinusoidal table */
    int causal, fused_attention;
    float dropout, attn_dropout, label_smoothing;
} ModelDims;

/* Dimensions from a config plus vocab and label counts. */
void model_dims_from_config(ModelDims *d, const Config *c, int vocab_size, int n_classes);

typedef struct {
    char name[32];
    size_t offset, numel;       /* in floats, into the parameter buffer */
    int rows, cols;             /* cols = 1 for vectors */
    int decay;                  /* 1: weight decay applies (linear weights) */
    int kind;                   /* PARAM_KIND_* (decides decay options) */
} ParamInfo;

enum { PARAM_KIND_WEIGHT = 0, PARAM_KIND_BIAS, PARAM_KIND_NORM, PARAM_KIND_EMBEDDING };

/* Offsets (in floats) of one encoder block's tensors. */
typedef struct {
    size_t qkv_w, qkv_b;   /* (3C, C), (3C) */
    size_t proj_w, proj_b; /* (C, C), (C) */
    size_t ln1_w, ln1_b;   /* (C), (C) */
    size_t fc1_w, fc1_b;   /* (F, C), (F) */
    size_t fc2_w, fc2_b;   /* (C, F), (C) */
    size_t ln2_w, ln2_b;   /* (C), (C) */
} LayerOffsets;

typedef struct {
    ParamInfo *t; int n;        /* tensors in buffer order */
    size_t total;               /* floats in the whole buffer */
    size_t tok_emb;             /* (V, C) */
    size_t pos_emb;             /* (P, C); SIZE_MAX when sinusoidal */
    LayerOffsets *layer;        /* (L) */
    size_t lnf_w, lnf_b;        /* (C) each; SIZE_MAX unless pre_norm */
    size_t head_w, head_b;      /* (K, C), (K) */
} ParamLayout;

void param_layout_build(ParamLayout *lay, const ModelDims *d, int decay_embeddings, int decay_norms);
void param_layout_free(ParamLayout *lay);

/* Host-side initialisation, PyTorch's defaults (as the articles' model gets them), the same
 * for a seed on every machine: embeddings N(0, 1); linear weights and biases
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)); LayerNorm gains 1, biases 0. */
void params_init(float *host, const ParamLayout *lay, uint64_t seed);

/* Sinusoidal position table (P, C) as in docs/model.md. */
void sinusoidal_table(float *out, int P, int C);

#endif
