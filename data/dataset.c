/* data/dataset.c: reading TSV, fastText and JSON Lines files (and plain text) into token
 * ids, and the label map; one line's format is data/line_format.c.
 *
 * Each line: the trailing LF / CRLF and (line 1) a UTF-8 BOM are dropped; the line is
 * checked for UTF-8 and NUL bytes (an error naming the byte offset in the line, or U+FFFD
 * when tok.replace_invalid); a line of only ASCII whitespace is empty (skipped, counted);
 * otherwise it is parsed, its text cut to max_line_bytes at a character boundary (counted
 * in n_long) and tokenised. Labels are kept as strings and lose surrounding spaces. A
 * UTF-16 file is refused (its byte-order mark); a first TSV line of column names
 * ("label<TAB>text") is skipped; TSV lines with more columns and fastText lines with more
 * labels are read (text after the first tab; the first label) and counted for a note, as
 * are labelled lines without text (the training file skips them).
 * The training file is read once: tokens are interned into a VocabCounter while reading,
 * then the vocabulary is built and the interned indices are mapped to ids. */
#include "data/dataset.h"
#include "data/utf8.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#define REPLACE_HINT "to read a few bad bytes as U+FFFD instead, set data.replace_invalid=true"
#define UTF8_HINT "a GBK file (common for Chinese text) converts with 'iconv -f GBK -t UTF-8 FILE > NEW'; " \
                  REPLACE_HINT
#define GBK_LABEL_HINT "held bytes that are not UTF-8, read as U+FFFD: if the file is GBK, convert it with " \
                       "'iconv -f GBK -t UTF-8 FILE > NEW'"
#define NUL_HINT "a UTF-16 file converts with 'iconv -f UTF-16LE -t UTF-8 FILE > NEW' (or UTF-16BE); to read NUL " \
                 "bytes as spaces instead, set data.replace_invalid=true"

/* ---- labels ----------------------------------------------------------------------------- */

int labelmap_find(const LabelMap *m, const char *name) {
    int lo = 0, hi = m ? m->n - 1 : -1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2, c = strcmp(m->names[mid], name);
        if (c == 0) return mid;
        if (c < 0) lo = mid + 1;
        else hi = mid - 1;
    }
    return -1;
}

void labelmap_free(LabelMap *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) free(m->names[i]);
    free(m->names);
    m->names = NULL;
    m->n = 0;
}

void labelmap_list(const LabelMap *m, char *buf, size_t cap) {
    size_t w = 0;
    buf[0] = '\0';
    for (int i = 0; i < m->n; i++) {
        size_t need = strlen(m->names[i]) + 2;
        if (w + need + 8 > cap) {
            snprintf(buf + w, cap - w, "%s...", i ? ", " : "");
            return;
        }
        w += (size_t)snprintf(buf + w, cap - w, "%s%s", i ? ", " : "", m->names[i]);
    }
}

int labelmap_find_trimmed(const LabelMap *m, const char *s, size_t len) {
    char buf[512];
    if (len >= sizeof buf) return -1;   /* no label is that long */
    memcpy(buf, s, len);
    buf[len] = '\0';
    return labelmap_find(m, utf8_trim_blank(buf));
}

/* "'a' (12 lines), 'b' (1 line)" for the max_shown unknown labels with the most lines (ties:
 * the first seen first), then ", and N more" */
void dataset_unknown_labels_summary(const Dataset *d, int max_shown, char *buf, size_t cap) {
    int n = dataset_unknown_label_count(d);
    size_t w = 0;
    int shown = 0;
    unsigned char used[MAX_UNKNOWN_LABELS + 1] = {0};   /* the reader stops at one more than the most */
    if (n > MAX_UNKNOWN_LABELS + 1) n = MAX_UNKNOWN_LABELS + 1;
    buf[0] = '\0';
    for (; shown < max_shown && shown < n; shown++) {
        int best = -1;
        long best_count = 0, c;
        for (int j = 0; j < n; j++) {
            dataset_unknown_label(d, j, &c);
            if (!used[j] && c > best_count) best = j, best_count = c;
        }
        used[best] = 1;
        const char *name = dataset_unknown_label(d, best, NULL);
        const int cut = utf8_shown(name, 60);
        w += (size_t)snprintf(buf + w, w < cap ? cap - w : 0, "%s'%.*s%s' (%ld line%s)", shown ? ", " : "", cut,
                              name, name[cut] ? "..." : "", best_count, best_count == 1 ? "" : "s");
    }
    if (n > shown && w < cap) snprintf(buf + w, cap - w, ", and %d more", n - shown);
}

