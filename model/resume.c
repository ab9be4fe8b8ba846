/* model/resume.c: last.mha's training state (see resume.h): written at each save, parsed
 * and checked by --resume, and whether a resumed run has work left. */
#include "model/resume.h"
#include "model/run_dir.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *train_state_json(const Run *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "update", (double)r->update);
    cJSON_AddNumberToObject(o, "epoch", r->epoch);
    cJSON_AddNumberToObject(o, "batch_pos", r->batch_pos);
    cJSON_AddNumberToObject(o, "adam_t", r->adamw.t);
    if (isfinite(r->best_metric)) cJSON_AddNumberToObject(o, "best_metric", r->best_metric);
    else   /* JSON has no NaN or infinity (cJSON writes null): kept as text, to come back exactly */
        cJSON_AddStringToObject(o, "best_metric", isnan(r->best_metric) ? "nan" : r->best_metric > 0 ? "inf" : "-inf");
    cJSON_AddNumberToObject(o, "best_update", (double)r->best_update);
    cJSON_AddNumberToObject(o, "evals_since_best", r->evals_since_best);
    cJSON_AddNumberToObject(o, "bad_steps", r->bad_steps);
    cJSON_AddNumberToObject(o, "elapsed", r->seconds_trained);
    /* the log's size now: records after it (of a run killed before its next save) are dropped
     * on resume, which writes them again */
    long log_bytes = r->metrics_log && !r->metrics_torn ? r->metrics_good_bytes : -1;
    cJSON_AddNumberToObject(o, "metrics_bytes", (double)log_bytes);
    char fp[24];   /* a 64-bit number, as text: JSON numbers are doubles */
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)r->train_fingerprint);
    cJSON_AddStringToObject(o, "train_fingerprint", fp);
    cJSON_AddNumberToObject(o, "train_examples", r->train.n);
    cJSON_AddBoolToObject(o, "test_reported", r->test_reported);
    cJSON_AddBoolToObject(o, "eval_due", r->eval_due);
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

/* The training state as read back from last.mha (train_state_parse). */
typedef struct {
    long update;
    int epoch, batch_pos, adam_t;
    double best_metric;
    long best_update;              /* -1: no best yet */
    int evals_since_best, bad_steps;
    double seconds_trained;        /* "elapsed"; 0 unless a finite number >= 0 */
    long metrics_bytes;            /* metrics.jsonl's size at the save; -1: unknown */
    int has_fingerprint;           /* train_fingerprint stored (absent in older checkpoints) */
    char train_fingerprint[24];    /* as stored (one longer, cut here, still differs from all of
                                    * dataset_fingerprint's 16 hex digits) */
    double train_examples;         /* -1: absent */
    int test_reported;
    int eval_due;                  /* a train.eval_every evaluation was interrupted: still to do */
    int progress_known;            /* update, epoch, best_update and evals_since_best are in range:
                                    * enough to tell whether the run is complete */
} TrainState;

