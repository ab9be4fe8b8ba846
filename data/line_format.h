/* data/line_format.h: one line of TSV / fastText / JSON Lines / plain text -> (label, text);
 * format names and detection; the TSV header and extra-label checks. Shared by the dataset
 * reader (data/dataset.c) and mha-predict's streamed input. */
#ifndef MHA_DATA_LINE_FORMAT_H
#define MHA_DATA_LINE_FORMAT_H

#include "data/error.h"

enum { FORMAT_AUTO = 0, FORMAT_TSV, FORMAT_FASTTEXT, FORMAT_JSONL, FORMAT_PLAIN };

/* What a JSON Lines line holds, for "(expected ...)" in messages. */
#define JSONL_SHAPE "{\"label\": ..., \"text\": ...}"

int format_from_name(const char *name);   /* "auto","tsv","fasttext","jsonl","plain"; -1 unknown */
/* The format of a file by its first non-empty line (a UTF-8 BOM and leading spaces are
 * skipped): __label__ is fastText, '{' JSON Lines, a tab TSV, anything else plain text. */
int detect_format(const char *first_line);

/* One line of any format -> (label string or NULL, text). Used by the readers and by
 * mha-predict on streamed input. `line` is modified in place (NUL-terminated pieces).
 * Returns 0, or MHA_EXIT_DATA with err->msg "what is wrong (expected ...)" (no FILE:LINE). */
int parse_line(char *line, int format, char **label, char **text, MhaError *err);
/* The text alone, for predictions: the label (empty, or of a type training refuses) is
 * neither read nor checked; the line must still have the format's shape (a tab, __label__,
 * a JSON object with a "text" string). */
int parse_text(char *line, int format, char **text, MhaError *err);

/* The whitespace of a line (not '\n'): what an empty line holds and what separates a
 * fastText label from its text. */
static inline int is_line_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* A TSV line of column names, such as "label<TAB>text" or "类别<TAB>评论" (the label and
 * text parse_line gave). Both columns must be names, so a real class called "label" still
 * trains. */
int is_tsv_header(const char *label, const char *text);
/* A fastText line with a second __label__ after the first one (parse_line skips it). */
int fasttext_has_extra_label(const char *line);

#endif