int dataset_unknown_label_count(const Dataset *d) {
    return d->unknown_labels ? vocab_counter_size(d->unknown_labels) : 0;
}

const char *dataset_unknown_label(const Dataset *d, int j, long *count) {
    return vocab_counter_token(d->unknown_labels, j, NULL, count);
}

/* Why a labelled file's labels are not the training set's, when its unknown labels tell: 20
 * or more, each on one line and all but one (a header's) a number: a first column of ids
 * (*ids set); or one holding U+FFFD (GBK read as UTF-8). "" otherwise. */
static const char *unknown_labels_hint(const Dataset *d, int *ids) {
    const int n = dataset_unknown_label_count(d);
    int once = 1, words = 0, replaced = 0;
    for (int j = 0; j < n; j++) {
        long c;
        const char *name = dataset_unknown_label(d, j, &c);
        once &= c == 1;
        words += !is_ascii_number(name);
        replaced |= strstr(name, "\xEF\xBF\xBD") != NULL;
    }
    *ids = n >= 20 && once && words <= 1;
    if (*ids) return "; they are numbers, a different one on each line: is the first column an id? (expected the "
                     "label first: 'label<TAB>text'; 'cut -f2- FILE > NEW' drops a first column)";
    return replaced ? "; a label " GBK_LABEL_HINT : "";
}

/* ---- what a user may not expect -------------------------------------------------------- */

static const char *lines_word(long n) { return n == 1 ? "line has" : "lines have"; }

void dataset_print_notes(const Dataset *d, const char *path, const char *prog, FILE *f) {
    if (d->header_line)
        fprintf(f, "%s: note: %s:%ld holds column names (a header line); skipped\n", prog, path,
                d->header_line);
    if (d->n_extra_columns)
        fprintf(f, "%s: note: %s: %ld %s more than two tab-separated columns (first: line %ld); "
                "everything after the first tab is read as the text\n", prog, path, d->n_extra_columns,
                lines_word(d->n_extra_columns), d->first_extra_columns);
    if (d->n_no_text)
        fprintf(f, "%s: note: %s: %ld %s a label but no text (first: line %ld); %s\n", prog, path,
                d->n_no_text, lines_word(d->n_no_text), d->first_no_text,
                d->no_text_skipped ? "skipped (nothing to learn from)"
                                   : "still examples, predicted from no text");
    if (d->n_extra_labels)
        fprintf(f, "%s: note: %s: %ld %s more than one __label__ (first: line %ld); only the first "
                "label is used (mha trains single-label classifiers)\n", prog, path, d->n_extra_labels,
                lines_word(d->n_extra_labels), d->first_extra_labels);
}

/* ---- growing a dataset ------------------------------------------------------------------ */

#define MAX_EXAMPLES (INT32_MAX - 1)   /* examples per file: Dataset.n and the line numbers are 32-bit */

static int grow_examples(Dataset *d) {
    if (d->n + 1 < d->ex_cap) return 0;
    if (d->ex_cap >= MAX_EXAMPLES) return -1;
    int cap = d->ex_cap > MAX_EXAMPLES / 2 ? MAX_EXAMPLES : d->ex_cap ? d->ex_cap * 2 : 1024;
    int32_t *l = realloc(d->labels, (size_t)cap * sizeof *l);
    if (!l) return -1;
    d->labels = l;
    int32_t *ln = realloc(d->line_no, (size_t)cap * sizeof *ln);
    if (!ln) return -1;
    d->line_no = ln;
    int64_t *of = realloc(d->offsets, ((size_t)cap + 1) * sizeof *of);
    if (!of) return -1;
    d->offsets = of;
    d->ex_cap = cap;
    return 0;
}

