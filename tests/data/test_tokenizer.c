/* tests/data/test_tokenizer.c: token splitting, NFKC / case folding, invalid UTF-8, and
 * the fast path's normalised text against utf8proc_map for every BMP character in
 * tricky contexts and for random strings of tricky characters. */
#include <stdint.h>
#include <string.h>
#include <utf8proc.h>

#include "data/tokenizer.h"
#include "tests/test_util.h"

static TokenList tl;

/* Tokens joined with '|' ("ERR: msg" on failure). */
static const char *toks(const TokenizerOptions *o, const char *s, size_t n) {
    static char buf[4096];
    MhaError err;
    if (tokenize(o, s, n, &tl, &err)) {
        snprintf(buf, sizeof buf, "ERR: %s", err.msg);
        return buf;
    }
    size_t w = 0;
    buf[0] = '\0';
    for (int i = 0; i < tl.n && w + (size_t)tl.len[i] + 2 < sizeof buf; i++) {
        if (i) buf[w++] = '|';
        memcpy(buf + w, tl.text + tl.start[i], (size_t)tl.len[i]);
        w += (size_t)tl.len[i];
    }
    buf[w] = '\0';
    return buf;
}

#define EXPECT(o, in, want)                                                      \
    do {                                                                         \
        const char *got_ = toks(o, in, strlen(in));                              \
        CHECK(strcmp(got_, want) == 0, "'%s' -> '%s', expected '%s'", in, got_, want); \
    } while (0)

static int set(TokenizerOptions *o, int nfkc, int casefold, int replace) {
    o->nfkc = nfkc;
    o->casefold = casefold;
    o->replace_invalid = replace;
    return 0;
}