static double json_num(const cJSON *o, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* A whole number lo..hi from the resume state (dflt when absent) into *out: 1, or 0 when it
 * is outside, with err filled if it is the first such field of the parse (*failed then set):
 * the state comes from a file, and a value outside what mha-train writes must not become an
 * out-of-range integer conversion or a nonsense position. */
static int state_int(const cJSON *o, const char *key, double dflt, double lo, double hi, double *out,
                     const char *path, int *failed, MhaError *err) {
    double v = json_num(o, key, dflt);
    if (!(v >= lo && v <= hi) || v != floor(v)) {
        if (!*failed)
            mha_fail(err, MHA_EXIT_DATA, "%s: corrupt training state (%s = %g; expected a whole number from "
                     "%.0f to %.0f)", path, key, v, lo, hi);
        *failed = 1;
        return 0;
    }
    *out = v;
    return 1;
}

/* last.mha's training state into *s: 0, or MHA_EXIT_DATA with err filled (a state that is not
 * a JSON object, or the first field out of range, in the order checked below). The fields in
 * range are read either way (the others keep their defaults); s->progress_known says whether
 * those that tell a complete run are among them. */
static int train_state_parse(const char *json, const Config *cfg, const char *path, TrainState *s,
                             MhaError *err) {
    memset(s, 0, sizeof *s);
    cJSON *o = cJSON_Parse(json);
    if (!cJSON_IsObject(o)) {
        cJSON_Delete(o);
        return mha_fail(err, MHA_EXIT_DATA, "%s: corrupt training state (expected a JSON object)", path);
    }
    double upd = 0, ep = 0, pos = 0, t = 0, bu = -1, esb = 0, bad = 0;
    int failed = 0;
    int upd_ok = state_int(o, "update", 0, 0, 9007199254740992.0, &upd, path, &failed, err);
    int ep_ok = state_int(o, "epoch", 0, 0, cfg->epochs, &ep, path, &failed, err);
    state_int(o, "batch_pos", 0, 0, INT32_MAX, &pos, path, &failed, err);
    state_int(o, "adam_t", 0, 0, INT32_MAX, &t, path, &failed, err);
    int bu_ok = upd_ok && state_int(o, "best_update", -1, -1, upd, &bu, path, &failed, err);
    int esb_ok = state_int(o, "evals_since_best", 0, 0, INT32_MAX, &esb, path, &failed, err);
    state_int(o, "bad_steps", 0, 0, INT32_MAX, &bad, path, &failed, err);
    s->progress_known = upd_ok && ep_ok && bu_ok && esb_ok;
    s->update = (long)upd;
    s->epoch = (int)ep;
    s->batch_pos = (int)pos;
    s->adam_t = (int)t;
    /* a best that is NaN or infinite (a dev loss that overflowed) as the run had it: "nan", "inf",
     * "-inf", or null from builds that wrote cJSON's null for them (NaN then: the likelier) */
    const cJSON *bm = cJSON_GetObjectItemCaseSensitive(o, "best_metric");
    s->best_metric = cJSON_IsNumber(bm) ? bm->valuedouble : cJSON_IsNull(bm) ? NAN
                     : cJSON_IsString(bm) && bm->valuestring ? (!strcmp(bm->valuestring, "inf") ? INFINITY
                                                               : !strcmp(bm->valuestring, "-inf") ? -INFINITY : NAN)
                     : 0;
    s->best_update = (long)bu;
    s->evals_since_best = (int)esb;
    s->bad_steps = (int)bad;
    s->seconds_trained = json_num(o, "elapsed", 0);
    if (!isfinite(s->seconds_trained) || s->seconds_trained < 0) s->seconds_trained = 0;
    double mb = json_num(o, "metrics_bytes", -1);
    s->metrics_bytes = mb >= 0 && mb <= (double)LONG_MAX && mb == floor(mb) ? (long)mb : -1;
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(o, "train_fingerprint");
    s->has_fingerprint = cJSON_IsString(fp);
    if (s->has_fingerprint) snprintf(s->train_fingerprint, sizeof s->train_fingerprint, "%s", fp->valuestring);
    s->train_examples = json_num(o, "train_examples", -1);
    /* a run killed during its test report has test_reported false; checkpoints written before
     * it existed count as reported. Kept as stored (false without a test set, as the run that
     * wrote it has it), so that a resumed run saves the same state */
    const cJSON *tr = cJSON_GetObjectItemCaseSensitive(o, "test_reported");
    s->test_reported = !(cJSON_IsBool(tr) && !cJSON_IsTrue(tr));
    s->eval_due = cfg->dev[0] && cfg->eval_every > 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "eval_due"));
    cJSON_Delete(o);
    return failed ? MHA_EXIT_DATA : 0;
}

/* Whether a resumed run has nothing left to do: every epoch trained (or stopped early by
 * patience), its model.mha saved (the best on dev, or without a dev set the final
 * parameters) and, with a test set, its test report given. A run killed before saving
 * model.mha or during the test report is not complete: resuming it does what is left. */
static int run_complete(const TrainState *s, const Config *cfg, int has_dev, int best_saved) {
    return (s->epoch >= cfg->epochs || (cfg->patience > 0 && s->evals_since_best >= cfg->patience)) &&
           (s->best_update >= 0 || (!has_dev && best_saved)) && (!cfg->test[0] || s->test_reported);
}

static void say_complete(const char *resume_path, long update, int all_epochs, const char *best_path) {
    fprintf(stderr, "mha-train: %s: the run is already complete (%ld update%s%s); nothing to do. "
            "Its model is %s (evaluate it with mha-predict --model %s --eval FILE)\n", resume_path, update,
            update == 1 ? "" : "s", all_epochs ? ", every epoch" : ", stopped early", best_path, best_path);
}