static int grow_ids(Dataset *d, size_t need) {
    if (need <= d->ids_cap) return 0;
    size_t cap = d->ids_cap ? d->ids_cap : 16384;
    while (cap < need) cap *= 2;
    int32_t *p = realloc(d->ids, cap * sizeof *p);
    if (!p) return -1;
    d->ids = p;
    d->ids_cap = cap;
    return 0;
}

static int oom(MhaError *err, const char *name) {
    return mha_fail(err, MHA_EXIT_DATA, "%s: out of memory while reading", name);
}

int dataset_append(Dataset *d, int32_t label, int32_t line_no, int n_ids, int32_t **ids,
                   const char *name, MhaError *err) {
    if (grow_examples(d)) return oom(err, name);
    if (d->n == 0) d->offsets[0] = 0;
    const int64_t at = d->offsets[d->n];
    if (grow_ids(d, (size_t)at + (size_t)n_ids)) return oom(err, name);
    *ids = n_ids ? d->ids + at : NULL;   /* d->ids is NULL until a token */
    d->labels[d->n] = label;
    d->line_no[d->n] = line_no;
    d->offsets[d->n + 1] = at + n_ids;
    d->n++;
    return 0;
}

/* ---- reading a file --------------------------------------------------------------------- */

typedef struct {
    const char *path;           /* opened */
    const char *name;           /* in messages */
    const ReadOptions *o;
    Dataset *d;
    int train;                  /* ids and labels hold indices into tok_count / lab_count */
    VocabCounter *tok_count, *lab_count;
    const Vocab *vocab;         /* !train */
    const LabelMap *labels;     /* !train; NULL: labels are not read (-1) */
    char *fix;  size_t fix_cap; /* a line with its invalid bytes replaced (replace_invalid) */
} Reader;

/* The Unicode line break that starts s (U+0085 NEL, U+2028, U+2029), as its code point, or 0:
 * what readers that split on them (Python's splitlines, editors) take for a line's end. */
static unsigned unicode_line_break(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] == 0xC2 && u[1] == 0x85) return 0x85;
    if (u[0] == 0xE2 && u[1] == 0x80 && (u[2] == 0xA8 || u[2] == 0xA9)) return 0x2000u + u[2] - 0x80u;
    return 0;
}

/* One parsed line as an example of r->d: its label resolved (interned while training, looked
 * up in r->labels otherwise), its text cut to max_line_bytes and tokenised, its tokens
 * interned or looked up. */
