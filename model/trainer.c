/* model/trainer.c: the training run of mha-train (see trainer.h): its model built, the
 * epochs of updates (each update's outcome logged and shown, dev evaluation, early stopping,
 * last.mha at each epoch's end) and the end of the run (model.mha, the test report). Its data
 * read, checked and described is in run_data.c; what last.mha's training state holds and how
 * --resume reads it back is in resume.c; what a run holds is in run.h. */
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
#include "model/resume.h"
#include "model/run.h"
#include "model/run_data.h"
#include "model/run_dir.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_interrupted;
static volatile sig_atomic_t g_finishing;   /* the training is saved: a stop signal quits at once */
/* Stop signals taken so far. Counted atomically: two that come together (SIGINT and SIGTERM)
 * can run their handlers at once on two threads, and each must not see itself as the first */
static atomic_int g_stop_signals;

/* What quitting at once says (where the run stands: set_quit_note), in one of two buffers so
 * that the handler never reads one being written; the temporary checkpoint names it removes. */
static char g_quit_note[2][2 * 4096 + 512];   /* room for output.dir twice */
static volatile size_t g_quit_len[2];
static volatile sig_atomic_t g_quit_current;
static char g_tmp_names[2][64];   /* ".last.mha.tmp.PID", ".model.mha.tmp.PID" in run_dir_fd() */

static void set_quit_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_quit_note(const char *fmt, ...) {
    const int next = !g_quit_current;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_quit_note[next], sizeof g_quit_note[next], fmt, ap);
    va_end(ap);
    g_quit_len[next] = n < 0 ? 0 : (size_t)n < sizeof g_quit_note[next] ? (size_t)n : sizeof g_quit_note[next] - 1;
    atomic_signal_fence(memory_order_seq_cst);   /* the note and its length before the switch */
    g_quit_current = next;
}

/* Ctrl-C, SIGTERM, SIGHUP: the run stops after the update (or between two evaluation batches)
 * and saves last.mha; said at once, since a save can take a while (write(2): async-signal-safe).
 * A second one, or one after the training was saved, quits at once: the checkpoint being
 * written is removed (unlinkat: async-signal-safe) and the note says where the run stands. */
static void on_signal(int sig) {
    static const char int_msg[] = "\nmha-train: stopping: saving last.mha after this step (Ctrl-C again quits at "
                                  "once, without saving)\n";
    static const char other_msg[] = "\nmha-train: stopping: saving last.mha after this step\n";
    int saved_errno = errno;
    ssize_t ignored;
    if (atomic_fetch_add(&g_stop_signals, 1) > 0 || g_finishing) {   /* lock-free: async-signal-safe */
        const int fd = run_dir_fd();
        for (int i = 0; i < 2 && fd >= 0; i++) unlinkat(fd, g_tmp_names[i], 0);
        const int q = g_quit_current;
        ignored = write(2, g_quit_note[q], g_quit_len[q]);
        _exit(128 + sig);
    }
    g_interrupted = 1;
    ignored = sig == SIGINT ? write(2, int_msg, sizeof int_msg - 1) : write(2, other_msg, sizeof other_msg - 1);
    (void)ignored;
    errno = saved_errno;
}

/* For the training loop: SIGINT, SIGTERM and SIGHUP stop it after a step (on_signal). */
static void catch_stop_signals(void) {
    for (int i = 0; i < 2; i++) checkpoint_temp_name(g_tmp_names[i], sizeof g_tmp_names[i], i ? "model.mha" : "last.mha");
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    struct sigaction hup;
    if (sigaction(SIGHUP, NULL, &hup) != 0 || hup.sa_handler != SIG_IGN) signal(SIGHUP, on_signal);
}

/* After it (last.mha holds the finished training): they quit at once, saying that --resume
 * does what is left (model.mha, the test report). */
static void quit_at_once_from_now(const char *out_dir, int has_test) {
    set_quit_note("\nmha-train: quit: the training is done and %s/last.mha holds it; mha-train --resume %s "
                  "writes what is left (model.mha%s)\n", out_dir, out_dir, has_test ? ", the test report" : "");
    g_finishing = 1;
}

/* Once the run is complete: they end the process as by default (nothing is left to do). */
static void release_stop_signals(void) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (signal(SIGHUP, SIG_DFL) == SIG_IGN) signal(SIGHUP, SIG_IGN);   /* nohup's stays */
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* A checkpoint's ORIGIN section (checkpoint.h): the mha that wrote it and the update its
 * parameters are from; for a model chosen on dev, the epoch (1-based, as in metrics.jsonl) and
 * its dev scores. NULL when out of memory: the section is then left out. */
