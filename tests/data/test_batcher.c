/* tests/data/test_batcher.c: batching invariants on a synthetic dataset: every example
 * once per epoch, padding after each length, determinism in (seed, epoch), resuming mid-epoch,
 * bucketing vs random padding, evaluation order, truncation, [CLS] and empty texts. */
#include <stdint.h>
#include <string.h>

#include "data/batcher.h"
#include "tests/test_util.h"

/* Example i has length len_of(i) and token t = 3 + (i * 31 + t) % 97. */
static int len_of(int i) { return i % 11 == 0 ? 0 : (int)((uint32_t)(i * 2654435761u) >> 7) % 300; }
static int32_t tok_of(int i, int t) { return 3 + (i * 31 + t) % 97; }

static void make_dataset(Dataset *d, int n) {
    memset(d, 0, sizeof *d);
    d->n = n;
    d->labels = malloc((size_t)n * sizeof *d->labels);
    d->line_no = malloc((size_t)n * sizeof *d->line_no);
    d->offsets = malloc(((size_t)n + 1) * sizeof *d->offsets);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += len_of(i);
    d->ids = malloc((size_t)(total ? total : 1) * sizeof *d->ids);
    d->offsets[0] = 0;
    for (int i = 0; i < n; i++) {
        d->labels[i] = i % 3;
        d->line_no[i] = i + 1;
        for (int t = 0; t < len_of(i); t++) d->ids[d->offsets[i] + t] = tok_of(i, t);
        d->offsets[i + 1] = d->offsets[i] + len_of(i);
    }
}

/* Run one epoch; check every batch; write the example order to `seen` (n entries).
 * Returns the number of batches. */
static int run_epoch(Batcher *b, int epoch, int shuffle, int start, int32_t *seen) {
    const Dataset *d = b->ds;
    batcher_start_epoch(b, epoch, shuffle, start);
    int nb = 0, at = 0, bad = 0;
    const Batch *bt;
    while ((bt = batcher_next(b)) != NULL) {
        nb++;
        int T = 0;
        long real = 0;
        for (int r = 0; r < bt->B; r++) {
            int i = bt->index[r], len = bt->lengths[r];
            if (len > T) T = len;
            real += len;
            bad += len < 1 || len > b->max_len || len != batcher_example_length(b, i);
            bad += bt->labels[r] != d->labels[i];
            const int32_t *row = bt->ids + (size_t)r * bt->T;
            for (int t = len; t < bt->T; t++) bad += row[t] != VOCAB_PAD;
            int k = 0;
            if (b->add_cls) bad += row[k++] != VOCAB_CLS;
            int raw = len_of(i), room = b->max_len - b->add_cls;
            if (raw == 0) {
                bad += row[k] != VOCAB_UNK;
            } else if (raw <= room || b->truncate == TRUNC_HEAD) {
                for (int t = 0; t < len - b->add_cls; t++) bad += row[k + t] != tok_of(i, t);
            } else {
                int head = (room + 1) / 2, tail = room - head;
                for (int t = 0; t < head; t++) bad += row[k + t] != tok_of(i, t);
                for (int t = 0; t < tail; t++) bad += row[k + head + t] != tok_of(i, raw - tail + t);
            }
            if (seen && at < d->n) seen[at++] = i;
        }
        bad += bt->T != T || bt->real_tokens != real;
        bad += bt->B < 1 || bt->B > b->batch_size;
    }
    CHECK(bad == 0, "epoch %d: %d bad values in batches", epoch, bad);
    return nb;
}

static int once_each(const int32_t *seen, int n) {
    char *hit = calloc((size_t)n, 1);
    int ok = 1;
    for (int k = 0; k < n; k++) {
        if (seen[k] < 0 || seen[k] >= n || hit[seen[k]]) ok = 0;
        else hit[seen[k]] = 1;
    }
    free(hit);
    return ok;
}

