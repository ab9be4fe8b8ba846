/* tests/fuzz/make_seed_checkpoint.c: writes tiny valid checkpoints (d_model 8, one layer,
 * a 10-token vocabulary, 2 labels) to seed the checkpoint fuzzers:
 *   make_seed_checkpoint MODEL.mha LAST.mha
 * MODEL.mha is model-only, LAST.mha has AdamW moments and training state as mha-train
 * writes them; both have an ORIGIN section. The committed seeds in tests/fuzz/corpus/checkpoint and
 * checkpoint_crc came from it (model.mha and last.mha before ORIGIN existed, *_origin.mha after). */
#include "data/vocab.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/params.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: make_seed_checkpoint MODEL.mha LAST.mha\n"); return 2; }
    Config c;
    config_defaults(&c);
    snprintf(c.train, sizeof c.train, "train.tsv");
    c.d_model = 8; c.n_heads = 2; c.d_ff = 8; c.n_layers = 1; c.max_len = 8;
    MhaError err;
    if (config_validate(&c, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    VocabCounter *vc = vocab_counter_new();
    const char *toks[] = {"好", "不", "酒", "店", "很", "差", "的", "a", "1", "!"};
    for (int i = 0; i < 10; i++) vocab_counter_add(vc, toks[i], (int)strlen(toks[i]));
    Vocab *v = vocab_build(vc, 1, 0);
    vocab_counter_free(vc);
    char *names[] = {"neg", "pos"};
    ModelDims d;
    model_dims_from_config(&d, &c, vocab_size(v), 2);
    ParamLayout lay;
    param_layout_build(&lay, &d, 0, 0);
    size_t n = lay.total;
    float *p = malloc(n * sizeof *p), *m = malloc(n * sizeof *m), *s = malloc(n * sizeof *s);
    params_init(p, &lay, 1);
    for (size_t i = 0; i < n; i++) { m[i] = 1e-3f * (float)(i % 7); s[i] = 1e-6f * (float)(i % 5); }
    param_layout_free(&lay);
    Checkpoint ck = {0};
    ck.config_json = config_to_json(&c);
    ck.vocab = v;
    ck.labels.n = 2;
    ck.labels.names = names;
    ck.params = p;
    ck.n_params = n;
    ck.origin_json = "{\"mha\": \"0.1.0\", \"update\": 3, \"epoch\": 1, \"dev\": {\"metric\": \"accuracy\", "
                     "\"loss\": 0.5, \"accuracy\": 0.75, \"macro_f1\": 0.7}}";
    int rc = checkpoint_save(argv[1], &ck, &err);
    if (!rc) {
        ck.adam_m = m;
        ck.adam_v = s;
        ck.state_json = "{\"update\": 3, \"epoch\": 0, \"batch_pos\": 3, \"adam_t\": 3, \"best_metric\": 0.5, "
                        "\"best_update\": 3, \"evals_since_best\": 0, \"bad_steps\": 0, \"elapsed\": 1.5}";
        ck.origin_json = "{\"mha\": \"0.1.0\", \"update\": 3}";
        rc = checkpoint_save(argv[2], &ck, &err);
    }
    if (rc) fprintf(stderr, "make_seed_checkpoint: %s\n", err.msg);
    free(ck.config_json);
    vocab_free(v);
    free(p); free(m); free(s);
    return rc;
}
