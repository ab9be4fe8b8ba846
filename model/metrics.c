/* model/metrics.c: accuracy, macro-F1, per-class report and confusion matrix. */
#include "model/metrics.h"
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

int metrics_init(Metrics *m, int K) { return metrics_init_unknown(m, K, 0); }

int metrics_init_unknown(Metrics *m, int K, int n_unknown) {
    m->K = K + n_unknown;
    m->K_model = K;
    m->confusion = calloc((size_t)m->K * m->K, sizeof *m->confusion);
    m->n = m->n_loss = 0;
    m->loss_sum = 0.0;
    return m->confusion ? 0 : -1;
}

long metrics_unknown(const Metrics *m) {
    long n = 0;
    for (size_t i = (size_t)m->K_model * m->K; i < (size_t)m->K * m->K; i++) n += m->confusion[i];
    return n;
}

void metrics_free(Metrics *m) {
    free(m->confusion);
    m->confusion = NULL;
}

void metrics_add(Metrics *m, int truth, int predicted, double loss) {
    m->confusion[(size_t)truth * m->K + predicted]++;
    m->n++;
    if (truth < m->K_model) {
        m->loss_sum += loss;
        m->n_loss++;
    }
}

double metrics_accuracy(const Metrics *m) {
    long right = 0;
    for (int k = 0; k < m->K; k++) right += m->confusion[(size_t)k * m->K + k];
    return m->n ? (double)right / m->n : 0.0;
}

double metrics_loss(const Metrics *m) { return m->n_loss ? m->loss_sum / m->n_loss : 0.0; }

void metrics_class(const Metrics *m, int k, double *precision, double *recall, double *f1, long *support) {
    long tp = m->confusion[(size_t)k * m->K + k], predicted = 0, actual = 0;
    for (int j = 0; j < m->K; j++) {
        predicted += m->confusion[(size_t)j * m->K + k];
        actual += m->confusion[(size_t)k * m->K + j];
    }
    double p = predicted ? (double)tp / predicted : 0.0, r = actual ? (double)tp / actual : 0.0;
    *precision = p;
    *recall = r;
    *f1 = p + r > 0 ? 2 * p * r / (p + r) : 0.0;
    *support = actual;
}

/* Whether class k occurs in the truth or the predictions: the classes macro-F1 averages. */
static int class_seen(const Metrics *m, int k) {
    for (int j = 0; j < m->K; j++)
        if (m->confusion[(size_t)j * m->K + k] || m->confusion[(size_t)k * m->K + j]) return 1;
    return 0;
}

/* Mean F1 over classes that occur in the truth or the predictions (sklearn's
 * convention when labels are taken from the data). */
double metrics_macro_f1(const Metrics *m) {
    double sum = 0.0;
    int used = 0;
    for (int k = 0; k < m->K; k++) {
        if (!class_seen(m, k)) continue;
        double p, r, f;
        long s;
        metrics_class(m, k, &p, &r, &f, &s);
        sum += f;
        used++;
    }
    return used ? sum / used : 0.0;
}

/* Display width of UTF-8 text in terminal columns, as utf8proc gives it per character: 2 for
 * East Asian wide and fullwidth characters (CJK), 0 for combining marks, joiners and variation
 * selectors, else 1; a byte that does not decode counts 1. */
static int display_width(const char *s) {
    int w = 0;
    for (const utf8proc_uint8_t *p = (const utf8proc_uint8_t *)s; *p;) {
        utf8proc_int32_t c;
        const utf8proc_ssize_t n = utf8proc_iterate(p, -1, &c);   /* stops at the NUL: never past it */
        if (n <= 0) { w++; p++; continue; }
        const int cw = utf8proc_charwidth(c);
        w += cw > 0 ? cw : 0;
        p += n;
    }
    return w;
}

static void pad_to(FILE *out, int used, int width) {
    for (int i = used; i < width; i++) fputc(' ', out);
}

static void pad_print(FILE *out, const char *s, int width) {
    fputs(s, out);
    pad_to(out, display_width(s), width);
}

#define UNKNOWN_MARK " (unknown)"   /* after the name of a gold label the model does not know */

/* names[k] whole, and UNKNOWN_MARK for a class the model does not know, padded to width columns */
static void name_print(FILE *out, const Metrics *m, char *const *names, int k, int width) {
    const char *mark = k >= m->K_model ? UNKNOWN_MARK : "";
    fputs(names[k], out);
    fputs(mark, out);
    pad_to(out, display_width(names[k]) + (int)strlen(mark), width);
}

