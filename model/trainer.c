/* model/trainer.c: the training loop of mha-train (see trainer.h). */
#include "model/trainer.h"
#include "data/batcher.h"
#include "data/dataset.h"
#include "kernels/backend.h"
#include "kernels/profile.h"
#include "kernels/rng.h"
#include "model/checkpoint.h"
#include "model/classifier.h"
#include "model/device.h"
#include "model/evaluate.h"
#include "model/metrics.h"
#include "model/optimizer.h"
#include "model/run_dir.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_interrupted;
static void on_signal(int sig) {
    g_interrupted = 1;
    signal(sig, SIG_DFL);  /* a second Ctrl-C ends the process at once */
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Everything a run holds, so helpers can take one pointer. */
typedef struct {
    Config *cfg;
    const Backend *be;
    Vocab *vocab;
    LabelMap labels;
    Dataset train, dev, test;
    int has_dev, has_test;
    Model model;
    AdamW opt;
    int add_cls, truncate;
    long update, total_updates, updates_per_epoch;
    int epoch, batch_pos;                 /* data position of the next update */
    double best_metric;  long best_update; int evals_since_best;
    int bad_steps;
    float *best_params;                   /* host copy of the best parameters */
    FILE *metrics_log;
    int metrics_failed;                   /* a write to metrics.jsonl failed (warned once) */
    int test_reported;                    /* the test report of the finished run was printed and logged */
    long metrics_saved_bytes;             /* resume: metrics.jsonl's size when last.mha was saved (-1: unknown) */
    uint64_t train_fingerprint;           /* dataset_fingerprint of train, taken once */
    double elapsed_before;                /* training seconds in earlier runs (resume) */
} Run;

static char *state_json(const Run *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "update", (double)r->update);
    cJSON_AddNumberToObject(o, "epoch", r->epoch);
    cJSON_AddNumberToObject(o, "batch_pos", r->batch_pos);
    cJSON_AddNumberToObject(o, "adam_t", r->opt.t);
    cJSON_AddNumberToObject(o, "best_metric", r->best_metric);
    cJSON_AddNumberToObject(o, "best_update", (double)r->best_update);
    cJSON_AddNumberToObject(o, "evals_since_best", r->evals_since_best);
    cJSON_AddNumberToObject(o, "bad_steps", r->bad_steps);
    cJSON_AddNumberToObject(o, "elapsed", r->elapsed_before);
    /* the log's size now: records after it (of a run killed before its next save) are dropped
     * on resume, which writes them again */
    long log_bytes = r->metrics_log && !r->metrics_failed ? ftell(r->metrics_log) : -1;
    cJSON_AddNumberToObject(o, "metrics_bytes", (double)log_bytes);
    char fp[24];   /* a 64-bit number, as text: JSON numbers are doubles */
    snprintf(fp, sizeof fp, "%016llx", (unsigned long long)r->train_fingerprint);
    cJSON_AddStringToObject(o, "train_fingerprint", fp);
    cJSON_AddNumberToObject(o, "train_examples", r->train.n);
    cJSON_AddBoolToObject(o, "test_reported", r->test_reported);
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

static double json_num(const cJSON *o, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* A whole number lo..hi from the resume state (dflt when absent), or -1 with err filled:
 * the state comes from a file, and a value outside what mha-train writes must not become
 * an out-of-range integer conversion or a nonsense position. */
static int state_int(const cJSON *o, const char *key, double dflt, double lo, double hi, double *out,
                     const char *path, MhaError *err) {
    double v = json_num(o, key, dflt);
    if (!(v >= lo && v <= hi) || v != floor(v)) {
        mha_fail(err, MHA_EXIT_DATA, "%s: corrupt training state (%s = %g; expected a whole number from "
                 "%.0f to %.0f)", path, key, v, lo, hi);
        return -1;
    }
    *out = v;
    return 0;
}

/* Whether a resumed run has nothing left to do: every epoch trained (or stopped early by
 * patience), its model.mha saved (the best on dev, or without a dev set the final
 * parameters) and, with a test set, its test report given. A run killed before saving
 * model.mha or during the test report is not complete: resuming it does what is left. */
static int run_complete(const Config *cfg, int epoch, int evals_since_best, long best_update, int has_dev,
                        int best_saved, int test_pending) {
    return (epoch >= cfg->epochs || (cfg->patience > 0 && evals_since_best >= cfg->patience)) &&
           (best_update >= 0 || (!has_dev && best_saved)) && !test_pending;
}

/* The state's test_reported (a run killed during its test report has it false); checkpoints
 * written before it existed count as reported. */
static int test_pending(const cJSON *st, const Config *cfg) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(st, "test_reported");
    return cfg->test[0] && cJSON_IsBool(t) && !cJSON_IsTrue(t);
}

static void say_complete(const char *resume_path, long update, int all_epochs, const char *best_path) {
    fprintf(stderr, "mha-train: %s: the run is already complete (%ld updates%s); nothing to do. "
            "Its model is %s (evaluate it with mha-predict --model %s --eval FILE)\n", resume_path, update,
            all_epochs ? ", every epoch" : ", stopped early", best_path, best_path);
}

/* model.mha in the output folder loads and has n_params parameters; its parameters go to
 * params when that is not NULL. */
static int best_model_saved(const char *best_path, size_t n_params, float *params) {
    Checkpoint best;
    MhaError ignore;
    if (checkpoint_load(best_path, &best, &ignore) != 0) return 0;
    int ok = best.n_params == n_params;
    if (ok && params) memcpy(params, best.params, n_params * sizeof(float));
    checkpoint_free(&best);
    return ok;
}

/* Before any data is read: a finished run says so at once (reading shopping10 alone takes a
 * second), as does one already at the update --max-steps (max_steps > 0) stops at. Anything
 * unexpected in the state is left to the full check after loading. */
static int complete_before_loading(const Checkpoint *resume, const Config *cfg, const char *resume_path,
                                   long max_steps) {
    cJSON *st = cJSON_Parse(resume->state_json);
    double upd, ep, bu, esb;
    MhaError ignore;
    int done = 0;
    if (cJSON_IsObject(st) && !state_int(st, "update", 0, 0, 9007199254740992.0, &upd, resume_path, &ignore) &&
        !state_int(st, "epoch", 0, 0, cfg->epochs, &ep, resume_path, &ignore) &&
        !state_int(st, "best_update", -1, -1, upd, &bu, resume_path, &ignore) &&
        !state_int(st, "evals_since_best", 0, 0, INT32_MAX, &esb, resume_path, &ignore)) {
        if (!isfinite(json_num(st, "best_metric", 0))) bu = -1;
        char best_path[4300];
        snprintf(best_path, sizeof best_path, "%s/model.mha", cfg->out_dir);
        int best_saved = best_model_saved(best_path, resume->n_params, NULL);
        if (!best_saved) bu = -1;
        if (run_complete(cfg, (int)ep, (int)esb, (long)bu, cfg->dev[0] != '\0', best_saved, test_pending(st, cfg))) {
            say_complete(resume_path, (long)upd, (int)ep >= cfg->epochs, best_path);
            done = 1;
        } else if (max_steps > 0 && upd >= (double)max_steps) {
            fprintf(stderr, "mha-train: %s is at update %.0f, where --max-steps %ld stops; nothing to do "
                    "(a larger --max-steps, or none, goes on)\n", resume_path, upd, max_steps);
            done = 1;
        }
    }
    cJSON_Delete(st);
    return done;
}

static int save_checkpoint(Run *r, const char *name, int with_state, const float *host_params, MhaError *err) {
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", r->cfg->out_dir, name);
    size_t n = r->model.lay.total, bytes = n * sizeof(float);
    Checkpoint ck = {0};
    ck.config_json = config_to_json(r->cfg);
    ck.vocab = r->vocab;
    ck.labels = r->labels;
    ck.n_params = n;
    float *params = NULL, *m = NULL, *v = NULL;
    int rc = 0;
    if (!host_params) ck.params = params = malloc(bytes);
    else ck.params = (float *)host_params;
    if (with_state) {
        ck.adam_m = m = malloc(bytes);
        ck.adam_v = v = malloc(bytes);
    }
    if (!ck.config_json || !ck.params || (with_state && (!m || !v))) {
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: out of memory for a host copy of the %zu parameters; the previous "
                      "checkpoint is untouched", path, n);
        goto done;
    }
    if (params) r->be->to_host(params, r->model.params, bytes);
    if (with_state) {
        r->be->to_host(m, r->opt.m, bytes);
        r->be->to_host(v, r->opt.v, bytes);
        if (!(ck.state_json = state_json(r))) {
            rc = mha_fail(err, MHA_EXIT_DATA, "%s: out of memory for the training state; the previous checkpoint "
                          "is untouched", path);
            goto done;
        }
    }
    rc = checkpoint_save(path, &ck, err);
done:
    free(ck.config_json);
    free(ck.state_json);
    free(params);
    free(m);
    free(v);
    return rc;
}

