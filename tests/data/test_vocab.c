/* tests/data/test_vocab.c: counting, min_count, max_size, the deterministic id order,
 * reserved ids, lookups, serialisation round trip and rejection of malformed blobs. */
#include <stdint.h>
#include <string.h>

#include "data/vocab.h"
#include "tests/test_util.h"

static void add_n(VocabCounter *c, const char *tok, int n) {
    for (int i = 0; i < n; i++) vocab_counter_add(c, tok, (int)strlen(tok));
}

static int32_t look(const Vocab *v, const char *tok) { return vocab_lookup(v, tok, (int)strlen(tok)); }

/* The counter used by several checks: counts 5,5,5,3,3,2,1,1. */
static VocabCounter *sample(int reversed) {
    static const char *const toks[] = {"b", "ab", "a", "好", "z", "abc", "x", "[CLS]"};
    static const int counts[] = {5, 5, 5, 3, 3, 2, 1, 1};
    VocabCounter *c = vocab_counter_new();
    for (int k = 0; k < 8; k++) {
        int i = reversed ? 7 - k : k;
        add_n(c, toks[i], counts[i]);
    }
    return c;
}

static void test_build(void) {
    VocabCounter *c = sample(0);
    CHECK(vocab_counter_size(c) == 8, "8 distinct tokens, got %d", vocab_counter_size(c));
    int len;
    long count;
    const char *t = vocab_counter_token(c, 3, &len, &count);
    CHECK(t && strcmp(t, "好") == 0 && len == 3 && count == 3, "counter entry 3: %s %d %ld", t, len, count);
    CHECK(vocab_counter_intern(c, "ab", 2) == 1 && vocab_counter_intern(c, "new", 3) == 8,
          "intern returns the first-occurrence index");

    /* ab now 6 */
    Vocab *v = vocab_build(c, 1, 0);
    CHECK(v != NULL, "build");
    const char *want[] = {"[PAD]", "[UNK]", "[CLS]", "ab", "a", "b", "z", "好", "abc", "new", "x"};
    int nw = (int)(sizeof want / sizeof *want);
    CHECK(vocab_size(v) == nw, "size %d, expected %d (the counter's [CLS] is not added twice)",
          vocab_size(v), nw);
    for (int i = 0; i < nw && i < vocab_size(v); i++)
        CHECK(strcmp(vocab_token(v, i), want[i]) == 0, "id %d is '%s', expected '%s'", i,
              vocab_token(v, i), want[i]);
    CHECK(look(v, "[PAD]") == VOCAB_PAD && look(v, "[UNK]") == VOCAB_UNK && look(v, "[CLS]") == VOCAB_CLS,
          "reserved ids");
    CHECK(look(v, "missing") == VOCAB_UNK && look(v, "") == VOCAB_UNK && look(v, "a ") == VOCAB_UNK,
          "absent -> UNK");
    CHECK(vocab_lookup(v, "abc", 2) == look(v, "ab"), "lookup uses the length, not the NUL");
    CHECK(vocab_token(v, -1) == NULL && vocab_token(v, nw) == NULL, "out-of-range id");
    vocab_free(v);

    v = vocab_build(c, 3, 0);   /* count >= 3 */
    CHECK(v && vocab_size(v) == 8, "min_count 3: size %d", v ? vocab_size(v) : -1);
    CHECK(look(v, "abc") == VOCAB_UNK && look(v, "好") == 7, "min_count drops abc, keeps 好");
    vocab_free(v);

    v = vocab_build(c, 1, 6);   /* reserved + 3 */
    CHECK(v && vocab_size(v) == 6, "max_size 6: size %d", v ? vocab_size(v) : -1);
    CHECK(look(v, "b") == 5 && look(v, "z") == VOCAB_UNK, "max_size keeps the most frequent");
    vocab_free(v);

    v = vocab_build(c, 1, 2);   /* smaller than the reserved ids */
    CHECK(v && vocab_size(v) == VOCAB_RESERVED, "max_size 2 keeps only the reserved ids");
    vocab_free(v);

    v = vocab_build(c, 100, 0);
    CHECK(v && vocab_size(v) == VOCAB_RESERVED, "min_count above every count");
    vocab_free(v);
    vocab_counter_free(c);

    /* insertion order does not matter */
    VocabCounter *c1 = sample(0), *c2 = sample(1);
    Vocab *v1 = vocab_build(c1, 1, 0), *v2 = vocab_build(c2, 1, 0);
    unsigned char *b1 = NULL, *b2 = NULL;
    size_t n1 = 0, n2 = 1;
    CHECK(vocab_serialize(v1, &b1, &n1) == 0 && vocab_serialize(v2, &b2, &n2) == 0, "serialize");
    CHECK(n1 == n2 && memcmp(b1, b2, n1) == 0, "same vocabulary from either insertion order");
    free(b1);
    free(b2);
    vocab_free(v1);
    vocab_free(v2);
    vocab_counter_free(c1);
    vocab_counter_free(c2);
}

