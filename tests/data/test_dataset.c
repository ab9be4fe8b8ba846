/* tests/data/test_dataset.c: the TSV, fastText, JSON Lines and plain readers on files
 * written to a temporary folder: BOM, CRLF, empty and over-long lines, label maps,
 * vocabulary, every malformed form and its "FILE:LINE: ..." message (with the format a line
 * looks like), labels the training set lacked kept as classes of their own
 * (keep_unknown_labels), and the swapped-columns check. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "data/dataset.h"
#include "tests/test_util.h"

static char g_dir[64];
static char g_paths[96][128];
static int g_n_paths;

/* Write a file in the temp folder; returns its path. */
static const char *put(const char *name, const char *content, size_t len) {
    char *p = g_paths[g_n_paths++];
    snprintf(p, 128, "%s/%s", g_dir, name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        exit(1);
    }
    fwrite(content, 1, len, f);
    fclose(f);
    return p;
}
#define PUT(name, lit) put(name, lit, sizeof(lit) - 1)

static ReadOptions opts(int format) {
    ReadOptions o;
    memset(&o, 0, sizeof o);
    o.format = format;
    tokenizer_options_default(&o.tok);
    o.max_line_bytes = 1 << 20;
    return o;
}

/* Tokens of example i joined by '|'. */
static const char *example(const Dataset *d, const Vocab *v, int i) {
    static char buf[4096];
    size_t w = 0;
    buf[0] = '\0';
    for (int64_t k = d->offsets[i]; k < d->offsets[i + 1]; k++) {
        w += (size_t)snprintf(buf + w, sizeof buf - w, "%s%s", k > d->offsets[i] ? "|" : "",
                              vocab_token(v, d->ids[k]));
        if (w >= sizeof buf) break;
    }
    return buf;
}

/* Train on `path` expecting an error whose message equals (or, with prefix=1, starts
 * with) `want`. */
static int train_fails(const char *path, ReadOptions o, const char *want, int prefix) {
    Vocab *v = NULL;
    LabelMap lm = {0, NULL};
    Dataset d;
    MhaError err = {0, ""};
    int rc = dataset_load_train(path, &o, 1, 0, &v, &lm, &d, &err);
    if (rc == 0) {
        fprintf(stderr, "%s: loaded, expected '%s'\n", path, want);
        vocab_free(v);
        labelmap_free(&lm);
        dataset_free(&d);
        return 0;
    }
    int ok = rc == MHA_EXIT_DATA && err.code == MHA_EXIT_DATA && v == NULL && lm.n == 0 &&
             (prefix ? strncmp(err.msg, want, strlen(want)) == 0 : strcmp(err.msg, want) == 0);
    if (!ok) fprintf(stderr, "got  '%s'\nwant '%s'\n", err.msg, want);
    return ok;
}

static char *msg(const char *fmt, const char *path) {
    static char buf[1024];
    snprintf(buf, sizeof buf, fmt, path);
    return buf;
}

static void test_tsv(void) {
    const char *train = PUT("train.tsv",
        "\xEF\xBB\xBF" "酒店\t房间很干净，服务好！\r\n"
        "\r\n"
        "书籍\t这本书很好看\r\n"
        "   \n"
        " b \tHello World 2024\n"
        "酒店\t\n"
        "书籍\t好书\ta\ttab\n");
    ReadOptions o = opts(FORMAT_AUTO);
    Vocab *v = NULL;
    LabelMap lm;
    Dataset d;
    MhaError err = {0, ""};
    int rc = dataset_load_train(train, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0, "load: %s", err.msg);
    if (rc) return;
    CHECK(d.n == 4 && d.n_lines == 7 && d.n_empty == 2 && d.n_long == 0 && d.n_no_text == 1 &&
              d.first_no_text == 6,
          "n %d lines %ld empty %ld long %ld no text %ld", d.n, d.n_lines, d.n_empty, d.n_long, d.n_no_text);
    CHECK(lm.n == 3 && strcmp(lm.names[0], "b") == 0 && strcmp(lm.names[1], "书籍") == 0 &&
              strcmp(lm.names[2], "酒店") == 0,
          "labels sorted by bytes, spaces trimmed");
    CHECK(labelmap_find(&lm, "酒店") == 2 && labelmap_find(&lm, "x") == -1 && labelmap_find(&lm, "") == -1,
          "labelmap_find");
    CHECK(d.labels[0] == 2 && d.labels[1] == 1 && d.labels[2] == 0 && d.labels[3] == 1, "label ids");
    CHECK(d.line_no[0] == 1 && d.line_no[1] == 3 && d.line_no[2] == 5 && d.line_no[3] == 7,
          "line numbers (line 6, a label without text, is skipped)");
    CHECK(strcmp(example(&d, v, 0), "房|间|很|干|净|,|服|务|好|!") == 0, "ex 0: %s", example(&d, v, 0));
    CHECK(strcmp(example(&d, v, 2), "hello|world|2024") == 0, "ex 2: %s", example(&d, v, 2));
    CHECK(strcmp(example(&d, v, 3), "好|书|a|tab") == 0, "later tabs are text: %s", example(&d, v, 3));
    CHECK(d.n_extra_columns == 1 && d.first_extra_columns == 7, "extra columns counted");
    CHECK(d.n_tokens == d.offsets[d.n] && d.n_tokens == 10 + 6 + 3 + 4, "n_tokens %ld", d.n_tokens);
    CHECK(d.n_unk == 0, "min_count 1: no UNK in train");
    CHECK(vocab_lookup(v, "好", 3) == 3, "好 (3 times) is the first id");
    dataset_free(&d);
    vocab_free(v);
    labelmap_free(&lm);

    /* min_count 2 turns singletons into UNK */
    rc = dataset_load_train(train, &o, 2, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && vocab_size(v) == 6, "min_count 2: vocab %d", rc ? -1 : vocab_size(v));
    CHECK(rc == 0 && d.n_unk == d.n_tokens - 7, "n_unk %ld of %ld", d.n_unk, d.n_tokens);

    /* dev: known labels, UNK counting */
    const char *dev = PUT("dev.tsv", "b\t好 zzz\n书籍\t书\n");
    Dataset dd;
    rc = dataset_load(dev, &o, v, &lm, &dd, &err);
    CHECK(rc == 0 && dd.n == 2 && dd.labels[0] == 0 && dd.labels[1] == 1 && dd.n_tokens == 3 && dd.n_unk == 1,
          "dev: %s", rc ? err.msg : "");
    if (!rc) dataset_free(&dd);

    /* unknown label in dev */
    const char *dev2 = PUT("dev2.tsv", "b\tok\n\n酒店\tok\n体育\tgo\n");
    rc = dataset_load(dev2, &o, v, &lm, &dd, &err);
    CHECK(rc == MHA_EXIT_DATA &&
              strcmp(err.msg, msg("%s:4: label '体育' does not occur in the training set (known "
                                  "labels: b, 书籍, 酒店)", dev2)) == 0,
          "unknown label: %s", err.msg);
    CHECK(dd.n == 0 && dd.ids == NULL, "dataset cleared after an error");

    /* no label map: labels ignored */
    rc = dataset_load(dev2, &o, v, NULL, &dd, &err);
    CHECK(rc == 0 && dd.n == 3 && dd.labels[2] == -1, "labels not read without a label map");
    if (!rc) dataset_free(&dd);

    /* plain text for prediction */
    ReadOptions po = opts(FORMAT_PLAIN);
    const char *plain = PUT("plain.txt", "书 好\n\n__label__x 好\n");
    rc = dataset_load(plain, &po, v, NULL, &dd, &err);
    CHECK(rc == 0 && dd.n == 2 && dd.labels[0] == -1 && dd.n_tokens == 2 + 7, "plain: %s",
          rc ? err.msg : "");
    if (!rc) dataset_free(&dd);

    dataset_free(&d);
    vocab_free(v);
    labelmap_free(&lm);
    CHECK(lm.n == 0 && lm.names == NULL, "labelmap_free clears");
}

