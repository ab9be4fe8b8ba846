/* data/tokenizer.c: UTF-8 validation, NFKC + case folding (utf8proc) and token splitting.
 *
 * Speed: most characters of real text map to exactly one code point that can neither
 * combine with the character before it nor be changed by it ("simple" characters: ASCII,
 * CJK ideographs, full-width forms, ...). Their normalised form and token class come from
 * a table built once per option set from utf8proc itself. Only spans around the other
 * characters (combining marks, Hangul jamo, multi-character expansions) go through
 * utf8proc_decompose + utf8proc_normalize_utf32, into a buffer reused across calls. A span
 * starts at the simple character before the first non-simple one and ends before the next
 * simple one, so the result is identical to normalising the whole text at once
 * (tests/data/test_tokenizer.c checks this against utf8proc_map for every BMP character).
 *
 * Token classes of a normalised character:
 *   separator  Z*, Cc, Cf, variation selectors      ends the token, dropped
 *   cjk        letters and Nl of the CJK, kana, hangul, bopomofo blocks: one token each
 *   letter     any other letter (L*): a run is one token
 *   digit      Nd: a run is one token
 *   mark       M*: extends the token before it (a token of its own when there is none)
 *   symbol     everything else (P*, S*, No, Nl, Co, Cn): one token each */
#include "data/tokenizer.h"

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

enum { CL_SEP = 0, CL_CJK, CL_LETTER, CL_DIGIT, CL_MARK, CL_SYM };
enum { K_NONE = 0, K_LETTER, K_DIGIT, K_SINGLE };

void tokenizer_options_default(TokenizerOptions *o) {
    o->nfkc = 1;
    o->casefold = 1;
    o->replace_invalid = 0;
}

void token_list_free(TokenList *t) {
    if (!t) return;
    free(t->text);
    free(t->start);
    free(t->len);
    free(t->ucs);
    free(t->fixed);
    memset(t, 0, sizeof *t);
}

/* ---- UTF-8 ---------------------------------------------------------------------------- */

/* Length of the valid sequence at s[0..n), or 0 when invalid; then *bad is the length of
 * its maximal invalid subpart (>= 1), as Unicode recommends for U+FFFD substitution. */
static inline int utf8_seq(const unsigned char *s, size_t n, int *bad) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    *bad = 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    unsigned lo = 0x80, hi = 0xBF;
    int len;
    if (c < 0xF0) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        else if (c == 0xED) hi = 0x9F;
    } else if (c < 0xF5) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        else if (c == 0xF4) hi = 0x8F;
    } else {
        return 0;
    }
    if (n < 2 || s[1] < lo || s[1] > hi) return 0;
    for (int k = 2; k < len; k++) {
        *bad = k;
        if ((size_t)k >= n || (s[k] & 0xC0) != 0x80) return 0;
    }
    return len;
}

size_t utf8_check(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            while (i + 8 <= n) {   /* ASCII: 8 bytes at a time */
                uint64_t w;
                memcpy(&w, s + i, 8);
                if (w & 0x8080808080808080ull) break;
                i += 8;
            }
            continue;
        }
        int bad, len = utf8_seq(s + i, n - i, &bad);
        if (!len) return i;
        i += (size_t)len;
    }
    return n;
}

size_t utf8_replace_invalid(const char *str, size_t n, char *dst, int nul) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0, w = 0;
    while (i < n) {
        int bad = 1, len = utf8_seq(s + i, n - i, &bad);
        if (len && !(nul && s[i] == 0)) {
            memcpy(dst + w, s + i, (size_t)len);
            w += (size_t)len;
            i += (size_t)len;
        } else {
            memcpy(dst + w, "\xEF\xBF\xBD", 3);
            w += 3;
            i += len ? (size_t)len : (size_t)bad;
        }
    }
    return w;
}

/* Decode one code point of text already known to be valid. */
static inline int32_t utf8_dec(const unsigned char *p, int *len) {
    unsigned c = p[0];
    if (c < 0x80) { *len = 1; return (int32_t)c; }
    if (c < 0xE0) { *len = 2; return (int32_t)(((c & 0x1F) << 6) | (p[1] & 0x3F)); }
    if (c < 0xF0) {
        *len = 3;
        return (int32_t)(((c & 0x0F) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3F));
    }
    *len = 4;
    return (int32_t)(((c & 0x07) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) |
                     (p[3] & 0x3F));
}