static void test_epochs(const Dataset *d) {
    int n = d->n;
    int32_t *a = malloc((size_t)n * sizeof *a), *c = malloc((size_t)n * sizeof *c);
    for (int bucket = 0; bucket <= 1; bucket++) {
        Batcher b1, b2;
        CHECK(batcher_init(&b1, d, 32, 128, TRUNC_HEAD, 0, bucket, 7) == 0, "init");
        CHECK(batcher_init(&b2, d, 32, 128, TRUNC_HEAD, 0, bucket, 7) == 0, "init");
        int nb = run_epoch(&b1, 0, 1, 0, a);
        CHECK(nb == (n + 31) / 32 && b1.n_batches == nb, "bucket %d: %d batches", bucket, nb);
        CHECK(once_each(a, n), "bucket %d: every example exactly once", bucket);
        run_epoch(&b2, 0, 1, 0, c);
        CHECK(memcmp(a, c, (size_t)n * sizeof *a) == 0, "same (seed, epoch) -> same order");
        run_epoch(&b2, 1, 1, 0, c);
        CHECK(once_each(c, n), "epoch 1: every example once");
        CHECK(memcmp(a, c, (size_t)n * sizeof *a) != 0, "a different epoch has another order");
        run_epoch(&b1, 1, 1, 0, a);
        CHECK(memcmp(a, c, (size_t)n * sizeof *a) == 0, "epoch 1 again: same order");

        /* all but the last batch are full */
        batcher_start_epoch(&b1, 3, 1, 0);
        int small = 0;
        for (int k = 0; k < b1.n_batches; k++) {
            int B = b1.batch_start[k + 1] - b1.batch_start[k];
            small += B != 32 && k != b1.n_batches - 1;
        }
        CHECK(small == 0, "only the last batch may be smaller");

        /* resume mid-epoch: batches from start_batch on are identical */
        run_epoch(&b1, 2, 1, 0, a);
        int start = 17, skipped = start * 32;
        int nb2 = run_epoch(&b2, 2, 1, start, c);
        CHECK(nb2 == nb - start, "resumed epoch has %d batches, expected %d", nb2, nb - start);
        CHECK(memcmp(a + skipped, c, (size_t)(n - skipped) * sizeof *a) == 0, "resume is identical");
        batcher_start_epoch(&b2, 2, 1, nb + 5);
        CHECK(batcher_next(&b2) == NULL, "start past the end: no batches");
        batcher_free(&b1);
        batcher_free(&b2);
    }
    /* a different seed gives another order */
    Batcher b1, b2;
    batcher_init(&b1, d, 32, 128, TRUNC_HEAD, 0, 1, 7);
    batcher_init(&b2, d, 32, 128, TRUNC_HEAD, 0, 1, 8);
    run_epoch(&b1, 0, 1, 0, a);
    run_epoch(&b2, 0, 1, 0, c);
    CHECK(memcmp(a, c, (size_t)n * sizeof *a) != 0, "another seed, another order");
    batcher_free(&b1);
    batcher_free(&b2);
    free(a);
    free(c);
}

static void test_padding_and_eval(const Dataset *d) {
    int n = d->n;
    Batcher bk, br;
    batcher_init(&bk, d, 32, 128, TRUNC_HEAD, 0, 1, 1);
    batcher_init(&br, d, 32, 128, TRUNC_HEAD, 0, 0, 1);
    double pk = batcher_padding_fraction(&bk), pr = batcher_padding_fraction(&br);
    printf("padding: bucketed %.3f, random %.3f\n", pk, pr);
    CHECK(pk < pr && pk < 0.05 && pr > 0.1, "bucketing pads less: %.3f vs %.3f", pk, pr);

    /* padding fraction agrees with the batches themselves */
    double all = 0, real = 0;
    const Batch *bt;
    batcher_start_epoch(&br, 0, 1, 0);
    while ((bt = batcher_next(&br)) != NULL) {
        all += (double)bt->B * bt->T;
        real += (double)bt->real_tokens;
    }
    CHECK(fabs((all - real) / all - pr) < 1e-12, "padding fraction %.6f vs batches %.6f", pr, (all - real) / all);

    /* evaluation: sorted by length, deterministic; without bucketing in file order */
    int32_t *a = malloc((size_t)n * sizeof *a);
    run_epoch(&bk, 0, 0, 0, a);
    int sorted = 1;
    for (int k = 1; k < n; k++) {
        int l0 = batcher_example_length(&bk, a[k - 1]), l1 = batcher_example_length(&bk, a[k]);
        sorted &= l0 < l1 || (l0 == l1 && a[k - 1] < a[k]);
    }
    CHECK(sorted && once_each(a, n), "evaluation order sorted by (length, index)");
    CHECK(batcher_padding_fraction(&bk) < pk, "evaluation layout pads least");
    run_epoch(&br, 0, 0, 0, a);
    int inorder = 1;
    for (int k = 0; k < n; k++) inorder &= a[k] == k;
    CHECK(inorder, "no bucketing, no shuffle: file order");
    free(a);
    batcher_free(&bk);
    batcher_free(&br);
}

