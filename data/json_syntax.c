/* data/json_syntax.c: the strict JSON syntax checker behind the config file's and the JSON
 * Lines reader's error messages (json_syntax.h): a recursive scan that stops at the first
 * error and names what was expected there. */
#include "data/json_syntax.h"
#include "data/utf8.h"

#include <stdint.h>
#include <string.h>

typedef struct {
    const char *s;
    size_t n, i;
    size_t err_at;
    const char *expected;
    int depth;
    /* json_member_line: the key sought (member `want_sub` of the top-level object's member
     * `want_top`, or that member itself when want_sub < 0), the top-level member being
     * scanned, and where the sought key starts (SIZE_MAX: not found) */
    int want_top, want_sub, cur_top;
    size_t found_at;
} Scan;

static int scan_fail(Scan *sc, size_t at, const char *expected) {
    sc->err_at = at;
    sc->expected = expected;
    return -1;
}

static void scan_ws(Scan *sc) {
    while (sc->i < sc->n && (sc->s[sc->i] == ' ' || sc->s[sc->i] == '\t' ||
                             sc->s[sc->i] == '\n' || sc->s[sc->i] == '\r'))
        sc->i++;
}

static int scan_value(Scan *sc);

static int is_hex(char ch) {
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F');
}

/* The value of the 4 hex digits after the "\\u" at byte `at`, or -1 when they are not there. */
static long hex4(const Scan *sc, size_t at) {
    long v = 0;
    for (int d = 0; d < 4; d++) {
        if (at + 2 + d >= sc->n || !is_hex(sc->s[at + 2 + d])) return -1;
        char ch = sc->s[at + 2 + d];
        v = v * 16 + (ch <= '9' ? ch - '0' : (ch | 0x20) - 'a' + 10);
    }
    return v;
}

static int scan_string(Scan *sc) {
    size_t open = sc->i++;
    while (sc->i < sc->n) {
        unsigned char ch = (unsigned char)sc->s[sc->i];
        if (ch == '"') { sc->i++; return 0; }
        if (ch == '\n' || ch == '\r')
            return scan_fail(sc, open, "a closing '\"' on the same line");
        if (ch < 0x20) return scan_fail(sc, sc->i, "no control characters in a string");
        if (ch == '\\') {
            if (sc->i + 1 >= sc->n) break;
            char e = sc->s[sc->i + 1];
            if (e == 'u') {
                long code = hex4(sc, sc->i);
                if (code < 0) return scan_fail(sc, sc->i, "\\u followed by 4 hex digits");
                /* UTF-16 surrogates come in pairs; one alone is no character (nor UTF-8) */
                if (code >= 0xDC00 && code <= 0xDFFF)
                    return scan_fail(sc, sc->i, "no lone low surrogate: \\uDC00-\\uDFFF only after "
                                                "\\uD800-\\uDBFF");
                if (code >= 0xD800 && code <= 0xDBFF) {
                    long low = sc->i + 7 < sc->n && sc->s[sc->i + 6] == '\\' && sc->s[sc->i + 7] == 'u'
                                   ? hex4(sc, sc->i + 6) : -1;
                    if (low < 0xDC00 || low > 0xDFFF)
                        return scan_fail(sc, sc->i, "a high surrogate \\uD800-\\uDBFF followed by a "
                                                    "low one \\uDC00-\\uDFFF");
                    sc->i += 6;
                }
                sc->i += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || !e)
                return scan_fail(sc, sc->i, "an escape: \\\" \\\\ \\/ \\b \\f \\n \\r \\t or \\uXXXX");
            sc->i += 2;
            continue;
        }
        sc->i++;
    }
    return scan_fail(sc, open, "a closing '\"'");
}

static int scan_digits(Scan *sc) {
    size_t start = sc->i;
    while (sc->i < sc->n && sc->s[sc->i] >= '0' && sc->s[sc->i] <= '9') sc->i++;
    return sc->i > start;
}

static int scan_number(Scan *sc) {
    size_t start = sc->i;
    if (sc->s[sc->i] == '-') sc->i++;
    if (sc->i < sc->n && sc->s[sc->i] == '0') sc->i++;
    else if (!scan_digits(sc)) return scan_fail(sc, start, "a number");
    if (sc->i < sc->n && sc->s[sc->i] == '.') {
        sc->i++;
        if (!scan_digits(sc)) return scan_fail(sc, start, "digits after the decimal point");
    }
    if (sc->i < sc->n && (sc->s[sc->i] == 'e' || sc->s[sc->i] == 'E')) {
        sc->i++;
        if (sc->i < sc->n && (sc->s[sc->i] == '+' || sc->s[sc->i] == '-')) sc->i++;
        if (!scan_digits(sc)) return scan_fail(sc, start, "digits in the exponent");
    }
    return 0;
}

