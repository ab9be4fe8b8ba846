/* model/metrics.h: classification metrics from a confusion matrix: accuracy,
 * macro-F1, per-class precision/recall/F1/support, as text and as JSON. */
#ifndef MHA_MODEL_METRICS_H
#define MHA_MODEL_METRICS_H

#include <stdio.h>

typedef struct {
    int K;
    long *confusion;    /* (K, K): row = true class, column = predicted */
    long n;
    double loss_sum;    /* sum of per-example losses (for the mean loss) */
} Metrics;

/* 0, or -1 when the confusion matrix cannot be allocated (then metrics_free is still safe). */
int metrics_init(Metrics *m, int K);
void metrics_free(Metrics *m);
void metrics_add(Metrics *m, int truth, int predicted, double loss);
double metrics_accuracy(const Metrics *m);
double metrics_macro_f1(const Metrics *m);
double metrics_loss(const Metrics *m);
/* precision, recall, F1 and support of class k. */
void metrics_class(const Metrics *m, int k, double *precision, double *recall, double *f1, long *support);

/* Human-readable report: per-class table and confusion matrix. */
void metrics_print(const Metrics *m, char *const *names, FILE *out);
/* One JSON object: accuracy, macro_f1, loss, n, per_class [...], labels, confusion. malloc'd. */
char *metrics_to_json(const Metrics *m, char *const *names);

#endif