static inline int utf8_enc(char *d, int32_t c) {
    unsigned u = (unsigned)c;
    if (u < 0x80) { d[0] = (char)u; return 1; }
    if (u < 0x800) {
        d[0] = (char)(0xC0 | (u >> 6));
        d[1] = (char)(0x80 | (u & 0x3F));
        return 2;
    }
    if (u < 0x10000) {
        d[0] = (char)(0xE0 | (u >> 12));
        d[1] = (char)(0x80 | ((u >> 6) & 0x3F));
        d[2] = (char)(0x80 | (u & 0x3F));
        return 3;
    }
    d[0] = (char)(0xF0 | (u >> 18));
    d[1] = (char)(0x80 | ((u >> 12) & 0x3F));
    d[2] = (char)(0x80 | ((u >> 6) & 0x3F));
    d[3] = (char)(0x80 | (u & 0x3F));
    return 4;
}

/* ---- classes and the simple-character tables ------------------------------------------ */

static int is_cjk(int32_t c) {
    return (c >= 0x1100 && c <= 0x11FF) ||   /* Hangul jamo */
           (c >= 0x2E80 && c <= 0x2FDF) ||   /* radicals */
           (c >= 0x3005 && c <= 0x3007) ||   /* 々 〆 〇 */
           (c >= 0x3021 && c <= 0x3029) ||   /* Hangzhou numerals */
           (c >= 0x3031 && c <= 0x303C) ||
           (c >= 0x3040 && c <= 0x31FF) ||   /* kana, bopomofo, compatibility jamo */
           (c >= 0x3400 && c <= 0x4DBF) ||   /* ext. A */
           (c >= 0x4E00 && c <= 0x9FFF) ||   /* unified ideographs */
           (c >= 0xA960 && c <= 0xA97F) ||   /* jamo ext. A */
           (c >= 0xAC00 && c <= 0xD7FF) ||   /* syllables, jamo ext. B */
           (c >= 0xF900 && c <= 0xFAFF) ||   /* compatibility ideographs */
           (c >= 0xFF66 && c <= 0xFFDC) ||   /* half-width kana and hangul */
           (c >= 0x1AFF0 && c <= 0x1B2FF) || /* kana supplement / extensions */
           (c >= 0x20000 && c <= 0x3FFFF);   /* ext. B and later */
}

static int classify(int32_t c) {
    if ((c >= 0xFE00 && c <= 0xFE0F) || (c >= 0xE0100 && c <= 0xE01EF)) return CL_SEP;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO:
        return is_cjk(c) ? CL_CJK : CL_LETTER;
    case UTF8PROC_CATEGORY_NL:
        return is_cjk(c) ? CL_CJK : CL_SYM;
    case UTF8PROC_CATEGORY_ND:
        return CL_DIGIT;
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
        return CL_MARK;
    case UTF8PROC_CATEGORY_ZS: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF:
        return CL_SEP;
    default:
        return CL_SYM;
    }
}

static utf8proc_option_t norm_options(int nfkc, int casefold) {
    int o = 0;
    if (nfkc) o |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT | UTF8PROC_STABLE;
    if (casefold) o |= UTF8PROC_CASEFOLD;
    return (utf8proc_option_t)o;
}

/* Code points that can be the second of a canonical composition pair: the non-initial
 * characters of every canonical decomposition, plus the Hangul vowels and trailing
 * consonants (from U+11A7, which utf8proc's Hangul composition also absorbs). */
static uint8_t g_second[0x110000 / 8];
static pthread_once_t g_second_once = PTHREAD_ONCE_INIT;

static inline int is_second(int32_t c) { return (g_second[c >> 3] >> (c & 7)) & 1; }
static inline void set_second(int32_t c) { g_second[c >> 3] |= (uint8_t)(1u << (c & 7)); }

static void build_second(void) {
    for (int32_t c = 0; c < 0x110000; c++) {
        if (c >= 0xD800 && c < 0xE000) continue;
        const utf8proc_property_t *p = utf8proc_get_property(c);
        if (p->decomp_seqindex == UINT16_MAX || p->decomp_type != 0) continue;
        utf8proc_int32_t d[8];
        utf8proc_ssize_t m = utf8proc_decompose_char(c, d, 8, UTF8PROC_DECOMPOSE, NULL);
        for (utf8proc_ssize_t k = 1; k < m && k < 8; k++) set_second(d[k]);
    }
    for (int32_t c = 0x1161; c <= 0x1175; c++) set_second(c);
    for (int32_t c = 0x11A7; c <= 0x11C2; c++) set_second(c);
}

/* Per option set (index nfkc*2 + casefold), for each BMP code point: (normalised code
 * point << 4 | class) when the character is simple, -1 when it is not. */