static void test_fasttext_jsonl(void) {
    ReadOptions o = opts(FORMAT_AUTO);
    Vocab *v = NULL;
    LabelMap lm;
    Dataset d;
    MhaError err = {0, ""};
    const char *ft = PUT("train.ft", "__label__pos __label__extra  great movie\n"
                                     "\n"
                                     "__label__neg\tbad\n"
                                     "__label__pos\n");
    int rc = dataset_load_train(ft, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && d.n == 2 && lm.n == 2 && strcmp(lm.names[0], "neg") == 0, "fasttext: %s", err.msg);
    if (!rc) {
        CHECK(d.labels[0] == 1 && d.labels[1] == 0, "fasttext labels");
        CHECK(strcmp(example(&d, v, 0), "great|movie") == 0, "first label only: %s", example(&d, v, 0));
        CHECK(d.n_no_text == 1 && d.first_no_text == 4 && d.no_text_skipped, "label without text skipped "
              "in training: %ld (line %ld)", d.n_no_text, d.first_no_text);
        CHECK(d.n_extra_labels == 1 && d.first_extra_labels == 1, "extra labels counted: %ld (line %ld)",
              d.n_extra_labels, d.first_extra_labels);
        char *notes = NULL;
        size_t notes_len = 0;
        FILE *nf = open_memstream(&notes, &notes_len);
        dataset_print_notes(&d, "train.ft", "mha-train", nf);
        fclose(nf);
        CHECK(strstr(notes, "mha-train: note: train.ft: 1 line has more than one __label__ (first: line 1); only "
                            "the first label is used (mha trains single-label classifiers)\n") &&
              strstr(notes, "mha-train: note: train.ft: 1 line has a label but no text (first: line 4); skipped "
                            "(nothing to learn from)\n"),
              "notes of a fastText file: %s", notes);
        free(notes);
        dataset_free(&d);
        /* in a dev/test file the line without text stays an example (it is predicted) */
        rc = dataset_load(ft, &o, v, &lm, &d, &err);
        CHECK(rc == 0 && d.n == 3 && d.n_no_text == 1 && !d.no_text_skipped && d.offsets[3] == d.offsets[2],
              "label without text kept in dev: %s", err.msg);
        if (!rc) dataset_free(&d);
        vocab_free(v);
        labelmap_free(&lm);
    }

    const char *js = PUT("train.jsonl",
        "{\"label\": \"酒店\", \"text\": \"很好\\n\\u0041B\"}\n"
        "{\"text\": \"差\", \"label\": 1, \"extra\": [1, 2]}\r\n"
        "\n"
        "  {\"label\": -7, \"text\": \"\"}\n"
        "{\"label\": \" 酒店  \", \"text\": \"好\"}\n");
    rc = dataset_load_train(js, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && d.n == 3 && lm.n == 2, "jsonl (labels lose surrounding spaces, as in TSV; no text "
          "skipped): %s", err.msg);
    if (!rc) {
        CHECK(strcmp(lm.names[0], "1") == 0 && strcmp(lm.names[1], "酒店") == 0,
              "integer labels become strings; the label of a line without text is not a class");
        CHECK(strcmp(example(&d, v, 0), "很|好|ab") == 0, "escapes decoded: %s", example(&d, v, 0));
        CHECK(d.labels[1] == 0 && d.labels[2] == 1 && d.n_empty == 1 && d.n_no_text == 1, "jsonl labels / empty");
        dataset_free(&d);
        vocab_free(v);
        labelmap_free(&lm);
    }

    /* explicit format wins over detection */
    ReadOptions to = opts(FORMAT_TSV);
    const char *tsvlike = PUT("ft_as_tsv.txt", "__label__a\tx\n");
    rc = dataset_load_train(tsvlike, &to, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && lm.n == 1 && strcmp(lm.names[0], "__label__a") == 0, "format tsv forced");
    if (!rc) {
        dataset_free(&d);
        vocab_free(v);
        labelmap_free(&lm);
    }
}

