/* tests/fuzz/fuzz_dataset.h: one dataset reader (TSV, fastText or JSON Lines) on arbitrary
 * bytes, as mha-train reads a training file, then as a dev file with the vocabulary and
 * labels built from it, then through the batcher; every line also goes through parse_line
 * as mha-predict's streamed input does. Invariants: a successful read has n > 0 examples,
 * monotone offsets, ids inside the vocabulary, labels inside the sorted, distinct label map;
 * reading the same file again as a dev file gives the same examples (plus the labelled lines
 * without text, which only a training file skips), each of those with tokens a repeat of a
 * training example with its label (data/overlap.h); every batch holds
 * lengths 1..T and ids inside the vocabulary. */
#ifndef MHA_TESTS_FUZZ_DATASET_H
#define MHA_TESTS_FUZZ_DATASET_H

#include "data/batcher.h"
#include "data/dataset.h"
#include "data/overlap.h"
#include "fuzz_common.h"

static void check_dataset(const Dataset *d, int V, int K) {
    FUZZ_ASSERT(d->n > 0);
    FUZZ_ASSERT(d->offsets[0] == 0);
    for (int i = 0; i < d->n; i++) {
        FUZZ_ASSERT(d->offsets[i + 1] >= d->offsets[i]);
        FUZZ_ASSERT(K < 0 ? d->labels[i] == -1 : (d->labels[i] >= 0 && d->labels[i] < K));
        FUZZ_ASSERT(d->line_no[i] >= 1);
    }
    for (int64_t j = 0; j < d->offsets[d->n]; j++) FUZZ_ASSERT(d->ids[j] >= 0 && d->ids[j] < V);
}

static int fuzz_dataset(const uint8_t *data, size_t size, int format) {
    const char *path = fuzz_file(data, size);
    ReadOptions o;
    memset(&o, 0, sizeof o);
    o.format = format;
    tokenizer_options_default(&o.tok);
    o.tok.replace_invalid = 1;
    o.max_line_bytes = 64;   /* small, so truncation at a character boundary is exercised */
    Vocab *v = NULL;
    LabelMap labels = {0, NULL};
    Dataset d;
    MhaError err;
    if (dataset_load_train(path, &o, 1, 64, &v, &labels, &d, &err) == 0) {
        int V = vocab_size(v);
        FUZZ_ASSERT(V >= VOCAB_RESERVED && V <= 64);
        FUZZ_ASSERT(labels.n >= 1);
        for (int k = 1; k < labels.n; k++) FUZZ_ASSERT(strcmp(labels.names[k - 1], labels.names[k]) < 0);
        for (int k = 0; k < labels.n; k++) FUZZ_ASSERT(labelmap_find(&labels, labels.names[k]) == k);
        check_dataset(&d, V, labels.n);

        Dataset dev;
        if (dataset_load(path, &o, v, &labels, &dev, &err) == 0) {
            check_dataset(&dev, V, labels.n);
            /* the same examples, except that a dev file keeps labelled lines without text */
            FUZZ_ASSERT(dev.n_no_text == d.n_no_text && dev.n == d.n + dev.n_no_text);
            for (int i = 0, j = 0; j < dev.n; j++) {
                if (i < d.n && dev.line_no[j] == d.line_no[i]) {
                    FUZZ_ASSERT(dev.labels[j] == d.labels[i]);
                    FUZZ_ASSERT(dev.offsets[j + 1] - dev.offsets[j] == d.offsets[i + 1] - d.offsets[i]);
                    i++;
                } else {
                    FUZZ_ASSERT(dev.offsets[j + 1] == dev.offsets[j]);   /* a line without text */
                }
            }
            /* every example with tokens repeats a training example, with its label; within the
             * training set, the repeats are fewer than the examples */
            Overlap ov;
            Repeats rp;
            long with_tokens = 0;
            for (int i = 0; i < d.n; i++) with_tokens += d.offsets[i + 1] > d.offsets[i];
            if (dataset_overlap(&d, &dev, &ov) == 0)
                FUZZ_ASSERT(ov.shared == with_tokens && ov.same_label == with_tokens);
            if (dataset_repeats(&d, &rp) == 0)
                FUZZ_ASSERT(rp.repeats >= 0 && rp.repeats < d.n && rp.conflicting >= 0 && rp.conflicting <= rp.repeats);
            dataset_free(&dev);
        } else {   /* only a label that occurs on lines without text alone is unknown to dev */
            FUZZ_ASSERT(d.n_no_text > 0 && strstr(err.msg, "does not occur in the training set"));
        }
        ReadOptions strict = o;
        strict.tok.replace_invalid = 0;
        if (dataset_load(path, &strict, v, NULL, &dev, &err) == 0) {
            check_dataset(&dev, V, -1);
            dataset_free(&dev);
        }
        /* as --eval reads it for a model that knows the first half of these classes: the other
         * labels become classes after the model's (each line counted once), or the file is
         * refused with a message */
        LabelMap half = {(labels.n + 1) / 2, labels.names};
        ReadOptions eval = o;
        eval.keep_unknown_labels = 1;
        if (dataset_load(path, &eval, v, &half, &dev, &err) == 0) {
            const int unknown = dataset_unknown_label_count(&dev);
            check_dataset(&dev, V, half.n + unknown);
            FUZZ_ASSERT(dev.n_known_label > 0 && dev.n_known_label + dev.n_unknown_label == dev.n);
            FUZZ_ASSERT((unknown > 0) == (dev.n_unknown_label > 0));
            dataset_free(&dev);
        } else {
            FUZZ_ASSERT(err.msg[0] != '\0');
        }

        Batcher b;
        memset(&b, 0, sizeof b);
        if (batcher_init(&b, &d, 3, 8, TRUNC_HEAD_TAIL, 1, 1, 7) == 0) {
            for (int epoch = 0; epoch < 2; epoch++) {
                batcher_start_epoch(&b, epoch, epoch == 0, 0);
                int seen = 0;
                const Batch *bt;
                while ((bt = batcher_next(&b)) != NULL) {
                    FUZZ_ASSERT(bt->B >= 1 && bt->B <= 3 && bt->T >= 1 && bt->T <= 8);
                    for (int i = 0; i < bt->B; i++) {
                        FUZZ_ASSERT(bt->lengths[i] >= 1 && bt->lengths[i] <= bt->T);
                        for (int t = 0; t < bt->T; t++) {
                            int32_t id = bt->ids[(size_t)i * bt->T + t];
                            FUZZ_ASSERT(id >= 0 && id < V);
                            FUZZ_ASSERT(t < bt->lengths[i] || id == VOCAB_PAD);
                        }
                    }
                    seen += bt->B;
                }
                FUZZ_ASSERT(seen == d.n);
            }
        }
        batcher_free(&b);
        dataset_free(&d);
        vocab_free(v);
        labelmap_free(&labels);
    }

    /* each line as mha-predict's streamed input (any format, the line modified in place) */
    char *copy = fuzz_string(data, size);
    char *line = copy, *next;
    int fmt = format;
    for (; line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        if (fmt == FORMAT_AUTO && line[0]) fmt = detect_format(line);
        char *label, *text;
        MhaError perr;
        if (parse_line(line, fmt, &label, &text, &perr) == 0) {
            FUZZ_ASSERT(text != NULL);
            FUZZ_ASSERT(strlen(text) <= size);
        }
    }
    free(copy);
    return 0;
}

#endif