static int add_example(Reader *r, long line_no, const char *label, const char *text,
                       size_t tlen, TokenList *tl, MhaError *err) {
    Dataset *d = r->d;
    const ReadOptions *o = r->o;
    int32_t lab = -1;
    /* a new label (a class, or a row of the --eval report): a JSON label can hold any
     * character, which the reports could not show */
    const int new_label = label && (r->train || (r->labels && o->keep_unknown_labels &&
                                                 labelmap_find(r->labels, label) < 0));
    for (const char *c = label; new_label && *c; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7F)
            return mha_fail(err, MHA_EXIT_DATA, "%s:%ld: label '%.*s' holds the control character 0x%02X "
                            "(expected a label of printable text: a tab or line break would break the "
                            "one-line-per-text output)", r->name, line_no, utf8_shown(label, 200), label,
                            (unsigned char)*c);
        const unsigned lb = unicode_line_break(c);
        if (lb)
            return mha_fail(err, MHA_EXIT_DATA, "%s:%ld: label '%.*s' holds the line break U+%04X (expected a "
                            "label of printable text: a line break would break the one-line-per-text output)",
                            r->name, line_no, utf8_shown(label, 200), label, lb);
    }
    if (label && r->train) {
        lab = vocab_counter_intern(r->lab_count, label, (int)strlen(label));
        if (lab < 0) return oom(err, r->name);
    } else if (label && r->labels) {
        lab = labelmap_find(r->labels, label);
        if (o->keep_unknown_labels)   /* swapped columns? (check_unknown_labels; not for training's dev/test) */
            d->n_text_is_label += labelmap_find_trimmed(r->labels, text, tlen) >= 0;
        if (lab >= 0) {
            d->n_known_label++;
        } else if (o->keep_unknown_labels) {   /* class K + j: evaluated, and wrong whatever is predicted */
            if (!d->unknown_labels && !(d->unknown_labels = vocab_counter_new())) return oom(err, r->name);
            int32_t j = vocab_counter_intern(d->unknown_labels, label, (int)strlen(label));
            if (j < 0) return oom(err, r->name);
            if (!d->n_unknown_label++) d->first_unknown_label = line_no;
            if (j >= MAX_UNKNOWN_LABELS) {
                char known[512], seen[512];
                labelmap_list(r->labels, known, sizeof known);
                dataset_unknown_labels_summary(d, 3, seen, sizeof seen);
                const long n = d->n_known_label + d->n_unknown_label;
                int ids;
                const char *why = unknown_labels_hint(d, &ids);
                return mha_fail(err, MHA_EXIT_DATA, "%s:%ld: more than %d distinct labels that do not occur in "
                                "the training set (%s); expected the training set's labels (%s)%s%s", r->name,
                                line_no, MAX_UNKNOWN_LABELS, seen, known, *why ? "" : ": ",
                                *why ? why
                                : columns_look_swapped(n, d->n_text_is_label, d->n_known_label)
                                    ? "the texts are labels: are the columns swapped? (swap them with "
                                      SWAP_COLUMNS_HINT ")"
                                    : "is it the right file for this model?");
            }
            lab = r->labels->n + j;
        } else {
            char known[1024];
            labelmap_list(r->labels, known, sizeof known);
            const char *hint = strstr(label, "\xEF\xBF\xBD") ? "; the label " GBK_LABEL_HINT : "";
            return mha_fail(err, MHA_EXIT_DATA,
                            "%s:%ld: label '%.*s' does not occur in the training set (known labels: %s)%s",
                            r->name, line_no, utf8_shown(label, 200), label, known, hint);
        }
    }
    if (o->max_line_bytes > 0 && tlen > (size_t)o->max_line_bytes) {
        tlen = utf8_cut(text, (size_t)o->max_line_bytes);
        d->n_long++;
    }
    MhaError terr;
    if (tokenize(&o->tok, text, tlen, tl, &terr))
        return mha_fail(err, MHA_EXIT_DATA, "%s:%ld: %s", r->name, line_no, terr.msg);
    if (d->ex_cap >= MAX_EXAMPLES && d->n + 1 >= d->ex_cap)
        return mha_fail(err, MHA_EXIT_DATA, "%s:%ld: more than %d examples (split the file)", r->name, line_no,
                        MAX_EXAMPLES - 1);
    int32_t *ids;
    int rc = dataset_append(d, lab, (int32_t)line_no, tl->n, &ids, r->name, err);
    if (rc) return rc;
    for (int i = 0; i < tl->n; i++) {
        const char *tok = tl->text + tl->start[i];
        if (r->train) {
            ids[i] = vocab_counter_intern(r->tok_count, tok, tl->len[i]);
            if (ids[i] < 0) return oom(err, r->name);
        } else {
            ids[i] = vocab_lookup(r->vocab, tok, tl->len[i]);
            d->n_unk += ids[i] == VOCAB_UNK;
        }
    }
    d->n_tokens += tl->n;
    return 0;
}