/* What is read in a way a user may not expect: a header line skipped, extra columns and
 * labels counted, UTF-16 refused, a GBK label named as such. */
static void test_surprises(void) {
    ReadOptions o = opts(FORMAT_AUTO);
    Vocab *v = NULL;
    LabelMap lm;
    Dataset d;
    MhaError err = {0, ""};
    const char *p = PUT("hdr.tsv", "\n Label \tText \r\npos\tgood\tand\tmore\nneg\tbad\npos\ta\tb\n");
    int rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && d.n == 3 && lm.n == 2 && d.header_line == 2, "header skipped: rc %d n %d header %ld %s",
          rc, d.n, d.header_line, err.msg);
    if (!rc) {
        CHECK(d.n_extra_columns == 2 && d.first_extra_columns == 3, "extra columns: %ld (line %ld)",
              d.n_extra_columns, d.first_extra_columns);
        CHECK(strcmp(example(&d, v, 0), "good|and|more") == 0, "text after the first tab: %s", example(&d, v, 0));
        dataset_free(&d);
        rc = dataset_load(p, &o, v, &lm, &d, &err);   /* dev/test files too */
        CHECK(rc == 0 && d.n == 3 && d.header_line == 2, "header skipped in dev: %s", err.msg);
        if (!rc) dataset_free(&d);
        /* a GBK label: the unknown-label error says so */
        ReadOptions ro = o;
        ro.tok.replace_invalid = 1;
        const char *g = PUT("gbk_label.tsv", "pos\tok\n\xd5\xe2\tx\n");
        rc = dataset_load(g, &ro, v, &lm, &d, &err);
        CHECK(rc == MHA_EXIT_DATA && strstr(err.msg, ":2: label '") &&
              strstr(err.msg, "bytes that are not UTF-8, read as U+FFFD: if the file is GBK, convert it "
                              "with 'iconv -f GBK -t UTF-8 FILE > NEW'"), "GBK label: %s", err.msg);
        vocab_free(v);
        labelmap_free(&lm);
    }
    /* the headers ChnSentiCorp (PaddleNLP's copy) and online_shopping_10_cats come with */
    static const char *const headers[] = {"label\ttext_a\n", "cat\treview\n", "类别\t正文\n"};
    for (int h = 0; h < 3; h++) {
        char body[64];
        snprintf(body, sizeof body, "%spos\tgood\nneg\tbad\n", headers[h]);
        p = put("hdr2.tsv", body, strlen(body));
        rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
        CHECK(rc == 0 && d.n == 2 && lm.n == 2 && d.header_line == 1, "header %d not skipped: rc %d n %d %s", h,
              rc, d.n, err.msg);
        if (!rc) {
            dataset_free(&d);
            vocab_free(v);
            labelmap_free(&lm);
        }
    }
    /* a class really called "label" is not a header when its text is not a column name */
    p = PUT("label_class.tsv", "label\tsome text\nother\tx\nlabel\ty\n");
    rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && d.n == 3 && d.header_line == 0 && lm.n == 2, "class 'label' kept: %s", err.msg);
    if (!rc) {
        dataset_free(&d);
        vocab_free(v);
        labelmap_free(&lm);
    }
    /* only the first non-empty line can be a header, in training and dev alike (a line without
     * text before it is skipped by the training reader only) */
    p = PUT("hdr_after_no_text.tsv", "\na\t\nlabel\ttext\nb\tx\n");
    rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && d.n == 2 && d.header_line == 0 && d.n_no_text == 1, "no header after a line: %s", err.msg);
    if (!rc) {
        dataset_free(&d);
        ReadOptions skip = o;
        rc = dataset_load(p, &skip, v, &lm, &d, &err);
        CHECK(rc == MHA_EXIT_DATA && strstr(err.msg, ":2: label 'a' does not occur"), "dev keeps it: %s", err.msg);
        skip.skip_no_text = 1;   /* the training file on resume */
        rc = dataset_load(p, &skip, v, &lm, &d, &err);
        CHECK(rc == 0 && d.n == 2 && d.no_text_skipped && d.line_no[0] == 3, "skip_no_text: %s", err.msg);
        if (!rc) dataset_free(&d);
        vocab_free(v);
        labelmap_free(&lm);
    }
    /* nothing left: the message says what the lines were */
    p = PUT("all_no_text.tsv", "a\t\nb\t  \n");
    CHECK(train_fails(p, o, msg("%s: no examples in 2 lines: 2 with a label but no text (expected at least one "
                                "line with text)", p), 0), "only lines without text");
    p = PUT("only_hdr.tsv", "label\ttext\n");
    CHECK(train_fails(p, o, msg("%s: no examples in 1 line: a header line (expected at least one line with text)",
                                p), 0), "only a header");
    /* only the first line can be a header */
    p = PUT("late_hdr.tsv", "pos\tx\nlabel\ttext\n");
    rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && d.n == 2 && d.header_line == 0, "a later 'label<TAB>text' is data: %s", err.msg);
    if (!rc) {
        dataset_free(&d);
        vocab_free(v);
        labelmap_free(&lm);
    }
    /* UTF-16, either byte order, even with replace_invalid */
    p = put("u16.tsv", "\xFF\xFEp\0o\0s\0\t\0x\0\n\0", 14);
    CHECK(train_fails(p, o, msg("%s: the file is UTF-16 (it starts with the byte-order mark FF FE); expected "
                                "UTF-8: convert it with 'iconv -f UTF-16 -t UTF-8 ", p), 1), "UTF-16 LE");
    ReadOptions ro = o;
    ro.tok.replace_invalid = 1;
    p = put("u16be.tsv", "\xFE\xFF\0p\0\t\0x\0\n", 10);
    CHECK(train_fails(p, ro, msg("%s: the file is UTF-16 (it starts with the byte-order mark FE FF)", p), 1),
          "UTF-16 BE with replace_invalid");
}