static void test_cases(void) {
    TokenizerOptions d, o;
    tokenizer_options_default(&d);
    CHECK(d.nfkc == 1 && d.casefold == 1 && d.replace_invalid == 0, "defaults");

    EXPECT(&d, "我爱NLP2024😀！", "我|爱|nlp|2024|😀|!");
    EXPECT(&d, "ＡＢＣ１２３", "abc|123");
    EXPECT(&d, "ｶ", "カ");
    EXPECT(&d, "ｶﾞｷﾞ", "ガ|ギ");            /* half-width kana + voiced mark compose */
    EXPECT(&d, "①", "1");
    EXPECT(&d, "①②", "12");                 /* NFKC first, then a digit run */
    EXPECT(&d, "㎏", "kg");
    EXPECT(&d, "ﬁne", "fine");
    EXPECT(&d, "Straße", "strasse");
    EXPECT(&d, "Café naïve", "café|naïve");
    EXPECT(&d, "Cafe\xCC\x81", "café");          /* e + U+0301 composes */
    CHECK(tl.n == 1 && tl.len[0] == 5, "composed café is 5 bytes, got %d", tl.n ? tl.len[0] : -1);
    EXPECT(&d, "İstanbul", "i̇stanbul");          /* the combining dot stays in the word */
    EXPECT(&d, "ΣΊΣΥΦΟΣ", "σίσυφοσ");
    EXPECT(&d, "don't stop", "don|'|t|stop");
    EXPECT(&d, "3.14%", "3|.|14|%");
    EXPECT(&d, "abc123def", "abc|123|def");
    EXPECT(&d, "a\tb\r\nc  d\xE3\x80\x80" "e\xC2\xA0" "f", "a|b|c|d|e|f");
    EXPECT(&d, "\xEF\xBB\xBFhello", "hello");   /* BOM */
    EXPECT(&d, "hi\r\n", "hi");                 /* CRLF */
    EXPECT(&d, "zero\xE2\x80\x8Bwidth", "zero|width");
    EXPECT(&d, "❤️👍", "❤|👍");                  /* variation selector dropped */
    EXPECT(&d, "👨‍👩‍👧", "👨|👩|👧");
    EXPECT(&d, "한국어", "한|국|어");
    EXPECT(&d, "ひらがなカタカナー", "ひ|ら|が|な|カ|タ|カ|ナ|ー");
    EXPECT(&d, "𠀀𠀁", "𠀀|𠀁");                    /* CJK extension B */
    EXPECT(&d, "Привет мир", "привет|мир");
    EXPECT(&d, "٣٤٥ab", "٣٤٥|ab");
    EXPECT(&d, "，。、《》", ",|。|、|《|》");
    EXPECT(&d, "", "");
    CHECK(tl.n == 0 && tl.text_len == 0, "empty text: %d tokens", tl.n);
    EXPECT(&d, " \t\r\n ", "");
    CHECK(tl.n == 0, "whitespace only: %d tokens", tl.n);
    EXPECT(&d, "\xCC\x81x", "\xCC\x81|x");      /* a mark with nothing before it */
    EXPECT(&d, "a \xCC\x81", "a|\xCC\x81");      /* ... or only a separator: not joined across it */
    /* the ends of the CJK blocks are characters of their own (ext. A ends at U+4DBF since
     * Unicode 13, the unified block at U+9FFF since 14) */
    EXPECT(&d, "\xE3\x90\x80\xE4\xB6\xB6\xE4\xB6\xBF", "\xE3\x90\x80|\xE4\xB6\xB6|\xE4\xB6\xBF");
    EXPECT(&d, "\xE4\xB8\x80\xE9\xBF\xBF", "\xE4\xB8\x80|\xE9\xBF\xBF");

    set(&o, 1, 0, 0);
    EXPECT(&o, "NLP Hello ＡＢＣ", "NLP|Hello|ABC");
    set(&o, 0, 1, 0);
    EXPECT(&o, "NLP ＡＢＣ", "nlp|ａｂｃ");
    EXPECT(&o, "①ｶ", "①|ｶ");
    set(&o, 0, 0, 0);
    EXPECT(&o, "NLP ＡＢＣ１２", "NLP|ＡＢＣ|１２");
    EXPECT(&o, "Cafe\xCC\x81", "Cafe\xCC\x81");

    /* invalid UTF-8: error naming the offset, or U+FFFD */
    EXPECT(&d, "ab\xFF" "cd", "ERR: invalid UTF-8 at byte offset 2 (expected UTF-8 text; set "
                              "data.replace_invalid=true to replace bad bytes with U+FFFD)");
    EXPECT(&d, "\xC0\xAF", "ERR: invalid UTF-8 at byte offset 0 (expected UTF-8 text; set "
                           "data.replace_invalid=true to replace bad bytes with U+FFFD)");
    const char *e = toks(&d, "我\xE4\xBD", 5);
    CHECK(strncmp(e, "ERR: invalid UTF-8 at byte offset 3 ", 36) == 0, "truncated: %s", e);
    e = toks(&d, "x\xED\xA0\x80", 4);   /* surrogate */
    CHECK(strncmp(e, "ERR: invalid UTF-8 at byte offset 1 ", 36) == 0, "surrogate: %s", e);
    e = toks(&d, "\xF4\x90\x80\x80", 4);   /* above U+10FFFF */
    CHECK(strncmp(e, "ERR: invalid UTF-8 at byte offset 0 ", 36) == 0, "too big: %s", e);
    set(&o, 1, 1, 1);
    EXPECT(&o, "ab\xFF" "cd", "ab|\xEF\xBF\xBD|cd");
    CHECK(tl.replaced == 1, "replaced not set after a replacement");
    toks(&o, "abcd", 4);
    CHECK(tl.replaced == 0, "replaced not cleared by a valid text");
    e = toks(&o, "我\xE4\xBD", 5);
    CHECK(strcmp(e, "我|\xEF\xBF\xBD") == 0, "truncated replaced: %s", e);
    e = toks(&o, "\xED\xA0\x80", 3);   /* maximal subparts: three replacements */
    CHECK(strcmp(e, "\xEF\xBF\xBD|\xEF\xBF\xBD|\xEF\xBF\xBD") == 0, "surrogate replaced: %s", e);
    e = toks(&o, "a\0b", 3);               /* NUL is a control character: a separator */
    CHECK(strcmp(e, "a|b") == 0, "NUL: %s", e);

    CHECK(utf8_check("abc", 3) == 3, "valid");
    CHECK(utf8_check("abcdefghij\x80", 11) == 10, "offset after the ASCII fast path");
    char out[32];
    size_t w = utf8_replace_invalid("a\0\xFF", 3, out, 1);
    CHECK(w == 7 && memcmp(out, "a\xEF\xBF\xBD\xEF\xBF\xBD", 7) == 0, "replace with NUL: %zu", w);
    w = utf8_replace_invalid("a\0\xFF", 3, out, 0);
    CHECK(w == 5 && memcmp(out, "a\0\xEF\xBF\xBD", 5) == 0, "replace keeping NUL: %zu", w);

    /* reuse: a long text then a short one */
    char big[20000];
    for (int i = 0; i < 2000; i++) memcpy(big + 6 * i, "好好", 6);
    int rc = tokenize(&d, big, 12000, &tl, NULL);
    CHECK(rc == 0 && tl.n == 4000, "4000 CJK tokens, got %d", tl.n);
    EXPECT(&d, "ok", "ok");
    CHECK(tl.n == 1, "list reused: %d", tl.n);
}

/* ---- the fast path against utf8proc_map ---------------------------------------------- */

static long n_cmp, n_bad;

static int enc(char *d, int32_t c) { return (int)utf8proc_encode_char(c, (utf8proc_uint8_t *)d); }

