/* tests/model/test_metrics.c: model/metrics.c against hand-computed values: accuracy, mean
 * loss, per-class precision/recall/F1/support, macro-F1 over the classes that occur (in the
 * truth or the predictions), the JSON form, and the text report's layout (CJK labels are two
 * columns wide: every row of the confusion matrix lines up with its header); gold labels the
 * model does not know (sklearn's convention: classes of their own, recall 0, in macro-F1);
 * names of other widths (combining marks, half-width kana) and longer than any buffer. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* wcwidth */
#endif
#include "model/metrics.h"
#include "tests/test_util.h"
#include <cjson/cJSON.h>
#include <locale.h>
#include <wchar.h>

static int near(double a, double b) { return fabs(a - b) < 1e-12; }

/* Columns a terminal gives UTF-8 text: ASCII 1, CJK (3-byte sequences here) 2. */
static int columns(const char *s, size_t n) {
    int w = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) { w++; i++; }
        else if (c >= 0xE0 && c < 0xF0) { w += 2; i += 3; }
        else { w++; i++; }
    }
    return w;
}

static void test_values(void) {
    Metrics m;
    metrics_init(&m, 3);
    /* truth -> predicted: 0->0 x3, 0->1, 0->2, 1->1 x2, 1->0; losses 1..8 */
    int pairs[8][2] = {{0, 0}, {0, 0}, {0, 0}, {0, 1}, {0, 2}, {1, 1}, {1, 1}, {1, 0}};
    for (int i = 0; i < 8; i++) metrics_add(&m, pairs[i][0], pairs[i][1], i + 1);
    CHECK(m.n == 8 && near(metrics_accuracy(&m), 5.0 / 8), "accuracy %g", metrics_accuracy(&m));
    CHECK(near(metrics_loss(&m), 4.5), "mean loss %g", metrics_loss(&m));
    double p, r, f;
    long s;
    metrics_class(&m, 0, &p, &r, &f, &s);   /* tp 3 of 4 predicted, of 5 true */
    CHECK(near(p, 0.75) && near(r, 0.6) && near(f, 2 * 0.75 * 0.6 / 1.35) && s == 5, "class 0: %g %g %g %ld", p, r, f, s);
    metrics_class(&m, 1, &p, &r, &f, &s);   /* tp 2 of 3 predicted, of 3 true */
    CHECK(near(p, 2.0 / 3) && near(r, 2.0 / 3) && near(f, 2.0 / 3) && s == 3, "class 1: %g %g %g %ld", p, r, f, s);
    metrics_class(&m, 2, &p, &r, &f, &s);   /* predicted once, never true */
    CHECK(p == 0 && r == 0 && f == 0 && s == 0, "class 2: %g %g %g %ld", p, r, f, s);
    /* class 2 occurs in the predictions: it counts, with F1 0 */
    CHECK(near(metrics_macro_f1(&m), (2 * 0.75 * 0.6 / 1.35 + 2.0 / 3 + 0) / 3), "macro-F1 %g", metrics_macro_f1(&m));

    char *names[] = {"a", "b", "c"};
    char *js = metrics_to_json(&m, names);
    cJSON *o = cJSON_Parse(js);
    const cJSON *conf = cJSON_GetObjectItem(o, "confusion");
    CHECK(o && near(cJSON_GetObjectItem(o, "accuracy")->valuedouble, 5.0 / 8) &&
          cJSON_GetArraySize(conf) == 3 &&
          cJSON_GetArrayItem(cJSON_GetArrayItem(conf, 0), 2)->valuedouble == 1 &&
          cJSON_GetArrayItem(cJSON_GetArrayItem(conf, 1), 0)->valuedouble == 1,
          "JSON: %s", js);
    cJSON_Delete(o);
    free(js);
    metrics_free(&m);

    /* a class absent from both the truth and the predictions is left out of macro-F1 */
    metrics_init(&m, 3);
    metrics_add(&m, 0, 0, 0);
    metrics_add(&m, 1, 0, 0);
    metrics_add(&m, 1, 1, 0);
    /* class 0: p 1/2 r 1 f 2/3; class 1: p 1 r 1/2 f 2/3; class 2 left out */
    CHECK(near(metrics_macro_f1(&m), 2.0 / 3), "macro-F1 without class 2: %g", metrics_macro_f1(&m));
    /* ... and the reports say so: "-" in its row and a note; in_macro_f1 false in the JSON */
    char *names3[3] = {"a", "b", "c"}, *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    metrics_print(&m, names3, mem);
    fclose(mem);
    CHECK(strstr(text, "\nc                -       -       -        0\n") &&
              strstr(text, "(-: 1 class neither in the labels nor predicted, left out of macro-F1, which averages "
                           "the other 2)"), "the unseen class in the report:\n%s", text);
    /* the matrix's rows are the truth: a -> a once; b -> a once, b -> b once */
    const char *cm = strstr(text, "confusion matrix (rows: true, columns: predicted)");
    const char *ra = cm ? strstr(cm, "\n0 a") : NULL, *rb = cm ? strstr(cm, "\n1 b") : NULL;
    long a[3] = {-1, -1, -1}, b[3] = {-1, -1, -1};
    CHECK(ra && rb && sscanf(ra + 4, "%ld %ld %ld", &a[0], &a[1], &a[2]) == 3 &&
              sscanf(rb + 4, "%ld %ld %ld", &b[0], &b[1], &b[2]) == 3 && a[0] == 1 && a[1] == 0 && a[2] == 0 &&
              b[0] == 1 && b[1] == 1 && b[2] == 0,
          "confusion rows: a %ld %ld %ld (expected 1 0 0), b %ld %ld %ld (expected 1 1 0):\n%s", a[0], a[1], a[2],
          b[0], b[1], b[2], text);
    free(text);
    char *js3 = metrics_to_json(&m, names3);
    CHECK(strstr(js3, "\"label\":\"c\",\"precision\":0,\"recall\":0,\"f1\":0,\"support\":0,\"in_macro_f1\":false") &&
              strstr(js3, "\"label\":\"a\",\"precision\":0.5,\"recall\":1,\"f1\":0.66666666666666663,\"support\":1,\"in_macro_f1\":true"),
          "JSON: %s", js3);
    free(js3);
    metrics_free(&m);
}