static void test_errors(void) {
    ReadOptions o = opts(FORMAT_AUTO);
    const char *p;
    p = PUT("notab.tsv", "a\tx\nb\tx\nno tab here\n");
    CHECK(train_fails(p, o, msg("%s:3: no tab between label and text (expected 'label<TAB>text')", p), 0),
          "no tab");
    p = PUT("nolabel.tsv", "a\tx\n  \tx\n");
    CHECK(train_fails(p, o, msg("%s:2: empty label (expected 'label<TAB>text' with a non-empty label)", p), 0),
          "empty label");
    p = PUT("plain.tsv", "\nno format\n");
    CHECK(train_fails(p, o, msg("%s:2: cannot tell the format", p), 1), "undetectable format");
    CHECK(train_fails(p, opts(FORMAT_PLAIN), msg("%s: format plain has no labels", p), 1), "plain training");
    p = PUT("ft.txt", "__label__a x\nplain line\n");
    CHECK(train_fails(p, o, msg("%s:2: missing __label__ prefix (expected '__label__LABEL text')", p), 0),
          "fasttext without prefix");
    p = PUT("ft2.txt", "__label__ x\n");
    CHECK(train_fails(p, o, msg("%s:1: empty label after __label__ (expected '__label__LABEL text')", p), 0),
          "fasttext empty label");
    p = PUT("bad.jsonl", "{\"label\": \"a\", \"text\": \"x\"}\n{\"label\": \"a\", \"text\": \"x\"\n");
    CHECK(train_fails(p, o, msg("%s:2: bad JSON at byte offset 26 (expected ',' or '}'); each line "
                                "holds one JSON object {\"label\": ..., \"text\": ...}", p), 0),
          "bad JSON: where and what was expected");
    p = PUT("comma.jsonl", "{\"label\": \"a\", \"text\": \"x\",}\n");
    CHECK(train_fails(p, o, msg("%s:1: bad JSON at byte offset 27 near '}' (expected another \"key\" "
                                "after ','; JSON has no trailing commas)", p), 1),
          "bad JSON: trailing comma");
    p = PUT("trail.jsonl", "{\"label\": \"a\", \"text\": \"x\"} x\n");
    CHECK(train_fails(p, o, msg("%s:1: bad JSON at byte offset 28 near 'x' (expected nothing after the "
                                "top-level value)", p), 1),
          "trailing garbage");
    p = PUT("arr.jsonl", "{\"label\": \"a\", \"text\": \"x\"}\n[1]\n");
    CHECK(train_fails(p, opts(FORMAT_JSONL), msg("%s:2: the line is an array (expected a JSON object", p), 1),
          "not an object");
    p = PUT("obj.jsonl", "{\"label\": \"a\", \"text\": {\"zh\": \"x\"}}\n");
    CHECK(train_fails(p, o, msg("%s:1: field \"text\" is an object (expected a string)", p), 0), "text an object");
    p = PUT("surrogate.jsonl", "{\"label\": \"a\", \"text\": \"ok\"}\n{\"label\": \"a\", \"text\": \"x\\ud800y\"}\n");
    CHECK(train_fails(p, o, msg("%s:2: bad JSON at byte offset 25 near '\\ud800y\"}' (expected a high surrogate "
                                "\\uD800-\\uDBFF followed by a low one \\uDC00-\\uDFFF); each line holds one JSON "
                                "object {\"label\": ..., \"text\": ...}", p), 0),
          "lone surrogate escape");
    p = PUT("notext.jsonl", "{\"label\": \"a\"}\n");
    CHECK(train_fails(p, o, msg("%s:1: missing field \"text\" (expected {\"label\": ..., \"text\": ...})", p), 0),
          "missing text");
    p = PUT("numtext.jsonl", "{\"label\": \"a\", \"text\": 5}\n");
    CHECK(train_fails(p, o, msg("%s:1: field \"text\" is a number (expected a string)", p), 0), "text type");
    p = PUT("nolab.jsonl", "{\"text\": \"x\"}\n");
    CHECK(train_fails(p, o, msg("%s:1: missing field \"label\" (expected {\"label\": ..., \"text\": ...})", p), 0),
          "missing label");
    p = PUT("flt.jsonl", "{\"label\": 1.5, \"text\": \"x\"}\n");
    CHECK(train_fails(p, o, msg("%s:1: field \"label\" is a number that is not an integer (expected a "
                                "string or an integer)", p), 0),
          "float label");
    p = PUT("bool.jsonl", "{\"label\": true, \"text\": \"x\"}\n");
    CHECK(train_fails(p, o, msg("%s:1: field \"label\" is a boolean (expected a string or an integer)", p), 0),
          "bool label");
    p = PUT("emptylab.jsonl", "{\"label\": \"\", \"text\": \"x\"}\n");
    CHECK(train_fails(p, o, msg("%s:1: empty label", p), 1), "empty JSON label");
    p = PUT("surr.jsonl", "{\"label\": \"a\", \"text\": \"\\ud800\"}\n");
    {   /* a lone surrogate escape: rejected by cJSON or by the UTF-8 check, never loaded */
        Vocab *v = NULL;
        LabelMap lm = {0, NULL};
        Dataset d;
        MhaError err = {0, ""};
        int rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
        CHECK(rc == MHA_EXIT_DATA && strstr(err.msg, ":1: "), "lone surrogate: %s", err.msg);
        if (!rc) {
            dataset_free(&d);
            vocab_free(v);
            labelmap_free(&lm);
        }
    }
    p = PUT("empty.tsv", "\n\r\n   \n");
    CHECK(train_fails(p, o, msg("%s: no examples in 3 lines", p), 1), "no examples");
    char missing[160];
    snprintf(missing, sizeof missing, "%s/does-not-exist.tsv", g_dir);
    CHECK(train_fails(missing, o, msg("%s: cannot open (No such file or directory)", missing), 0), "missing file");

    /* invalid UTF-8 and NUL bytes: offsets in the line (the BOM counts) */
    p = PUT("bad8.tsv", "\xEF\xBB\xBF" "a\tok\na\tb\xC3(\n");
    CHECK(train_fails(p, o, msg("%s:2: invalid UTF-8 at byte offset 3 (expected UTF-8 text; a GBK file "
                                "(common for Chinese text) converts with 'iconv -f GBK -t UTF-8 FILE > NEW'; "
                                "to read a few bad bytes as U+FFFD instead, set data.replace_invalid=true)", p), 0),
          "invalid UTF-8");
    p = PUT("bad8b.tsv", "\xEF\xBB\xBF" "a\to\xFFk\n");
    CHECK(train_fails(p, o, msg("%s:1: invalid UTF-8 at byte offset 6 ", p), 1), "offset counts the BOM");
    p = PUT("nul.tsv", "a\tok\na\tb\0c\n");
    CHECK(train_fails(p, o, msg("%s:2: NUL byte at byte offset 3 (expected UTF-8 text; a UTF-16 file "
                                "converts with 'iconv -f UTF-16LE -t UTF-8 FILE > NEW' (or UTF-16BE); to read NUL bytes "
                                "as spaces instead, set data.replace_invalid=true)", p), 0),
          "NUL byte");
    ReadOptions ro = o;
    ro.tok.replace_invalid = 1;
    p = PUT("fix.tsv", "a\tb\xC3(\na\tx\0y\nl\xFF\tz\n");
    Vocab *v = NULL;
    LabelMap lm;
    Dataset d;
    MhaError err = {0, ""};
    int rc = dataset_load_train(p, &ro, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && d.n == 3, "replace_invalid loads: %s", err.msg);
    if (!rc) {
        CHECK(strcmp(example(&d, v, 0), "b|\xEF\xBF\xBD|(") == 0, "replaced: %s", example(&d, v, 0));
        CHECK(strcmp(example(&d, v, 1), "x|y") == 0, "NUL read as a space, as mha-predict does: %s",
              example(&d, v, 1));
        CHECK(lm.n == 2 && strcmp(lm.names[1], "l\xEF\xBF\xBD") == 0, "label replaced");
        dataset_free(&d);
        vocab_free(v);
        labelmap_free(&lm);
    }
}

