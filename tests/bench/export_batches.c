/* tests/bench/export_batches.c: writes the batches mha-train would see to a binary file,
 * so that scripts/bench_torch.py (the PyTorch reference) trains on exactly the same data in
 * exactly the same order. Built for scripts/bench-train and scripts/bench-predict; not a test.
 *
 * usage: export_batches --config FILE [--set key=value ...] --out FILE.bin
 *                       [--padded] [--predict TEXTFILE [--batch-size N] [--batch-tokens N] [--chunk N]]
 *
 * Training export (default): the data is read with the project's data/ API exactly as
 * mha-train reads it (dataset_load_train for the training file: vocabulary and labels;
 * dataset_load for dev and test), the batcher is set up with the config's batch_size,
 * max_len, truncate, add_cls = (pooling == "cls"), bucket and seed, and the file gets every
 * training epoch e = 0 .. epochs-1 as batcher_start_epoch(e, shuffle = 1) lays it out,
 * then the dev and test batches as the evaluation lays them out (model/evaluate.c: bucketed,
 * not shuffled, seed 0, batch_size).
 *
 * --padded: the "articles' style" instead: random batches (bucket = 0) and every batch
 * padded to max_len; dev/test in file order, also padded to max_len.
 *
 * --predict TEXTFILE: only the batches mha-predict forms for TEXTFILE (one text per line):
 * chunks of --chunk lines (default 2048, CHUNK_LINES of cmd/mha-predict.c), each chunk
 * bucketed and not shuffled in batches of --batch-size (default 64, mha-predict's default)
 * and, with --batch-tokens N, at most N padded tokens (mha-predict on the CPU caps its batches
 * at evaluate_cpu_max_tokens; the default here is no cap, as PyTorch's eager forward, with
 * its per-op overhead, is faster on whole batches: docs/benchmarks.md), the vocabulary built
 * from the config's training file.
 * With --padded: file order, padded to max_len, no token cap.
 *
 * A FILE.bin.json beside the output holds the resolved config (config_to_json).
 *
 * File layout (all little-endian int32 unless stated):
 *   magic        8 bytes "MHABATCH"
 *   header       16 int32: [0] version = 1, [1] vocab size V, [2] classes K, [3] max_len,
 *                [4] batch_size, [5] epochs, [6] pad id, [7] add_cls, [8] padded (0/1),
 *                [9] number of sections, [10..15] 0
 *   sections     each: 4 int32: kind (0 train epoch, 1 dev, 2 test, 3 predict),
 *                index (epoch for train, else 0), number of batches, number of examples;
 *                then its batches, each:
 *                  B, T          2 int32
 *                  ids           B*T int32 (row-major (B, T), pad id after each length)
 *                  lengths       B int32 (real tokens, >= 1)
 *                  labels        B int32 (-1 for predict)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/batcher.h"
#include "data/dataset.h"
#include "data/vocab.h"
#include "model/config.h"

enum { KIND_TRAIN = 0, KIND_DEV = 1, KIND_TEST = 2, KIND_PREDICT = 3 };

typedef struct {
    FILE *f;
    int padded, max_len;
    int32_t *row;         /* scratch: one batch padded to max_len */
    long sections;
    long real_tokens, positions;
} Writer;

static void die(const char *msg) {
    fprintf(stderr, "export_batches: %s\n", msg);
    exit(1);
}

static void put(Writer *w, const void *p, size_t n, size_t size) {
    if (n && fwrite(p, size, n, w->f) != n) die("write failed (disk full?)");
}

static void put_i32(Writer *w, int32_t v) { put(w, &v, 1, sizeof v); }

static void write_batch(Writer *w, const Batch *b) {
    int T = w->padded ? w->max_len : b->T;
    put_i32(w, b->B);
    put_i32(w, T);
    if (T == b->T) {
        put(w, b->ids, (size_t)b->B * (size_t)T, sizeof(int32_t));
    } else {
        for (int r = 0; r < b->B; r++) {
            for (int t = 0; t < T; t++) w->row[t] = t < b->T ? b->ids[(size_t)r * b->T + t] : VOCAB_PAD;
            put(w, w->row, (size_t)T, sizeof(int32_t));
        }
    }
    put(w, b->lengths, (size_t)b->B, sizeof(int32_t));
    put(w, b->labels, (size_t)b->B, sizeof(int32_t));
    w->real_tokens += b->real_tokens;
    w->positions += (long)b->B * T;
}

static void section_header(Writer *w, int kind, int index, int n_batches, int n_examples) {
    put_i32(w, kind);
    put_i32(w, index);
    put_i32(w, n_batches);
    put_i32(w, n_examples);
    w->sections++;
}