void metrics_print(const Metrics *m, char *const *names, FILE *out) {
    int w = 7;
    const int mark = (int)strlen(UNKNOWN_MARK);
    for (int k = 0; k < m->K; k++) {
        int nw = display_width(names[k]) + (k >= m->K_model ? mark : 0);
        if (nw > w) w = nw;
    }
    fprintf(out, "accuracy %.4f  macro-F1 %.4f  loss %.4f  n %ld\n\n", metrics_accuracy(m),
            metrics_macro_f1(m), metrics_loss(m), m->n);
    pad_print(out, "class", w);
    fprintf(out, "  precision  recall      f1  support\n");
    int unseen = 0;
    for (int k = 0; k < m->K; k++) {
        double p, r, f;
        long s;
        metrics_class(m, k, &p, &r, &f, &s);
        name_print(out, m, names, k, w);
        if (class_seen(m, k)) {
            fprintf(out, "  %9.4f  %6.4f  %6.4f  %7ld\n", p, r, f, s);
        } else {
            fprintf(out, "  %9s  %6s  %6s  %7ld\n", "-", "-", "-", s);
            unseen++;
        }
    }
    if (unseen)
        fprintf(out, "(-: %d class%s neither in the labels nor predicted, left out of macro-F1, which "
                "averages the other %d)\n", unseen, unseen == 1 ? "" : "es", m->K - unseen);
    const long unknown = metrics_unknown(m);
    if (m->K > m->K_model)
        fprintf(out, "(unknown: %d label%s the model was not trained on, in %ld of the %ld lines: counted as "
                "errors, with recall 0 and F1 0 in macro-F1; the loss is the mean over the other %ld)\n",
                m->K - m->K_model, m->K - m->K_model == 1 ? "" : "s", unknown, m->n, m->n_loss);
    /* rows "INDEX LABEL": the index right-aligned to the widest, the label padded to w */
    int iw = snprintf(NULL, 0, "%d", m->K > 0 ? m->K - 1 : 0);
    fprintf(out, "\nconfusion matrix (rows: true, columns: predicted)\n");
    pad_print(out, "", iw + 1 + w);
    for (int k = 0; k < m->K; k++) fprintf(out, " %6d", k);
    fputc('\n', out);
    for (int k = 0; k < m->K; k++) {
        fprintf(out, "%*d ", iw, k);
        name_print(out, m, names, k, w);
        for (int j = 0; j < m->K; j++) fprintf(out, " %6ld", m->confusion[(size_t)k * m->K + j]);
        fputc('\n', out);
    }
}

char *metrics_to_json(const Metrics *m, char *const *names) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "accuracy", metrics_accuracy(m));
    cJSON_AddNumberToObject(o, "macro_f1", metrics_macro_f1(m));
    cJSON_AddNumberToObject(o, "loss", metrics_loss(m));
    cJSON_AddNumberToObject(o, "n", (double)m->n);
    cJSON_AddNumberToObject(o, "unknown_label_lines", (double)metrics_unknown(m));
    cJSON *pc = cJSON_AddArrayToObject(o, "per_class");
    cJSON *labels = cJSON_AddArrayToObject(o, "labels");
    cJSON *conf = cJSON_AddArrayToObject(o, "confusion");
    for (int k = 0; k < m->K; k++) {
        double p, r, f;
        long s;
        metrics_class(m, k, &p, &r, &f, &s);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "label", names[k]);
        cJSON_AddNumberToObject(c, "precision", p);
        cJSON_AddNumberToObject(c, "recall", r);
        cJSON_AddNumberToObject(c, "f1", f);
        cJSON_AddNumberToObject(c, "support", (double)s);
        cJSON_AddBoolToObject(c, "in_macro_f1", class_seen(m, k));
        cJSON_AddBoolToObject(c, "in_model", k < m->K_model);
        cJSON_AddItemToArray(pc, c);
        cJSON_AddItemToArray(labels, cJSON_CreateString(names[k]));
        cJSON *row = cJSON_CreateArray();
        for (int j = 0; j < m->K; j++)
            cJSON_AddItemToArray(row, cJSON_CreateNumber((double)m->confusion[(size_t)k * m->K + j]));
        cJSON_AddItemToArray(conf, row);
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