/* One line as getline read it (got bytes), cleaned in place: the LF / CRLF dropped, and a
 * leading UTF-8 byte-order mark (on line 1 a UTF-16 one is an error); then checked for
 * invalid UTF-8 and NUL bytes: an error naming the byte offset in the line, or with
 * tok.replace_invalid NUL bytes read as spaces (as mha-predict reads them) and invalid UTF-8
 * as U+FFFD, in r->fix (a line changed either way counted once in n_replaced). *out and
 * *out_len: the clean line, NUL-terminated. */
static int clean_line(Reader *r, char *line, size_t got, long line_no, char **out, size_t *out_len,
                      MhaError *err) {
    size_t len = got, bom = 0;
    if (len && line[len - 1] == '\n') len--;
    if (len && line[len - 1] == '\r') len--;
    line[len] = '\0';
    char *s = line;
    if (line_no == 1 && is_checkpoint_first_line(s, len))
        return mha_fail(err, MHA_EXIT_DATA, "%s: an mha checkpoint, not a file of labelled texts (expected one "
                        "example per line: 'label<TAB>text', '__label__LABEL text' or " JSONL_SHAPE ")", r->name);
    if (line_no == 1 && utf16_bom(s, len))
        return mha_fail(err, MHA_EXIT_DATA,
                        "%s: the file is UTF-16 (it starts with the byte-order mark %02X %02X); expected "
                        "UTF-8: convert it with 'iconv -f UTF-16 -t UTF-8 %s > NEW'", r->name,
                        (unsigned char)s[0], (unsigned char)s[1], r->name);
    /* a byte-order mark starts the file, or a line of a file that 'cat a.tsv b.tsv' made */
    bom = utf8_bom_length(s, len);
    s += bom;
    len -= bom;
    char *nul = memchr(s, '\0', len);
    int nul_read = 0;
    if (nul && r->o->tok.replace_invalid) {   /* NUL bytes read as spaces, as mha-predict reads them */
        for (char *c = nul; c < s + len; c++)
            if (!*c) *c = ' ';
        nul = NULL;
        nul_read = 1;
        r->d->n_replaced++;
    }
    size_t bad = utf8_check(s, len);
    if (bad < len || nul) {
        int is_nul = nul && (size_t)(nul - s) < bad;
        if (!r->o->tok.replace_invalid)
            return mha_fail(err, MHA_EXIT_DATA, "%s:%ld: %s at byte offset %zu (expected UTF-8 text; %s)",
                            r->name, line_no, is_nul ? "NUL byte" : "invalid UTF-8",
                            (is_nul ? (size_t)(nul - s) : bad) + bom, is_nul ? NUL_HINT : UTF8_HINT);
        if (r->fix_cap < 3 * len + 1) {
            free(r->fix);
            r->fix_cap = 3 * len + 1;
            r->fix = malloc(r->fix_cap);
            if (!r->fix) return oom(err, r->name);
        }
        len = utf8_replace_invalid(s, len, r->fix, 1);
        r->fix[len] = '\0';
        s = r->fix;
        if (!nul_read) r->d->n_replaced++;
    }
    *out = s;
    *out_len = len;
    return 0;
}

/* keep_unknown_labels, once the file is read: a file whose texts are the labels (columns
 * swapped), or that has no label of the training set at all (another dataset's file?), is an
 * error rather than an evaluation where every line is wrong. */
