/* cmd/model_info.c: mha-predict --info: what a checkpoint holds (see model_info.h), read
 * without building the model. */
#include "cmd/model_info.h"
#include <cjson/cJSON.h>
#include <string.h>
#include <sys/stat.h>
#include "data/vocab.h"
#include "model/checkpoint.h"
#include "model/config.h"

/* The number at key in o, or def when o has none. */
static double number_or(const cJSON *o, const char *key, double def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : def;
}

static const char *string_or(const cJSON *o, const char *key, const char *def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : def;
}

/* "update U (epoch E): dev accuracy A, macro-F1 F, loss L" from a checkpoint's ORIGIN */
static void print_origin(FILE *out, const cJSON *origin) {
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(origin, "dev");
    fprintf(out, "parameters   from update %.0f", number_or(origin, "update", -1));
    if (cJSON_IsObject(dev))
        fprintf(out, " (epoch %.0f), the best on dev by %s: accuracy %.4f, macro-F1 %.4f, loss %.4f",
                number_or(origin, "epoch", 0), string_or(dev, "metric", "?"), number_or(dev, "accuracy", 0),
                number_or(dev, "macro_f1", 0), number_or(dev, "loss", 0));
    fputc('\n', out);
}

/* The run's position and best from a last.mha's STATE. */
static void print_state(FILE *out, const cJSON *state, const Config *c) {
    double best = number_or(state, "best_metric", 0), best_update = number_or(state, "best_update", -1);
    if (!strcmp(c->metric, "loss")) best = -best;   /* stored as higher-is-better */
    fprintf(out, "state        resumable: update %.0f, %.0f of %d epochs done, %.1f s trained", number_or(state, "update", 0),
            number_or(state, "epoch", 0), c->epochs, number_or(state, "elapsed", 0));
    if (best_update >= 0) fprintf(out, "; best dev %s %.4f at update %.0f", c->metric, best, best_update);
    fputc('\n', out);
}

static void print_text(FILE *out, const char *path, long long bytes, const Checkpoint *ck, const Config *c,
                       const cJSON *origin, const cJSON *state) {
    fprintf(out, "%s: %s, %lld bytes", path, ck->state_json ? "training state (last.mha)" : "model", bytes);
    if (origin && string_or(origin, "mha", NULL)) fprintf(out, ", written by mha %s", string_or(origin, "mha", ""));
    fprintf(out, "\nclasses      %d:", ck->labels.n);
    for (int i = 0; i < ck->labels.n; i++) fprintf(out, " %s", ck->labels.names[i]);
    fprintf(out, "\nvocabulary   %d tokens (data.min_count %d, data.max_vocab %d)%s%s\n", vocab_size(ck->vocab),
            c->min_count, c->max_vocab, c->nfkc ? ", NFKC" : "", c->casefold ? ", case-folded" : "");
    fprintf(out, "input        at most %d tokens a text (data.truncate %s)\n", c->max_len, c->truncate);
    fprintf(out, "model        %zu parameters: d_model %d, %d heads, d_ff %d, %d layer%s (%s-LN, %s), %s pooling, "
            "%s positions, %s attention%s\n", ck->n_params, c->d_model, c->n_heads, c->d_ff, c->n_layers,
            c->n_layers == 1 ? "" : "s", c->norm, c->activation, c->pooling, c->position, c->attention,
            c->causal ? ", causal" : "");
    fprintf(out, "trained      %s, %d epochs of batches of %d, lr %g, seed %d, on %s", c->precision, c->epochs,
            c->batch_size, c->lr, c->seed, c->train);
    if (c->dev[0]) fprintf(out, " (dev %s)", c->dev);
    fputc('\n', out);
    if (origin && !ck->state_json) print_origin(out, origin);
    if (state) print_state(out, state, c);
}

static int print_json(FILE *out, const char *path, long long bytes, const Checkpoint *ck, cJSON *origin,
                      cJSON *state, MhaError *err) {
    cJSON *o = cJSON_CreateObject(), *classes = cJSON_CreateArray();
    cJSON *config = cJSON_Parse(ck->config_json);
    for (int i = 0; classes && i < ck->labels.n; i++) cJSON_AddItemToArray(classes, cJSON_CreateString(ck->labels.names[i]));
    cJSON_AddStringToObject(o, "path", path);
    cJSON_AddNumberToObject(o, "bytes", (double)bytes);
    cJSON_AddStringToObject(o, "kind", ck->state_json ? "training state" : "model");
    const char *by = origin ? string_or(origin, "mha", NULL) : NULL;
    cJSON_AddItemToObject(o, "written_by", by ? cJSON_CreateString(by) : cJSON_CreateNull());
    cJSON_AddNumberToObject(o, "parameters", (double)ck->n_params);
    cJSON_AddItemToObject(o, "classes", classes);
    cJSON_AddNumberToObject(o, "vocab_size", vocab_size(ck->vocab));
    cJSON_AddItemToObject(o, "config", config ? config : cJSON_CreateNull());
    /* the caller's trees move into o */
    cJSON_AddItemToObject(o, "origin", origin ? origin : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "state", state ? state : cJSON_CreateNull());
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    if (!s) return mha_fail(err, MHA_EXIT_DATA, "out of memory writing the description of %s", path);
    fprintf(out, "%s\n", s);
    cJSON_free(s);
    return 0;
}

int model_info_print(const char *path, int json, FILE *out, MhaError *err) {
    Checkpoint ck;
    Config c;
    int rc = checkpoint_load(path, &ck, err);
    if (rc) return rc;
    config_defaults(&c);
    if ((rc = config_from_json(&c, ck.config_json, "", err))) {
        char inner[1800];
        snprintf(inner, sizeof inner, "%.1700s", err->msg);
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: the stored config is not valid (%s)", path, inner);
    } else {
        rc = checkpoint_check_layout(&ck, &c, path, err);
    }
    if (rc) {
        checkpoint_free(&ck);
        return rc;
    }
    struct stat st;
    const long long bytes = stat(path, &st) == 0 ? (long long)st.st_size : -1;
    /* unreadable ORIGIN or STATE text is shown as absent */
    cJSON *origin = ck.origin_json ? cJSON_Parse(ck.origin_json) : NULL;
    cJSON *state = ck.state_json ? cJSON_Parse(ck.state_json) : NULL;
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