static void test_long_lines(void) {
    /* 100 CJK characters (300 bytes) cut at 100 bytes -> 33 characters */
    char buf[4096];
    size_t w = 0;
    w += (size_t)snprintf(buf + w, sizeof buf - w, "x\tshort\n");
    w += (size_t)snprintf(buf + w, sizeof buf - w, "y\t");
    for (int i = 0; i < 100; i++) w += (size_t)snprintf(buf + w, sizeof buf - w, "好");
    w += (size_t)snprintf(buf + w, sizeof buf - w, "\nz\t");
    for (int i = 0; i < 150; i++) buf[w++] = 'a';
    buf[w++] = '\n';
    const char *p = put("long.tsv", buf, w);
    ReadOptions o = opts(FORMAT_AUTO);
    o.max_line_bytes = 100;
    Vocab *v = NULL;
    LabelMap lm;
    Dataset d;
    MhaError err = {0, ""};
    int rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && d.n == 3 && d.n_long == 2, "long lines: %s n_long %ld", err.msg, d.n_long);
    if (!rc) {
        CHECK(d.offsets[2] - d.offsets[1] == 33, "cut at a character boundary: %lld tokens",
              (long long)(d.offsets[2] - d.offsets[1]));
        CHECK(d.offsets[3] - d.offsets[2] == 1 && strlen(vocab_token(v, d.ids[d.offsets[2]])) == 100,
              "Latin run cut at 100 bytes");
        dataset_free(&d);
        vocab_free(v);
        labelmap_free(&lm);
    }
    /* a very long line (3 MB) is read whole, cut, and its buffer released */
    size_t big = 3u << 20;
    char *s = malloc(big + 8);
    memcpy(s, "a\t", 2);
    memset(s + 2, 'a', big - 2);
    s[big] = '\n';
    memcpy(s + big + 1, "b\tok\n", 5);
    p = put("huge.tsv", s, big + 6);
    free(s);
    o.max_line_bytes = 1000;
    rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && d.n == 2 && d.n_long == 1 && d.offsets[1] == 1, "huge line: %s", err.msg);
    if (!rc) {
        dataset_free(&d);
        vocab_free(v);
        labelmap_free(&lm);
    }
}

static void test_parse_line(void) {
    char line[256];
    char *label, *text;
    MhaError err;
    CHECK(detect_format("__label__a b") == FORMAT_FASTTEXT && detect_format("{\"a\":1}") == FORMAT_JSONL &&
              detect_format("a\tb") == FORMAT_TSV && detect_format("plain text") == FORMAT_PLAIN &&
              detect_format("\xEF\xBB\xBF{}") == FORMAT_JSONL && detect_format("") == FORMAT_PLAIN &&
              detect_format("\xEF") == FORMAT_PLAIN,
          "detect_format");
    CHECK(format_from_name("auto") == FORMAT_AUTO && format_from_name("tsv") == FORMAT_TSV &&
              format_from_name("fasttext") == FORMAT_FASTTEXT && format_from_name("jsonl") == FORMAT_JSONL &&
              format_from_name("plain") == FORMAT_PLAIN && format_from_name("csv") == -1,
          "format_from_name");
    strcpy(line, "酒店\t很好");
    CHECK(parse_line(line, FORMAT_AUTO, &label, &text, &err) == 0 && strcmp(label, "酒店") == 0 &&
              strcmp(text, "很好") == 0, "tsv line");
    strcpy(line, "{\"label\":\"x\",\"text\":\"t\\u00e9\"}");
    CHECK(parse_line(line, FORMAT_JSONL, &label, &text, &err) == 0 && strcmp(label, "x") == 0 &&
              strcmp(text, "t\xC3\xA9") == 0, "json line");
    strcpy(line, "{\"text\":\"only\"}");
    CHECK(parse_line(line, FORMAT_JSONL, &label, &text, &err) == 0 && label == NULL &&
              strcmp(text, "only") == 0, "json line without label");
    /* \u0000 would end the decoded C string there: refused (before: the text was cut) */
    strcpy(line, "{\"label\":\"x\",\"text\":\"ab\\u0000cd\"}");
    CHECK(parse_line(line, FORMAT_JSONL, &label, &text, &err) == MHA_EXIT_DATA &&
              strstr(err.msg, "a string holds \\u0000, a NUL character"), "json \\u0000 refused");
    strcpy(line, "{\"text\":\"ab\\\\u0000cd\"}");   /* an escaped backslash, then "u0000" */
    CHECK(parse_line(line, FORMAT_JSONL, &label, &text, &err) == 0 && strcmp(text, "ab\\u0000cd") == 0,
          "json \\\\u0000 is text");
    strcpy(line, "just text\there");
    CHECK(parse_line(line, FORMAT_PLAIN, &label, &text, &err) == 0 && label == NULL && text == line,
          "plain line");
    strcpy(line, "x");
    CHECK(parse_line(line, 42, &label, &text, &err) == MHA_EXIT_DATA && strstr(err.msg, "unknown format"),
          "unknown format");
}