static double metric_value(const Config *c, const Metrics *m) {
    if (strcmp(c->metric, "loss") == 0) return -metrics_loss(m);   /* higher is better */
    if (strcmp(c->metric, "macro_f1") == 0) return metrics_macro_f1(m);
    return metrics_accuracy(m);
}

static void log_record(Run *r, cJSON *rec) {
    if (!r->metrics_log) { cJSON_Delete(rec); return; }
    char *s = cJSON_PrintUnformatted(rec);
    errno = 0;
    int bad = !s || fprintf(r->metrics_log, "%s\n", s) < 0;
    if (fflush(r->metrics_log) != 0 || bad) {
        if (!r->metrics_failed)
            fprintf(stderr, "mha-train: warning: cannot write %s/metrics.jsonl (%s); training goes on, "
                    "but records are being lost\n", r->cfg->out_dir, strerror(errno ? errno : EIO));
        r->metrics_failed = 1;
        clearerr(r->metrics_log);
    }
    free(s);
    cJSON_Delete(rec);
}

/* Resume: the records metrics.jsonl got after last.mha was saved (a run killed mid-epoch)
 * are removed, since the resumed run writes them again; a log shorter than at the save
 * (edited by hand) is left alone. */
static void drop_unsaved_records(Run *r, const char *log_path) {
    const long keep = r->metrics_saved_bytes;
    if (keep < 0 || fseek(r->metrics_log, 0, SEEK_END) != 0) return;
    const long size = ftell(r->metrics_log);
    if (size <= keep) return;
    FILE *f = fopen(log_path, "r");
    long records = 0;
    if (f && fseek(f, keep, SEEK_SET) == 0)
        for (int ch; (ch = getc(f)) != EOF;) records += ch == '\n';
    if (f) fclose(f);
    if (ftruncate(fileno(r->metrics_log), (off_t)keep) != 0) {
        fprintf(stderr, "mha-train: warning: %s: cannot remove the %ld records written after last.mha was saved "
                "(%s); they will appear twice\n", log_path, records, strerror(errno));
        return;
    }
    fseek(r->metrics_log, 0, SEEK_END);
    fprintf(stderr, "mha-train: note: %s: removed %ld record%s written after last.mha was saved (the run "
            "stopped without saving); the resumed run writes them again\n", log_path, records,
            records == 1 ? "" : "s");
}

/* Dev evaluation during epoch `epoch` (1-based, as in the train records); keeps the best
 * parameters and writes model.mha when they improve. */