/* Whether model.mha (best_path) loads and has n_params parameters; if so, and params is not
 * NULL, its parameters are copied there. */
static int load_best_params(const char *best_path, size_t n_params, float *params) {
    Checkpoint best;
    MhaError ignore;
    if (checkpoint_load(best_path, &best, &ignore) != 0) return 0;
    int ok = best.n_params == n_params;
    if (ok && params) memcpy(params, best.params, n_params * sizeof(float));
    checkpoint_free(&best);
    return ok;
}

/* Whether the run of state s is complete (run_complete), said on stderr when it is. Its best
 * parameters so far are in the output folder's model.mha: they go to best_params when that is
 * not NULL and s has a best; without a model.mha that loads, s->best_update becomes -1. */
static int say_if_complete(TrainState *s, const Config *cfg, int has_dev, size_t n_params, float *best_params,
                           const char *resume_path) {
    char best_path[4300];
    snprintf(best_path, sizeof best_path, "%s/model.mha", cfg->out_dir);
    int best_saved = load_best_params(best_path, n_params, s->best_update >= 0 ? best_params : NULL);
    if (!best_saved) s->best_update = -1;
    if (!run_complete(s, cfg, has_dev, best_saved)) return 0;
    say_complete(resume_path, s->update, s->epoch >= cfg->epochs, best_path);
    return 1;
}

static void say_at_max_steps(const char *resume_path, long update, long max_steps) {
    fprintf(stderr, "mha-train: %s is at update %ld, where --max-steps %ld stops; nothing to do "
            "(a larger --max-steps, or none, goes on)\n", resume_path, update, max_steps);
}

/* Before any data is read: a finished run says so at once (reading shopping10 alone takes a
 * second), as does one already at the update --max-steps (max_steps > 0) stops at, at the start
 * of an epoch (one at an epoch's end may still owe that epoch's evaluation: resume_restore
 * tells, with the data read). Anything unexpected in the state is left to the full check after
 * loading (resume_restore). */
static int complete_before_loading(const Checkpoint *resume, const Config *cfg, const char *resume_path,
                                   long max_steps) {
    TrainState s;
    MhaError ignore;
    train_state_parse(resume->state_json, cfg, resume_path, &s, &ignore);
    if (!s.progress_known) return 0;
    if (say_if_complete(&s, cfg, cfg->dev[0] != '\0', resume->n_params, NULL, resume_path)) return 1;
    if (max_steps > 0 && s.update >= max_steps && !s.eval_due && s.batch_pos == 0) {
        say_at_max_steps(resume_path, s.update, max_steps);
        return 1;
    }
    return 0;
}

int resume_open(const char *path, long max_steps, const char *const *sets, int n_sets, Config *cfg,
                Checkpoint *resume, int *done, MhaError *err) {
    int rc;
    *done = 0;
    if ((rc = checkpoint_load(path, resume, err))) return rc;
    if (!resume->state_json || !resume->adam_m) {
        checkpoint_free(resume);
        return mha_fail(err, MHA_EXIT_USAGE, "%s: a model-only checkpoint has no training state "
                        "(resume from OUTPUT_DIR/last.mha)", path);
    }
    if ((rc = checkpoint_config(resume, cfg, path, err))) {
        checkpoint_free(resume);
        return rc;
    }
    if ((rc = config_apply_resume_sets(cfg, sets, n_sets, err))) {   /* train.device and the like */
        checkpoint_free(resume);
        return rc;
    }
    if ((rc = checkpoint_check_layout(resume, cfg, path, err))) {
        checkpoint_free(resume);
        return rc;
    }
    /* the run goes on in the folder that holds last.mha, wherever it was started */
    char dir[PATH_MAX], stored[PATH_MAX];
    if (!run_dir_of(path, dir, sizeof dir) || strlen(dir) >= sizeof cfg->out_dir) {
        checkpoint_free(resume);
        return mha_fail(err, MHA_EXIT_DATA, "%s: cannot resolve its folder (%s)", path,
                        strerror(errno ? errno : ENAMETOOLONG));
    }
    if (!realpath(cfg->out_dir, stored) || strcmp(dir, stored) != 0) {
        fprintf(stderr, "mha-train: note: continuing in %s, the folder of %s (the run was "
                "started with output.dir %s)\n", dir, path, cfg->out_dir);
        snprintf(cfg->out_dir, sizeof cfg->out_dir, "%s", dir);
    }
    if (complete_before_loading(resume, cfg, path, max_steps)) {
        checkpoint_free(resume);
        *done = 1;
    }
    return 0;
}

