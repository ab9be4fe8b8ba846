/* tests/fuzz/fuzz_checkpoint.h: a checkpoint file of arbitrary bytes through the loader and
 * the checks mha-predict / mha-train --resume make before they build a model (stored config,
 * parameter count). Invariants: a load either fails with MHA_EXIT_DATA and a message, or
 * gives a config, a vocabulary of distinct tokens (each looks up to its own id) with the
 * reserved ones first, sorted distinct labels, parameters, and training state that is
 * complete or absent, all of the sizes the file holds; describing it (mha-predict --info, as
 * text and as JSON) succeeds, or fails with MHA_EXIT_DATA and a message. */
#ifndef MHA_TESTS_FUZZ_CHECKPOINT_H
#define MHA_TESTS_FUZZ_CHECKPOINT_H

#include "fuzz_common.h"
#include "cmd/model_info.h"
#include "model/checkpoint.h"
#include "model/config.h"

static int fuzz_checkpoint_file(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size);
    Checkpoint ck;
    MhaError err;
    err.msg[0] = '\0';
    if (checkpoint_load(path, &ck, &err) != 0) {
        FUZZ_ASSERT(err.code == MHA_EXIT_DATA && err.msg[0]);
        FUZZ_ASSERT(ck.config_json == NULL && ck.vocab == NULL && ck.params == NULL);
        return 0;
    }
    FUZZ_ASSERT(ck.config_json && ck.vocab && ck.params && ck.labels.n > 0);
    FUZZ_ASSERT(ck.n_params * sizeof(float) <= size);
    FUZZ_ASSERT(!ck.adam_m == !ck.adam_v && !ck.adam_m == !ck.state_json);
    int V = vocab_size(ck.vocab);
    FUZZ_ASSERT(V >= VOCAB_RESERVED && (size_t)V <= size);
    for (int id = 0; id < V; id++) {
        const char *t = vocab_token(ck.vocab, id);
        FUZZ_ASSERT(t != NULL);
        FUZZ_ASSERT(vocab_lookup(ck.vocab, t, (int)strlen(t)) == id);
    }
    FUZZ_ASSERT(vocab_token(ck.vocab, V) == NULL && vocab_token(ck.vocab, -1) == NULL);
    for (int k = 0; k < ck.labels.n; k++) FUZZ_ASSERT(labelmap_find(&ck.labels, ck.labels.names[k]) == k);
    Config cfg;
    if (config_from_json(&cfg, ck.config_json, "", &err) == 0) {
        if (checkpoint_check_layout(&ck, &cfg, path, &err) != 0) FUZZ_ASSERT(err.code == MHA_EXIT_DATA);
    }
    checkpoint_free(&ck);
    static FILE *sink;
    if (!sink) sink = fopen("/dev/null", "w");
    for (int json = 0; sink && json < 2; json++) {
        err.msg[0] = '\0';
        if (model_info_print(path, json, sink, &err) != 0) FUZZ_ASSERT(err.code == MHA_EXIT_DATA && err.msg[0]);
    }
    return 0;
}

#endif
