/* model/evaluate.c: batched evaluation and prediction over a dataset. */
#include "model/evaluate.h"
#include <string.h>

/* Runs forward over every batch (sorted by length, no shuffling) and hands each
 * example's probabilities and loss to `sink`. */
static void run_batches(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                        int add_cls, int with_labels,
                        void (*sink)(void *ctx, int index, const float *probs, float loss, int label),
                        void *ctx) {
    Batcher bt;
    if (batcher_init(&bt, ds, batch_size, max_len, truncate, add_cls, 1, 0) != 0) return;
    batcher_start_epoch(&bt, 0, 0, 0);
    const Batch *b;
    int K = m->d.K;
    while ((b = batcher_next(&bt)) != NULL) {
        model_forward(m, b->ids, b->lengths, with_labels ? b->labels : NULL, b->B, b->T, 0, 0);
        for (int i = 0; i < b->B; i++)
            sink(ctx, b->index[i], m->h_probs + (size_t)i * K, with_labels ? m->h_losses[i] : 0.0f,
                 with_labels ? b->labels[i] : -1);
    }
    batcher_free(&bt);
}

static int argmax(const float *p, int K) {
    int best = 0;
    for (int k = 1; k < K; k++) if (p[k] > p[best]) best = k;
    return best;
}

typedef struct { Metrics *metrics; int K; } EvalCtx;
static void eval_sink(void *ctx, int index, const float *probs, float loss, int label) {
    EvalCtx *e = ctx;
    (void)index;
    metrics_add(e->metrics, label, argmax(probs, e->K), loss);
}

void evaluate_dataset(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                      int add_cls, Metrics *out) {
    metrics_init(out, m->d.K);
    EvalCtx e = {out, m->d.K};
    run_batches(m, ds, batch_size, max_len, truncate, add_cls, 1, eval_sink, &e);
}

typedef struct { float *probs; int K; } PredCtx;
static void pred_sink(void *ctx, int index, const float *probs, float loss, int label) {
    PredCtx *p = ctx;
    (void)loss;
    (void)label;
    memcpy(p->probs + (size_t)index * p->K, probs, (size_t)p->K * sizeof(float));
}

void predict_dataset(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                     int add_cls, float *probs) {
    PredCtx p = {probs, m->d.K};
    run_batches(m, ds, batch_size, max_len, truncate, add_cls, 0, pred_sink, &p);
}
