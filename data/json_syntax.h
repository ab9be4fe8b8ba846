/* data/json_syntax.h: a strict JSON syntax checker for user-facing errors. cJSON says only
 * where it gave up; this finds the first syntax error and what was expected there, so a
 * config file or a JSON Lines record can be reported compiler-style:
 * "FILE:LINE: invalid JSON near 'xxx' (expected ',' or '}')"; and finds the line of a key, for
 * errors about its value ("FILE:LINE: key 'train.epochs': expected an integer"). */
#ifndef MHA_DATA_JSON_SYNTAX_H
#define MHA_DATA_JSON_SYNTAX_H

#include <stddef.h>

/* 0 when text[0..n) is exactly one JSON value (surrounded by whitespace); otherwise -1,
 * with *at the byte offset of the first error (<= n) and *expected what was expected there
 * (a static string, e.g. "',' or '}'" or "a \"key\" in double quotes"). Nesting deeper
 * than 512 is an error. On success *at and *expected are left as they were. */
int json_syntax_check(const char *text, size_t n, size_t *at, const char **expected);

/* The line (from 1) where a key starts, for messages about a key's value: member `sub`
 * (from 0, in document order) of the object that is member `top` of the top-level object,
 * or member `top` itself when sub < 0. 0 when there is no such key. */
int json_member_line(const char *text, size_t n, int top, int sub);

/* The text at byte offset `at` up to the end of its line, at most 24 bytes and never a cut
 * UTF-8 sequence, control characters shown as '?': for "near '...'" in a message.
 * out holds at least 32 bytes. */
void json_excerpt(char out[32], const char *text, size_t n, size_t at);

/* The byte offset of the first escape \u0000 in text[0..n) (valid JSON, for which cJSON gives
 * a NUL that ends its C string there, silently cutting the string), or -1 when there is none. */
long json_nul_escape_at(const char *text, size_t n);

#endif
