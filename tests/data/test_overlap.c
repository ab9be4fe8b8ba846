/* tests/data/test_overlap.c: dataset_overlap (data/overlap.c) against a brute-force count, on
 * datasets built with dataset_append: exact copies with the same and with another label,
 * prefixes and extensions (not copies), a reversed text, texts without tokens (never repeats,
 * in train and in dev), many copies of one text
 * in train (kept once); dataset_repeats against its brute-force definition on the same sets;
 * then random datasets over a 3-token alphabet, where copies are common; the notes' 1%
 * threshold. Built twice: as is, and with the hash cut to 2 bits (data_overlap_collide), where
 * distinct texts share hashes. */
#include <stdlib.h>
#include "data/overlap.h"
#include "tests/test_util.h"

static void add(Dataset *d, int label, const int32_t *toks, int n) {
    int32_t *ids = NULL;
    MhaError err;
    if (dataset_append(d, label, d->n + 1, n, &ids, "test", &err) != 0) {
        fprintf(stderr, "dataset_append: %s\n", err.msg);
        exit(1);
    }
    for (int i = 0; i < n; i++) ids[i] = toks[i];
}

static int same(const Dataset *a, int i, const Dataset *b, int j) {
    int64_t n = a->offsets[i + 1] - a->offsets[i];
    if (n != b->offsets[j + 1] - b->offsets[j]) return 0;
    for (int64_t k = 0; k < n; k++)
        if (a->ids[a->offsets[i] + k] != b->ids[b->offsets[j] + k]) return 0;
    return 1;
}

/* The definition, in O(n m). */
static Overlap brute(const Dataset *train, const Dataset *other) {
    Overlap o = {0, 0};
    for (int e = 0; e < other->n; e++) {
        int shared = 0, labelled = 0;
        if (other->offsets[e + 1] == other->offsets[e]) continue;   /* no tokens: never a repeat */
        for (int t = 0; t < train->n; t++)
            if (same(train, t, other, e)) {
                shared = 1;
                labelled |= train->labels[t] == other->labels[e];
            }
        o.shared += shared;
        o.same_label += labelled;
    }
    return o;
}

/* The definition of dataset_repeats, in O(n^2). */
static Repeats brute_repeats(const Dataset *d) {
    Repeats r = {0, 0};
    for (int i = 0; i < d->n; i++) {
        int first = 1, conflict = 0;
        if (d->offsets[i + 1] == d->offsets[i]) continue;   /* no tokens: never a repeat */
        for (int j = 0; j < i && first; j++) first = !same(d, j, d, i);
        if (!first) {
            r.repeats++;
            continue;
        }
        for (int j = i + 1; j < d->n; j++) conflict |= same(d, j, d, i) && d->labels[j] != d->labels[i];
        r.conflicting += conflict;
    }
    return r;
}

static void check_repeats(const char *what, const Dataset *d, long repeats, long conflicting) {
    Repeats r, b = brute_repeats(d);
    CHECK(dataset_repeats(d, &r) == 0, "%s: out of memory", what);
    CHECK(r.repeats == b.repeats && r.conflicting == b.conflicting, "%s: repeats %ld/%ld, brute force %ld/%ld", what,
          r.repeats, r.conflicting, b.repeats, b.conflicting);
    if (repeats >= 0)
        CHECK(r.repeats == repeats && r.conflicting == conflicting, "%s: repeats %ld/%ld, expected %ld/%ld", what,
              r.repeats, r.conflicting, repeats, conflicting);
}

static void check_case(const char *what, const Dataset *train, const Dataset *other, long shared, long same_label) {
    Overlap o, b = brute(train, other);
    CHECK(dataset_overlap(train, other, &o) == 0, "%s: out of memory", what);
    CHECK(o.shared == b.shared && o.same_label == b.same_label, "%s: %ld/%ld, brute force %ld/%ld", what, o.shared,
          o.same_label, b.shared, b.same_label);
    if (shared >= 0)
        CHECK(o.shared == shared && o.same_label == same_label, "%s: %ld/%ld, expected %ld/%ld", what, o.shared,
              o.same_label, shared, same_label);
}

int main(void) {
    Dataset train = {0}, dev = {0};
    const int32_t a[] = {5, 6, 7}, b[] = {5, 6}, c[] = {5, 6, 7, 8}, d[] = {9}, e[] = {7, 6, 5};
    add(&train, 0, a, 3);
    add(&train, 1, d, 1);
    for (int i = 0; i < 1000; i++) add(&train, 2, e, 3);   /* many copies: one entry */
    add(&train, 3, e, 3);                                   /* the same text, another label */
    add(&train, 0, NULL, 0);                                /* no tokens (a text of format characters) */
    add(&train, 1, NULL, 0);                                /* ... twice: not a repeat */
    add(&dev, 0, a, 3);   /* copy, same label */
    add(&dev, 0, (const int32_t[]){7, 6, 5, 4}, 4);   /* not a copy of e */
    add(&dev, 1, a, 3);   /* copy, another label */
    add(&dev, 0, b, 2);   /* a prefix: not a copy */
    add(&dev, 0, c, 4);   /* an extension: not a copy */
    add(&dev, 0, NULL, 0);   /* empty text: no repeat, though train has one */
    add(&dev, 3, e, 3);   /* copy whose label one of the training copies has */
    add(&dev, 0, e, 3);   /* copy with a label none has */
    add(&dev, 1, d, 1);   /* copy, same label */
    check_case("hand-made", &train, &dev, 5, 3);
    check_repeats("hand-made train", &train, 1000, 1);   /* e: 1001 copies, labels 2 and 3 */
    check_repeats("hand-made dev", &dev, 2, 2);          /* a twice (labels 0, 1), e twice (3, 0) */
    Dataset empty = {0};
    check_case("empty other", &train, &empty, 0, 0);
    check_case("empty train", &empty, &dev, 0, 0);
    dataset_free(&train);
    dataset_free(&dev);

    /* random texts of 1..3 tokens over {1, 2, 3}: 39 distinct texts, so most repeat */
    srand(7);
    for (int round = 0; round < 20; round++) {
        Dataset tr = {0}, ot = {0};
        int32_t t[3];
        for (int i = 0; i < 300; i++) {
            int n = 1 + rand() % 3;
            for (int k = 0; k < n; k++) t[k] = 1 + rand() % 3;
            add(&tr, rand() % 3, t, n);
        }
        for (int i = 0; i < 100; i++) {
            int n = 1 + rand() % 3;
            for (int k = 0; k < n; k++) t[k] = 1 + rand() % 3;
            add(&ot, rand() % 3, t, n);
        }
        check_case("random", &tr, &ot, -1, -1);
        check_repeats("random", &tr, -1, -1);
        dataset_free(&tr);
        dataset_free(&ot);
    }
    /* the notes' threshold: 1% or more */
    CHECK(overlap_noteworthy(1, 100) && !overlap_noteworthy(1, 101) && !overlap_noteworthy(0, 0) &&
              !overlap_noteworthy(0, 5) && overlap_noteworthy(2147483647L, 2147483647L),
          "overlap_noteworthy");
    if (test_failures) return 1;
    printf("all checks passed\n");
    return 0;
}
