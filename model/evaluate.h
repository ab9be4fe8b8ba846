/* model/evaluate.h: running a model over a dataset in length-sorted batches, for dev/test
 * evaluation (metrics) and for prediction (probabilities per example, in input order). */
#ifndef MHA_MODEL_EVALUATE_H
#define MHA_MODEL_EVALUATE_H

#include "data/batcher.h"
#include "model/classifier.h"
#include "model/metrics.h"

/* Called for every example after its batch's forward pass: row is its row in batch b
 * (b->index[row] is its dataset index), probs its K class probabilities. */
typedef void (*ExampleSink)(void *ctx, const Model *m, const Batch *b, int row, const float *probs,
                            float loss);

/* Evaluate all of ds (which must carry labels) into metrics (initialised here, K classes). */
void evaluate_dataset(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                      int add_cls, Metrics *out);

/* Class probabilities (ds->n, K) in dataset order into probs; `extra` (may be NULL) also
 * sees every example, e.g. to read its attention weights. */
void predict_dataset(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                     int add_cls, float *probs, ExampleSink extra, void *extra_ctx);

#endif
