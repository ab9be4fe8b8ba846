/* tests/fuzz/fuzz_tokenizer.c: arbitrary bytes through the tokenizer and the UTF-8 helpers.
 * The first byte picks the options (bit 0 nfkc, bit 1 casefold, bit 2 replace_invalid);
 * the rest is the text. Invariants: tokens lie inside the normalised text, are non-empty
 * and in order; the normalised text is valid UTF-8; invalid input is an error exactly when
 * replace_invalid is off; utf8_replace_invalid always yields valid UTF-8 of <= 3n bytes. */
#include "data/tokenizer.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    TokenizerOptions o;
    o.nfkc = data[0] & 1;
    o.casefold = (data[0] >> 1) & 1;
    o.replace_invalid = (data[0] >> 2) & 1;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;

    size_t bad = utf8_check(s, n);
    FUZZ_ASSERT(bad <= n);
    char *fixed = malloc(3 * n + 1);
    if (!fixed) return 0;
    size_t m = utf8_replace_invalid(s, n, fixed, (data[0] >> 3) & 1);
    FUZZ_ASSERT(m <= 3 * n);
    FUZZ_ASSERT(utf8_check(fixed, m) == m);
    if (bad == n && !((data[0] >> 3) & 1)) FUZZ_ASSERT(m == n && memcmp(fixed, s, n) == 0);
    free(fixed);

    TokenList t;
    memset(&t, 0, sizeof t);
    MhaError err;
    int rc = tokenize(&o, s, n, &t, &err);
    if (bad < n && !o.replace_invalid) {
        FUZZ_ASSERT(rc != 0);
    } else {
        FUZZ_ASSERT(rc == 0);
        FUZZ_ASSERT(utf8_check(t.text, t.text_len) == t.text_len);
        FUZZ_ASSERT(t.text[t.text_len] == '\0');
        int prev_end = 0;
        for (int i = 0; i < t.n; i++) {
            FUZZ_ASSERT(t.len[i] > 0);
            FUZZ_ASSERT(t.start[i] >= prev_end);
            FUZZ_ASSERT((size_t)t.start[i] + (size_t)t.len[i] <= t.text_len);
            FUZZ_ASSERT(utf8_check(t.text + t.start[i], (size_t)t.len[i]) == (size_t)t.len[i]);
            prev_end = t.start[i] + t.len[i];
        }
        /* the TokenList is reused across calls: a second text must not see the first */
        int n1 = t.n;
        FUZZ_ASSERT(tokenize(&o, "", 0, &t, &err) == 0 && t.n == 0 && t.text_len == 0);
        (void)n1;
    }
    token_list_free(&t);
    return 0;
}