static void test_many(void) {
    /* growth of both hash tables; ties broken by bytes */
    VocabCounter *c = vocab_counter_new();
    char tok[32];
    for (int i = 0; i < 100000; i++) {
        int n = snprintf(tok, sizeof tok, "t%d", i);
        vocab_counter_add(c, tok, n);
        if (i % 7 == 0) vocab_counter_add(c, tok, n);
    }
    Vocab *v = vocab_build(c, 1, 0);
    CHECK(v && vocab_size(v) == 100003, "size %d", v ? vocab_size(v) : -1);
    CHECK(look(v, "t0") == 3 && look(v, "t10003") == 4 && look(v, "t1") == 3 + 14286,
          "count 2 first, then by bytes: %d %d %d", look(v, "t0"), look(v, "t10003"), look(v, "t1"));
    int order_bad = 0;
    for (int id = 4; v && id < vocab_size(v); id++) {
        const char *p = vocab_token(v, id - 1), *q = vocab_token(v, id);
        int gp = atoi(p + 1) % 7 == 0, gq = atoi(q + 1) % 7 == 0;
        order_bad += gp < gq || (gp == gq && strcmp(p, q) >= 0);
    }
    CHECK(order_bad == 0, "%d neighbours out of order", order_bad);
    int bad = 0;
    for (int i = 0; i < 100000; i++) {
        int n = snprintf(tok, sizeof tok, "t%d", i);
        int32_t id = vocab_lookup(v, tok, n);
        bad += id < 3 || strcmp(vocab_token(v, id), tok) != 0;
    }
    CHECK(bad == 0, "%d lookups wrong", bad);
    vocab_free(v);
    vocab_counter_free(c);
}

static int rejects(const unsigned char *b, size_t n, const char *needle) {
    Vocab *v = (Vocab *)1;
    MhaError err = {0, ""};
    int rc = vocab_deserialize(&v, b, n, &err);
    if (rc == 0) {
        vocab_free(v);
        return 0;
    }
    if (v != NULL || err.code != MHA_EXIT_DATA) return 0;
    if (needle && !strstr(err.msg, needle)) {
        fprintf(stderr, "message '%s' lacks '%s'\n", err.msg, needle);
        return 0;
    }
    return 1;
}

static void test_serialize(void) {
    VocabCounter *c = sample(0);
    Vocab *v = vocab_build(c, 1, 0);
    unsigned char *b;
    size_t n;
    CHECK(vocab_serialize(v, &b, &n) == 0, "serialize");
    CHECK(n >= 4 && b[0] == (unsigned char)vocab_size(v) && b[1] == 0 && b[4] == 5 && b[5] == 0 &&
              memcmp(b + 8, "[PAD]", 5) == 0,
          "layout: u32 count, u32 length, bytes (little-endian)");
    Vocab *w = NULL;
    MhaError err;
    CHECK(vocab_deserialize(&w, b, n, &err) == 0, "round trip: %s", err.msg);
    if (w) {
        CHECK(vocab_size(w) == vocab_size(v), "same size");
        for (int i = 0; i < vocab_size(v); i++) {
            CHECK(strcmp(vocab_token(v, i), vocab_token(w, i)) == 0, "token %d", i);
            CHECK(look(w, vocab_token(v, i)) == i, "lookup %d", i);
        }
        vocab_free(w);
    }

    /* every truncation is rejected (ASan would see an out-of-bounds read) */
    int ok = 1;
    for (size_t k = 0; k < n; k++) {
        unsigned char *cut = malloc(k ? k : 1);
        memcpy(cut, b, k);
        ok &= rejects(cut, k, NULL);
        free(cut);
    }
    CHECK(ok, "a truncated blob is rejected");
    CHECK(rejects(b, 3, "truncated"), "3-byte blob");

    unsigned char *x = malloc(n + 1);
    memcpy(x, b, n);
    x[n] = 0;
    CHECK(rejects(x, n + 1, "after its"), "trailing byte");
    memcpy(x, b, n);
    x[0] = 0xFF; x[1] = 0xFF; x[2] = 0xFF; x[3] = 0x7F;
    CHECK(rejects(x, n, "declares"), "huge count is rejected before allocating");
    memcpy(x, b, n);
    x[4] = 0xF0; x[7] = 0x10;
    CHECK(rejects(x, n, "declares"), "huge token length");
    memcpy(x, b, n);
    x[0] = 2;
    CHECK(rejects(x, n, "reserved"), "fewer tokens than reserved");
    memcpy(x, b, n);
    x[9] = 'X';   /* [PAD] -> [XAD] */
    CHECK(rejects(x, n, "[PAD]"), "first token must be [PAD]");
    memcpy(x, b, n);
    x[9] = 0;
    CHECK(rejects(x, n, "NUL"), "NUL inside a token");
    free(x);

    /* duplicate token: [PAD] [UNK] [CLS] a a */
    const unsigned char dup[] = {5, 0, 0, 0, 5, 0, 0, 0, '[', 'P', 'A', 'D', ']', 5, 0, 0, 0,
                                 '[', 'U', 'N', 'K', ']', 5, 0, 0, 0, '[', 'C', 'L', 'S', ']',
                                 1, 0, 0, 0, 'a', 1, 0, 0, 0, 'a'};
    CHECK(rejects(dup, sizeof dup, "twice"), "duplicate token");
    const unsigned char zero[] = {4, 0, 0, 0, 5, 0, 0, 0, '[', 'P', 'A', 'D', ']', 5, 0, 0, 0,
                                  '[', 'U', 'N', 'K', ']', 5, 0, 0, 0, '[', 'C', 'L', 'S', ']',
                                  0, 0, 0, 0};
    CHECK(rejects(zero, sizeof zero, NULL), "empty token");
    unsigned char four[sizeof dup - 5];
    memcpy(four, dup, sizeof four);
    four[0] = 4;
    Vocab *ok3 = NULL;
    CHECK(vocab_deserialize(&ok3, four, sizeof four, &err) == 0 && ok3 && vocab_size(ok3) == 4 &&
              look(ok3, "a") == 3,
          "the same blob without the duplicate loads");
    vocab_free(ok3);

    free(b);
    vocab_free(v);
    vocab_counter_free(c);
}

int main(void) {
    test_build();
    test_many();
    test_serialize();
    return test_finish("test_vocab");
}
