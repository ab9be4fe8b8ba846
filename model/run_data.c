/* model/run_data.c: a training run's data (run_data.h): the training, dev and test files read
 * and checked (labels that look swapped or like ids, a class of one example, classes whose
 * names differ only in case or width, dev or test sets that repeat the training data), the
 * statistics and notes printed before the first update,
 * and the notes on settings that the data makes odd (a warmup longer than the run, dev-set
 * options without a dev set). */
#include "model/run_data.h"
#include "data/line_format.h"
#include "data/overlap.h"
#include "data/utf8.h"
#include "model/optimizer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <utf8proc.h>

/* A note when 1% or more of the training examples repeat an earlier one token for token (they
 * weigh more), with the texts whose copies disagree on the label. Silent when out of memory. */
static void note_repeats(const char *path, const Dataset *d) {
    Repeats rp;
    if (dataset_repeats(d, &rp) != 0 || !overlap_noteworthy(rp.repeats, d->n)) return;
    const int one = rp.repeats == 1;
    fprintf(stderr, "mha-train: note: %s: %ld of %d examples (%.1f%%) repeat%s an earlier one token for token, so "
            "th%s weigh%s more in training", path, rp.repeats, d->n, 100.0 * (double)rp.repeats / d->n,
            one ? "s" : "", one ? "at text" : "ose texts", one ? "s" : "");
    if (rp.conflicting)
        fprintf(stderr, "; %ld text%s copies with different labels", rp.conflicting,
                rp.conflicting == 1 ? " has" : "s have");
    fputc('\n', stderr);
}

/* A note when 1% or more of a dev or test set repeats training examples token for token
 * (data/overlap.h): its scores then mix memory with generalisation. Silent when out of memory. */
static void note_overlap(const Run *r, const char *path, const Dataset *d) {
    Overlap o;
    if (dataset_overlap(&r->train, d, &o) != 0 || !overlap_noteworthy(o.shared, d->n)) return;
    fprintf(stderr, "mha-train: note: %s: %ld of %d examples (%.1f%%) repeat%s a training example token for token "
            "(%ld with its label): the scores on this file partly measure what the model remembers rather than how "
            "it does on new text\n", path, o.shared, d->n, 100.0 * (double)o.shared / d->n, o.shared == 1 ? "s" : "",
            o.same_label);
}

/* The training labels. Label and text swapped (a "class" per example) trains a useless model
 * without complaint: refused when more than half of the examples (and more than 20) have a
 * label no other example has; said to be a first column of ids when those labels are numbers
 * (all but one: a header line's). Otherwise a note for the
 * classes with a single example: a line of column names the reader did not know, or a typo. */