/* One section: every batch of `bt` laid out for (epoch, shuffle). */
static void write_epoch(Writer *w, Batcher *bt, int kind, int epoch, int shuffle) {
    batcher_start_epoch(bt, epoch, shuffle, 0);
    section_header(w, kind, kind == KIND_TRAIN ? epoch : 0, bt->n_batches, bt->ds->n);
    const Batch *b;
    while ((b = batcher_next(bt)) != NULL) write_batch(w, b);
}

/* The dev/test layout of model/evaluate.c (bucketed, seed 0, not shuffled), or the padded
 * articles' layout (file order). */
static int write_eval(Writer *w, const Dataset *ds, int kind, const Config *c, int truncate, int add_cls) {
    Batcher bt;
    if (batcher_init(&bt, ds, c->batch_size, c->max_len, truncate, add_cls, w->padded ? 0 : 1, 0) != 0) return 1;
    write_epoch(w, &bt, kind, 0, 0);
    batcher_free(&bt);
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: export_batches --config FILE [--set key=value ...] --out FILE.bin [--padded]\n"
               "                      [--predict TEXTFILE [--batch-size N] [--batch-tokens N] [--chunk N]]\n"
               "Writes the batches mha-train (or mha-predict with --predict) forms; the layout is\n"
               "described at the top of tests/bench/export_batches.c.\n");
}