static int32_t g_table[4][0x10000];
static pthread_once_t g_once[4] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                   PTHREAD_ONCE_INIT};

/* The normalised form of c when c is simple, else -1. */
static int32_t simple_form(int32_t c, utf8proc_option_t opt) {
    char buf[4];
    utf8proc_int32_t d[8];
    int nb = utf8_enc(buf, c);
    utf8proc_ssize_t m = utf8proc_decompose((const utf8proc_uint8_t *)buf, nb, d, 8, opt);
    if (m < 1 || m > 8) return -1;
    if (utf8proc_get_property(d[0])->combining_class != 0 || is_second(d[0])) return -1;
    if (m > 1) {
        if (!(opt & UTF8PROC_COMPOSE)) return -1;
        m = utf8proc_normalize_utf32(d, m, opt);
        if (m != 1) return -1;
    }
    return d[0];
}

static void build_table(int idx) {
    pthread_once(&g_second_once, build_second);
    utf8proc_option_t opt = norm_options(idx >> 1, idx & 1);
    for (int32_t c = 0; c < 0x10000; c++) {
        int32_t o = (c >= 0xD800 && c < 0xE000) ? -1 : simple_form(c, opt);
        g_table[idx][c] = o < 0 ? -1 : (o << 4) | classify(o);
    }
}
static void build0(void) { build_table(0); }
static void build1(void) { build_table(1); }
static void build2(void) { build_table(2); }
static void build3(void) { build_table(3); }

static const int32_t *table_for(int nfkc, int casefold) {
    static void (*const build[4])(void) = {build0, build1, build2, build3};
    int idx = (nfkc ? 2 : 0) + (casefold ? 1 : 0);
    pthread_once(&g_once[idx], build[idx]);
    return g_table[idx];
}

/* Outside the BMP: simple when utf8proc changes nothing about c. */
static int32_t astral_entry(int32_t c, int casefold) {
    const utf8proc_property_t *p = utf8proc_get_property(c);
    if (p->combining_class || p->decomp_seqindex != UINT16_MAX ||
        (casefold && p->casefold_seqindex != UINT16_MAX) || is_second(c))
        return -1;
    return (c << 4) | classify(c);
}

static inline int32_t entry_of(const int32_t *tab, int32_t c, int casefold) {
    return c < 0x10000 ? tab[c] : astral_entry(c, casefold);
}

/* ---- token output ---------------------------------------------------------------------- */

typedef struct {
    TokenList *t;
    int kind, oom;
} Out;

static int grow_text(TokenList *t, size_t need) {
    size_t cap = t->text_cap ? t->text_cap : 256;
    while (cap < need) cap *= 2;
    char *p = realloc(t->text, cap);
    if (!p) return -1;
    t->text = p;
    t->text_cap = cap;
    return 0;
}

static int grow_tokens(TokenList *t) {
    int cap = t->cap ? t->cap * 2 : 64;
    int *s = realloc(t->start, (size_t)cap * sizeof *s);
    if (!s) return -1;
    t->start = s;
    int *l = realloc(t->len, (size_t)cap * sizeof *l);
    if (!l) return -1;
    t->len = l;
    t->cap = cap;
    return 0;
}

static inline void emit(Out *o, int32_t c, int cls) {
    TokenList *t = o->t;
    if (t->text_len + 5 > t->text_cap && grow_text(t, t->text_len + 5)) {
        o->oom = 1;
        o->kind = K_NONE;
        return;
    }
    size_t at = t->text_len;
    int nb = utf8_enc(t->text + at, c);
    t->text_len += (size_t)nb;
    switch (cls) {
    case CL_SEP:
        o->kind = K_NONE;
        return;
    case CL_LETTER:
    case CL_DIGIT: {
        int k = cls == CL_LETTER ? K_LETTER : K_DIGIT;
        if (o->kind == k) {
            t->len[t->n - 1] += nb;
            return;
        }
        o->kind = k;
        break;
    }
    case CL_MARK:
        if (o->kind != K_NONE) {
            t->len[t->n - 1] += nb;
            return;
        }
        o->kind = K_SINGLE;
        break;
    default:
        o->kind = K_SINGLE;
        break;
    }
    if (t->n == t->cap && grow_tokens(t)) {
        o->oom = 1;
        o->kind = K_NONE;
        return;
    }
    t->start[t->n] = (int)at;
    t->len[t->n] = nb;
    t->n++;
}