static int check_labels(const char *path, const Dataset *d, const LabelMap *labels, MhaError *err) {
    int *count = calloc((size_t)labels->n, sizeof *count);
    if (!count) return mha_fail(err, MHA_EXIT_DATA, "out of memory counting labels");
    for (int i = 0; i < d->n; i++) count[d->labels[i]]++;
    int alone = 0, numbers = 0, eg = -1;
    for (int k = 0; k < labels->n; k++)
        if (count[k] == 1) {
            alone++;
            numbers += is_ascii_number(labels->names[k]);
            if (eg < 0 || k == labels->n / 2) eg = k;
        }
    if (alone > 20 && 2L * alone > d->n) {
        free(count);
        const char *name = labels->names[eg];
        if (numbers >= alone - 1)
            return mha_fail(err, MHA_EXIT_DATA,
                            "%s: %d of %d examples have a label no other example has, a number (e.g. "
                            "'%.*s'): is the first column an id? (expected the label first: 'label<TAB>text'; "
                            "'cut -f2- %s > NEW' drops a first column)", path, alone, d->n, utf8_shown(name, 60),
                            name, path);
        return mha_fail(err, MHA_EXIT_DATA,
                        "%s: %d of %d examples have a label no other example has (e.g. '%.*s'); are the "
                        "label and the text swapped? (expected a short label first: 'label<TAB>text', "
                        "'__label__LABEL text' or {\"label\": ..., \"text\": ...})", path, alone, d->n,
                        utf8_shown(name, 60), name);
    }
    if (alone == 1) {
        int i = 0;
        while (count[d->labels[i]] != 1) i++;
        const char *name = labels->names[d->labels[i]];
        if (i == 0)   /* the file's first example */
            fprintf(stderr, "mha-train: note: %s:%d: the class '%.*s' has this one example: a line of column names? "
                    "(a first line such as 'label<TAB>text' is skipped; delete the line otherwise)\n", path,
                    d->line_no[i], utf8_shown(name, 60), name);
        else
            fprintf(stderr, "mha-train: note: %s:%d: the class '%.*s' has this one example: too few to learn; a "
                    "mistyped label?\n", path, d->line_no[i], utf8_shown(name, 60), name);
    } else if (alone > 1) {
        fprintf(stderr, "mha-train: note: %s: %d classes have a single example, too few to learn (", path, alone);
        for (int i = 0, shown = 0; i < d->n && shown < 3; i++) {
            if (count[d->labels[i]] != 1) continue;
            const char *name = labels->names[d->labels[i]];
            fprintf(stderr, "%s'%.*s' on line %d", shown ? ", " : "", utf8_shown(name, 60), name, d->line_no[i]);
            shown++;
        }
        fprintf(stderr, "%s); mistyped labels?\n", alone > 3 ? ", ..." : "");
    }
    free(count);
    return 0;
}

typedef struct { char *key; int k; } LabelKey;

static int by_key(const void *a, const void *b) {
    const LabelKey *x = a, *y = b;
    const int c = strcmp(x->key, y->key);
    return c ? c : x->k - y->k;
}

/* Text is read NFKC-normalised and case-folded, labels as they are written: a note for classes
 * whose names differ only in case, width (ＡＢ, AB), composition (NFC and NFD é) or invisible
 * characters (ZWSP), which are separate classes however alike they look. Silent when out of
 * memory. */
static void note_lookalike_labels(const char *path, const LabelMap *labels) {
    LabelKey *keys = calloc((size_t)labels->n, sizeof *keys);
    int n = 0;
    for (int k = 0; keys && k < labels->n; k++) {
        utf8proc_uint8_t *key = NULL;
        if (utf8proc_map((const utf8proc_uint8_t *)labels->names[k], 0, &key,
                         UTF8PROC_NULLTERM | UTF8PROC_STABLE | UTF8PROC_COMPAT | UTF8PROC_COMPOSE |
                         UTF8PROC_CASEFOLD | UTF8PROC_IGNORE) >= 0)
            keys[n++] = (LabelKey){(char *)key, k};
    }
    if (keys) qsort(keys, (size_t)n, sizeof *keys, by_key);
    int shown = 0, pairs = 0;
    for (int i = 1; i < n; i++) {
        if (strcmp(keys[i - 1].key, keys[i].key) != 0) continue;
        if (pairs++ >= 3) continue;
        const char *a = labels->names[keys[i - 1].k], *b = labels->names[keys[i].k];
        fprintf(stderr, "%s'%.*s' and '%.*s'", shown++ ? ", " : "mha-train: note: the classes ", utf8_shown(a, 60), a,
                utf8_shown(b, 60), b);
    }
    if (pairs)
        fprintf(stderr, "%s in %s differ only in case, width, composition or invisible characters; they are "
                "separate classes (make their labels the same to merge them)\n", pairs > 3 ? ", ..." : "", path);
    for (int i = 0; i < n; i++) free(keys[i].key);
    free(keys);
}

/* A dev or test file's class that the training set lacks: what to do, after the reader's
 * error (which names the line and the known labels). rc passes through. */
static int unknown_class_hint(int rc, MhaError *err) {
    if (!strstr(err->msg, "does not occur in the training set")) return rc;
    char msg[sizeof err->msg];
    snprintf(msg, sizeof msg, "%s", err->msg);
    return mha_fail(err, rc, "%.1800s; a dev or test file holds the training set's classes only: remove that "
                    "class's lines ('mha-predict --eval' scores a file with them, as errors)", msg);
}