/* batcher_set_max_tokens: evaluation batches within B x T <= cap (one long example alone may
 * exceed it), at most batch_size examples, the same sorted order as without the cap, each
 * batch as full as the cap allows (the next example would break it); training epochs and a
 * cap of 0 keep batch_size cuts. */
static void test_max_tokens(const Dataset *d) {
    const int n = d->n, caps[3] = {300, 1000, 2500};
    Batcher b;
    int32_t *a = malloc((size_t)n * sizeof *a), *ref = malloc((size_t)n * sizeof *ref);
    batcher_init(&b, d, 32, 128, TRUNC_HEAD, 0, 1, 1);
    const int nb_plain = run_epoch(&b, 0, 0, 0, ref);
    for (int ci = 0; ci < 3; ci++) {
        const long cap = caps[ci];
        batcher_set_max_tokens(&b, cap);
        const int nb = run_epoch(&b, 0, 0, 0, a);
        int over = 0, big = 0, not_full = 0, count = 0;
        const Batch *bt;
        batcher_start_epoch(&b, 0, 0, 0);
        while ((bt = batcher_next(&b)) != NULL) {
            count++;
            over += bt->B > 1 && (long)bt->B * bt->T > cap;
            big += bt->B > 32;
            /* the next batch's first example would have fitted here: not greedy */
            const int at = b.batch_start[b.pos];
            if (b.pos < b.n_batches && bt->B < 32) {
                int next_len = batcher_example_length(&b, b.order[at]);
                not_full += (long)(bt->B + 1) * next_len <= cap;
            }
        }
        char what[96];
        snprintf(what, sizeof what, "max_tokens %ld: %d batches (%d without), B x T within it, greedy", cap,
                 nb, nb_plain);
        CHECK(count == nb && over == 0 && big == 0 && not_full == 0 && nb > nb_plain,
              "%s (over %d, more than 32 %d, not full %d)", what, over, big, not_full);
        printf("%s\n", what);
        CHECK(memcmp(a, ref, (size_t)n * sizeof *a) == 0 && once_each(a, n),
              "max_tokens %ld: the same sorted order", cap);
    }
    /* shuffled (training) epochs ignore it; 0 removes it */
    const int nb_train = run_epoch(&b, 1, 1, 0, a);
    CHECK(nb_train == (n + 31) / 32, "max_tokens: a training epoch still has %d batches of 32 (%d)",
          (n + 31) / 32, nb_train);
    batcher_set_max_tokens(&b, 0);
    CHECK(run_epoch(&b, 0, 0, 0, a) == nb_plain, "max_tokens 0: batches of batch_size again");
    batcher_free(&b);
    free(a);
    free(ref);
}