static int evaluate_dev(Run *r, int epoch, int quiet, MhaError *err) {
    Config *c = r->cfg;
    Metrics mt;
    evaluate_dataset(&r->model, &r->dev, c->batch_size, c->max_len, r->truncate, r->add_cls, &mt);
    double value = metric_value(c, &mt);
    int improved = r->best_update < 0 || value > r->best_metric;
    if (improved) {
        r->best_metric = value;
        r->best_update = r->update;
        r->evals_since_best = 0;
        r->be->to_host(r->best_params, r->model.params, r->model.lay.total * sizeof(float));
    } else {
        r->evals_since_best++;
    }
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "type", "dev");
    cJSON_AddNumberToObject(rec, "update", (double)r->update);
    cJSON_AddNumberToObject(rec, "epoch", epoch);
    cJSON_AddNumberToObject(rec, "loss", metrics_loss(&mt));
    cJSON_AddNumberToObject(rec, "accuracy", metrics_accuracy(&mt));
    cJSON_AddNumberToObject(rec, "macro_f1", metrics_macro_f1(&mt));
    cJSON_AddBoolToObject(rec, "best", improved);
    log_record(r, rec);
    if (!quiet)
        fprintf(stderr, "dev   update %ld  loss %.4f  accuracy %.4f  macro-F1 %.4f%s\n", r->update,
                metrics_loss(&mt), metrics_accuracy(&mt), metrics_macro_f1(&mt),
                improved ? "  (best, saved model.mha)" : "");
    metrics_free(&mt);
    if (improved) return save_checkpoint(r, "model.mha", 0, r->best_params, err);
    return 0;
}

/* Early stopping: 1 after train.patience evaluations in a row without a better dev metric, and
 * then says so on stderr (whether evaluations come per epoch or every train.eval_every updates). */
static int check_patience(const Run *r) {
    const int p = r->cfg->patience;
    if (p <= 0 || r->evals_since_best < p || r->update >= r->total_updates) return 0;   /* last: ends anyway */
    fprintf(stderr, "early stopping: no better dev %s in %d evaluation%s (train.patience); best at update %ld\n",
            r->cfg->metric, p, p == 1 ? "" : "s", r->best_update);
    return 1;
}