static int check_unknown_labels(Reader *r, MhaError *err) {
    const Dataset *d = r->d;
    const long n = d->n_known_label + d->n_unknown_label;   /* labelled lines */
    char known[512], seen[512];
    if (!d->n_unknown_label) return 0;
    labelmap_list(r->labels, known, sizeof known);
    dataset_unknown_labels_summary(d, 3, seen, sizeof seen);
    if (columns_look_swapped(n, d->n_text_is_label, d->n_known_label))
        return mha_fail(err, MHA_EXIT_DATA, "%s: the label and text look swapped: in %ld of %ld lines the text "
                        "is a label of the training set (%s) and the label is not (first: line %ld); expected "
                        "%s", r->name, d->n_text_is_label, n, known, d->first_unknown_label,
                        d->format == FORMAT_TSV ? "'label<TAB>text': swap the columns with " SWAP_COLUMNS_HINT
                        : d->format == FORMAT_JSONL ? JSONL_SHAPE ": swap the two fields' values"
                                                    : "'__label__LABEL text'");
    int ids;
    const char *why = unknown_labels_hint(d, &ids);
    if (!d->n_known_label)
        return mha_fail(err, MHA_EXIT_DATA, "%s: none of its %ld labelled lines has a label of the training set "
                        "(its labels: %s; the training set's: %s)%s", r->name, n, seen, known,
                        *why ? why : ": is it the right file for this model?");
    if (ids && 2 * d->n_unknown_label > n)   /* ids: a few of them matched numeric classes */
        return mha_fail(err, MHA_EXIT_DATA, "%s: %ld of its %ld labelled lines have a label the training set "
                        "lacks (%s; the training set's: %s)%s", r->name, d->n_unknown_label, n, seen, known, why);
    return 0;
}

/* Reads the file r->path into r->d (dataset_load_train and dataset_load). */
static int read_examples(Reader *r, MhaError *err) {
    const ReadOptions *o = r->o;
    Dataset *d = r->d;
    memset(d, 0, sizeof *d);
    /* /dev/stdin: descriptor 0 itself, from where it stands (reopening the path fails on a
     * socket and starts a file over from its beginning) */
    int dup0 = strcmp(r->path, "/dev/stdin") == 0 ? dup(STDIN_FILENO) : -2;
    FILE *f = dup0 == -2 ? fopen(r->path, "rb") : dup0 >= 0 ? fdopen(dup0, "rb") : NULL;
    if (!f && dup0 >= 0) {
        /* a write-only descriptor 0 is mha_guard_std_fds' stand-in for a closed stdin: said
         * as the read of a closed stream is said */
        int e = errno == EINVAL ? EBADF : errno;
        close(dup0);
        return mha_fail(err, MHA_EXIT_DATA, "%s: read error (%s)", r->name, strerror(e));
    }
    if (!f) return mha_fail(err, MHA_EXIT_DATA, "%s: cannot open (%s)", r->name, strerror(errno));

    int rc = 0, format = o->format;
    int need_label = r->train || r->labels;
    char *line = NULL;
    size_t line_cap = 0;
    size_t keep = o->max_line_bytes > 0 ? 4 * (size_t)o->max_line_bytes : 0;
    if (keep < ((size_t)1 << 20)) keep = (size_t)1 << 20;
    TokenList tl = {0};
    ssize_t got;
    long line_no = 0, first_line = 0;   /* the first non-empty line: the only one a header can be */
    const int skip_no_text = r->train || o->skip_no_text;
    d->no_text_skipped = skip_no_text;
    errno = 0;
    while ((got = getline(&line, &line_cap, f)) >= 0) {
        line_no++;
        d->n_lines++;
        char *s = NULL;
        size_t len = 0;
        if ((rc = clean_line(r, line, (size_t)got, line_no, &s, &len, err))) break;
        if (utf8_is_blank(s)) {   /* nothing but spaces, zero-width characters or BOMs */
            d->n_empty++;
            continue;
        }
        if (!first_line) first_line = line_no;
        if (format == FORMAT_AUTO) {
            format = detect_format(s);
            if (format == FORMAT_PLAIN && need_label) {
                char hint[320];
                rc = mha_fail(err, MHA_EXIT_DATA,
                              "%s:%ld: cannot tell the format: no tab, no __label__ prefix, no JSON "
                              "object (expected 'label<TAB>text', '__label__LABEL text' or " JSONL_SHAPE ")%s",
                              r->name, line_no, format_hint(s, FORMAT_PLAIN, hint, sizeof hint));
                break;
            }
        }
        char *label, *text;
        MhaError perr;
        if (format == FORMAT_FASTTEXT && fasttext_has_extra_label(s) && !d->n_extra_labels++)
            d->first_extra_labels = line_no;
        if (parse_line(s, format, &label, &text, &perr)) {
            rc = mha_fail(err, MHA_EXIT_DATA, "%s:%ld: %s", r->name, line_no, perr.msg);
            break;
        }
        if (format == FORMAT_TSV && label) {
            if (line_no == first_line && is_tsv_header(label, text)) {
                d->header_line = line_no;
                goto next;
            }
            if (strchr(text, '\t') && !d->n_extra_columns++) d->first_extra_columns = line_no;
        }
        if (label && need_label) {   /* a label and no text */
            if (utf8_is_blank(text)) {
                if (!d->n_no_text++) d->first_no_text = line_no;
                if (skip_no_text) goto next;
            }
        }
        if (!need_label) label = NULL;
        else if (!label) {
            rc = mha_fail(err, MHA_EXIT_DATA, "%s:%ld: missing %s (expected %s)", r->name, line_no,
                          format == FORMAT_JSONL ? "field \"label\"" : "label",
                          format == FORMAT_JSONL ? JSONL_SHAPE : "a labelled line");
            break;
        }
        if (format == FORMAT_JSONL &&
            (utf8_check(text, strlen(text)) != strlen(text) ||
             (label && utf8_check(label, strlen(label)) != strlen(label)))) {
            /* a guard: the raw line was checked, and cJSON refuses lone surrogates (json_syntax_check says why) */
            rc = mha_fail(err, MHA_EXIT_DATA,
                          "%s:%ld: a JSON string decodes to invalid UTF-8 (expected valid \\u escapes)",
                          r->name, line_no);
            break;
        }
        rc = add_example(r, line_no, label, text, strlen(text), &tl, err);
        if (rc) break;
    next:
        if (line_cap > keep) {   /* do not hold on to the buffer of one huge line */
            free(line);
            line = NULL;
            line_cap = 0;
        }
        if (r->fix_cap > keep) {
            free(r->fix);
            r->fix = NULL;
            r->fix_cap = 0;
        }
    }
    if (!rc && ferror(f))
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: read error after line %ld (%s)", r->name, line_no,
                      strerror(errno ? errno : EIO));
    d->format = format;
    if (!rc && d->n > 0 && r->labels && o->keep_unknown_labels) rc = check_unknown_labels(r, err);
    if (!rc && d->n == 0) {
        char why[160] = "";   /* what the non-empty lines were */
        if (d->n_no_text)
            snprintf(why, sizeof why, ": %s%ld with a label but no text", d->header_line ? "a header line, " : "",
                     d->n_no_text);
        else if (d->header_line)
            snprintf(why, sizeof why, ": a header line");
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: no examples in %ld line%s%s (expected at least one line "
                      "with text)", r->name, line_no, line_no == 1 ? "" : "s", why);
    }
    free(line);
    free(r->fix);
    r->fix = NULL;
    r->fix_cap = 0;
    token_list_free(&tl);
    fclose(f);
    if (rc) dataset_free(d);
    return rc;
}