static void compare(const TokenizerOptions *o, const char *s, size_t n) {
    int opt = 0;
    if (o->nfkc) opt |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT | UTF8PROC_STABLE;
    if (o->casefold) opt |= UTF8PROC_CASEFOLD;
    utf8proc_uint8_t *ref = NULL;
    utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &ref,
                                      (utf8proc_option_t)opt);
    int rc = tokenize(o, s, n, &tl, NULL);
    n_cmp++;
    int ok = rc == 0 && m >= 0 && (size_t)m == tl.text_len && memcmp(ref, tl.text, (size_t)m) == 0;
    /* tokens lie inside the text, in order, without overlap */
    for (int i = 0; ok && i < tl.n; i++)
        ok = tl.len[i] > 0 && tl.start[i] >= 0 && (size_t)(tl.start[i] + tl.len[i]) <= tl.text_len &&
             (i == 0 || tl.start[i] >= tl.start[i - 1] + tl.len[i - 1]);
    if (!ok && n_bad++ < 10) {
        fprintf(stderr, "mismatch (nfkc %d casefold %d) for", o->nfkc, o->casefold);
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %02X", (unsigned char)s[i]);
        fprintf(stderr, ": utf8proc '%s', tokenizer '%.*s'\n", ref ? (char *)ref : "?",
                (int)tl.text_len, tl.text);
    }
    free(ref);
}

static void test_against_utf8proc(void) {
    static const int32_t before[] = {0, 'e', 0x1100, 0xFF76, 0xAC00, 0x4E00};
    static const int32_t after[] = {0, 0x0301, 0x0323, 0x1161, 0x11A8, 0x3099, 0xFF9E, 0x0B3E, 'a'};
    TokenizerOptions o;
    for (int nfkc = 0; nfkc <= 1; nfkc++)
        for (int cf = 0; cf <= 1; cf++) {
            set(&o, nfkc, cf, 0);
            for (int32_t c = 1; c < 0x10000; c++) {
                if (c >= 0xD800 && c < 0xE000) continue;
                for (size_t b = 0; b < sizeof before / sizeof *before; b++)
                    for (size_t a = 0; a < sizeof after / sizeof *after; a++) {
                        if (!(nfkc && cf) && (a + b) % 3) continue;   /* fewer for other options */
                        char s[16];
                        int n = 0;
                        if (before[b]) n += enc(s + n, before[b]);
                        n += enc(s + n, c);
                        if (after[a]) n += enc(s + n, after[a]);
                        compare(&o, s, (size_t)n);
                    }
            }
        }
    /* random strings of characters that interact */
    static const int32_t pool[] = {
        'a', 'e', 'A', 'Z', '1', ' ', '\t', '!', 0x00C9, 0x00DF, 0x0130, 0x03A3, 0x03C2,
        0x0300, 0x0301, 0x0308, 0x0323, 0x0344, 0x0345, 0x0F73, 0x1E9B, 0x212B, 0x2126,
        0x1100, 0x1112, 0x1161, 0x1175, 0x11A7, 0x11A8, 0x11C2, 0xAC00, 0xAC01, 0xD7A3,
        0x304B, 0x3099, 0x309A, 0x309B, 0xFF76, 0xFF9E, 0xFF9F, 0x30AB, 0x0B47, 0x0B3E, 0x0B57,
        0x0CC6, 0x0CD5, 0x0DD9, 0x0DCF, 0x1025, 0x102E, 0x4E00, 0x6211, 0xFF01, 0xFF21, 0xFF41,
        0xFB01, 0xFDFA, 0x3392, 0x2460, 0x00BD, 0x1F600, 0xFE0F, 0x200D, 0x1F468, 0x1D400,
        0x1D15E, 0x1D165, 0x1D157, 0x11099, 0x110BA, 0x11131, 0x11127, 0x2F800, 0x20000, 0xFFFD,
        0x0041, 0x030A, 0x0627, 0x0653, 0x05D0, 0x05B7, 0x0915, 0x093C, 0x0E01, 0x0E33, 0x1EA0};
    uint64_t rng = 12345;
    for (int nfkc = 0; nfkc <= 1; nfkc++)
        for (int cf = 0; cf <= 1; cf++) {
            set(&o, nfkc, cf, 0);
            for (int it = 0; it < 50000; it++) {
                char s[128];
                int n = 0;
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                int len = 1 + (int)((rng >> 33) % 12);
                for (int k = 0; k < len; k++) {
                    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                    n += enc(s + n, pool[(rng >> 33) % (sizeof pool / sizeof *pool)]);
                }
                compare(&o, s, (size_t)n);
            }
        }
    CHECK(n_bad == 0, "%ld of %ld normalised texts differ from utf8proc_map", n_bad, n_cmp);
    printf("compared %ld texts with utf8proc_map\n", n_cmp);
}

int main(void) {
    test_cases();
    test_against_utf8proc();
    token_list_free(&tl);
    return test_finish("test_tokenizer");
}