static void format_duration(char *out, size_t n, double s) {
    long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    if (t >= 3600) snprintf(out, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(out, n, "%ld:%02ld", t / 60, t % 60);
}

/* Label and text swapped (a "class" per example) trains a useless model without complaint:
 * refused when more than half of the examples (and more than 20) have a label no other
 * example has. */
static int check_labels_not_swapped(const char *path, const Dataset *d, const LabelMap *labels, MhaError *err) {
    int *count = calloc((size_t)labels->n, sizeof *count);
    if (!count) return mha_fail(err, MHA_EXIT_DATA, "out of memory counting labels");
    for (int i = 0; i < d->n; i++) count[d->labels[i]]++;
    int alone = 0, eg = -1;
    for (int k = 0; k < labels->n; k++)
        if (count[k] == 1) {
            alone++;
            if (eg < 0 || k == labels->n / 2) eg = k;
        }
    free(count);
    if (alone <= 20 || 2L * alone <= d->n) return 0;
    const char *name = labels->names[eg];
    int n = (int)strlen(name);
    if (n > 60)
        for (n = 60; n > 0 && ((unsigned char)name[n] & 0xC0) == 0x80; n--) {}   /* whole characters */
    return mha_fail(err, MHA_EXIT_DATA,
                    "%s: %d of %d examples have a label no other example has (e.g. '%.*s'); are the "
                    "label and the text swapped? (expected a short label first: 'label<TAB>text', "
                    "'__label__LABEL text' or {\"label\": ..., \"text\": ...})", path, alone, d->n, n, name);
}

static int load_data(Run *r, const Checkpoint *resume, MhaError *err) {
    Config *c = r->cfg;
    ReadOptions ro;
    config_read_options(c, &ro);
    int rc;
    if (resume) {
        r->vocab = resume->vocab;
        r->labels = resume->labels;
        ReadOptions train_ro = ro;   /* read as a fresh run reads it: lines without text skipped */
        train_ro.skip_no_text = 1;
        if (access(c->train, R_OK) != 0)   /* moved since: the path is the one last.mha stores */
            return mha_fail(err, MHA_EXIT_DATA, "%s: cannot open (%s); the run reads the training file it "
                            "started with, by the path stored in its last.mha: put the file back there to "
                            "resume", c->train, strerror(errno));
        rc = dataset_load(c->train, &train_ro, r->vocab, &r->labels, &r->train, err);
        if (rc && strstr(err->msg, "does not occur in the training set")) {   /* a class the run never had */
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            mha_fail(err, rc, "%.1800s; the classes of a run are fixed when it starts: has %s changed since?",
                     msg, c->train);
        }
    } else {
        rc = dataset_load_train(c->train, &ro, c->min_count, c->max_vocab, &r->vocab, &r->labels, &r->train, err);
    }
    if (rc) return rc;
    r->train_fingerprint = dataset_fingerprint(&r->train);   /* once: stored at every save, checked on resume */
    if (r->train.n == 0) return mha_fail(err, MHA_EXIT_DATA, "%s: no examples (expected labelled lines)", c->train);
    if (r->labels.n < 2)
        return mha_fail(err, MHA_EXIT_DATA, "%s: every example has the label '%s' (expected at least 2 "
                        "classes to tell apart)", c->train, r->labels.names[0]);
    if (!resume && (rc = check_labels_not_swapped(c->train, &r->train, &r->labels, err))) return rc;
    if (c->dev[0]) {
        if ((rc = dataset_load(c->dev, &ro, r->vocab, &r->labels, &r->dev, err))) return rc;
        r->has_dev = r->dev.n > 0;
    }
    if (c->test[0]) {
        if ((rc = dataset_load(c->test, &ro, r->vocab, &r->labels, &r->test, err))) return rc;
        r->has_test = r->test.n > 0;
    }
    return 0;
}

static void print_data_stats(Run *r, Batcher *bt) {
    Config *c = r->cfg;
    fprintf(stderr, "train %s: %d examples, %ld tokens, %ld empty and %ld over-long lines skipped/truncated",
            c->train, r->train.n, r->train.n_tokens, r->train.n_empty, r->train.n_long);
    if (r->train.n_replaced)
        fprintf(stderr, ", %ld with invalid UTF-8 or NUL bytes read as U+FFFD", r->train.n_replaced);
    fputc('\n', stderr);
    dataset_print_notes(&r->train, c->train, "mha-train", stderr);
    if (r->has_dev) dataset_print_notes(&r->dev, c->dev, "mha-train", stderr);
    if (r->has_test) dataset_print_notes(&r->test, c->test, "mha-train", stderr);
    const int shown = r->labels.n <= 40 ? r->labels.n : 30;
    fprintf(stderr, "vocab %d tokens, %d classes:", vocab_size(r->vocab), r->labels.n);
    for (int k = 0; k < shown; k++) fprintf(stderr, " %s", r->labels.names[k]);
    if (shown < r->labels.n) fprintf(stderr, " ... (%d more)", r->labels.n - shown);
    fprintf(stderr, "\n");
    if (r->has_dev)
        fprintf(stderr, "dev %s: %d examples, OOV rate %.2f%%\n", c->dev, r->dev.n,
                r->dev.n_tokens ? 100.0 * r->dev.n_unk / r->dev.n_tokens : 0.0);
    if (r->has_test) fprintf(stderr, "test %s: %d examples\n", c->test, r->test.n);
    fprintf(stderr, "batches: %d per epoch, padding %.1f%% of positions%s\n", bt->n_batches,
            100.0 * batcher_padding_fraction(bt), c->bucket ? " (length-bucketed)" : "");
}

static void free_run(Run *r, int own_vocab) {
    adamw_destroy(&r->opt, &r->model);
    model_destroy(&r->model);
    dataset_free(&r->train);
    dataset_free(&r->dev);
    dataset_free(&r->test);
    if (own_vocab) {
        if (r->vocab) vocab_free(r->vocab);
        labelmap_free(&r->labels);
    }
    free(r->best_params);
    if (r->metrics_log) fclose(r->metrics_log);
}


static const Batch *next_batch(Batcher *bt, double *seconds) {
    double t0 = now_s();
    const Batch *b = batcher_next(bt);
    *seconds += now_s() - t0;
    return b;
}

/* GEMM GFLOP/s of the backend's linear layer (sgemm, or the bf16 GEMM in mixed precision) on
 * the feed-forward shape at this batch size: the ceiling the whole step is compared with. */
static double gemm_ceiling(const Backend *be, int N, int C, int F) {
    size_t fl = sizeof(float);
    float *a = be->alloc((size_t)N * C * fl), *w = be->alloc((size_t)F * C * fl), *o = be->alloc((size_t)N * F * fl);
    if (!a || !w || !o) return 0;
    be->zero(a, (size_t)N * C * fl);
    be->zero(w, (size_t)F * C * fl);
    int reps = 0;
    double t0 = now_s(), t;
    do {
        be->linear_forward(o, a, w, NULL, N, C, F);
        be->sync();
        reps++;
    } while ((t = now_s() - t0) < 0.3);
    be->free(a);
    be->free(w);
    be->free(o);
    return 2.0 * N * C * F * reps / t / 1e9;
}

static void print_profile(const Backend *be, const Config *c, double total, double data_seconds, long tokens) {
    ProfileCounters *pc = profile_counters();
    double op_total = 0, flops = pc->flops[PROF_GEMM] + pc->flops[PROF_ATTENTION];
    for (int f = 0; f < PROF_FAMILIES; f++) op_total += pc->seconds[f];
    fprintf(stderr, "\nprofile: %.2f s of training, %ld real tokens (%.0f tokens/s)\n", total, tokens, tokens / total);
    fprintf(stderr, "| op family | seconds | share | calls | GFLOP/s |\n|---|---:|---:|---:|---:|\n");
    for (int f = 0; f < PROF_FAMILIES; f++) {
        fprintf(stderr, "| %s | %.3f | %.1f%% | %ld |", profile_family_name(f), pc->seconds[f],
                100.0 * pc->seconds[f] / total, pc->calls[f]);
        if (pc->flops[f] > 0) fprintf(stderr, " %.1f |\n", pc->flops[f] / pc->seconds[f] / 1e9);
        else fprintf(stderr, " |\n");
    }
    fprintf(stderr, "| data (batching) | %.3f | %.1f%% | | |\n", data_seconds, 100.0 * data_seconds / total);
    fprintf(stderr, "| other (host side) | %.3f | %.1f%% | | |\n", total - op_total - data_seconds,
            100.0 * (total - op_total - data_seconds) / total);
    /* before the ceiling's own buffers below; parsed by benchmark scripts: keep the format */
    if (be->peak_bytes) fprintf(stderr, "peak device memory: %.1f MiB\n", be->peak_bytes() / 1048576.0);
    int N = c->batch_size * (c->max_len < 64 ? c->max_len : 64);
    double ceiling = gemm_ceiling(be, N, c->d_model, c->d_ff);
    double achieved = flops / total / 1e9;
    const char *kind = be->bf16 ? "bf16 GEMM" : "sgemm";
    fprintf(stderr, "whole step: %.1f GFLOP/s (GEMM + attention work on padded shapes) = %.0f%% of the %s "
            "ceiling %.1f GFLOP/s (%d x %d x %d, %s backend)\n", achieved, 100.0 * achieved / ceiling, kind,
            ceiling, N, c->d_model, c->d_ff, be->name);
}

/* The progress line on stderr, across updates. */
typedef struct {
    int tty, quiet;
    double t_start;                 /* when this stretch of updates began (each epoch) */
    long start_update;              /* r->update then */
    double t_last_print, t_window;  /* the last progress line; the start of the tok/s window */
    long tokens_window;             /* real tokens of the updates finished since t_window */
    long print_every;
} Progress;

/* An update queued whose outcome (loss, gradient norm, skipped or not) is not read yet. */
typedef struct {
    int queued;
    long update;     /* its number (1-based), as logged */
    int epoch;       /* 0-based */
    float lr;
    long examples;   /* in its batches */
    long tokens;     /* real tokens in its batches */
} PendingUpdate;

/* Reads the outcome of the pending update (adamw_outcome: waits for the copy back queued right
 * after its AdamW, not for what was queued later), counts a skipped one and ends a diverging
 * run, logs its record and prints the progress line. 0, or the exit code. */
static int finish_update(Run *r, PendingUpdate *pu, Progress *pg, MhaError *err) {
    if (!pu->queued) return 0;
    pu->queued = 0;
    const Config *cfg = r->cfg;
    double loss_sum = 0, gnorm = 0;
    int skipped = adamw_outcome(&r->opt, &r->model, &loss_sum, &gnorm);
    double loss = loss_sum / (double)pu->examples;
    if (skipped) {
        r->bad_steps++;
        fprintf(stderr, "%swarning: update %ld: non-finite loss or gradients (loss %g, grad norm %g); "
                "update skipped (%d in a row)\n", pg->tty ? "\r\033[K" : "", pu->update, loss, gnorm, r->bad_steps);
        if (r->bad_steps >= cfg->max_bad_steps) {
            char last[4300];
            snprintf(last, sizeof last, "%s/last.mha", cfg->out_dir);
            return mha_fail(err, MHA_EXIT_DATA,
                            "training diverged: %d non-finite updates in a row at update %ld "
                            "(lower train.lr or raise train.warmup)%s%s",
                            r->bad_steps, pu->update, access(last, F_OK) == 0 ? "; last good checkpoint kept: " : "",
                            access(last, F_OK) == 0 ? last : "");
        }
    } else {
        r->bad_steps = 0;
    }
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "type", "train");
    cJSON_AddNumberToObject(rec, "update", (double)pu->update);
    cJSON_AddNumberToObject(rec, "epoch", pu->epoch + 1);
    cJSON_AddNumberToObject(rec, "loss", isfinite(loss) ? loss : -1);
    cJSON_AddNumberToObject(rec, "lr", pu->lr);
    cJSON_AddNumberToObject(rec, "grad_norm", isfinite(gnorm) ? gnorm : -1);
    cJSON_AddBoolToObject(rec, "skipped", skipped);
    log_record(r, rec);

    pg->tokens_window += pu->tokens;
    double t = now_s();
    long u = pu->update, every = pg->print_every;
    if (!pg->quiet && (u % every == 0 || pg->tty || u == r->total_updates) &&
        (t - pg->t_last_print > (pg->tty ? 0.2 : 5.0) || u == r->total_updates || u % (every * 10) == 0)) {
        double tps = pg->tokens_window / (t - pg->t_window > 1e-9 ? t - pg->t_window : 1e-9);
        double elapsed = r->elapsed_before + (t - pg->t_start);
        double per_update = (t - pg->t_start) / (double)(u - pg->start_update);
        char el[32], eta[32];
        format_duration(el, sizeof el, elapsed);
        format_duration(eta, sizeof eta, per_update * (double)(r->total_updates - u));
        fprintf(stderr, "%sstep %ld/%ld  epoch %d/%d  loss %.4f  lr %.2e  tok/s %.0f  elapsed %s  eta %s%s",
                pg->tty ? "\r\033[K" : "", u, r->total_updates, pu->epoch + 1, cfg->epochs, loss, pu->lr,
                tps, el, eta, pg->tty ? "" : "\n");
        pg->t_last_print = t;
        pg->tokens_window = 0;
        pg->t_window = t;
    }
    return 0;
}