static int cmp_label_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int dataset_load_train(const char *path, const ReadOptions *o, int min_count, int max_vocab,
                       Vocab **vocab, LabelMap *labels, Dataset *out, MhaError *err) {
    *vocab = NULL;
    labels->n = 0;
    labels->names = NULL;
    memset(out, 0, sizeof *out);
    if (o->format == FORMAT_PLAIN)
        return mha_fail(err, MHA_EXIT_DATA,
                        "%s: format plain has no labels (expected tsv, fasttext or jsonl for training)",
                        path);
    Reader r = {.path = path, .name = path, .o = o, .d = out, .train = 1};
    r.tok_count = vocab_counter_new();
    r.lab_count = vocab_counter_new();
    int rc = 0;
    int32_t *map = NULL;
    char **names = NULL;
    Vocab *v = NULL;
    if (!r.tok_count || !r.lab_count) {
        rc = oom(err, path);
        memset(out, 0, sizeof *out);
        goto done;
    }
    rc = read_examples(&r, err);
    if (rc) goto done;

    /* labels: sorted names; map interned index -> class id */
    int nl = vocab_counter_size(r.lab_count);
    names = calloc((size_t)nl, sizeof *names);
    map = malloc(((size_t)nl + (size_t)vocab_counter_size(r.tok_count) + 1) * sizeof *map);
    if (!names || !map) goto nomem;
    for (int i = 0; i < nl; i++) {
        names[i] = strdup(vocab_counter_token(r.lab_count, i, NULL, NULL));
        if (!names[i]) goto nomem;
    }
    qsort(names, (size_t)nl, sizeof *names, cmp_label_name);
    labels->n = nl;
    labels->names = names;
    names = NULL;
    for (int i = 0; i < nl; i++) map[i] = labelmap_find(labels, vocab_counter_token(r.lab_count, i, NULL, NULL));
    for (int i = 0; i < out->n; i++) out->labels[i] = map[out->labels[i]];

    /* vocabulary: interned token index -> id */
    v = vocab_build(r.tok_count, min_count, max_vocab);
    if (!v) goto nomem;
    int nt = vocab_counter_size(r.tok_count);
    if (vocab_size(v) == VOCAB_RESERVED && nt > 0) {   /* every token below min_count: a model of [UNK]s */
        long most = 0, count;
        for (int i = 0; i < nt; i++) {
            vocab_counter_token(r.tok_count, i, NULL, &count);
            if (count > most) most = count;
        }
        rc = mha_fail(err, MHA_EXIT_DATA, "%s: data.min_count = %d leaves no token in the vocabulary (the "
                      "most frequent of the %d distinct tokens occurs %ld times; expected data.min_count <= %ld)",
                      path, min_count, nt, most, most);
        dataset_free(out);
        labelmap_free(labels);
        goto done;
    }
    for (int i = 0; i < nt; i++) {
        int len;
        const char *s = vocab_counter_token(r.tok_count, i, &len, NULL);
        map[i] = vocab_lookup(v, s, len);
    }
    out->n_unk = 0;
    int64_t total = out->offsets[out->n];
    for (int64_t i = 0; i < total; i++) {
        out->ids[i] = map[out->ids[i]];
        out->n_unk += out->ids[i] == VOCAB_UNK;
    }
    *vocab = v;
    v = NULL;
    goto done;
nomem:
    rc = oom(err, path);
    dataset_free(out);
    labelmap_free(labels);
done:
    if (names)
        for (int i = 0; i < vocab_counter_size(r.lab_count); i++) free(names[i]);
    free(names);
    free(map);
    vocab_free(v);
    vocab_counter_free(r.tok_count);
    vocab_counter_free(r.lab_count);
    return rc;
}

