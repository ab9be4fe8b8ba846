/* model/evaluate.c: batched evaluation and prediction over a dataset. */
#include "model/evaluate.h"
#include <string.h>

/* Runs forward over every batch (sorted by length, no shuffling) and hands each
 * example's probabilities and loss to `sink`. */
static void run_batches(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                        int add_cls, int with_labels,
                        ExampleSink sink, void *ctx) {
    Batcher bt;
    if (batcher_init(&bt, ds, batch_size, max_len, truncate, add_cls, 1, 0) != 0) return;
    batcher_start_epoch(&bt, 0, 0, 0);
    const Batch *b;
    int K = m->d.K;
    while ((b = batcher_next(&bt)) != NULL) {
        model_forward(m, b->ids, b->lengths, with_labels ? b->labels : NULL, b->B, b->T, 0, 0);
        for (int i = 0; i < b->B; i++)
            sink(ctx, m, b, i, m->h_probs + (size_t)i * K, with_labels ? m->h_losses[i] : 0.0f);
    }
    batcher_free(&bt);
}

static int argmax(const float *p, int K) {
    int best = 0;
    for (int k = 1; k < K; k++) if (p[k] > p[best]) best = k;
    return best;
}

typedef struct { Metrics *metrics; int K; } EvalCtx;
static void eval_sink(void *ctx, const Model *m, const Batch *b, int row, const float *probs, float loss) {
    EvalCtx *e = ctx;
    (void)m;
    metrics_add(e->metrics, b->labels[row], argmax(probs, e->K), loss);
}

void evaluate_dataset(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                      int add_cls, Metrics *out) {
    metrics_init(out, m->d.K);
    EvalCtx e = {out, m->d.K};
    run_batches(m, ds, batch_size, max_len, truncate, add_cls, 1, eval_sink, &e);
}

typedef struct { float *probs; int K; ExampleSink extra; void *extra_ctx; } PredCtx;
static void pred_sink(void *ctx, const Model *m, const Batch *b, int row, const float *probs, float loss) {
    PredCtx *p = ctx;
    memcpy(p->probs + (size_t)b->index[row] * p->K, probs, (size_t)p->K * sizeof(float));
    if (p->extra) p->extra(p->extra_ctx, m, b, row, probs, loss);
}

void predict_dataset(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                     int add_cls, float *probs, ExampleSink extra, void *extra_ctx) {
    PredCtx p = {probs, m->d.K, extra, extra_ctx};
    run_batches(m, ds, batch_size, max_len, truncate, add_cls, 0, pred_sink, &p);
}