static const char *const VALUE_EXPECTED =
    "a value: a number, \"string\", true, false, null, {...} or [...]";

static int scan_container(Scan *sc, char close) {
    sc->i++;
    if (++sc->depth > 512) return scan_fail(sc, sc->i - 1, "less deeply nested data");
    scan_ws(sc);
    if (sc->i < sc->n && sc->s[sc->i] == close) { sc->i++; sc->depth--; return 0; }
    for (int member = 0;; member++) {
        const int first = member == 0;
        scan_ws(sc);
        if (close == '}') {
            if (sc->i >= sc->n || sc->s[sc->i] != '"')
                return scan_fail(sc, sc->i, (!first && sc->i < sc->n && sc->s[sc->i] == '}')
                                                ? "another \"key\" after ','; JSON has no trailing commas"
                                                : "a \"key\" in double quotes");
            if (sc->depth == 1) sc->cur_top = member;
            if ((sc->depth == 1 && sc->want_sub < 0 && member == sc->want_top) ||
                (sc->depth == 2 && sc->cur_top == sc->want_top && member == sc->want_sub))
                sc->found_at = sc->i;
            if (scan_string(sc)) return -1;
            scan_ws(sc);
            if (sc->i >= sc->n || sc->s[sc->i] != ':')
                return scan_fail(sc, sc->i, "':' after the key");
            sc->i++;
            scan_ws(sc);
        } else if (!first && sc->i < sc->n && sc->s[sc->i] == ']') {
            return scan_fail(sc, sc->i, "another value after ','; JSON has no trailing commas");
        }
        if (scan_value(sc)) return -1;
        scan_ws(sc);
        if (sc->i < sc->n && sc->s[sc->i] == ',') { sc->i++; continue; }
        if (sc->i < sc->n && sc->s[sc->i] == close) { sc->i++; sc->depth--; return 0; }
        return scan_fail(sc, sc->i, close == '}' ? "',' or '}'" : "',' or ']'");
    }
}

static int scan_value(Scan *sc) {
    scan_ws(sc);
    if (sc->i >= sc->n) return scan_fail(sc, sc->i, VALUE_EXPECTED);
    char ch = sc->s[sc->i];
    if (ch == '{') return scan_container(sc, '}');
    if (ch == '[') return scan_container(sc, ']');
    if (ch == '"') return scan_string(sc);
    if (ch == '-' || (ch >= '0' && ch <= '9')) return scan_number(sc);
    static const char *const lits[] = {"true", "false", "null"};
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(lits[i]);
        if (sc->n - sc->i >= len && memcmp(sc->s + sc->i, lits[i], len) == 0) {
            sc->i += len;
            return 0;
        }
    }
    if (ch == '\'') return scan_fail(sc, sc->i, "a string in double quotes, not single quotes");
    return scan_fail(sc, sc->i, VALUE_EXPECTED);
}

int json_syntax_check(const char *text, size_t n, size_t *at, const char **expected) {
    Scan sc = {text, n, 0, 0, NULL, 0, -1, -1, -1, SIZE_MAX};
    if (scan_value(&sc) == 0) {
        scan_ws(&sc);
        if (sc.i >= sc.n) return 0;
        *at = sc.i;
        *expected = "nothing after the top-level value";
        return -1;
    }
    *at = sc.err_at > n ? n : sc.err_at;
    *expected = sc.expected;
    return -1;
}

int json_member_line(const char *text, size_t n, int top, int sub) {
    Scan sc = {text, n, 0, 0, NULL, 0, top, sub, -1, SIZE_MAX};
    scan_value(&sc);   /* a syntax error after the key does not matter */
    if (sc.found_at == SIZE_MAX) return 0;
    int line = 1;
    for (size_t i = 0; i < sc.found_at; i++) line += text[i] == '\n';
    return line;
}

void json_excerpt(char out[32], const char *text, size_t n, size_t at) {
    size_t len = 0;
    if (at > n) at = n;
    while (at + len < n && len < 24 && text[at + len] != '\n' && text[at + len] != '\r') len++;
    if (at + len < n && len == 24) len = utf8_cut(text + at, len);   /* do not cut a UTF-8 sequence */
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)text[at + i];
        out[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
    }
    out[len] = '\0';
}

long json_nul_escape_at(const char *text, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (text[i] != '\\') continue;
        if (text[i + 1] == 'u' && i + 6 <= n && memcmp(text + i + 2, "0000", 4) == 0) return (long)i;
        i++;   /* the escaped character: \\u0000 is a backslash and "u0000" */
    }
    return -1;
}
