/* data/utf8.h: two byte-level UTF-8 helpers shared by the readers, mha-predict and the
 * config loader: where a text may be cut without splitting a character, and the length of
 * a leading UTF-8 byte-order mark. (Validation and repair are in data/tokenizer.h.) */
#ifndef MHA_DATA_UTF8_H
#define MHA_DATA_UTF8_H

#include <stddef.h>

/* The length, at most n, at which s can be cut without splitting a character: n backed up
 * over continuation bytes (10xxxxxx), so that s[result] starts a character (or result is
 * 0). s[n] must be readable: callers cut a text longer than n. */
static inline size_t utf8_cut(const char *s, size_t n) {
    while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80) n--;
    return n;
}

/* 3 when s[0..n) starts with the UTF-8 byte-order mark EF BB BF, else 0; reads no byte at
 * or past s[n] (for a NUL-terminated string, pass n = strnlen(s, 3)). */
static inline size_t utf8_bom_length(const char *s, size_t n) {
    return n >= 3 && (unsigned char)s[0] == 0xEF && (unsigned char)s[1] == 0xBB &&
                   (unsigned char)s[2] == 0xBF ? 3 : 0;
}

#endif
