/* model/evaluate.h: running a model over a dataset in length-sorted batches, for dev/test
 * evaluation (metrics) and for prediction (probabilities per example, in input order). */
#ifndef MHA_MODEL_EVALUATE_H
#define MHA_MODEL_EVALUATE_H

#include "data/batcher.h"
#include "model/classifier.h"
#include "model/metrics.h"
#include <signal.h>

/* Batches run data-parallel on the CPU backend: with W OpenMP threads, W workers (the model
 * and its replicas, model_replicas) run whole forward passes at once with single-threaded
 * ops; the sinks still see every batch in order, from the calling thread, and the results
 * are the bits of one batch at a time on one thread (see evaluate.c for more threads).
 * n caps W (1: one batch at a time, each op on all threads); 0, the default, lets W be the
 * number of OpenMP threads. */
void evaluate_set_workers(int n);

/* Batches are cut from the length-sorted examples, at most batch_size examples each; n > 0
 * also caps their padded size B x T at n tokens (a batch holds one example at least), except
 * for predict_dataset with an `extra` sink (one batch at a time); 0, the default, removes the
 * cap. Process-wide, like evaluate_set_workers: it holds for every later call. */
void evaluate_set_max_tokens(long n);
/* The cap that keeps a CPU forward pass's activations in cache, for a model of width d_model
 * and feed-forward width d_ff: about 1 MiB of the widest per-token activation (512 tokens at
 * d_model 128, d_ff 512), 256 tokens at least. mha-predict uses it on the CPU; mha-train's evaluation
 * (one batch at a time, ops on all threads) is faster with whole batches and leaves the cap
 * at 0. */
long evaluate_cpu_max_tokens(int d_model, int d_ff);

/* Called for every example after its batch's forward pass: row is its row in batch b
 * (b->index[row] is its dataset index), probs its K class probabilities. m is the model;
 * it holds the activations of b only for predict_dataset's `extra` (which therefore gets
 * the batches one at a time, on the calling thread's model). */
typedef void (*ExampleSink)(void *ctx, const Model *m, const Batch *b, int row, const float *probs,
                            float loss);

/* What evaluate_dataset and predict_dataset return: EVAL_OK; EVAL_NO_MEMORY when the batches
 * (or the metrics) could not be allocated, with nothing evaluated; EVAL_CANCELLED when the
 * cancel flag was set between two batches (the results are incomplete and must not be used). */
enum { EVAL_OK = 0, EVAL_NO_MEMORY = 1, EVAL_CANCELLED = 2 };

/* A flag (set by a signal handler) checked before each batch of the one-batch-at-a-time path:
 * when it is set, the evaluation stops and returns EVAL_CANCELLED. NULL (the default): never.
 * Process-wide, like evaluate_set_workers. */
void evaluate_set_cancel_flag(volatile sig_atomic_t *flag);

/* Evaluate all of ds (which must carry labels) into metrics (initialised here, K classes,
 * and one more per label of ds the model does not know: dataset_unknown_label_count, whose
 * lines count as errors and stay out of the loss). EVAL_OK, or another EVAL_ value with *out
 * freed. */
int evaluate_dataset(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                     int add_cls, Metrics *out);

/* Class probabilities (ds->n, K) in dataset order into probs; `extra` (may be NULL) also
 * sees every example, e.g. to read its attention weights. EVAL_OK, or another EVAL_ value
 * with probs incomplete. */
int predict_dataset(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                    int add_cls, float *probs, ExampleSink extra, void *extra_ctx);

#endif