/* Blank characters beyond ASCII (data/utf8.h): a byte-order mark mid-file (cat a.tsv b.tsv)
 * and labels ending in U+3000 or NBSP make no new class; a line of U+3000 and ZWSP is empty;
 * a text of U+3000 / NBSP / ZWSP is "a label but no text", in TSV and JSON Lines alike. */
static void test_unicode_blanks(void) {
    ReadOptions o = opts(FORMAT_TSV);
    Vocab *v = NULL;
    LabelMap lm = {0, NULL};
    Dataset d;
    MhaError err = {0, ""};
    const char *p = PUT("blanks2.tsv", "a\tx\n"
                           "\xEF\xBB\xBF" "a\ty\n"
                           "a\xE3\x80\x80\tz\n"
                           "\xC2\xA0" "b\xC2\xA0\tw\n"
                           "\xE3\x80\x80\xE2\x80\x8B \n"
                           "b\t\xE3\x80\x80\xC2\xA0\xE2\x80\x8B\n");
    int rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0, "blanks2.tsv loads: %s", err.msg);
    if (!rc) {
        CHECK(lm.n == 2 && !strcmp(lm.names[0], "a") && !strcmp(lm.names[1], "b"),
              "labels a and b only: %d (%s)", lm.n, lm.n > 2 ? lm.names[2] : "");
        CHECK(d.n == 4 && d.n_empty == 1 && d.n_no_text == 1 && d.first_no_text == 6,
              "4 examples, 1 empty line, line 6 without text: %d %ld %ld %ld", d.n, d.n_empty,
              d.n_no_text, d.first_no_text);
        CHECK(!strcmp(example(&d, v, 1), "y"), "the mid-file BOM is not text: %s", example(&d, v, 1));
        dataset_free(&d), vocab_free(v), labelmap_free(&lm);
    }
    p = PUT("blanks.jsonl", "{\"label\": \"b\\u3000\", \"text\": \"v\"}\n"
                            "{\"label\": \" b\", \"text\": \"\\u3000\\u200b\"}\n"
                            "{\"label\": \"a\", \"text\": \"u\"}\n");
    o.format = FORMAT_AUTO;
    v = NULL;
    rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && lm.n == 2 && d.n == 2 && d.n_no_text == 1, "JSON Lines: labels trimmed of U+3000, "
          "blank text: rc %d labels %d n %d no text %ld (%s)", rc, lm.n, d.n, d.n_no_text, err.msg);
    if (!rc) dataset_free(&d), vocab_free(v), labelmap_free(&lm);
    p = PUT("blanks.ft", "__label__a\xE3\x80\x80 x\n__label__a y\n__label__b z\n");
    v = NULL;
    rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0 && lm.n == 2, "fastText: a label trimmed of U+3000: rc %d labels %d (%s)", rc, lm.n, err.msg);
    if (!rc) dataset_free(&d), vocab_free(v), labelmap_free(&lm);
    p = PUT("blank-label.ft", "__label__a x\n__label__\xE2\x80\x8B y\n");
    CHECK(train_fails(p, o, msg("%s:2: empty label after __label__", p), 1), "fastText: a label of only ZWSP");
}

/* The training set's fingerprint (what --resume compares): the same for the same file, another
 * when only one label changed (same length, same tokens). */
static void test_fingerprint(void) {
    ReadOptions o = opts(FORMAT_TSV);
    const char *files[3] = {PUT("fp1.tsv", "a\tx y\nb\tz\na\tw\n"), PUT("fp2.tsv", "a\tx y\nb\tz\na\tw\n"),
                            PUT("fp3.tsv", "a\tx y\nb\tz\nb\tw\n")};
    uint64_t fp[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        Vocab *v = NULL;
        LabelMap lm = {0, NULL};
        Dataset d;
        MhaError err = {0, ""};
        int rc = dataset_load_train(files[i], &o, 1, 0, &v, &lm, &d, &err);
        CHECK(rc == 0, "%s: %s", files[i], err.msg);
        if (rc) continue;
        fp[i] = dataset_fingerprint(&d);
        dataset_free(&d), vocab_free(v), labelmap_free(&lm);
    }
    CHECK(fp[0] == fp[1], "the same data, another fingerprint");
    CHECK(fp[0] != fp[2], "one label changed, the same fingerprint");
}