static char *origin_json(const Run *r, long update, int epoch, const Metrics *dev) {
    cJSON *o = cJSON_CreateObject(), *d = NULL;
    if (r->written_by) cJSON_AddStringToObject(o, "mha", r->written_by);
    cJSON_AddNumberToObject(o, "update", (double)update);
    if (dev) {
        cJSON_AddNumberToObject(o, "epoch", epoch);
        if ((d = cJSON_AddObjectToObject(o, "dev"))) {
            cJSON_AddStringToObject(d, "metric", r->cfg->metric);
            cJSON_AddNumberToObject(d, "loss", metrics_loss(dev));
            cJSON_AddNumberToObject(d, "accuracy", metrics_accuracy(dev));
            cJSON_AddNumberToObject(d, "macro_f1", metrics_macro_f1(dev));
        }
    }
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* Writes OUTPUT_DIR/name: the parameters (host_params, or the device's when NULL) with, when
 * with_state, the optimizer state and the run's position (last.mha, whose ORIGIN holds the
 * current update); a model-only file (model.mha) records in its ORIGIN the update it is from
 * (r->best_update) and, when dev chose it (dev not NULL), the epoch and dev scores. 0 or an
 * exit code. */
static int save_checkpoint(Run *r, const char *name, int with_state, const float *host_params, int epoch,
                           const Metrics *dev, MhaError *err) {
    int rc = 0;
    char path[4300];
    snprintf(path, sizeof path, "%s/%s", r->cfg->out_dir, name);
    size_t n = r->model.lay.total, bytes = n * sizeof(float);
    Checkpoint ck = {0};
    ck.config_json = config_to_json(r->cfg);
    ck.origin_json = origin_json(r, with_state ? r->update : r->best_update, epoch, dev);
    ck.vocab = r->vocab;
    ck.labels = r->labels;
    ck.n_params = n;
    float *params = NULL, *m = NULL, *v = NULL;
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
    if (with_state && r->metrics_log) fsync(fileno(r->metrics_log));   /* the size last.mha records is on disk */
    if (with_state) {
        r->be->to_host(m, r->adamw.m, bytes);
        r->be->to_host(v, r->adamw.v, bytes);
        if (!(ck.state_json = train_state_json(r))) {
            rc = mha_fail(err, MHA_EXIT_DATA, "%s: out of memory for the training state; the previous checkpoint "
                          "is untouched", path);
            goto done;
        }
    }
    /* a moved output folder stops the run with a message (checked after the slow copies and
     * fsync); the file itself is written through the locked folder's descriptor, so a move
     * after this check still puts it in the run's own folder, never in a new one at the path */
    if ((rc = run_dir_check(r->cfg->out_dir, err))) goto done;
    rc = run_dir_fd() >= 0 ? checkpoint_save_at(run_dir_fd(), name, path, &ck, err) : checkpoint_save(path, &ck, err);
    if (!rc && with_state && !g_finishing)
        set_quit_note("\nmha-train: quit without saving: %s is from update %ld (mha-train --resume %s goes on "
                      "from there)\n", path, r->update, path);
done:
    free(ck.config_json);
    free(ck.state_json);
    free(ck.origin_json);
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

/* A record as one line of metrics.jsonl, written straight to the file (no stdio buffer that
 * could hold half a line over to a later write). A failed or short write (a full disk) is
 * cut back off (ftruncate to the last whole line), so the file holds whole lines only and
 * its size stays known for last.mha; warned once, training goes on. */
static void log_record(Run *r, cJSON *rec) {
    if (!r->metrics_log) { cJSON_Delete(rec); return; }
    char *s = cJSON_PrintUnformatted(rec);
    cJSON_Delete(rec);
    int fd = fileno(r->metrics_log), e = 0;
    size_t len = s ? strlen(s) : 0, done = 0;
    if (s) s[len++] = '\n';   /* over the terminating NUL: written by length */
    else e = ENOMEM;
    while (!e && done < len) {
        ssize_t w = write(fd, s + done, len - done);
        if (w > 0) done += (size_t)w;
        else if (w < 0 && errno == EINTR) continue;
        else e = w < 0 ? errno : ENOSPC;
    }
    free(s);
    if (!e) {
        r->metrics_good_bytes += (long)len;
        return;
    }
    if (done > 0 && (ftruncate(fd, (off_t)r->metrics_good_bytes) != 0 ||
                     lseek(fd, (off_t)r->metrics_good_bytes, SEEK_SET) < 0))
        r->metrics_torn = 1;   /* a partial line stays: its size is no longer known */
    if (!r->metrics_failed)
        fprintf(stderr, "mha-train: warning: cannot write %s/metrics.jsonl (%s); training goes on, "
                "but records are being lost\n", r->cfg->out_dir, strerror(e));
    r->metrics_failed = 1;
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

/* The message of an evaluation that could not allocate its batches. */
static int eval_no_memory(const Run *r, const char *what, MhaError *err) {
    char last[4200];
    snprintf(last, sizeof last, "%s/last.mha", r->cfg->out_dir);
    const int saved = access(last, F_OK) == 0;   /* none yet in the first epoch */
    return mha_fail(err, MHA_EXIT_DATA, "out of memory evaluating on %s (batches of %d x %d tokens): nothing "
                    "was evaluated; free memory, or lower train.batch_size or data.max_len, and %s%s",
                    what, r->cfg->batch_size, r->cfg->max_len, saved ? "continue with --resume " : "start again",
                    saved ? last : "");
}

/* Dev evaluation during epoch `epoch` (1-based, as in the train records); keeps the best
 * parameters and writes model.mha when they improve. With cancellable, an interrupt between
 * two of its batches stops it with nothing recorded: *cancelled set, 0 returned. */
static int evaluate_dev(Run *r, int epoch, int quiet, int cancellable, int *cancelled, MhaError *err) {
    Config *c = r->cfg;
    Metrics mt;
    *cancelled = 0;
    evaluate_set_cancel_flag(cancellable ? &g_interrupted : NULL);
    int erc = evaluate_dataset(&r->model, &r->dev, c->batch_size, c->max_len, r->truncate, r->add_cls, &mt);
    evaluate_set_cancel_flag(NULL);
    if (erc == EVAL_CANCELLED) { *cancelled = 1; return 0; }
    if (erc != EVAL_OK) return eval_no_memory(r, c->dev, err);
    double value = metric_value(c, &mt);
    /* a NaN best (a dev loss that overflowed, or a legacy null read back) is beaten by anything */
    int improved = r->best_update < 0 || isnan(r->best_metric) || value > r->best_metric;
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
    /* model.mha first: the log and the line say "saved" of a file that is there */
    int rc = improved ? save_checkpoint(r, "model.mha", 0, r->best_params, epoch, &mt, err) : 0;
    if (!rc) log_record(r, rec);
    else cJSON_Delete(rec);
    if (!rc && !quiet)
        fprintf(stderr, "dev   update %ld  loss %.4f  accuracy %.4f  macro-F1 %.4f%s\n", r->update,
                metrics_loss(&mt), metrics_accuracy(&mt), metrics_macro_f1(&mt),
                improved ? "  (best, saved model.mha)" : "");
    metrics_free(&mt);
    return rc;
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

static void free_run(Run *r, int own_vocab) {
    adamw_destroy(&r->adamw, &r->model);
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

/* The progress line on stderr, across updates. */
typedef struct {
    int tty, quiet;
    double t_start;                 /* when this stretch of updates began (each epoch) */
    long start_update;              /* r->update then */
    double t_last_print, t_window;  /* the last progress line; the start of the tok/s window */
    long tokens_window;             /* real tokens of the updates finished since t_window */
    long print_every;
    long end_update;                /* where this run stops: the schedule's end, or --max-steps */
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

/* What an update came to: the mean loss over its examples, the gradient norm (before
 * clipping), and whether it was skipped (non-finite loss or gradients). */
typedef struct {
    double loss, grad_norm;
    int skipped;
} UpdateOutcome;

/* Reads the outcome of the pending update (adamw_outcome: waits for the copy back queued right
 * after its AdamW, not for what was queued later), counts a skipped one and ends a diverging
 * run. 0, or the exit code. */
static int read_outcome(Run *r, const PendingUpdate *pu, int tty, UpdateOutcome *out, MhaError *err) {
    const Config *cfg = r->cfg;
    double loss_sum = 0, gnorm = 0;
    int skipped = adamw_outcome(&r->adamw, &r->model, &loss_sum, &gnorm);
    double loss = loss_sum / (double)pu->examples;
    *out = (UpdateOutcome){.loss = loss, .grad_norm = gnorm, .skipped = skipped};
    if (skipped) {
        r->bad_steps++;
        fprintf(stderr, "%swarning: update %ld: non-finite loss or gradients (loss %g, grad norm %g); "
                "update skipped (%d in a row)\n", tty ? "\r\033[K" : "", pu->update, loss, gnorm, r->bad_steps);
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
    return 0;
}

/* The update's "train" record in metrics.jsonl. */
static void log_update(Run *r, const PendingUpdate *pu, const UpdateOutcome *out) {
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "type", "train");
    cJSON_AddNumberToObject(rec, "update", (double)pu->update);
    cJSON_AddNumberToObject(rec, "epoch", pu->epoch + 1);
    cJSON_AddNumberToObject(rec, "loss", isfinite(out->loss) ? out->loss : -1);
    cJSON_AddNumberToObject(rec, "lr", pu->lr);
    cJSON_AddNumberToObject(rec, "grad_norm", isfinite(out->grad_norm) ? out->grad_norm : -1);
    cJSON_AddBoolToObject(rec, "skipped", out->skipped);
    log_record(r, rec);
}

/* The update's tokens into the tok/s window, and the progress line when it is due: every
 * print_every updates (on a terminal, every update) but at most every 0.2 s on a terminal
 * and 5 s elsewhere, except at the last update and every 10 x print_every. */
static void print_progress(const Run *r, const PendingUpdate *pu, double loss, Progress *pg) {
    const Config *cfg = r->cfg;
    pg->tokens_window += pu->tokens;
    double t = now_s();
    long u = pu->update, every = pg->print_every;
    const long end = pg->end_update;
    if (!pg->quiet && (u % every == 0 || pg->tty || u == end) &&
        (t - pg->t_last_print > (pg->tty ? 0.2 : 5.0) || u == end || u % (every * 10) == 0)) {
        double tps = pg->tokens_window / (t - pg->t_window > 1e-9 ? t - pg->t_window : 1e-9);
        double elapsed = r->seconds_trained + (t - pg->t_start);
        double per_update = (t - pg->t_start) / (double)(u - pg->start_update);
        char el[32], eta[32];
        format_duration(el, sizeof el, elapsed);
        format_duration(eta, sizeof eta, per_update * (double)(end > u ? end - u : 0));
        fprintf(stderr, "%sstep %ld/%ld  epoch %d/%d  loss %.4f  lr %.2e  tok/s %.0f  elapsed %s  eta %s%s",
                pg->tty ? "\r\033[K" : "", u, end, pu->epoch + 1, cfg->epochs, loss, pu->lr,
                tps, el, eta, pg->tty ? "" : "\n");
        pg->t_last_print = t;
        pg->tokens_window = 0;
        pg->t_window = t;
    }
}

/* The pending update, if one is queued: its outcome read (a diverging run ends here), logged
 * and shown. 0, or the exit code. */
static int finish_update(Run *r, PendingUpdate *pu, Progress *pg, MhaError *err) {
    if (!pu->queued) return 0;
    pu->queued = 0;
    UpdateOutcome out;
    int rc = read_outcome(r, pu, pg->tty, &out, err);
    if (rc) return rc;
    log_update(r, pu, &out);
    print_progress(r, pu, out.loss, pg);
    return 0;
}

/* The test set on the best parameters: the report to stdout, a "test" record to metrics.jsonl. */
static int report_test(Run *r, MhaError *err) {
    const Config *cfg = r->cfg;
    r->be->to_device(r->model.params, r->best_params, r->model.lay.total * sizeof(float));
    Metrics mt;
    if (evaluate_dataset(&r->model, &r->test, cfg->batch_size, cfg->max_len, r->truncate, r->add_cls, &mt) != EVAL_OK)
        return eval_no_memory(r, cfg->test, err);
    printf("test %s (%s):\n", cfg->test, r->has_dev ? "best model" : "final parameters, no dev set");
    metrics_print(&mt, r->labels.names, stdout);
    cJSON *rec = cJSON_CreateObject();
    cJSON_AddStringToObject(rec, "type", "test");
    cJSON_AddNumberToObject(rec, "update", (double)r->best_update);
    if (r->best_update > 0 && r->updates_per_epoch > 0)   /* the epoch that update fell in, from 1 */
        cJSON_AddNumberToObject(rec, "epoch", (double)((r->best_update - 1) / r->updates_per_epoch + 1));
    cJSON_AddNumberToObject(rec, "loss", metrics_loss(&mt));
    cJSON_AddNumberToObject(rec, "accuracy", metrics_accuracy(&mt));
    cJSON_AddNumberToObject(rec, "macro_f1", metrics_macro_f1(&mt));
    log_record(r, rec);
    metrics_free(&mt);
    return 0;
}

/* Why the epochs end before the last one is trained, if they do. */
typedef enum {
    KEEP_TRAINING = 0,
    STOP_EARLY,    /* train.patience: the run ends as after its last epoch (model.mha, test report) */
    STOP_PAUSED,   /* Ctrl-C or --max-steps: last.mha saved, --resume goes on from there */
} StopReason;

/* The epochs from the run's position on: updates, dev evaluations, early stopping and
 * last.mha at the end of each epoch, and with --profile the report of the loop. Returns 0
 * with *stop KEEP_TRAINING (every epoch trained) or STOP_EARLY; STOP_PAUSED (last.mha saved,
 * said) with 0, or 130 after Ctrl-C; or an exit code with err filled. */
static int train_epochs(Run *r, Batcher *bt, const TrainOptions *opt, StopReason *stop, MhaError *err) {
    const Config *cfg = r->cfg;
    int rc;
    /* Ctrl-C and SIGTERM save and stop (also in a script's background job, where the shell
     * ignores SIGINT for it); SIGHUP (the terminal or ssh session gone) too, unless the run was
     * started with it ignored (nohup, trap '' HUP): then it stays ignored */
    if (r->update == 0)
        set_quit_note("\nmha-train: quit without saving: no last.mha was written yet\n");
    else if (opt->resume_path)   /* resumed: the checkpoint it started from (not always the folder's last.mha) */
        set_quit_note("\nmha-train: quit without saving: %s is from update %ld (mha-train --resume %s goes on from "
                      "there)\n", opt->resume_path, r->update, opt->resume_path);
    catch_stop_signals();
    const long end = opt->max_steps > 0 && opt->max_steps < r->total_updates ? opt->max_steps : r->total_updates;
    const long every = (end - r->update) / 100;   /* about 100 lines a run (fewer off a terminal: 5 s apart) */
    Progress pg = {.tty = isatty(fileno(stderr)) && !opt->quiet, .quiet = opt->quiet, .t_start = now_s(),
                   .start_update = r->update, .print_every = every > 0 ? every : 1, .end_update = end};
    pg.t_window = pg.t_start;
    if (!opt->quiet && end < r->total_updates && r->update < end)
        fprintf(stderr, "--max-steps %ld: this run stops at update %ld of the schedule's %ld (the learning rate follows "
                "the whole schedule; --resume goes on from there)\n", opt->max_steps, end, r->total_updates);
    const int tty = pg.tty;
    double data_seconds = 0, loop_start = now_s();
    long profiled_tokens = 0;
    memset(profile_counters(), 0, sizeof(ProfileCounters));  /* count the training loop only */
    PendingUpdate pending = {0};
    /* a resumed run that patience had already stopped (killed during its test report) trains no more */
    *stop = r->has_dev && cfg->patience > 0 && r->evals_since_best >= cfg->patience ? STOP_EARLY : KEEP_TRAINING;

    while (r->epoch < cfg->epochs && *stop == KEEP_TRAINING) {
        batcher_start_epoch(bt, r->epoch, 1, r->batch_pos);
        /* a train.eval_every evaluation an interrupt cut short (resumed): done before any update,
         * as the run that was interrupted would have done it */
        if (r->eval_due) {
            int cancelled;
            if ((rc = evaluate_dev(r, r->epoch + 1, opt->quiet, 1, &cancelled, err))) return rc;
            if (cancelled) { *stop = STOP_PAUSED; break; }
            r->eval_due = 0;
            if (check_patience(r)) *stop = STOP_EARLY;
        }
        /* resumed at --max-steps' update (an epoch's end that owes its evaluation, or after the
         * evaluation above): nothing more to train here */
        if (*stop == KEEP_TRAINING && opt->max_steps > 0 && r->update >= opt->max_steps) *stop = STOP_PAUSED;
        /* (an interrupt during the previous epoch's evaluation or save: no update in this one) */
        while (bt->pos < bt->n_batches && *stop == KEEP_TRAINING && !g_interrupted) {
            model_zero_grads(&r->model);
            adamw_begin(&r->adamw, &r->model);
            long examples = 0, tokens = 0;
            const Batch *b;
            for (int k = 0; k < cfg->grad_accum && (b = next_batch(bt, &data_seconds)) != NULL; k++) {
                uint64_t seed = mha_rng_u64((uint64_t)cfg->seed, (uint64_t)r->update * cfg->grad_accum + k);
                model_forward(&r->model, b->ids, b->lengths, b->labels, b->B, b->T, 1, seed);
                model_backward(&r->model, 1.0f, seed);
                model_loss_accumulate(&r->model, r->adamw.stats);
                examples += b->B;
                tokens += b->real_tokens;
                profiled_tokens += b->real_tokens;
            }
            /* The previous update's outcome: a wait for its AdamW only, while the device has
             * this update's forward and backward, queued above, to run. */
            if ((rc = finish_update(r, &pending, &pg, err))) return rc;
            r->be->scale(r->model.grads, r->model.lay.total, 1.0f / (float)examples);
            float lr = schedule_lr(cfg, r->update, r->total_updates);
            adamw_queue(&r->adamw, &r->model, cfg, lr);
            r->batch_pos = bt->pos;
            r->update++;
            pending = (PendingUpdate){.queued = 1, .update = r->update, .epoch = r->epoch, .lr = lr,
                                      .examples = examples, .tokens = tokens};
            if (r->has_dev && cfg->eval_every > 0 && r->update % cfg->eval_every == 0) {
                if ((rc = finish_update(r, &pending, &pg, err))) return rc;
                if (tty) fputc('\n', stderr);
                /* an interrupt during it: stopped, last.mha says the evaluation is due (r->eval_due) */
                int cancelled;
                if ((rc = evaluate_dev(r, r->epoch + 1, opt->quiet, 1, &cancelled, err))) return rc;   /* during epoch r->epoch + 1 */
                if (cancelled) { r->eval_due = 1; *stop = STOP_PAUSED; break; }
                if (check_patience(r)) *stop = STOP_EARLY;
            }
            /* early stopping on the update --max-steps ends at is still the end of the run */
            if (g_interrupted || (*stop == KEEP_TRAINING && opt->max_steps > 0 && r->update >= opt->max_steps))
                *stop = STOP_PAUSED;
        }
        /* before an evaluation or a checkpoint: the last update's outcome (AdamW's step count) */
        if ((rc = finish_update(r, &pending, &pg, err))) return rc;
        /* an interrupt that came meanwhile stops here, before the end-of-epoch evaluation: the
         * saved position is then the end of the epoch (batch_pos = n_batches, the epoch not yet
         * counted), and --resume starts with that evaluation */
        if (g_interrupted && *stop == KEEP_TRAINING) *stop = STOP_PAUSED;
        /* --max-steps that ends on an epoch's last update: the epoch's evaluation belongs to it
         * (and after the last epoch, the run is done: it finishes as a whole run does) */
        const int steps_end_epoch = *stop == STOP_PAUSED && !g_interrupted && !r->eval_due &&
                                    bt->pos >= bt->n_batches;
        if (*stop == STOP_PAUSED && !steps_end_epoch) break;
        if (bt->pos >= bt->n_batches) {  /* epoch finished */
            /* per epoch; or, with eval_every, the end of the last epoch when its update was not
             * just evaluated, so that the final parameters compete for model.mha too */
            if (r->has_dev && (cfg->eval_every == 0 ||
                               (r->epoch + 1 == cfg->epochs && r->update % cfg->eval_every != 0))) {
                if (tty) fputc('\n', stderr);
                int cancelled;   /* an interrupt during it: stopped at the end of the epoch, as above */
                if ((rc = evaluate_dev(r, r->epoch + 1, opt->quiet, 1, &cancelled, err))) return rc;   /* the epoch just ended */
                if (cancelled) { *stop = STOP_PAUSED; break; }
                if (check_patience(r)) *stop = STOP_EARLY;
            } else if (tty) {
                fputc('\n', stderr);
            }
            r->epoch++;
            r->batch_pos = 0;
        }
        if (steps_end_epoch && *stop == STOP_PAUSED) {
            if (r->epoch < cfg->epochs) break;   /* saved below, as a pause */
            *stop = KEEP_TRAINING;               /* the schedule's last update: the run ends */
        }
        r->seconds_trained += now_s() - pg.t_start;
        pg.t_start = now_s();
        pg.start_update = r->update;
        if ((rc = save_checkpoint(r, "last.mha", 1, NULL, 0, NULL, err))) return rc;
    }
    if (opt->profile)   /* the ceiling on the feed-forward product at this batch size */
        profile_print_report(now_s() - loop_start, data_seconds, profiled_tokens,
                             cfg->batch_size * (cfg->max_len < 64 ? cfg->max_len : 64), cfg->d_model, cfg->d_ff);
    if (*stop != STOP_PAUSED) return 0;
    if (tty) fputc('\n', stderr);
    r->seconds_trained += now_s() - pg.t_start;
    if ((rc = save_checkpoint(r, "last.mha", 1, NULL, 0, NULL, err))) return rc;
    fprintf(stderr, "%s at update %ld: saved %s/last.mha (continue with --resume %s/last.mha)\n",
            g_interrupted ? "interrupted" : "stopped", r->update, cfg->out_dir, cfg->out_dir);
    return g_interrupted ? 130 : 0;
}

/* After the last epoch or early stopping: model.mha of the final parameters when there is no
 * dev set (or when the best ones went with a missing model.mha), the closing line, and with
 * a test set its report and then a last.mha that records it. 0 or an exit code. */
static int finish_run(Run *r, int quiet, MhaError *err) {
    const Config *cfg = r->cfg;
    const size_t pbytes = r->model.lay.total * sizeof(float);
    int rc;
    /* No dev set: the final parameters are the model. */
    if (!r->has_dev) {
        r->be->to_host(r->best_params, r->model.params, pbytes);
        r->best_update = r->update;
        r->test_reported = 0;   /* (a resumed run whose model.mha was lost: its report again) */
        if ((rc = save_checkpoint(r, "model.mha", 0, r->best_params, 0, NULL, err))) return rc;
    } else if (r->best_update < 0) {
        /* a finished run resumed after its model.mha went missing: the best parameters are
         * gone with it; the final ones, evaluated, become the model */
        fprintf(stderr, "mha-train: note: %s/model.mha is missing (the best parameters are lost); the final "
                "parameters, evaluated on dev, become the model\n", cfg->out_dir);
        r->test_reported = 0;   /* another model: its own report */
        int cancelled;
        /* during epoch r->epoch + 1 when it stopped inside one (train.patience), else the last */
        if ((rc = evaluate_dev(r, r->batch_pos > 0 ? r->epoch + 1 : r->epoch, quiet, 0, &cancelled, err)) ||
            (rc = save_checkpoint(r, "last.mha", 1, NULL, 0, NULL, err)))
            return rc;
    }
    if (r->has_dev)
        fprintf(stderr, "training done: %ld update%s in %.1f s; best model from update %ld in %s/model.mha\n",
                r->update, r->update == 1 ? "" : "s", r->seconds_trained, r->best_update, cfg->out_dir);
    else
        fprintf(stderr, "training done: %ld update%s in %.1f s; the final parameters (no dev set) in %s/model.mha\n",
                r->update, r->update == 1 ? "" : "s", r->seconds_trained, cfg->out_dir);
    if (!r->has_test || r->best_update < 0 || r->test_reported) return 0;
    /* the report, then a last.mha that says it was given (of the final parameters, which the
     * report replaces on the device by the best ones): a run killed in between gives it on
     * --resume */
    float *final = malloc(pbytes);
    if (!final)
        return mha_fail(err, MHA_EXIT_DATA, "out of memory for a copy of the %zu parameters", r->model.lay.total);
    r->be->to_host(final, r->model.params, pbytes);
    if ((rc = report_test(r, err))) { free(final); return rc; }
    errno = 0;   /* out before last.mha says it was given: a stop signal after that loses nothing */
    if (fflush(stdout) != 0 || ferror(stdout)) {   /* a full disk, say: --resume gives it again */
        free(final);
        return mha_fail(err, MHA_EXIT_DATA, "cannot write the report to standard output (%s)",
                        strerror(errno ? errno : EIO));
    }
    r->test_reported = 1;
    rc = save_checkpoint(r, "last.mha", 1, final, 0, NULL, err);
    free(final);
    return rc;
}

/* The model and its AdamW state on the run's backend, and the host copy of the best
 * parameters. 0 or an exit code. */
static int create_model(Run *r, ModelDims *d, MhaError *err) {
    const Config *cfg = r->cfg;
    int rc;
    model_dims_from_config(d, cfg, vocab_size(r->vocab), r->labels.n);
    /* room for the largest batch the run forms: train.batch_size examples, or every example
     * of its largest set when that has fewer (a batch_size of 10^6 on 654 lines allocates 654) */
    int most = r->train.n;
    if (r->dev.n > most) most = r->dev.n;
    if (r->test.n > most) most = r->test.n;
    const int max_batch = cfg->batch_size < most ? cfg->batch_size : (most > 0 ? most : 1);
    if ((rc = model_create(&r->model, d, r->be, max_batch, cfg->max_len, cfg->decay_embeddings,
                           cfg->decay_norms, err)))
        return rc;
    if ((rc = adamw_create(&r->adamw, &r->model, err))) return rc;
    /* Dev and test evaluation one batch at a time (ops on all threads): data-parallel workers
     * would each need a forward activation set (model_replicas), raising training's peak
     * memory by about a third for an evaluation that is a small part of the run. */
    evaluate_set_workers(1);
    if (!(r->best_params = malloc(r->model.lay.total * sizeof(float))))
        return mha_fail(err, MHA_EXIT_DATA, "out of memory for a copy of the %zu parameters", r->model.lay.total);
    return 0;
}

/* The model line on stderr: parameters, backend, attention (and its kernel). */
static void print_model_line(const Run *r, const ModelDims *d) {
    char kernel[96] = "";   /* which kernel the fused attention runs, where there is a choice */
    if (d->fused_attention && r->be->attention_kernel)
        snprintf(kernel, sizeof kernel, " (%s)", r->be->attention_kernel(d->C / d->NH));
    fprintf(stderr, "model: %zu parameters, backend %s%s, attention %s%s\n", r->model.lay.total, r->be->name,
            r->be->bf16 ? " (bf16 mixed precision)" : "", d->fused_attention ? "fused" : "math", kernel);
}

/* metrics.jsonl in the output folder: a new run's written from the start, a resumed run's
 * appended to (less the records written after last.mha was saved). 0 or an exit code. */
static int open_metrics_log(Run *r, int resumed, MhaError *err) {
    char log_path[4300];
    snprintf(log_path, sizeof log_path, "%s/metrics.jsonl", r->cfg->out_dir);
    r->metrics_log = fopen(log_path, resumed ? "a" : "w");
    if (!r->metrics_log)
        return mha_fail(err, MHA_EXIT_DATA, "%s: cannot open for writing (%s)", log_path, strerror(errno));
    if (resumed) drop_unsaved_records(r, log_path);
    /* log_record writes through the descriptor from the end of the file: the log's size */
    int fd = fileno(r->metrics_log);
    off_t end = lseek(fd, 0, SEEK_END);
    r->metrics_good_bytes = end >= 0 ? (long)end : 0;
    if (end < 0) r->metrics_torn = 1;
    return 0;
}

int train_run(Config *cfg, const TrainOptions *opt, MhaError *err) {
    Run r;
    memset(&r, 0, sizeof r);
    r.cfg = cfg;
    r.written_by = opt->version;
    r.best_update = -1;
    Checkpoint resume = {0};
    int have_resume = 0, rc = 0;
    Batcher bt;
    memset(&bt, 0, sizeof bt);

    if (opt->resume_path) {
        int done;
        if ((rc = resume_open(opt->resume_path, opt->max_steps, opt->resume_sets, opt->n_resume_sets, cfg, &resume,
                              &done, err)) || done)
            return rc;
        have_resume = 1;
    }
    if ((rc = select_backend(cfg, &r.be, "train.device", err))) goto out;
    if (opt->profile) r.be = profile_backend(r.be);
    if ((rc = run_dir_lock(cfg->out_dir, err))) goto out;
    const char *data_keys[] = {"data.train", "data.dev", "data.test"}, *data[] = {cfg->train, cfg->dev, cfg->test};
    if ((rc = run_dir_check_inputs(cfg->out_dir, data_keys, data, 3, err))) goto out;
    /* a new run in a folder holding one: refused here, before the data is read; with
     * --overwrite, the earlier run's checkpoints go only once this run is ready to train */
    if (!have_resume && !opt->overwrite && (rc = run_dir_claim(cfg->out_dir, 0, err))) goto out;
    if (!opt->quiet) {
        char *cj = config_to_json(cfg);
        fprintf(stderr, "mha-train: resolved config\n%s\n", cj);
        free(cj);
    }
    if ((rc = run_load_data(&r, have_resume ? &resume : NULL, err))) goto out;

    r.add_cls = strcmp(cfg->pooling, "cls") == 0;
    r.truncate = strcmp(cfg->truncate, "head_tail") == 0 ? TRUNC_HEAD_TAIL : TRUNC_HEAD;
    if ((rc = batcher_init(&bt, &r.train, cfg->batch_size, cfg->max_len, r.truncate, r.add_cls,
                           cfg->bucket, (uint64_t)cfg->seed)) != 0) {
        rc = mha_fail(err, MHA_EXIT_DATA, "out of memory laying out batches of %d x %d tokens "
                      "(try a smaller train.batch_size or data.max_len)", cfg->batch_size, cfg->max_len);
        goto out;
    }
    batcher_start_epoch(&bt, 0, 1, 0);
    run_print_data_stats(&r, &bt);

    ModelDims d;
    if ((rc = create_model(&r, &d, err))) goto out;
    r.updates_per_epoch = (bt.n_batches + cfg->grad_accum - 1) / cfg->grad_accum;
    r.total_updates = r.updates_per_epoch * cfg->epochs;
    run_note_schedule(&r, have_resume);
    if (have_resume) {
        int done;
        if ((rc = resume_restore(&r, &resume, opt->resume_path, opt->quiet, opt->max_steps, bt.n_batches, &done, err)) || done) goto out;
        /* the parameters and moments are the backend's now: the file's copies (3 x the
         * parameters' bytes) need not last the run (the vocabulary and labels are the run's) */
        free(resume.params);
        free(resume.adam_m);
        free(resume.adam_v);
        resume.params = resume.adam_m = resume.adam_v = NULL;
    } else {
        model_init_params(&r.model, (uint64_t)cfg->seed);
    }
    if (!opt->quiet) print_model_line(&r, &d);

    if (!have_resume && opt->overwrite && (rc = run_dir_claim(cfg->out_dir, 1, err))) goto out;
    if ((rc = open_metrics_log(&r, have_resume, err))) goto out;

    StopReason stop;
    rc = train_epochs(&r, &bt, opt, &stop, err);
    if (rc || stop == STOP_PAUSED) goto out;
    quit_at_once_from_now(cfg->out_dir, r.has_test);   /* from here a stop signal quits (checked after: no gap) */
    if (g_interrupted) {   /* came after the last update's step: the training is saved, the rest is not done */
        fprintf(stderr, "interrupted after the last update: %s/last.mha holds the finished training (continue with "
                "--resume %s/last.mha for model.mha and the test report)\n", cfg->out_dir, cfg->out_dir);
        rc = 130;
        goto out;
    }
    rc = finish_run(&r, opt->quiet, err);
    release_stop_signals();
out:
    if (rc && !have_resume) run_dir_remove_if_unused(cfg->out_dir);
    batcher_free(&bt);
    free_run(&r, !have_resume);
    if (have_resume) checkpoint_free(&resume);
    return rc;
}
