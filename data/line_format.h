/* data/line_format.h: one line of TSV / fastText / JSON Lines / plain text -> (label, text);
 * format names and detection; the TSV header and extra-label checks. Shared by the dataset
 * reader (data/dataset.c) and mha-predict's streamed input. */
#ifndef MHA_DATA_LINE_FORMAT_H
#define MHA_DATA_LINE_FORMAT_H

#include "data/error.h"
#include <stddef.h>
#include <string.h>

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

/* Which format a line that failed to parse as `expected` looks like, as the end of the error
 * message in buf: "; the line looks like JSON Lines: set data.format to \"jsonl\" (or
 * \"auto\")", the same for fastText and TSV, or a CSV line (commas, no tab) with a way to
 * convert it; "" when it looks like nothing else. Returns buf. */
const char *format_hint(const char *line, int expected, char *buf, size_t cap);
/* How format_hint says which format to choose: 0 (the default) the config key data.format,
 * 1 mha-predict's --input-format. Process-wide. */
void format_hint_set_cli(int cli);

/* Label and text columns swapped, judged over n labelled lines of which text_is_class have a
 * text that is (after blanks are trimmed) one of the model's class names and label_is_class a
 * label that is: nearly always the text (90% of the lines, one at least) and nearly never the
 * label (10% at most). */
int columns_look_swapped(long n, long text_is_class, long label_is_class);
/* How to swap two tab-separated columns, for the messages that say they look swapped. */
#define SWAP_COLUMNS_HINT "awk -F'\\t' -v OFS='\\t' '{print $2, $1}' FILE > NEW"

/* The whitespace of a line (not '\n'): what an empty line holds and what separates a
 * fastText label from its text. */
static inline int is_line_space(char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* s is a number: one or more ASCII digits and nothing else (an id column's value). */
static inline int is_ascii_number(const char *s) {
    if (!*s) return 0;
    for (; *s; s++)
        if (*s < '0' || *s > '9') return 0;
    return 1;
}

/* line (len bytes, its newline dropped) is the first line of an mha checkpoint: its magic,
 * "MHACKPT\n" (model/checkpoint.h), given where text was expected. */
static inline int is_checkpoint_first_line(const char *line, size_t len) {
    return len == 7 && memcmp(line, "MHACKPT", 7) == 0;
}

/* A TSV line of column names, such as "label<TAB>text" or "类别<TAB>评论" (the label and
 * text parse_line gave). Both columns must be names, so a real class called "label" still
 * trains. */
int is_tsv_header(const char *label, const char *text);
/* A fastText line with a second __label__ after the first one (parse_line skips it). */
int fasttext_has_extra_label(const char *line);

#endif
