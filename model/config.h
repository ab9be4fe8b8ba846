/* model/config.h: the resolved run configuration (sections data, model, train, output),
 * loaded from JSON with cJSON, overridden by --set key=value, validated, printed,
 * and stored in checkpoints as JSON text. */
#ifndef MHA_MODEL_CONFIG_H
#define MHA_MODEL_CONFIG_H

#include <stddef.h>
#include <stdio.h>
#include "data/dataset.h"
#include "data/error.h"

/* The most CPU threads train.threads and mha-predict --threads accept. */
#define MHA_MAX_THREADS 4096

typedef struct {
    /* data */
    char train[4096], dev[4096], test[4096];  /* resolved paths ("" when absent) */
    char format[16];        /* "auto" | "tsv" | "fasttext" | "jsonl" */
    int max_len;            /* tokens kept per example (incl. [CLS] when pooling = cls) */
    char truncate[16];      /* "head" | "head_tail" */
    int min_count;          /* vocab: minimum training count */
    int max_vocab;          /* vocab: maximum size including reserved ids */
    int nfkc, casefold;     /* tokenizer normalisation, both default on */
    int replace_invalid;    /* invalid UTF-8: 0 = error, 1 = replace with U+FFFD */
    int max_line_bytes;     /* longer lines are truncated and counted */
    int bucket;             /* length bucketing on (default) or off */

    /* model */
    int d_model, n_heads, d_ff, n_layers;
    float dropout, attn_dropout;
    char activation[8];     /* "relu" | "gelu" */
    char norm[8];           /* "post" (the articles) | "pre" */
    char pooling[8];        /* "mean" | "cls" | "max" */
    char position[16];      /* "learned" | "sinusoidal" */
    char attention[16];     /* "fused" | "math" */
    int causal;

    /* train */
    int epochs, batch_size, grad_accum, seed, threads;
    float lr, weight_decay, beta1, beta2, adam_eps, clip_norm, label_smoothing;
    float warmup;           /* < 1: fraction of total updates; >= 1: update count */
    char decay[16];         /* "linear" | "cosine" | "none" */
    float min_lr_ratio;     /* decay floor as a fraction of lr */
    int decay_embeddings, decay_norms; /* weight decay on embeddings / LayerNorm (default off) */
    int eval_every;         /* evaluate every N updates; 0 = every epoch */
    char metric[16];        /* best-model metric: "accuracy" | "macro_f1" | "loss" */
    int patience;           /* evaluations without improvement before stopping; 0 = never */
    int max_bad_steps;      /* consecutive non-finite updates before giving up */
    char device[16];        /* "cpu" | "cuda" | "auto" */
    char precision[8];      /* "fp32" | "bf16" (mixed precision: CUDA, or a CPU with AVX512_BF16) */
    int tf32;

    /* output */
    char out_dir[4096];
} Config;

/* Defaults for every key. */
void config_defaults(Config *c);

/* Load FILE (paths inside are relative to FILE's folder), apply each "key=value"
 * override in order (paths relative to the working directory), validate. Paths are
 * stored absolute. On error returns MHA_EXIT_USAGE with err filled
 * ("FILE: key 'x': expected ... (allowed ...)"; an unknown key suggests the nearest). */
int config_load(Config *c, const char *path, const char *const *overrides, int n_overrides,
                MhaError *err);

/* --set overrides given with --resume, onto the config stored in last.mha: only the keys that
 * do not change what the run computes (train.device, train.threads, train.max_bad_steps);
 * any other key is refused (MHA_EXIT_USAGE, naming it and why). Validates the result. */
int config_apply_resume_sets(Config *c, const char *const *overrides, int n_overrides, MhaError *err);

/* Parse a config from JSON text (as stored in a checkpoint); base_dir resolves paths. */
int config_from_json(Config *c, const char *json, const char *base_dir, MhaError *err);

/* Validate ranges and relations (n_heads divides d_model, ...). */
int config_validate(const Config *c, MhaError *err);

/* Resolved config as pretty JSON (malloc'd string, caller frees). */
char *config_to_json(const Config *c);

/* One line per key: name, type, default, help and allowed values (for --help). */
void config_print_help(FILE *f);

/* How the data.* keys say a data file is read (format, normalisation, invalid UTF-8, line
 * length), as the dataset readers take it. */
void config_read_options(const Config *c, ReadOptions *o);

#endif
