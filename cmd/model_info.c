/* cmd/model_info.c: mha-predict --info: what a checkpoint holds (see model_info.h), read
 * without building the model. */
#include "cmd/model_info.h"
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include "data/vocab.h"
#include "model/checkpoint.h"
#include "model/config.h"

/* The number at key in o, or NAN when o has none (or not a number). */
static double number_at(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *string_at(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A model.mha's ORIGIN: "parameters   from update U (epoch E), on dev (the best by M): accuracy
 * A, macro-F1 F, loss L", or "from update U: the final parameters (no dev set)". Nothing when
 * the ORIGIN lacks its update. */
static void print_origin(FILE *out, const cJSON *origin) {
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(origin, "dev");
    const double update = number_at(origin, "update"), epoch = number_at(origin, "epoch");
    if (isnan(update)) return;
    fprintf(out, "parameters   from update %.0f", update);
    if (cJSON_IsObject(dev) && !isnan(epoch)) {
        const char *metric = string_at(dev, "metric");
        fprintf(out, " (epoch %.0f), on dev (the best by %s): accuracy %.4f, macro-F1 %.4f, loss %.4f\n", epoch,
                metric ? metric : "?", number_at(dev, "accuracy"), number_at(dev, "macro_f1"), number_at(dev, "loss"));
    } else {
        fprintf(out, ": the final parameters (no dev set)\n");
    }
}

/* A last.mha's STATE: where the run stands, as mha-train --resume judges it (model/resume.c),
 * and its best dev score so far. */
static void print_state(FILE *out, const cJSON *state, const Config *c, const char *path) {
    const double update = number_at(state, "update"), epoch = number_at(state, "epoch"),
                 batch = number_at(state, "batch_pos"), since_best = number_at(state, "evals_since_best"),
                 best = number_at(state, "best_metric"), best_update = number_at(state, "best_update"),
                 elapsed = number_at(state, "elapsed");
    const cJSON *reported = cJSON_GetObjectItemCaseSensitive(state, "test_reported");
    if (isnan(update) || isnan(epoch)) return;
    const int all_epochs = epoch >= c->epochs, early = !all_epochs && c->patience > 0 && since_best >= c->patience;
    fprintf(out, "state        update %.0f, %.1f s trained: ", update, isnan(elapsed) ? 0.0 : elapsed);
    if (all_epochs) fprintf(out, c->epochs == 1 ? "finished (its one epoch)" : "finished (all %d epochs)", c->epochs);
    else if (early) fprintf(out, "finished early (train.patience) in epoch %.0f of %d", epoch + 1, c->epochs);
    else
        fprintf(out, "paused in epoch %.0f of %d after %.0f of its batches (mha-train --resume %s goes on)", epoch + 1,
                c->epochs, isnan(batch) ? 0.0 : batch, path);
    if ((all_epochs || early) && c->test[0] && !cJSON_IsTrue(reported))
        fprintf(out, "; its test report is still due (mha-train --resume %s gives it)", path);
    /* the best is kept higher-is-better: loss negated */
    if (c->dev[0] && !isnan(best) && best_update >= 0)
        fprintf(out, "; best dev %s %.4f at update %.0f", c->metric, strcmp(c->metric, "loss") ? best : -best,
                best_update);
    fputc('\n', out);
}

static void print_text(FILE *out, const char *path, long long bytes, const Checkpoint *ck, const Config *c,
                       const cJSON *origin, const cJSON *state) {
    const char *by = string_at(origin, "mha");
    fprintf(out, "%s: %s, %lld bytes", path, ck->state_json ? "training state (last.mha)" : "model", bytes);
    if (by) fprintf(out, ", written by mha %s", by);
    fprintf(out, "\nclasses      %d:", ck->labels.n);
    for (int i = 0; i < ck->labels.n; i++) fprintf(out, " %s", ck->labels.names[i]);
    fprintf(out, "\nvocabulary   %d tokens (data.min_count %d, data.max_vocab %d)%s%s\n", vocab_size(ck->vocab),
            c->min_count, c->max_vocab, c->nfkc ? ", NFKC" : "", c->casefold ? ", case-folded" : "");
    fprintf(out, "input        at most %d tokens a text (data.truncate %s)\n", c->max_len, c->truncate);
    fprintf(out, "model        %zu parameters: d_model %d, %d heads, d_ff %d, %d layer%s (%s-LN, %s), %s pooling, "
            "%s positions, %s attention%s\n", ck->n_params, c->d_model, c->n_heads, c->d_ff, c->n_layers,
            c->n_layers == 1 ? "" : "s", c->norm, c->activation, c->pooling, c->position, c->attention,
            c->causal ? ", causal" : "");
    fprintf(out, "settings     %s, %d epoch%s of batches of %d", c->precision, c->epochs, c->epochs == 1 ? "" : "s",
            c->batch_size);
    if (c->grad_accum > 1) fprintf(out, " (updates of %d batches)", c->grad_accum);
    fprintf(out, ", lr %g, seed %d, on %s", c->lr, c->seed, c->train);
    if (c->dev[0]) fprintf(out, " (dev %s)", c->dev);
    fputc('\n', out);
    if (origin && !ck->state_json) print_origin(out, origin);
    if (state) print_state(out, state, c, path);
}

/* Adds item to o under key; on failure frees it and returns 0. */
static int add(cJSON *o, const char *key, cJSON *item) {
    if (item && cJSON_AddItemToObject(o, key, item)) return 1;
    cJSON_Delete(item);
    return 0;
}

/* Takes origin and state (either may be NULL): they move into the object written. */
static int print_json(FILE *out, const char *path, long long bytes, const Checkpoint *ck, cJSON *origin,
                      cJSON *state, MhaError *err) {
    cJSON *o = cJSON_CreateObject(), *classes = cJSON_CreateArray();
    int ok = o && classes;
    for (int i = 0; ok && i < ck->labels.n; i++) {
        cJSON *name = cJSON_CreateString(ck->labels.names[i]);
        ok = name && cJSON_AddItemToArray(classes, name);
        if (!ok) cJSON_Delete(name);
    }
    const char *by = string_at(origin, "mha");
    cJSON *by_item = by ? cJSON_CreateString(by) : cJSON_CreateNull();   /* copied before origin moves */
    cJSON *config = cJSON_Parse(ck->config_json);
    if (o) {   /* every item goes in, or add() frees it */
        ok &= add(o, "path", cJSON_CreateString(path));
        ok &= add(o, "bytes", cJSON_CreateNumber((double)bytes));
        ok &= add(o, "kind", cJSON_CreateString(ck->state_json ? "training state" : "model"));
        ok &= add(o, "written_by", by_item);
        ok &= add(o, "parameters", cJSON_CreateNumber((double)ck->n_params));
        ok &= add(o, "classes", classes);
        ok &= add(o, "vocab_size", cJSON_CreateNumber(vocab_size(ck->vocab)));
        ok &= add(o, "config", config ? config : cJSON_CreateNull());
        ok &= add(o, "origin", origin ? origin : cJSON_CreateNull());
        ok &= add(o, "state", state ? state : cJSON_CreateNull());
    } else {
        cJSON_Delete(classes);
        cJSON_Delete(by_item);
        cJSON_Delete(config);
        cJSON_Delete(origin);
        cJSON_Delete(state);
    }
    char *s = ok ? cJSON_Print(o) : NULL;
    cJSON_Delete(o);
    if (!s) return mha_fail(err, MHA_EXIT_DATA, "out of memory describing %s", path);
    fprintf(out, "%s\n", s);
    cJSON_free(s);
    return 0;
}

/* The JSON object in text, or NULL (absent, not JSON, or not an object). */
static cJSON *parse_object(const char *text) {
    cJSON *v = text ? cJSON_Parse(text) : NULL;
    if (cJSON_IsObject(v)) return v;
    cJSON_Delete(v);
    return NULL;
}

int model_info_print(const char *path, int json, FILE *out, MhaError *err) {
    Checkpoint ck;
    Config c;
    int rc = checkpoint_load(path, &ck, err);
    if (rc) return rc;
    if ((rc = checkpoint_config(&ck, &c, path, err)) == 0) rc = checkpoint_check_layout(&ck, &c, path, err);
    if (rc) {
        checkpoint_free(&ck);
        return rc;
    }
    const long long bytes = (long long)ck.file_bytes;
    /* an ORIGIN or STATE that is not a JSON object is shown as absent */
    cJSON *origin = parse_object(ck.origin_json), *state = parse_object(ck.state_json);
    if (json) {
        rc = print_json(out, path, bytes, &ck, origin, state, err);   /* takes origin and state */
    } else {
        print_text(out, path, bytes, &ck, &c, origin, state);
        cJSON_Delete(origin);
        cJSON_Delete(state);
    }
    checkpoint_free(&ck);
    return rc;
}