/* train.patience and train.eval_every evaluate on the dev set: without one, said once. */
static void note_no_dev(const Config *cfg) {
    const int p = cfg->patience > 0, e = cfg->eval_every > 0;
    if (!p && !e) return;
    fprintf(stderr, "mha-train: note: %s on the dev set, and there is none (data.dev): %s nothing; the final "
            "parameters become the model\n",
            p && e ? "train.patience and train.eval_every evaluate" : p ? "train.patience evaluates" : "train.eval_every evaluates",
            p && e ? "they do" : "it does");
}

/* --resume: loads the checkpoint into *resume and the config it stores into cfg, and moves
 * the run to the folder that holds last.mha. Returns 0 (*done set when the run is already
 * complete: said, nothing to do) or an exit code with err filled; *resume is freed on every
 * path that does not return 0 with *done clear. */
static int open_resume(const char *path, long max_steps, Config *cfg, Checkpoint *resume, int *done,
                       MhaError *err) {
    int rc;
    *done = 0;
    if ((rc = checkpoint_load(path, resume, err))) return rc;
    if (!resume->state_json || !resume->adam_m) {
        checkpoint_free(resume);
        return mha_fail(err, MHA_EXIT_USAGE, "%s: a model-only checkpoint has no training state "
                        "(resume from OUTPUT_DIR/last.mha)", path);
    }
    if (config_from_json(cfg, resume->config_json, "", err) != 0) {
        char inner[1800];
        snprintf(inner, sizeof inner, "%.1700s", err->msg);
        checkpoint_free(resume);
        return mha_fail(err, MHA_EXIT_DATA, "%s: the stored config is not valid (%s)", path, inner);
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

/* --resume: the parameters, AdamW moments and training state of the checkpoint into the
 * run (the model and optimizer exist). Returns 0 (*done set when the run turns out complete:
 * said, nothing to do) or an exit code with err filled. */
static int restore_state(Run *r, const Checkpoint *resume, const char *rp, int quiet, int *done, MhaError *err) {
    const Config *cfg = r->cfg;
    const size_t pbytes = r->model.lay.total * sizeof(float);
    *done = 0;
    if (resume->n_params != r->model.lay.total)
        return mha_fail(err, MHA_EXIT_DATA, "%s: checkpoint has %zu parameters, the config describes %zu", rp,
                        resume->n_params, r->model.lay.total);
    r->be->to_device(r->model.params, resume->params, pbytes);
    r->be->to_device(r->opt.m, resume->adam_m, pbytes);
    r->be->to_device(r->opt.v, resume->adam_v, pbytes);
    cJSON *st = cJSON_Parse(resume->state_json);
    double upd, ep, pos, t, bu, esb, bad;
    if (!cJSON_IsObject(st) ||
        state_int(st, "update", 0, 0, 9007199254740992.0, &upd, rp, err) ||
        state_int(st, "epoch", 0, 0, cfg->epochs, &ep, rp, err) ||
        state_int(st, "batch_pos", 0, 0, INT32_MAX, &pos, rp, err) ||
        state_int(st, "adam_t", 0, 0, INT32_MAX, &t, rp, err) ||
        state_int(st, "best_update", -1, -1, upd, &bu, rp, err) ||
        state_int(st, "evals_since_best", 0, 0, INT32_MAX, &esb, rp, err) ||
        state_int(st, "bad_steps", 0, 0, INT32_MAX, &bad, rp, err)) {
        if (!cJSON_IsObject(st))
            mha_fail(err, MHA_EXIT_DATA, "%s: corrupt training state (expected a JSON object)", rp);
        cJSON_Delete(st);
        return MHA_EXIT_DATA;
    }
    r->update = (long)upd;
    r->epoch = (int)ep;
    r->batch_pos = (int)pos;
    r->opt.t = (int)t;
    r->best_metric = json_num(st, "best_metric", 0);
    r->best_update = (long)bu;
    r->evals_since_best = (int)esb;
    r->bad_steps = (int)bad;
    r->elapsed_before = json_num(st, "elapsed", 0);
    /* the same training examples as when the run started (absent in older checkpoints) */
    const cJSON *fp = cJSON_GetObjectItemCaseSensitive(st, "train_fingerprint");
    char now[24];
    snprintf(now, sizeof now, "%016llx", (unsigned long long)r->train_fingerprint);
    if (cJSON_IsString(fp) && strcmp(fp->valuestring, now) != 0) {
        mha_fail(err, MHA_EXIT_DATA, "%s: the training data changed since this run started (%s: %d examples "
                 "now, %.0f then): --resume goes on only with the examples the run started on; restore the "
                 "file, or start a new run (--config ... --overwrite)", rp, cfg->train, r->train.n,
                 json_num(st, "train_examples", -1));
        cJSON_Delete(st);
        return MHA_EXIT_DATA;
    }
    r->test_reported = !test_pending(st, cfg);
    double mb = json_num(st, "metrics_bytes", -1);
    r->metrics_saved_bytes = mb >= 0 && mb <= (double)LONG_MAX && mb == floor(mb) ? (long)mb : -1;
    if (!isfinite(r->elapsed_before) || r->elapsed_before < 0) r->elapsed_before = 0;
    if (!isfinite(r->best_metric)) r->best_update = -1;   /* no usable best so far */
    cJSON_Delete(st);
    /* the best parameters so far are in model.mha */
    char best_path[4300];
    snprintf(best_path, sizeof best_path, "%s/model.mha", cfg->out_dir);
    int best_saved = best_model_saved(best_path, r->model.lay.total, r->best_update >= 0 ? r->best_params : NULL);
    if (!best_saved) r->best_update = -1;
    /* normally said before loading the data (complete_before_loading); a run killed before
     * saving model.mha goes on below to save it and print the test report */
    if (run_complete(cfg, r->epoch, r->evals_since_best, r->best_update, r->has_dev, best_saved, !r->test_reported)) {
        say_complete(rp, r->update, r->epoch >= cfg->epochs, best_path);
        *done = 1;
        return 0;
    }
    if (!quiet && r->epoch < cfg->epochs)
        fprintf(stderr, "resuming %s at update %ld (epoch %d, batch %d)\n", rp,
                r->update, r->epoch + 1, r->batch_pos);
    else if (!quiet)   /* every epoch done; what is left is the model.mha of the end */
        fprintf(stderr, "resuming %s at update %ld (after the last epoch)\n", rp, r->update);
    return 0;
}

/* The test set on the best parameters: the report to stdout, a "test" record to metrics.jsonl. */
static void report_test(Run *r) {
    const Config *cfg = r->cfg;
    r->be->to_device(r->model.params, r->best_params, r->model.lay.total * sizeof(float));
    Metrics mt;
    evaluate_dataset(&r->model, &r->test, cfg->batch_size, cfg->max_len, r->truncate, r->add_cls, &mt);
    printf("test %s (%s):\n", cfg->test, r->has_dev ? "best model" : "final parameters, no dev set");
    metrics_print(&mt, r->labels.names, stdout);
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "type", "test");
    cJSON_AddNumberToObject(rec, "update", (double)r->best_update);
    cJSON_AddNumberToObject(rec, "loss", metrics_loss(&mt));
    cJSON_AddNumberToObject(rec, "accuracy", metrics_accuracy(&mt));
    cJSON_AddNumberToObject(rec, "macro_f1", metrics_macro_f1(&mt));
    log_record(r, rec);
    metrics_free(&mt);
}

int train_run(Config *cfg, const TrainOptions *opt, MhaError *err) {
    Run r;
    memset(&r, 0, sizeof r);
    r.cfg = cfg;
    r.best_update = -1;
    Checkpoint resume = {0};
    int have_resume = 0, rc = 0;
    Batcher bt;
    memset(&bt, 0, sizeof bt);

    if (opt->resume_path) {
        int done;
        if ((rc = open_resume(opt->resume_path, opt->max_steps, cfg, &resume, &done, err)) || done) return rc;
        have_resume = 1;
    }
    if ((rc = select_backend(cfg, &r.be, "train.device", err))) goto out;
    const Backend *unprofiled = r.be;
    if (opt->profile) r.be = profile_backend(r.be);
    if ((rc = run_dir_lock(cfg->out_dir, err))) goto out;
    /* a new run in a folder holding one: refused here, before the data is read; with
     * --overwrite, the earlier run's checkpoints go only once this run is ready to train */
    if (!have_resume && !opt->overwrite && (rc = run_dir_claim(cfg->out_dir, 0, err))) goto out;
    if (!opt->quiet) {
        char *cj = config_to_json(cfg);
        fprintf(stderr, "mha-train: resolved config\n%s\n", cj);
        free(cj);
    }
    if ((rc = load_data(&r, have_resume ? &resume : NULL, err))) goto out;

    r.add_cls = strcmp(cfg->pooling, "cls") == 0;
    r.truncate = strcmp(cfg->truncate, "head_tail") == 0 ? TRUNC_HEAD_TAIL : TRUNC_HEAD;
    if ((rc = batcher_init(&bt, &r.train, cfg->batch_size, cfg->max_len, r.truncate, r.add_cls,
                           cfg->bucket, (uint64_t)cfg->seed)) != 0) {
        rc = mha_fail(err, MHA_EXIT_DATA, "out of memory laying out batches of %d x %d tokens "
                      "(try a smaller train.batch_size or data.max_len)", cfg->batch_size, cfg->max_len);
        goto out;
    }
    batcher_start_epoch(&bt, 0, 1, 0);
    print_data_stats(&r, &bt);
    if (!r.has_dev) note_no_dev(cfg);

    ModelDims d;
    model_dims_from_config(&d, cfg, vocab_size(r.vocab), r.labels.n);
    if ((rc = model_create(&r.model, &d, r.be, cfg->batch_size, cfg->max_len, cfg->decay_embeddings,
                           cfg->decay_norms, err)))
        goto out;
    if ((rc = adamw_create(&r.opt, &r.model, err))) goto out;
    /* Dev and test evaluation one batch at a time (ops on all threads): data-parallel workers
     * would each need a forward activation set (model_replicas), raising training's peak
     * memory by about a third for an evaluation that is a small part of the run. */
    evaluate_set_workers(1);
    size_t pbytes = r.model.lay.total * sizeof(float);
    if (!(r.best_params = malloc(pbytes))) {
        rc = mha_fail(err, MHA_EXIT_DATA, "out of memory for a copy of the %zu parameters", r.model.lay.total);
        goto out;
    }
    r.updates_per_epoch = (bt.n_batches + cfg->grad_accum - 1) / cfg->grad_accum;
    r.total_updates = r.updates_per_epoch * cfg->epochs;
    if (have_resume) {
        int done;
        if ((rc = restore_state(&r, &resume, opt->resume_path, opt->quiet, &done, err)) || done) goto out;
    } else {
        model_init_params(&r.model, (uint64_t)cfg->seed);
    }
    if (!opt->quiet) {
        char kernel[96] = "";   /* which kernel the fused attention runs, where there is a choice */
        if (d.fused_attention && r.be->attention_kernel)
            snprintf(kernel, sizeof kernel, " (%s)", r.be->attention_kernel(d.C / d.NH));
        fprintf(stderr, "model: %zu parameters, backend %s%s, attention %s%s\n", r.model.lay.total, r.be->name,
                r.be->bf16 ? " (bf16 mixed precision)" : "", d.fused_attention ? "fused" : "math", kernel);
    }

    if (!have_resume && opt->overwrite && (rc = run_dir_claim(cfg->out_dir, 1, err))) goto out;

    char log_path[4300];
    snprintf(log_path, sizeof log_path, "%s/metrics.jsonl", cfg->out_dir);
    r.metrics_log = fopen(log_path, have_resume ? "a" : "w");
    if (!r.metrics_log) {
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: cannot open for writing (%s)", log_path, strerror(errno));
        goto out;
    }
    if (have_resume) drop_unsaved_records(&r, log_path);

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    Progress pg = {.tty = isatty(fileno(stderr)) && !opt->quiet, .quiet = opt->quiet, .t_start = now_s(),
                   .start_update = r.update, .print_every = r.total_updates / 100 > 0 ? r.total_updates / 100 : 1};
    pg.t_window = pg.t_start;
    const int tty = pg.tty;
    double data_seconds = 0, loop_start = now_s();
    long profiled_tokens = 0;
    memset(profile_counters(), 0, sizeof(ProfileCounters));  /* count the training loop only */
    PendingUpdate pending = {0};
    /* a resumed run that patience had already stopped (killed during its test report) trains no more */
    int stop = r.has_dev && cfg->patience > 0 && r.evals_since_best >= cfg->patience;

    while (r.epoch < cfg->epochs && !stop) {
        batcher_start_epoch(&bt, r.epoch, 1, r.batch_pos);
        while (bt.pos < bt.n_batches && !stop) {
            model_zero_grads(&r.model);
            adamw_begin(&r.opt, &r.model);
            long examples = 0, tokens = 0;
            const Batch *b;
            for (int k = 0; k < cfg->grad_accum && (b = next_batch(&bt, &data_seconds)) != NULL; k++) {
                uint64_t seed = mha_rng_u64((uint64_t)cfg->seed, (uint64_t)r.update * cfg->grad_accum + k);
                model_forward(&r.model, b->ids, b->lengths, b->labels, b->B, b->T, 1, seed);
                model_backward(&r.model, 1.0f, seed);
                model_loss_accumulate(&r.model, r.opt.stats);
                examples += b->B;
                tokens += b->real_tokens;
                profiled_tokens += b->real_tokens;
            }
            /* The previous update's outcome: a wait for its AdamW only, while the device has
             * this update's forward and backward, queued above, to run. */
            if ((rc = finish_update(&r, &pending, &pg, err))) goto out;
            r.be->scale(r.model.grads, r.model.lay.total, 1.0f / (float)examples);
            float lr = schedule_lr(cfg, r.update, r.total_updates);
            adamw_queue(&r.opt, &r.model, cfg, lr);
            r.batch_pos = bt.pos;
            r.update++;
            pending = (PendingUpdate){.queued = 1, .update = r.update, .epoch = r.epoch, .lr = lr,
                                      .examples = examples, .tokens = tokens};
            if (r.has_dev && cfg->eval_every > 0 && r.update % cfg->eval_every == 0) {
                if ((rc = finish_update(&r, &pending, &pg, err))) goto out;
                if (tty) fputc('\n', stderr);
                if ((rc = evaluate_dev(&r, r.epoch + 1, opt->quiet, err))) goto out;   /* during epoch r.epoch + 1 */
                if (check_patience(&r)) stop = 1;
            }
            /* early stopping on the update --max-steps ends at is still the end of the run */
            if (g_interrupted || (!stop && opt->max_steps > 0 && r.update >= opt->max_steps)) stop = 2;
        }
        /* before an evaluation or a checkpoint: the last update's outcome (AdamW's step count) */
        if ((rc = finish_update(&r, &pending, &pg, err))) goto out;
        if (stop == 2) break;
        if (bt.pos >= bt.n_batches) {  /* epoch finished */
            r.epoch++;
            r.batch_pos = 0;
            if (tty) fputc('\n', stderr);
            /* per epoch; or, with eval_every, the end of the last epoch when its update was not
             * just evaluated, so that the final parameters compete for model.mha too */
            if (r.has_dev && (cfg->eval_every == 0 ||
                              (r.epoch == cfg->epochs && r.update % cfg->eval_every != 0))) {
                if ((rc = evaluate_dev(&r, r.epoch, opt->quiet, err))) goto out;   /* the epoch just ended */
                if (check_patience(&r)) stop = 1;
            }
        }
        r.elapsed_before += now_s() - pg.t_start;
        pg.t_start = now_s();
        pg.start_update = r.update;
        if ((rc = save_checkpoint(&r, "last.mha", 1, NULL, err))) goto out;
    }
    if (opt->profile) print_profile(unprofiled, cfg, now_s() - loop_start, data_seconds, profiled_tokens);
    if (stop == 2) {
        if (tty) fputc('\n', stderr);
        r.elapsed_before += now_s() - pg.t_start;
        if ((rc = save_checkpoint(&r, "last.mha", 1, NULL, err))) goto out;
        fprintf(stderr, "%s at update %ld: saved %s/last.mha (continue with --resume %s/last.mha)\n",
                g_interrupted ? "interrupted" : "stopped", r.update, cfg->out_dir, cfg->out_dir);
        rc = g_interrupted ? 130 : 0;
        goto out;
    }
    /* No dev set: the final parameters are the model. */
    if (!r.has_dev) {
        r.be->to_host(r.best_params, r.model.params, pbytes);
        r.best_update = r.update;
        r.test_reported = 0;   /* (a resumed run whose model.mha was lost: its report again) */
        if ((rc = save_checkpoint(&r, "model.mha", 0, r.best_params, err))) goto out;
    } else if (r.best_update < 0) {
        /* a finished run resumed after its model.mha went missing: the best parameters are
         * gone with it; the final ones, evaluated, become the model */
        fprintf(stderr, "mha-train: note: %s/model.mha is missing (the best parameters are lost); the final "
                "parameters, evaluated on dev, become the model\n", cfg->out_dir);
        r.test_reported = 0;   /* another model: its own report */
        if ((rc = evaluate_dev(&r, r.epoch, opt->quiet, err)) ||
            (rc = save_checkpoint(&r, "last.mha", 1, NULL, err)))
            goto out;
    }
    if (r.has_dev)
        fprintf(stderr, "training done: %ld updates in %.1f s; best model from update %ld in %s/model.mha\n",
                r.update, r.elapsed_before, r.best_update, cfg->out_dir);
    else
        fprintf(stderr, "training done: %ld updates in %.1f s; the final parameters (no dev set) in %s/model.mha\n",
                r.update, r.elapsed_before, cfg->out_dir);
    if (r.has_test && r.best_update >= 0 && !r.test_reported) {
        /* the report, then a last.mha that says it was given (of the final parameters, which the
         * report replaces on the device by the best ones): a run killed in between gives it on
         * --resume */
        float *final = malloc(pbytes);
        if (!final) {
            rc = mha_fail(err, MHA_EXIT_DATA, "out of memory for a copy of the %zu parameters", r.model.lay.total);
            goto out;
        }
        r.be->to_host(final, r.model.params, pbytes);
        report_test(&r);
        r.test_reported = 1;
        rc = save_checkpoint(&r, "last.mha", 1, final, err);
        free(final);
    }
out:
    batcher_free(&bt);
    free_run(&r, !have_resume);
    if (have_resume) checkpoint_free(&resume);
    return rc;
}