static void test_truncation(const Dataset *d) {
    /* example 1 has len_of(1) tokens; make sure it is long */
    int i = 1;
    while (len_of(i) < 50) i++;
    int raw = len_of(i);
    struct { int max_len, trunc, cls; } cases[] = {
        {10, TRUNC_HEAD, 0}, {10, TRUNC_HEAD_TAIL, 0}, {11, TRUNC_HEAD_TAIL, 0},
        {11, TRUNC_HEAD_TAIL, 1}, {10, TRUNC_HEAD, 1}, {1, TRUNC_HEAD_TAIL, 0}, {2, TRUNC_HEAD_TAIL, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        Batcher b;
        CHECK(batcher_init(&b, d, 4, cases[c].max_len, cases[c].trunc, cases[c].cls, 1, 3) == 0, "init");
        CHECK(batcher_example_length(&b, i) == cases[c].max_len, "case %zu: length", c);
        CHECK(batcher_example_length(&b, 0) == 1 + cases[c].cls, "case %zu: empty text -> [UNK]", c);
        run_epoch(&b, 0, 1, 0, NULL);   /* checks contents of every row */
        batcher_free(&b);
    }
    /* explicit values for one case: max_len 11, head_tail, CLS: CLS + 5 head + 5 tail */
    Dataset one;
    memset(&one, 0, sizeof one);
    int32_t ids[20], lab = 0, line = 1;
    int64_t off[2] = {0, 20};
    for (int t = 0; t < 20; t++) ids[t] = 100 + t;
    one.n = 1; one.ids = ids; one.offsets = off; one.labels = &lab; one.line_no = &line;
    Batcher b;
    batcher_init(&b, &one, 8, 11, TRUNC_HEAD_TAIL, 1, 1, 0);
    const Batch *bt = batcher_next(&b);
    const int32_t want[11] = {VOCAB_CLS, 100, 101, 102, 103, 104, 115, 116, 117, 118, 119};
    CHECK(bt && bt->B == 1 && bt->T == 11 && memcmp(bt->ids, want, sizeof want) == 0, "CLS + head 5 + tail 5");
    batcher_free(&b);
    batcher_init(&b, &one, 8, 7, TRUNC_HEAD_TAIL, 0, 1, 0);
    bt = batcher_next(&b);
    const int32_t want7[7] = {100, 101, 102, 103, 117, 118, 119};
    CHECK(bt && bt->T == 7 && memcmp(bt->ids, want7, sizeof want7) == 0, "head ceil(7/2)=4, tail 3");
    batcher_free(&b);
    batcher_init(&b, &one, 8, 7, TRUNC_HEAD, 1, 1, 0);
    bt = batcher_next(&b);
    const int32_t wanth[7] = {VOCAB_CLS, 100, 101, 102, 103, 104, 105};
    CHECK(bt && memcmp(bt->ids, wanth, sizeof wanth) == 0, "CLS + head 6");
    batcher_free(&b);
    (void)raw;
}

static void test_edges(const Dataset *d) {
    Batcher b;
    CHECK(batcher_init(&b, d, 0, 10, TRUNC_HEAD, 0, 1, 0) == MHA_EXIT_USAGE, "batch_size 0");
    CHECK(batcher_init(&b, d, 4, 1, TRUNC_HEAD, 1, 1, 0) == MHA_EXIT_USAGE, "max_len too small for CLS");
    CHECK(batcher_init(&b, d, 4, 10, 7, 0, 1, 0) == MHA_EXIT_USAGE, "bad truncate");
    Dataset empty;
    memset(&empty, 0, sizeof empty);
    int64_t off0 = 0;
    empty.offsets = &off0;
    CHECK(batcher_init(&b, &empty, 4, 10, TRUNC_HEAD, 0, 1, 0) == 0 && b.n_batches == 0, "empty dataset");
    CHECK(batcher_next(&b) == NULL && batcher_padding_fraction(&b) == 0.0, "no batches");
    batcher_free(&b);
    /* batch larger than the dataset */
    int32_t *seen = malloc((size_t)d->n * sizeof *seen);
    CHECK(batcher_init(&b, d, 100000, 64, TRUNC_HEAD, 1, 1, 5) == 0, "huge batch");
    CHECK(run_epoch(&b, 0, 1, 0, seen) == 1 && once_each(seen, d->n), "one batch holds everything");
    batcher_free(&b);
    free(seen);
}

/* Bucketed, with n a multiple of the batch size (no smaller batch kept last): the full batches
 * are shuffled all of them, so the batch of the longest texts (the last one sorted) lands in
 * different places over the epochs, not always last. */
static void test_bucket_shuffle_reaches_every_batch(void) {
    Dataset d;
    make_dataset(&d, 32 * 20);
    Batcher b;
    CHECK(batcher_init(&b, &d, 32, 512, TRUNC_HEAD, 0, 1, 3) == 0, "init");
    int last_count = 0, epochs = 20;
    for (int e = 0; e < epochs; e++) {
        batcher_start_epoch(&b, e, 1, 0);
        int k = 0, longest_at = -1, longest_T = -1;
        const Batch *bt;
        while ((bt = batcher_next(&b)) != NULL) {
            if (bt->T > longest_T) { longest_T = bt->T; longest_at = k; }
            k++;
        }
        last_count += longest_at == k - 1;
    }
    CHECK(last_count < epochs / 2, "the batch of the longest texts came last in %d of %d epochs", last_count, epochs);
    batcher_free(&b);
    dataset_free(&d);
}

int main(void) {
    test_bucket_shuffle_reaches_every_batch();
    Dataset d;
    make_dataset(&d, 5003);
    test_epochs(&d);
    test_padding_and_eval(&d);
    test_max_tokens(&d);
    test_truncation(&d);
    test_edges(&d);
    dataset_free(&d);
    return test_finish("test_batcher");
}
