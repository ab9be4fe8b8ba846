/* data/dataset.h: reading labelled text files (TSV `label<TAB>text`, fastText
 * `__label__X text`, JSON Lines {"label":..,"text":..}) into token ids; one line's format
 * is data/line_format.h (included: FORMAT_*, parse_line, detect_format).
 * Handles a UTF-8 BOM, CRLF, empty lines (skipped, counted), over-long lines
 * (truncated, counted). Every error is "FILE:LINE: what is wrong (what was expected)". */
#ifndef MHA_DATA_DATASET_H
#define MHA_DATA_DATASET_H

#include <stdint.h>
#include <stdio.h>
#include "data/error.h"
#include "data/line_format.h"
#include "data/tokenizer.h"
#include "data/vocab.h"

typedef struct {
    int format;                 /* FORMAT_*; AUTO detects from the first non-empty line */
    TokenizerOptions tok;
    int max_line_bytes;         /* a line's text longer than this is cut at a character
                                   boundary and counted in n_long; <= 0: no limit */
    int skip_no_text;           /* skip labelled lines without text (the training file: they
                                   teach nothing); dataset_load_train always does */
    int keep_unknown_labels;    /* dataset_load with a label map (mha-predict --eval): a label the
                                   map lacks is not an error but class labels->n + j, j its index
                                   in Dataset.unknown_labels; the file is still refused when no
                                   line has a known label, or its columns look swapped */
} ReadOptions;

/* Class names, sorted (strcmp order of UTF-8 bytes), from the training set. */
typedef struct { int n; char **names; } LabelMap;
int labelmap_find(const LabelMap *m, const char *name);          /* -1 when absent */
/* The same for the len bytes at s with blanks around them trimmed (s is not changed): is a
 * text a label? (its columns swapped) */
int labelmap_find_trimmed(const LabelMap *m, const char *s, size_t len);
/* "a, b, c" (shortened with ", ..." to fit cap), for messages */
void labelmap_list(const LabelMap *m, char *buf, size_t cap);
void labelmap_free(LabelMap *m);

typedef struct {
    int n;                      /* examples */
    int32_t *labels;            /* (n) class ids; -1 when the line had no label (FORMAT_PLAIN) */
    int64_t *offsets;           /* (n+1): ids of example i are ids[offsets[i] .. offsets[i+1]) */
    int32_t *ids;               /* all examples' token ids, untruncated */
    int32_t *line_no;           /* (n) 1-based source line of each example */
    long n_lines, n_empty, n_long, n_tokens, n_unk;  /* statistics */
    long n_replaced;            /* lines whose invalid UTF-8 became U+FFFD, NUL bytes spaces (replace_invalid) */
    long n_extra_columns;       /* TSV lines with more than two tab-separated columns: their text
                                   is everything after the first tab, tabs included */
    long n_extra_labels;        /* fastText lines with more than one __label__: the first counts */
    long first_extra_columns, first_extra_labels;   /* line numbers of the first such lines */
    long header_line;           /* a TSV column-name line ("label<TAB>text") that was skipped; 0: none */
    long n_no_text, first_no_text;  /* labelled lines whose text is empty or spaces: skipped in the
                                       training file (nothing to learn from), kept in others */
    int no_text_skipped;        /* they were skipped (ReadOptions.skip_no_text) */
    int format;                 /* FORMAT_* the lines were read as (AUTO: no line decided it) */
    /* dataset_load with a label map: */
    long n_known_label;         /* lines whose label is in the map */
    long n_text_is_label;       /* keep_unknown_labels: lines whose text (blanks trimmed) is a label of the map */
    VocabCounter *unknown_labels;   /* keep_unknown_labels: the labels not in the map, in order of
                                       first occurrence, each counted per line; NULL: none */
    long n_unknown_label, first_unknown_label;   /* lines with such a label; the first one's number */
    int ex_cap;                 /* room in labels and line_no (offsets: one more) */
    size_t ids_cap;             /* room in ids */
} Dataset;

/* Appends example d->n: its class id (-1: none), source line and n_ids token ids, which
 * the caller then writes at *ids (NULL when n_ids is 0); d->n, the offsets and the arrays
 * grow (a zeroed Dataset starts empty). Returns 0, or MHA_EXIT_DATA with
 * "NAME: out of memory while reading" (d keeps the examples it had). */
int dataset_append(Dataset *d, int32_t label, int32_t line_no, int n_ids, int32_t **ids,
                   const char *name, MhaError *err);

/* Notes on what was read in a way the user may not expect (a skipped header line, labelled
 * lines without text, extra columns, extra labels), one line each on f,
 * "PROG: note: PATH...". Nothing when none. */
void dataset_print_notes(const Dataset *d, const char *path, const char *prog, FILE *f);

/* Read the training file: builds the vocab (min_count, max_vocab) and the label map
 * from it, then the dataset. */
int dataset_load_train(const char *path, const ReadOptions *o, int min_count, int max_vocab,
                       Vocab **vocab, LabelMap *labels, Dataset *out, MhaError *err);
/* Read a dev/test file with an existing vocab and label map; a label the training set
 * never had is an error naming the label and the line. labels == NULL: labels are not
 * read (all -1), as for FORMAT_PLAIN. A file without examples is an error. */
/* path "/dev/stdin" reads standard input (descriptor 0) from where it stands. */
int dataset_load(const char *path, const ReadOptions *o, const Vocab *vocab,
                 const LabelMap *labels, Dataset *out, MhaError *err);
/* The same, with `name` in place of the path in every message (mha-predict reads
 * "/dev/stdin" as "<stdin>"). */
int dataset_load_named(const char *path, const char *name, const ReadOptions *o, const Vocab *vocab,
                       const LabelMap *labels, Dataset *out, MhaError *err);
void dataset_free(Dataset *d);
/* keep_unknown_labels: how many distinct labels the map lacked (their classes are K .. K + n - 1
 * for a map of K labels); the name of the j-th and, when count is not NULL, its lines. */
int dataset_unknown_label_count(const Dataset *d);
const char *dataset_unknown_label(const Dataset *d, int j, long *count);
/* Most distinct unknown labels a file may have (each is a row of the --eval report): more
 * means the wrong file, or labels and texts swapped; an error names both. */
#define MAX_UNKNOWN_LABELS 1000
/* "'a' (12 lines), 'b' (1 line), and 3 more": the max_shown unknown labels with the most
 * lines, for messages (cut to fit cap). */
void dataset_unknown_labels_summary(const Dataset *d, int max_shown, char *buf, size_t cap);
/* 64-bit FNV-1a: h (start from MHA_FNV1A_START) extended by the n bytes at p (p unread when n is 0). */
#define MHA_FNV1A_START 0xcbf29ce484222325ull
static inline uint64_t mha_fnv1a(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}
/* 64-bit FNV-1a of the examples as read (count, labels, token ids): a run stores its training
 * set's, so that --resume can tell the data changed under it. */
uint64_t dataset_fingerprint(const Dataset *d);

#endif