/* A line in another format than the one set: the message says which it looks like. */
static void test_format_hints(void) {
    const char *p;
    p = PUT("j.jsonl", "{\"label\": \"a\", \"text\": \"x\"}\n");
    CHECK(train_fails(p, opts(FORMAT_TSV), msg("%s:1: no tab between label and text (expected 'label<TAB>text'); "
                                                "the line looks like JSON Lines: set data.format to \"jsonl\" (or "
                                                "\"auto\")", p), 0), "JSON Lines read as TSV");
    p = PUT("f.txt", "  __label__a x\n");
    CHECK(train_fails(p, opts(FORMAT_TSV), msg("%s:1: no tab between label and text (expected 'label<TAB>text'); "
                                                "the line looks like fastText: set data.format to \"fasttext\" (or "
                                                "\"auto\")", p), 0), "fastText read as TSV");
    p = PUT("t.tsv", "a\tx\n");
    CHECK(train_fails(p, opts(FORMAT_FASTTEXT), msg("%s:1: missing __label__ prefix (expected '__label__LABEL text'); "
                                                     "the line looks like TSV: set data.format to \"tsv\" (or \"auto\")",
                                                     p), 0), "TSV read as fastText");
    CHECK(train_fails(p, opts(FORMAT_JSONL), msg("%s:1: bad JSON at byte offset 0", p), 1), "TSV read as JSON Lines");
    {   /* the hint ends the JSON message */
        Vocab *v = NULL;
        LabelMap lm = {0, NULL};
        Dataset d;
        MhaError err = {0, ""};
        ReadOptions o = opts(FORMAT_JSONL);
        int rc = dataset_load_train(p, &o, 1, 0, &v, &lm, &d, &err);
        const char *want = "; the line looks like TSV: set data.format to \"tsv\" (or \"auto\")";
        size_t n = strlen(err.msg), w = strlen(want);
        CHECK(rc == MHA_EXIT_DATA && n > w && strcmp(err.msg + n - w, want) == 0, "TSV read as JSON: %s", err.msg);
    }
    /* CSV: with format auto, and with tsv set */
    p = PUT("c.csv", "label,text\n体育,篮球,足球\n");
    const char *csv = "; the line looks like CSV (comma-separated), and mha reads TSV: convert simple CSV with "
                      "sed 's/,/\\t/' FILE > NEW (the first comma of each line becomes a tab; for quoted fields use "
                      "Python's csv module)";
    char want[1024];
    snprintf(want, sizeof want, "%s:1: cannot tell the format: no tab, no __label__ prefix, no JSON object (expected "
             "'label<TAB>text', '__label__LABEL text' or {\"label\": ..., \"text\": ...})%s", p, csv);
    CHECK(train_fails(p, opts(FORMAT_AUTO), want, 0), "CSV with format auto");
    snprintf(want, sizeof want, "%s:1: no tab between label and text (expected 'label<TAB>text')%s", p, csv);
    CHECK(train_fails(p, opts(FORMAT_TSV), want, 0), "CSV with format tsv");
    /* mha-predict's wording: its option */
    format_hint_set_cli(1);
    p = PUT("j2.jsonl", "{\"label\": \"a\", \"text\": \"x\"}\n");
    CHECK(train_fails(p, opts(FORMAT_TSV), msg("%s:1: no tab between label and text (expected 'label<TAB>text'); "
                                                "the line looks like JSON Lines: give --input-format jsonl (or auto)",
                                                p), 0), "JSON Lines read as TSV, mha-predict's words");
    format_hint_set_cli(0);
    /* nothing to say: a line of plain text */
    p = PUT("n.tsv", "a\tx\nplain text\n");
    CHECK(train_fails(p, opts(FORMAT_TSV), msg("%s:2: no tab between label and text (expected 'label<TAB>text')", p), 0),
          "no hint for a plain line");
    CHECK(columns_look_swapped(10, 9, 1) && !columns_look_swapped(10, 8, 0) && !columns_look_swapped(10, 10, 2) &&
              columns_look_swapped(1, 1, 0) && !columns_look_swapped(0, 0, 0), "columns_look_swapped thresholds");
}

/* dev/test files with keep_unknown_labels (mha-predict --eval): a label the training set lacked
 * is class K + j, counted and named; a file of no known label, or with label and text swapped,
 * is an error. Without the option it stays an error at the line (mha-train's dev and test). */
