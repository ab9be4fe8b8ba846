/* tests/cli/make_tie_model.c: writes a tiny model.mha whose classes tie exactly, for the
 * tie-rule test of mha-predict (test_predict_ties.sh):
 *   make_tie_model OUT.mha B0 B1 B2 B3
 * 4 classes named a, b, c, d; the head's weights are zero, so every text's logits are the head's
 * biases B0..B3 (equal biases: exactly equal probabilities). A 10-token vocabulary. */
#include "data/vocab.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/params.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K = 4 };

int main(int argc, char **argv) {
    if (argc != 2 + K) { fprintf(stderr, "usage: make_tie_model OUT.mha B0 B1 B2 B3\n"); return 2; }
    Config c;
    config_defaults(&c);
    snprintf(c.train, sizeof c.train, "train.tsv");
    c.d_model = 8; c.n_heads = 2; c.d_ff = 8; c.n_layers = 1; c.max_len = 16;
    MhaError err;
    if (config_validate(&c, &err)) { fprintf(stderr, "make_tie_model: %s\n", err.msg); return 1; }
    VocabCounter *vc = vocab_counter_new();
    const char *toks[] = {"好", "不", "酒", "店", "很", "差", "的", "a", "1", "!"};
    for (int i = 0; i < 10; i++) vocab_counter_add(vc, toks[i], (int)strlen(toks[i]));
    Vocab *v = vocab_build(vc, 1, 0);
    vocab_counter_free(vc);
    char *names[K] = {"a", "b", "c", "d"};
    ModelDims d;
    model_dims_from_config(&d, &c, vocab_size(v), K);
    ParamLayout lay;
    param_layout_build(&lay, &d, 0, 0);
    float *p = malloc(lay.total * sizeof *p);
    if (!p) { fprintf(stderr, "make_tie_model: out of memory\n"); return 1; }
    params_init(p, &lay, 1);
    memset(p + lay.head_w, 0, (size_t)K * d.C * sizeof *p);
    for (int k = 0; k < K; k++) p[lay.head_b + k] = strtof(argv[2 + k], NULL);
    Checkpoint ck = {0};
    ck.config_json = config_to_json(&c);
    ck.vocab = v;
    ck.labels.n = K;
    ck.labels.names = names;
    ck.params = p;
    ck.n_params = lay.total;
    int rc = checkpoint_save(argv[1], &ck, &err);
    if (rc) fprintf(stderr, "make_tie_model: %s\n", err.msg);
    param_layout_free(&lay);
    free(ck.config_json);
    vocab_free(v);
    free(p);
    return rc;
}
