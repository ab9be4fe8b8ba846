/* data/tokenizer.h: UTF-8 text -> tokens, on utf8proc.
 * Validates UTF-8, NFKC-normalises and case-folds (configurable); each CJK ideograph,
 * kana or hangul syllable is one token; a run of letters of any other script (and across
 * scripts) is one token; a run of digits is one token; each punctuation or symbol
 * character is one token; whitespace separates and is dropped. A combining mark stays with the token before it;
 * format characters (Cf: ZWSP, ZWJ, BOM, ...) and variation selectors separate like
 * whitespace. TokenList.text is the whole normalised text, byte for byte what utf8proc_map
 * gives with the same options (invalid bytes first replaced by U+FFFD when allowed). */
#ifndef MHA_DATA_TOKENIZER_H
#define MHA_DATA_TOKENIZER_H

#include <stddef.h>
#include "data/error.h"

typedef struct {
    int nfkc;             /* default 1 */
    int casefold;         /* default 1 */
    int replace_invalid;  /* 0: invalid UTF-8 is an error; 1: replaced by U+FFFD */
} TokenizerOptions;

/* Tokens of one text: token i is the bytes text[start[i] .. start[i]+len[i]) of `text`,
 * the normalised UTF-8 (not NUL-terminated). Reused across calls to avoid allocation. */
typedef struct {
    char *text;  size_t text_len, text_cap;
    int *start, *len;  int n, cap;
    int replaced;                   /* the last text held invalid UTF-8, read as U+FFFD */
    /* scratch reused across calls (zero-initialise the whole TokenList before first use) */
    int *ucs;  size_t ucs_cap;      /* code points of a span being normalised */
    char *fixed;  size_t fixed_cap; /* input with invalid bytes replaced (replace_invalid) */
} TokenList;

void tokenizer_options_default(TokenizerOptions *o);
/* Tokenise bytes s[0..n). On invalid UTF-8 (and replace_invalid == 0) returns
 * MHA_EXIT_DATA with err->msg = "invalid UTF-8 at byte offset K" (caller adds FILE:LINE). */
int tokenize(const TokenizerOptions *o, const char *s, size_t n, TokenList *out, MhaError *err);
void token_list_free(TokenList *t);

/* Byte offset of the first invalid UTF-8 sequence in s[0..n) (overlong forms, surrogates,
 * code points above U+10FFFF, truncated sequences), or n when all of it is valid. */
size_t utf8_check(const char *s, size_t n);
/* Copy s[0..n) to dst (room for 3*n bytes), replacing each maximal invalid subsequence by
 * U+FFFD, and each NUL byte too when nul != 0. Returns the bytes written. */
size_t utf8_replace_invalid(const char *s, size_t n, char *dst, int nul);

#endif