int resume_restore(Run *r, const Checkpoint *resume, const char *path, int quiet, long max_steps, int n_batches,
                   int *done, MhaError *err) {
    const Config *cfg = r->cfg;
    const size_t pbytes = r->model.lay.total * sizeof(float);
    *done = 0;
    if (resume->n_params != r->model.lay.total)
        return mha_fail(err, MHA_EXIT_DATA, "%s: checkpoint has %zu parameters, the config describes %zu", path,
                        resume->n_params, r->model.lay.total);
    r->be->to_device(r->model.params, resume->params, pbytes);
    r->be->to_device(r->adamw.m, resume->adam_m, pbytes);
    r->be->to_device(r->adamw.v, resume->adam_v, pbytes);
    TrainState s;
    int rc = train_state_parse(resume->state_json, cfg, path, &s, err);
    if (rc) return rc;
    /* the same training examples as when the run started (absent in older checkpoints) */
    char now[24];
    snprintf(now, sizeof now, "%016llx", (unsigned long long)r->train_fingerprint);
    if (s.has_fingerprint && strcmp(s.train_fingerprint, now) != 0)
        return mha_fail(err, MHA_EXIT_DATA, "%s: the training data changed since this run started (%s: %d "
                        "examples now, %.0f then; or this mha reads some lines differently from the one that started "
                        "the run): --resume goes on only with the examples the run started on; "
                        "restore the file, or start a new run (--config ... --overwrite)", path, cfg->train,
                        r->train.n, s.train_examples);
    /* normally said before loading the data (complete_before_loading); a run killed before
     * saving model.mha goes on below to save it and print the test report */
    const long had_best = s.best_update;
    if (say_if_complete(&s, cfg, r->has_dev, r->model.lay.total, r->best_params, path)) {
        *done = 1;
        return 0;
    }
    /* last.mha copied without its model.mha, say (at the end of the run, finish_run says it) */
    if (had_best >= 0 && s.best_update < 0 && s.epoch < cfg->epochs &&
        !(cfg->patience > 0 && s.evals_since_best >= cfg->patience))
        fprintf(stderr, "mha-train: warning: %s/model.mha, the best parameters on dev so far (update %ld, %s %.4f), "
                "is missing or does not load: they are lost, and model.mha will hold the best of the rest of the run "
                "(to keep them, put that run's model.mha beside %s and resume again)\n", cfg->out_dir, had_best,
                cfg->metric, strcmp(cfg->metric, "loss") == 0 ? -s.best_metric : s.best_metric, path);
    r->update = s.update;
    r->epoch = s.epoch;
    r->batch_pos = s.batch_pos;
    r->adamw.t = s.adam_t;
    r->best_metric = s.best_metric;
    r->best_update = s.best_update;
    r->evals_since_best = s.evals_since_best;
    r->bad_steps = s.bad_steps;
    r->seconds_trained = s.seconds_trained;
    r->test_reported = s.test_reported;
    r->eval_due = s.eval_due;
    r->metrics_saved_bytes = s.metrics_bytes;
    /* at --max-steps' update inside an epoch; at its end, the epoch's evaluation is still to do */
    if (max_steps > 0 && r->update >= max_steps && !r->eval_due && r->epoch < cfg->epochs && r->batch_pos < n_batches) {
        say_at_max_steps(path, r->update, max_steps);
        *done = 1;
        return 0;
    }
    if (!quiet && r->epoch < cfg->epochs)
        fprintf(stderr, "resuming %s at update %ld (epoch %d, batch %d)\n", path,
                r->update, r->epoch + 1, r->batch_pos);
    else if (!quiet)   /* every epoch done; what is left is the model.mha of the end */
        fprintf(stderr, "resuming %s at update %ld (after the last epoch)\n", path, r->update);
    return 0;
}