static void test_unknown_labels(void) {
    const char *train = PUT("u_train.tsv", "a\t好\nb\t书\na\t好书\n");
    ReadOptions o = opts(FORMAT_AUTO);
    Vocab *v = NULL;
    LabelMap lm;
    Dataset d, dd;
    MhaError err = {0, ""};
    int rc = dataset_load_train(train, &o, 1, 0, &v, &lm, &d, &err);
    CHECK(rc == 0, "train: %s", err.msg);
    if (rc) return;
    ReadOptions ko = o;
    ko.keep_unknown_labels = 1;
    const char *dev = PUT("u_dev.tsv", "a\t好\nc\t书\n d \t好\nc\tb\nb\t书\nc\t好\n");
    rc = dataset_load(dev, &ko, v, &lm, &dd, &err);
    CHECK(rc == 0, "unknown labels kept: %s", err.msg);
    if (!rc) {
        long c0 = 0, c1 = 0;
        const char *n0 = dataset_unknown_label(&dd, 0, &c0), *n1 = dataset_unknown_label(&dd, 1, &c1);
        CHECK(dd.n == 6 && dd.labels[0] == 0 && dd.labels[1] == 2 && dd.labels[2] == 3 && dd.labels[3] == 2 &&
                  dd.labels[4] == 1 && dd.labels[5] == 2, "classes: K + j for unknown label j");
        CHECK(dataset_unknown_label_count(&dd) == 2 && !strcmp(n0, "c") && c0 == 3 && !strcmp(n1, "d") && c1 == 1,
              "unknown labels: %d, '%s' x%ld, '%s' x%ld", dataset_unknown_label_count(&dd), n0, c0, n1, c1);
        CHECK(dd.n_unknown_label == 4 && dd.first_unknown_label == 2 && dd.n_known_label == 2 && dd.n_text_is_label == 1,
              "counts: unknown %ld (first %ld), known %ld, text is a label %ld", dd.n_unknown_label,
              dd.first_unknown_label, dd.n_known_label, dd.n_text_is_label);
        char sum[256];
        dataset_unknown_labels_summary(&dd, 5, sum, sizeof sum);
        CHECK(!strcmp(sum, "'c' (3 lines), 'd' (1 line)"), "summary: %s", sum);
        dataset_unknown_labels_summary(&dd, 1, sum, sizeof sum);
        CHECK(!strcmp(sum, "'c' (3 lines), and 1 more"), "summary of 1: %s", sum);
        dataset_free(&dd);
        CHECK(dd.unknown_labels == NULL, "dataset_free frees the unknown labels");
    }
    /* without the option (mha-train's dev/test): the error at the first one, as before */
    rc = dataset_load(dev, &o, v, &lm, &dd, &err);
    CHECK(rc == MHA_EXIT_DATA && strstr(err.msg, ":2: label 'c' does not occur in the training set (known labels: a, b)"),
          "without keep_unknown_labels: %s", err.msg);
    /* no known label at all */
    const char *none = PUT("u_none.tsv", "x\t好\ny\t书\nx\t好\n");
    rc = dataset_load(none, &ko, v, &lm, &dd, &err);
    CHECK(rc == MHA_EXIT_DATA && !strcmp(err.msg, msg("%s: none of its 3 labelled lines has a label of the training "
                                                      "set (its labels: 'x' (2 lines), 'y' (1 line); the training set's: "
                                                      "a, b): is it the right file for this model?", none)),
          "no known label: %s", err.msg);
    /* label and text swapped: 9 of 10 texts are labels, no label is */
    const char *sw = PUT("u_sw.tsv", "好\ta\n书\tb\n好书\ta\n好\t a\n书\tb\n好\ta\n书\tb\n好\ta\n书\tb\n好书好\tc\n");
    rc = dataset_load(sw, &ko, v, &lm, &dd, &err);
    CHECK(rc == MHA_EXIT_DATA && !strcmp(err.msg, msg("%s: the label and text look swapped: in 9 of 10 lines the text "
                                                      "is a label of the training set (a, b) and the label is not (first: "
                                                      "line 1); expected 'label<TAB>text': swap the columns with awk "
                                                      "-F'\\t' -v OFS='\\t' '{print $2, $1}' FILE > NEW", sw)),
          "swapped: %s", err.msg);
    /* more distinct unknown labels than a report can hold: an error at the first one too many */
    {
        static char many[1100 * 16];
        size_t w = (size_t)snprintf(many, sizeof many, "a\t好\n");
        for (int i = 0; i <= MAX_UNKNOWN_LABELS; i++) w += (size_t)snprintf(many + w, sizeof many - w, "x%d\t好\n", i);
        const char *p = put("u_many.tsv", many, w);
        rc = dataset_load(p, &ko, v, &lm, &dd, &err);
        char want[256];
        snprintf(want, sizeof want, "%s:%d: more than %d distinct labels that do not occur in the training set "
                 "('x0' (1 line), 'x1' (1 line), 'x2' (1 line), and %d more); expected the training set's labels (a, b): "
                 "is it the right file for this model?", p, MAX_UNKNOWN_LABELS + 2, MAX_UNKNOWN_LABELS, MAX_UNKNOWN_LABELS - 2);
        CHECK(rc == MHA_EXIT_DATA && !strcmp(err.msg, want), "too many unknown labels: %s", err.msg);
    }
    /* a JSON label the reports could not show */
    const char *ctl = PUT("u_ctl.jsonl", "{\"label\": \"a\", \"text\": \"好\"}\n{\"label\": \"x\\ny\", \"text\": \"好\"}\n");
    rc = dataset_load(ctl, &ko, v, &lm, &dd, &err);
    CHECK(rc == MHA_EXIT_DATA && strstr(err.msg, ":2: label 'x\ny' holds the control character 0x0A"),
          "control character in an unknown label: %s", err.msg);
    /* ... nor a Unicode line break (before: accepted; the output then split into more lines for
     * readers that break on them) */
    const char *breaks[3][2] = {{"\\u0085", "0085"}, {"\\u2028", "2028"}, {"\\u2029", "2029"}};
    for (int i = 0; i < 3; i++) {
        char text[200], want[120];
        snprintf(text, sizeof text, "{\"label\": \"a\", \"text\": \"好\"}\n{\"label\": \"x%sy\", \"text\": \"好\"}\n",
                 breaks[i][0]);
        const char *lb = put("u_break.jsonl", text, strlen(text));
        rc = dataset_load(lb, &ko, v, &lm, &dd, &err);
        snprintf(want, sizeof want, ":2: label 'x%sy' holds the line break U+%s",
                 i == 0 ? "\xC2\x85" : i == 1 ? "\xE2\x80\xA8" : "\xE2\x80\xA9", breaks[i][1]);
        CHECK(rc == MHA_EXIT_DATA && strstr(err.msg, want), "line break U+%s in a label: %s", breaks[i][1], err.msg);
    }
    /* a long label in a message is cut at a character boundary (before: at byte 200, mid-character) */
    char longlabel[400] = "{\"label\": \"a";
    for (int i = 0; i < 100; i++) strcat(longlabel, "体");
    strcat(longlabel, "\", \"text\": \"好\"}\n");
    ReadOptions strict = o;
    strict.keep_unknown_labels = 0;
    rc = dataset_load(put("u_long.jsonl", longlabel, strlen(longlabel)), &strict, v, &lm, &dd, &err);
    const char *q = strstr(err.msg, "label '");
    const char *endq = q ? strchr(q + 7, '\'') : NULL;
    CHECK(rc == MHA_EXIT_DATA && endq && (endq - (q + 7)) == 1 + 3 * 66,
          "a long label is not cut at a character boundary (1 + 3 x 66 bytes): %s", err.msg);
    dataset_free(&d);
    vocab_free(v);
    labelmap_free(&lm);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/mha-test-data-XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_parse_line();
    test_tsv();
    test_fasttext_jsonl();
    test_errors();
    test_surprises();
    test_long_lines();
    test_unicode_blanks();
    test_fingerprint();
    test_format_hints();
    test_unknown_labels();
    for (int i = 0; i < g_n_paths; i++) unlink(g_paths[i]);
    rmdir(g_dir);
    return test_finish("test_dataset");
}