static void test_layout(void) {
    enum { K = 11 };
    char *names[K] = {"书籍", "平板", "手机", "水果", "洗发水", "热水器", "蒙牛", "衣服", "计算机", "酒店",
                      "a-long-ascii-label"};
    Metrics m;
    metrics_init(&m, K);
    for (int t = 0; t < K; t++)
        for (int p = 0; p < K; p++)
            for (int i = 0; i < (t == p ? 120 : (t + p) % 3); i++) metrics_add(&m, t, p, 0.1);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    metrics_print(&m, names, f);
    fclose(f);
    const char *at = strstr(text, "confusion matrix");
    CHECK(at != NULL, "no confusion matrix in:\n%s", text);
    if (!at) { free(text); metrics_free(&m); return; }
    at = strchr(at, '\n') + 1;   /* the header row */
    int want = -1, rows = 0;
    while (*at) {
        const char *end = strchr(at, '\n');
        size_t n = end ? (size_t)(end - at) : strlen(at);
        int w = columns(at, n);
        if (want < 0) want = w;
        else rows++;
        CHECK(w == want, "confusion row %d is %d columns wide, the header %d:\n%.*s", rows, w, want, (int)n, at);
        at += n + (end != NULL);
    }
    CHECK(rows == K, "%d confusion rows, expected %d", rows, K);
    /* the per-class table: the header and every row equally wide */
    const char *cls = strstr(text, "class");
    int tw = -1;
    for (int i = 0; cls && i <= K; i++) {
        const char *end = strchr(cls, '\n');
        int w = columns(cls, (size_t)(end - cls));
        if (i == 0) tw = w;
        CHECK(w == tw, "per-class line %d is %d columns wide, the header %d", i, w, tw);
        cls = end + 1;
    }
    free(text);
    metrics_free(&m);
}

/* 2 model classes and 1 unknown gold label (class 2): its 2 lines are errors, in accuracy's
 * denominator and in macro-F1 with F1 0; the loss is over the others; the reports mark it. */