int main(int argc, char **argv) {
    const char *config_path = NULL, *out_path = NULL, *predict_path = NULL;
    const char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int n_sets = 0, padded = 0, pred_batch = 64, chunk = 2048;
    long pred_tokens = 0;    /* --batch-tokens; 0: no cap */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
        else if (!strcmp(a, "--padded")) padded = 1;
        else if (!strcmp(a, "--config") && more) config_path = argv[++i];
        else if (!strcmp(a, "--set") && more) sets[n_sets++] = argv[++i];
        else if (!strcmp(a, "--out") && more) out_path = argv[++i];
        else if (!strcmp(a, "--predict") && more) predict_path = argv[++i];
        else if (!strcmp(a, "--batch-size") && more) pred_batch = atoi(argv[++i]);
        else if (!strcmp(a, "--batch-tokens") && more) {
            char *end;
            pred_tokens = strtol(argv[++i], &end, 10);
            if (*end || end == argv[i] || pred_tokens < 0) { usage(stderr); return 2; }
        }
        else if (!strcmp(a, "--chunk") && more) chunk = atoi(argv[++i]);
        else { usage(stderr); return 2; }
    }
    if (!config_path || !out_path || pred_batch < 1 || chunk < 1) { usage(stderr); return 2; }

    Config cfg;
    MhaError err = {0};
    config_defaults(&cfg);
    if (config_load(&cfg, config_path, sets, n_sets, &err) != 0) {
        fprintf(stderr, "export_batches: %s\n", err.msg);
        return 2;
    }
    free(sets);
    ReadOptions ro;
    config_read_options(&cfg, &ro);
    int add_cls = strcmp(cfg.pooling, "cls") == 0;
    int truncate = strcmp(cfg.truncate, "head_tail") == 0 ? TRUNC_HEAD_TAIL : TRUNC_HEAD;

    Vocab *vocab = NULL;
    LabelMap labels = {0};
    Dataset train, dev, test, pred;
    memset(&train, 0, sizeof train);
    memset(&dev, 0, sizeof dev);
    memset(&test, 0, sizeof test);
    memset(&pred, 0, sizeof pred);
    if (dataset_load_train(cfg.train, &ro, cfg.min_count, cfg.max_vocab, &vocab, &labels, &train, &err) != 0) {
        fprintf(stderr, "export_batches: %s\n", err.msg);
        return 1;
    }
    if (!predict_path) {
        if (cfg.dev[0] && dataset_load(cfg.dev, &ro, vocab, &labels, &dev, &err) != 0) {
            fprintf(stderr, "export_batches: %s\n", err.msg);
            return 1;
        }
        if (cfg.test[0] && dataset_load(cfg.test, &ro, vocab, &labels, &test, &err) != 0) {
            fprintf(stderr, "export_batches: %s\n", err.msg);
            return 1;
        }
    } else {
        /* as mha-predict reads: plain lines, invalid bytes replaced */
        ReadOptions pro = ro;
        pro.format = FORMAT_PLAIN;
        pro.tok.replace_invalid = 1;
        if (dataset_load(predict_path, &pro, vocab, NULL, &pred, &err) != 0) {
            fprintf(stderr, "export_batches: %s\n", err.msg);
            return 1;
        }
    }

    Writer w = {0};
    w.padded = padded;
    w.max_len = cfg.max_len;
    w.row = malloc((size_t)cfg.max_len * sizeof *w.row);
    w.f = fopen(out_path, "wb");
    if (!w.f || !w.row) die("cannot open the output file");
    int n_sections = predict_path ? 1 : cfg.epochs + (dev.n > 0) + (test.n > 0);
    put(&w, "MHABATCH", 8, 1);
    int32_t header[16] = {1, vocab_size(vocab), labels.n, cfg.max_len,
                          predict_path ? pred_batch : cfg.batch_size, predict_path ? 0 : cfg.epochs,
                          VOCAB_PAD, add_cls, padded, n_sections, 0, 0, 0, 0, 0, 0};
    put(&w, header, 16, sizeof(int32_t));

    if (!predict_path) {
        Batcher bt;
        if (batcher_init(&bt, &train, cfg.batch_size, cfg.max_len, truncate, add_cls,
                         padded ? 0 : cfg.bucket, (uint64_t)cfg.seed) != 0)
            die("batcher_init failed");
        long epoch_tokens = 0;
        for (int e = 0; e < cfg.epochs; e++) {
            long before = w.real_tokens;
            write_epoch(&w, &bt, KIND_TRAIN, e, 1);
            epoch_tokens = w.real_tokens - before;
        }
        fprintf(stderr, "export_batches: train %d examples, %d batches/epoch, %ld real tokens/epoch, "
                "%d epochs, padding %.1f%%%s\n", train.n, bt.n_batches, epoch_tokens, cfg.epochs,
                w.positions ? 100.0 * (1.0 - (double)w.real_tokens / (double)w.positions) : 0.0,
                padded ? " (random batches padded to max_len)" : "");
        batcher_free(&bt);
        if (dev.n > 0 && write_eval(&w, &dev, KIND_DEV, &cfg, truncate, add_cls)) die("batcher_init failed (dev)");
        if (test.n > 0 && write_eval(&w, &test, KIND_TEST, &cfg, truncate, add_cls)) die("batcher_init failed (test)");
        fprintf(stderr, "export_batches: dev %d, test %d examples\n", dev.n, test.n);
    } else {
        /* mha-predict: chunks of `chunk` lines, each evaluated like model/evaluate.c does */
        int nb_total = 0;
        for (int pass = 0; pass < 2; pass++) {   /* count the batches, then write them */
            if (pass) section_header(&w, KIND_PREDICT, 0, nb_total, pred.n);
            for (int s = 0; s < pred.n; s += chunk) {
                Dataset view = pred;  /* a shallow window: offsets index the shared ids */
                view.n = pred.n - s < chunk ? pred.n - s : chunk;
                view.labels = pred.labels + s;
                view.offsets = pred.offsets + s;
                view.line_no = pred.line_no + s;
                Batcher bt;
                if (batcher_init(&bt, &view, pred_batch, cfg.max_len, truncate, add_cls, padded ? 0 : 1, 0) != 0)
                    die("batcher_init failed (predict)");
                batcher_set_max_tokens(&bt, padded ? 0 : pred_tokens);
                batcher_start_epoch(&bt, 0, 0, 0);
                if (!pass) {
                    nb_total += bt.n_batches;
                } else {
                    const Batch *b;
                    while ((b = batcher_next(&bt)) != NULL) write_batch(&w, b);
                }
                batcher_free(&bt);
            }
        }
        char cap[48] = "no token cap";
        if (!padded && pred_tokens > 0) snprintf(cap, sizeof cap, "<= %ld tokens", pred_tokens);
        fprintf(stderr, "export_batches: predict %d lines, %d batches of <= %d lines and %s, "
                "%ld real tokens, padding %.1f%%\n", pred.n, nb_total, pred_batch, cap, w.real_tokens,
                w.positions ? 100.0 * (1.0 - (double)w.real_tokens / (double)w.positions) : 0.0);
    }
    if (w.sections != n_sections) die("internal error: section count");
    if (fclose(w.f) != 0) die("write failed (disk full?)");

    /* the resolved config beside the batches */
    char json_path[4200];
    snprintf(json_path, sizeof json_path, "%s.json", out_path);
    FILE *jf = fopen(json_path, "w");
    if (!jf) die("cannot write the config JSON");
    char *cj = config_to_json(&cfg);
    fprintf(jf, "%s\n", cj);
    free(cj);
    fclose(jf);

    free(w.row);
    dataset_free(&train);
    dataset_free(&dev);
    dataset_free(&test);
    dataset_free(&pred);
    vocab_free(vocab);
    labelmap_free(&labels);
    return 0;
}
