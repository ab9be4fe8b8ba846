/* data/utf8.h: byte-level UTF-8 helpers shared by the readers, mha-predict and the config
 * loader: where a text may be cut without splitting a character, blank characters (ASCII and
 * Unicode spaces, zero-width characters, the byte-order mark) for empty lines and labels,
 * and the length of a leading UTF-8 byte-order mark. (Validation and repair are in
 * data/tokenizer.h.) */
#ifndef MHA_DATA_UTF8_H
#define MHA_DATA_UTF8_H

#include <stddef.h>
#include <string.h>

/* The length, at most n, at which s can be cut without splitting a character: n backed up
 * over continuation bytes (10xxxxxx), so that s[result] starts a character (or result is
 * 0). s[n] must be readable: callers cut a text longer than n. */
static inline size_t utf8_cut(const char *s, size_t n) {
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return n;
}

/* How much of s a message shows (with "%.*s"): all of it, or its first max bytes cut back to a
 * character boundary (never half a character in a message). */
static inline int utf8_shown(const char *s, size_t max) {
    const size_t n = strlen(s);
    return (int)(n <= max ? n : utf8_cut(s, max));
}

/* The length of the blank character that starts s (a NUL-terminated string), or 0: ASCII
 * space, tab, CR, VT, FF, and the Unicode characters that show as nothing or as a space:
 * U+0085, U+00A0, U+1680, U+2000-U+200D, U+2028, U+2029, U+202F, U+205F, U+2060, U+3000,
 * U+FEFF (the byte-order mark, also found mid-file after 'cat a.tsv b.tsv'). */
static inline size_t utf8_blank_length(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    switch (u[0]) {
    case ' ': case '\t': case '\r': case '\v': case '\f':
        return 1;
    case 0xC2:
        return u[1] == 0x85 || u[1] == 0xA0 ? 2 : 0;
    case 0xE1:
        return u[1] == 0x9A && u[2] == 0x80 ? 3 : 0;
    case 0xE2:
        if (u[1] == 0x80 && u[2] >= 0x80 && (u[2] <= 0x8D || u[2] == 0xA8 || u[2] == 0xA9 || u[2] == 0xAF))
            return 3;
        return u[1] == 0x81 && (u[2] == 0x9F || u[2] == 0xA0) ? 3 : 0;
    case 0xE3:
        return u[1] == 0x80 && u[2] == 0x80 ? 3 : 0;
    case 0xEF:
        return u[1] == 0xBB && u[2] == 0xBF ? 3 : 0;
    default:
        return 0;
    }
}

/* Whether the NUL-terminated s holds nothing but blank characters (utf8_blank_length). */
static inline int utf8_is_blank(const char *s) {
    size_t k;
    while ((k = utf8_blank_length(s)) > 0) s += k;
    return *s == '\0';
}

/* s with its leading and trailing blank characters (utf8_blank_length) removed: a pointer
 * into s, which is cut short in place. */
static inline char *utf8_trim_blank(char *s) {
    size_t k;
    while ((k = utf8_blank_length(s)) > 0) s += k;
    char *end = s;   /* just past the last character that is not blank */
    for (char *p = s; *p;) {
        if ((k = utf8_blank_length(p)) > 0) {
            p += k;
        } else {
            p++;
            while (((unsigned char)*p & 0xC0) == 0x80) p++;
            end = p;
        }
    }
    *end = '\0';
    return s;
}

/* 3 when s[0..n) starts with the UTF-8 byte-order mark EF BB BF, else 0; reads no byte at
 * or past s[n] (for a NUL-terminated string, pass n = strnlen(s, 3)). */
static inline size_t utf8_bom_length(const char *s, size_t n) {
    return n >= 3 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB &&
                   (unsigned char)s[2] == 0xBF ? 3 : 0;
}

/* Whether s[0..n) starts with a UTF-16 byte-order mark (FF FE or FE FF): the file is UTF-16,
 * which a byte reader would split at every 0x0A byte. */
static inline int utf16_bom(const char *s, size_t n) {
    return n >= 2 && ((unsigned char)s[0] == 0xFF || (unsigned char)s[0] == 0xFE) &&
           ((unsigned char)s[1] ^ (unsigned char)s[0]) == 0x01;
}

#endif