/* Normalise the span s[0..n) with utf8proc and emit it. */
static int emit_span(Out *o, const unsigned char *s, size_t n, utf8proc_option_t opt,
                     MhaError *err) {
    TokenList *t = o->t;
    utf8proc_ssize_t m;
    if (t->ucs_cap < n + 8) {
        size_t cap = t->ucs_cap ? t->ucs_cap : 64;
        while (cap < n + 8) cap *= 2;
        int *p = realloc(t->ucs, cap * sizeof *p);
        if (!p) return mha_fail(err, MHA_EXIT_DATA, "out of memory while tokenising");
        t->ucs = p;
        t->ucs_cap = cap;
    }
    for (;;) {
        m = utf8proc_decompose(s, (utf8proc_ssize_t)n, t->ucs, (utf8proc_ssize_t)t->ucs_cap, opt);
        if (m < 0 || (size_t)m <= t->ucs_cap) break;
        int *p = realloc(t->ucs, (size_t)m * sizeof *p);
        if (!p) return mha_fail(err, MHA_EXIT_DATA, "out of memory while tokenising");
        t->ucs = p;
        t->ucs_cap = (size_t)m;
    }
    if (m >= 0 && (opt & UTF8PROC_COMPOSE)) m = utf8proc_normalize_utf32(t->ucs, m, opt);
    if (m < 0)
        return mha_fail(err, MHA_EXIT_DATA, "cannot normalise text (utf8proc: %s)",
                        utf8proc_errmsg(m));
    for (utf8proc_ssize_t i = 0; i < m; i++) emit(o, t->ucs[i], classify(t->ucs[i]));
    return 0;
}

int tokenize(const TokenizerOptions *opts, const char *str, size_t n, TokenList *out,
             MhaError *err) {
    TokenizerOptions def;
    if (!opts) {
        tokenizer_options_default(&def);
        opts = &def;
    }
    out->n = 0;
    out->replaced = 0;
    out->text_len = 0;
    if (n > (size_t)INT_MAX / 8)
        return mha_fail(err, MHA_EXIT_DATA, "text of %zu bytes is too long (expected at most %d)",
                        n, INT_MAX / 8);

    size_t bad = utf8_check(str, n);
    if (bad < n) {
        if (!opts->replace_invalid)
            return mha_fail(err, MHA_EXIT_DATA,
                            "invalid UTF-8 at byte offset %zu (expected UTF-8 text; set "
                            "data.replace_invalid=true to replace bad bytes with U+FFFD)",
                            bad);
        if (out->fixed_cap < 3 * n + 1) {
            char *p = realloc(out->fixed, 3 * n + 1);
            if (!p) return mha_fail(err, MHA_EXIT_DATA, "out of memory while tokenising");
            out->fixed = p;
            out->fixed_cap = 3 * n + 1;
        }
        n = utf8_replace_invalid(str, n, out->fixed, 0);
        str = out->fixed;
        out->replaced = 1;
    }
    if (out->text_cap < 2 * n + 16 && grow_text(out, 2 * n + 16))
        return mha_fail(err, MHA_EXIT_DATA, "out of memory while tokenising");

    const int casefold = opts->casefold != 0;
    const int32_t *tab = table_for(opts->nfkc, casefold);
    const utf8proc_option_t uopt = norm_options(opts->nfkc, casefold);
    const unsigned char *p = (const unsigned char *)str, *end = p + n;
    Out o = {out, K_NONE, 0};
    int len = 0, len2 = 0;
    int32_t e = -1, e2 = -1;
    if (p < end) e = entry_of(tab, utf8_dec(p, &len), casefold);
    while (p < end) {
        const unsigned char *q = p + len;
        e2 = -1;
        if (q < end) e2 = entry_of(tab, utf8_dec(q, &len2), casefold);
        if (e >= 0 && (q >= end || e2 >= 0)) {
            emit(&o, e >> 4, e & 15);
            p = q;
            e = e2;
            len = len2;
            continue;
        }
        /* a span: this character and every following one that is not simple */
        const unsigned char *r = q;
        while (r < end && e2 < 0) {
            r += len2;
            if (r < end) e2 = entry_of(tab, utf8_dec(r, &len2), casefold);
        }
        int rc = emit_span(&o, p, (size_t)(r - p), uopt, err);
        if (rc) return rc;
        p = r;
        e = e2;
        len = len2;
    }
    if (!o.oom && out->text_len + 1 > out->text_cap && grow_text(out, out->text_len + 1))
        o.oom = 1;
    if (o.oom) return mha_fail(err, MHA_EXIT_DATA, "out of memory while tokenising");
    out->text[out->text_len] = '\0';
    return 0;
}
