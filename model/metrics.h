/* model/metrics.h: classification metrics from a confusion matrix: accuracy,
 * macro-F1, per-class precision/recall/F1/support, as text and as JSON.
 *
 * Gold labels the model does not know (mha-predict --eval on a file with a class the training
 * set lacked) follow sklearn's convention with labels taken from the data: each is a class of
 * its own, after the model's K (never predicted, so every line with one is an error), in
 * accuracy's denominator, and in macro-F1 with recall 0 and F1 0; the confusion matrix stays
 * square (their columns are zeros). The mean loss leaves those lines out: a model gives such
 * a label no probability. */
#ifndef MHA_MODEL_METRICS_H
#define MHA_MODEL_METRICS_H

#include <stdio.h>

typedef struct {
    int K;              /* classes: the model's, then the unknown gold labels */
    int K_model;        /* the model's classes, 0 .. K_model - 1 (the only ones predicted) */
    long *confusion;    /* (K, K): row = true class, column = predicted */
    long n;
    double loss_sum;    /* sum of per-example losses (for the mean loss) */
    long n_loss;        /* examples in loss_sum: those whose true class is the model's */
} Metrics;

/* 0, or -1 when the confusion matrix cannot be allocated (then metrics_free is still safe). */
int metrics_init(Metrics *m, int K);
/* The same for a model of K classes and n_unknown gold labels it does not know (classes K ..
 * K + n_unknown - 1). */
int metrics_init_unknown(Metrics *m, int K, int n_unknown);
/* Examples whose true class the model does not know (all of them errors). */
long metrics_unknown(const Metrics *m);
void metrics_free(Metrics *m);
/* loss is ignored for a truth the model does not know (truth >= K_model). */
void metrics_add(Metrics *m, int truth, int predicted, double loss);
double metrics_accuracy(const Metrics *m);
double metrics_macro_f1(const Metrics *m);
double metrics_loss(const Metrics *m);
/* precision, recall, F1 and support of class k. */
void metrics_class(const Metrics *m, int k, double *precision, double *recall, double *f1, long *support);

/* Human-readable report: per-class table and confusion matrix. names: K of them, the model's
 * classes then the unknown labels (marked "(unknown)", with a note). */
void metrics_print(const Metrics *m, char *const *names, FILE *out);
/* One JSON object: accuracy, macro_f1, loss, n, unknown_label_lines, per_class [...] (each
 * with in_macro_f1 and in_model), labels, confusion (K x K). malloc'd. */
char *metrics_to_json(const Metrics *m, char *const *names);

#endif