int dataset_load_named(const char *path, const char *name, const ReadOptions *o, const Vocab *vocab,
                       const LabelMap *labels, Dataset *out, MhaError *err) {
    Reader r = {.path = path, .name = name, .o = o, .d = out, .vocab = vocab, .labels = labels};
    return read_examples(&r, err);
}

int dataset_load(const char *path, const ReadOptions *o, const Vocab *vocab,
                 const LabelMap *labels, Dataset *out, MhaError *err) {
    return dataset_load_named(path, path, o, vocab, labels, out, err);
}

uint64_t dataset_fingerprint(const Dataset *d) {
    uint64_t h = MHA_FNV1A_START;
    const int64_t n = d->n;
    h = mha_fnv1a(h, &n, sizeof n);
    if (d->n <= 0) return h;
    h = mha_fnv1a(h, d->labels, (size_t)d->n * sizeof *d->labels);
    h = mha_fnv1a(h, d->offsets, (size_t)(d->n + 1) * sizeof *d->offsets);
    return mha_fnv1a(h, d->ids, (size_t)d->offsets[d->n] * sizeof *d->ids);
}

void dataset_free(Dataset *d) {
    if (!d) return;
    vocab_counter_free(d->unknown_labels);
    free(d->labels);
    free(d->offsets);
    free(d->ids);
    free(d->line_no);
    memset(d, 0, sizeof *d);
}