static void test_unknown(void) {
    Metrics m;
    CHECK(metrics_init_unknown(&m, 2, 1) == 0 && m.K == 3 && m.K_model == 2, "init: K %d, K_model %d", m.K, m.K_model);
    metrics_add(&m, 0, 0, 1.0);
    metrics_add(&m, 0, 1, 2.0);
    metrics_add(&m, 1, 1, 3.0);
    metrics_add(&m, 2, 0, 100.0);   /* unknown: the loss is not counted */
    metrics_add(&m, 2, 1, 100.0);
    CHECK(m.n == 5 && near(metrics_accuracy(&m), 2.0 / 5), "accuracy %g (expected 2/5)", metrics_accuracy(&m));
    CHECK(near(metrics_loss(&m), 2.0) && m.n_loss == 3, "loss %g over %ld (expected 2 over 3)", metrics_loss(&m), m.n_loss);
    CHECK(metrics_unknown(&m) == 2, "unknown lines %ld", metrics_unknown(&m));
    double p, r, f;
    long s;
    metrics_class(&m, 2, &p, &r, &f, &s);
    CHECK(p == 0 && r == 0 && f == 0 && s == 2, "unknown class: %g %g %g %ld", p, r, f, s);
    /* class 0: p 1/2 r 1/2 f 1/2; class 1: p 1/3 r 1 f 1/2; class 2: f 0 (sklearn: 1/3) */
    CHECK(near(metrics_macro_f1(&m), (0.5 + 0.5 + 0) / 3), "macro-F1 %g (expected 1/3)", metrics_macro_f1(&m));
    char *names[3] = {"a", "b", "财经"}, *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    metrics_print(&m, names, mem);
    fclose(mem);
    CHECK(strstr(text, "\n财经 (unknown)     0.0000  0.0000  0.0000        2\n") &&
              strstr(text, "\n2 财经 (unknown)      1      1      0\n") &&
              strstr(text, "(unknown: 1 label the model was not trained on, in 2 of the 5 lines: counted as errors, "
                           "with recall 0 and F1 0 in macro-F1; the loss is the mean over the other 3)"),
          "the unknown class in the report:\n%s", text);
    free(text);
    char *js = metrics_to_json(&m, names);
    cJSON *o = cJSON_Parse(js);
    const cJSON *conf = cJSON_GetObjectItem(o, "confusion"), *pc = cJSON_GetObjectItem(o, "per_class");
    int square = cJSON_GetArraySize(conf) == 3;
    for (int i = 0; square && i < 3; i++) square = cJSON_GetArraySize(cJSON_GetArrayItem(conf, i)) == 3;
    CHECK(o && square && cJSON_GetArraySize(pc) == 3 && cJSON_GetArraySize(cJSON_GetObjectItem(o, "labels")) == 3 &&
              cJSON_GetObjectItem(o, "unknown_label_lines")->valuedouble == 2 &&
              cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetArrayItem(pc, 2), "in_model")) &&
              cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(pc, 2), "in_macro_f1")) &&
              cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetArrayItem(pc, 1), "in_model")) &&
              cJSON_GetArrayItem(cJSON_GetArrayItem(conf, 2), 1)->valuedouble == 1,
          "JSON with an unknown class: %s", js);
    cJSON_Delete(o);
    free(js);
    metrics_free(&m);
}

/* Width in terminal columns by the C library's own tables (wcwidth, a UTF-8 locale), which
 * the report's widths (utf8proc's) are checked against; -1 where that locale is missing. */
static int libc_columns(const char *s, size_t n) {
    mbstate_t st;
    memset(&st, 0, sizeof st);
    int w = 0;
    for (size_t i = 0; i < n;) {
        wchar_t wc;
        size_t k = mbrtowc(&wc, s + i, n - i, &st);
        if (k == (size_t)-1 || k == (size_t)-2 || k == 0) return -1;
        int cw = wcwidth(wc);
        w += cw > 0 ? cw : 0;
        i += k;
    }
    return w;
}

/* Class names of other widths than 1 or 2 columns a character (combining marks, half-width
 * kana, symbols of 3 bytes and 1 column) line up, and a name longer than any buffer is printed
 * whole (before: cut at 1023 bytes mid-character, and read past the buffer). */
static void test_wide_and_long_names(void) {
    if (!setlocale(LC_CTYPE, "C.UTF-8")) {
        fprintf(stderr, "test_metrics: no C.UTF-8 locale; the width check is skipped\n");
        return;
    }
    char longname[3100] = "a";
    for (int i = 0; i < 1000; i++) strcat(longname, "体");
    enum { K = 6 };
    char *names[K] = {"\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "cafe\u0301", "\u20acuro\u2014\u2026",
                      "\uff76\uff9e", longname, "unknown-one"};
    Metrics m;
    metrics_init_unknown(&m, K - 1, 1);
    for (int t = 0; t < K; t++) metrics_add(&m, t, t % (K - 1), 0.5);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    metrics_print(&m, names, f);
    fclose(f);
    CHECK(strstr(text, longname) != NULL, "the %zu-byte class name is not printed whole", strlen(longname));
    CHECK(strstr(text, "unknown-one (unknown)") != NULL, "no unknown mark:\n%s", text);
    const char *cls = strstr(text, "class");
    int tw = -1;
    for (int i = 0; cls && i <= K; i++) {
        const char *end = strchr(cls, '\n');
        int w = libc_columns(cls, (size_t)(end - cls));
        if (i == 0) tw = w;
        CHECK(w == tw, "per-class line %d is %d columns wide, the header %d: %.80s", i, w, tw, cls);
        cls = end + 1;
    }
    setlocale(LC_CTYPE, "C");
    free(text);
    metrics_free(&m);
}

int main(void) {
    test_values();
    test_layout();
    test_wide_and_long_names();
    test_unknown();
    return test_finish("test_metrics");
}