int run_load_data(Run *r, const Checkpoint *resume, MhaError *err) {
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
    if (!resume && (rc = check_labels(c->train, &r->train, &r->labels, err))) return rc;
    if (!resume) note_lookalike_labels(c->train, &r->labels);
    note_repeats(c->train, &r->train);
    if (c->dev[0]) {
        if ((rc = dataset_load(c->dev, &ro, r->vocab, &r->labels, &r->dev, err))) return unknown_class_hint(rc, err);
        r->has_dev = r->dev.n > 0;
    }
    if (c->test[0]) {
        if ((rc = dataset_load(c->test, &ro, r->vocab, &r->labels, &r->test, err))) return unknown_class_hint(rc, err);
        r->has_test = r->test.n > 0;
    }
    /* the training examples again (the same file, or a copy): its scores would say nothing */
    if (r->has_dev && dataset_fingerprint(&r->dev) == r->train_fingerprint)
        fprintf(stderr, "mha-train: warning: %s holds the same examples as the training file %s: dev scores will "
                "not tell how the model does on new text, nor pick the best model well (set data.dev to a held-out "
                "file)\n", c->dev, c->train);
    else if (r->has_dev) note_overlap(r, c->dev, &r->dev);
    if (r->has_test && dataset_fingerprint(&r->test) == r->train_fingerprint)
        fprintf(stderr, "mha-train: warning: %s holds the same examples as the training file %s: the test score "
                "will not tell how the model does on new text (set data.test to a held-out file)\n", c->test,
                c->train);
    else if (r->has_test) note_overlap(r, c->test, &r->test);
    return 0;
}

void run_print_data_stats(const Run *r, const Batcher *bt) {
    const Config *c = r->cfg;
    const long blank = r->train.n_empty, long_lines = r->train.n_long;
    fprintf(stderr, "train %s: %d examples, %ld tokens", c->train, r->train.n, r->train.n_tokens);
    if (blank) fprintf(stderr, ", %ld blank line%s skipped", blank, blank == 1 ? "" : "s");
    if (long_lines)
        fprintf(stderr, ", %ld over-long line%s truncated at data.max_line_bytes (%d bytes)", long_lines,
                long_lines == 1 ? "" : "s", c->max_line_bytes);
    if (r->train.n_replaced)
        fprintf(stderr, ", %ld with invalid UTF-8 read as U+FFFD or NUL bytes as spaces", r->train.n_replaced);
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
    /* how much the model never sees: examples with more tokens than fit in max_len */
    const int64_t room = c->max_len - r->add_cls;
    long cut = 0;
    for (int i = 0; i < r->train.n; i++) cut += r->train.offsets[i + 1] - r->train.offsets[i] > room;
    if (cut)
        fprintf(stderr, "truncated: %ld of %d training examples (%.1f%%) have more than %lld tokens "
                "(data.max_len%s; data.truncate %s keeps %s)\n", cut, r->train.n, 100.0 * cut / r->train.n,
                (long long)room, r->add_cls ? " less [CLS]" : "", c->truncate,
                r->truncate == TRUNC_HEAD ? "their first tokens" : "their first and last tokens");
}

/* A warmup (a number of updates) longer than the run: the learning rate never reaches train.lr
 * and never decays. */
static void note_long_warmup(const Config *cfg, long total) {
    const long w = schedule_warmup(cfg->warmup, total);
    if (w <= total) return;
    fprintf(stderr, "mha-train: note: train.warmup is %ld updates and the run has %ld: the learning rate rises "
            "to %.3g of train.lr (%g) and never decays (a warmup below 1 is a fraction of the run)\n", w, total,
            (double)schedule_lr(cfg, total - 1, total) / cfg->lr, cfg->lr);
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

void run_note_schedule(const Run *r, int resumed) {
    if (!r->has_dev) note_no_dev(r->cfg);
    if (!resumed) note_long_warmup(r->cfg, r->total_updates);   /* a resumed run cannot change it */
}
