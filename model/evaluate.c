/* model/evaluate.c: batched evaluation and prediction over a dataset.
 *
 * Batches are sorted by length and handed to the sinks in that order. On the CPU backend
 * with W > 1 OpenMP threads, their forward passes run data-parallel: a round copies up to
 * ROUND_PER_WORKER x W batches; W workers (the model and W - 1 replicas reading its
 * parameters) take them one at a time, longest first, each running whole forward passes with
 * single-threaded ops (one OpenMP region per round instead of tens per batch); then the sinks
 * see the round's batches in order. A batch's results do not depend on the worker that ran
 * it: they are the bits of the one-batch-at-a-time path with ops on one thread, and so with
 * ops on any number of threads, as the ops' bits do not depend on it (fp32: its linear row
 * blocks are aligned for that; tests/model/test_evaluate.c). A sink that reads the model's
 * activations (predict_dataset's `extra`) keeps the one-batch-at-a-time path. */
#include "model/evaluate.h"
#include "kernels/cpu/layers_f32.h"
#include <omp.h>
#include <stdlib.h>
#include <string.h>

enum { ROUND_PER_WORKER = 8 };   /* batches per worker and round: evens out their lengths */

static int max_workers;          /* evaluate_set_workers; 0: one per OpenMP thread */

void evaluate_set_workers(int n) { max_workers = n > 0 ? n : 0; }

/* evaluate_cpu_max_tokens: a batch's widest per-token activation (B x T rows of max(3C, F)
 * floats: the fused qkv or the feed-forward's hidden layer; the materialising attention's
 * (B, NH, T, T) scores are not counted) kept to about this many bytes, so that a worker's
 * forward pass works in its core's cache instead of streaming every activation through
 * memory. Measured with mha-predict on 2 cores (d_model 128, d_ff 512), in a build that read
 * the size from the environment: 1 MiB was the fastest of 0.5, 1, 2 and 4 MiB, 12-25% faster
 * than batches of 64 texts. At least CPU_BATCH_MIN_TOKENS, so that wide models still batch
 * several texts (the linear layers of our own pack their weights at every call, except
 * under mha-predict's promise that they stay fixed: kernels/cpu/packed_cache.h). */
enum { CPU_BATCH_ACTIVATION_BYTES = 1 << 20, CPU_BATCH_MIN_TOKENS = 256 };

static long max_tokens;          /* evaluate_set_max_tokens; 0: batches of batch_size */

void evaluate_set_max_tokens(long n) { max_tokens = n > 0 ? n : 0; }

static volatile sig_atomic_t *cancel_flag;   /* evaluate_set_cancel_flag; NULL: never cancelled */

void evaluate_set_cancel_flag(volatile sig_atomic_t *flag) { cancel_flag = flag; }

long evaluate_cpu_max_tokens(int d_model, int d_ff) {
    const long width = 3L * d_model > d_ff ? 3L * d_model : (d_ff > 1 ? d_ff : 1);
    const long rows = CPU_BATCH_ACTIVATION_BYTES / (width * (long)sizeof(float));
    return rows > CPU_BATCH_MIN_TOKENS ? rows : CPU_BATCH_MIN_TOKENS;
}

/* A label the model does not know (mha-predict --eval's gold labels past its K classes) goes
 * to the forward pass as class 0, through `scratch` (room for b->B labels; NULL when the
 * dataset has no such label): the model has no probability for it, so its loss means nothing,
 * and metrics_add leaves it out. The batch itself keeps the real label. */
static void forward_batch(Model *m, const Batch *b, int with_labels, int32_t *scratch) {
    const int32_t *labels = with_labels ? b->labels : NULL;
    if (labels && scratch) {
        for (int j = 0; j < b->B; j++) scratch[j] = b->labels[j] >= 0 && b->labels[j] < m->d.K ? b->labels[j] : 0;
        labels = scratch;
    }
    model_forward(m, b->ids, b->lengths, labels, b->B, b->T, 0, 0);
}

/* Hands every example of b to `sink`: probs (B, K), losses (B) or NULL. */
static void sink_batch(const Model *m, const Batch *b, const float *probs, const float *losses,
                       ExampleSink sink, void *ctx) {
    int K = m->d.K;
    for (int i = 0; i < b->B; i++) sink(ctx, m, b, i, probs + (size_t)i * K, losses ? losses[i] : 0.0f);
}

/* ---- the data-parallel path ---- */

/* The table's ops are the CPU kernels themselves (the fp32, bf16 or int8 table), which
 * several host threads may call at once on their own data. Not a wrapping table such as
 * kernels/profile.c's (its counters belong to one thread), nor another device. */
static int cpu_kernels(const Backend *be) {
    return strcmp(be->name, "cpu") == 0 && be->embed_forward == mha_embed_forward_f32;
}

/* How many workers run batches at once; 1: the sequential path. */
static int worker_count(const Model *m, int n_batches) {
    if (!cpu_kernels(m->be) || omp_in_parallel()) return 1;
    int w = omp_get_max_threads();
    if (max_workers > 0 && max_workers < w) w = max_workers;
    if (w > n_batches) w = n_batches;
    return w > 1 ? w : 1;
}

/* One batch of a round: a copy (batcher_next reuses its buffers) and its outputs. */
typedef struct {
    Batch batch;
    float *probs, *losses;   /* (Bmax, K), (Bmax) */
} Slot;

/* Arrays for up to Bmax examples of up to Tmax tokens, as the batcher's own. */
static int slot_alloc(Slot *s, int Bmax, int Tmax, int K) {
    Batch *b = &s->batch;
    size_t cells = (size_t)Bmax * Tmax;
    b->ids = malloc(cells * sizeof *b->ids);                  /* (Bmax, Tmax) */
    b->lengths = malloc((size_t)Bmax * sizeof *b->lengths);   /* (Bmax) each */
    b->labels = malloc((size_t)Bmax * sizeof *b->labels);
    b->index = malloc((size_t)Bmax * sizeof *b->index);
    s->probs = malloc((size_t)Bmax * K * sizeof *s->probs);
    s->losses = malloc((size_t)Bmax * sizeof *s->losses);
    return b->ids && b->lengths && b->labels && b->index && s->probs && s->losses ? 0 : -1;
}

static void slot_free(Slot *s) {
    Batch *b = &s->batch;
    free(b->ids), free(b->lengths), free(b->labels), free(b->index);
    free(s->probs), free(s->losses);
}

static void batch_copy(Batch *dst, const Batch *src) {
    size_t bt = (size_t)src->B * src->T, b = (size_t)src->B;
    dst->B = src->B;
    dst->T = src->T;
    dst->real_tokens = src->real_tokens;
    memcpy(dst->ids, src->ids, bt * sizeof *dst->ids);
    memcpy(dst->lengths, src->lengths, b * sizeof *dst->lengths);
    memcpy(dst->labels, src->labels, b * sizeof *dst->labels);
    memcpy(dst->index, src->index, b * sizeof *dst->index);
}

/* The forward passes of slots[0..n) on W workers, models[w] for thread w. The batches come
 * sorted by length: taken from the last, the longest go first and the short ones fill in.
 * Every thread of the caller joins, W or not: a smaller team makes libgomp retire the other
 * threads, and with them their thread-local kernel buffers (unfreed); threads without a
 * model take nothing. Inside a worker every op's own OpenMP region runs on that one thread:
 * nthreads-var is 1 in the worker's task (whatever OMP_MAX_ACTIVE_LEVELS allows), so
 * omp_get_max_threads() is 1 there and the ops size their work and scratch for one thread. */
static void forward_round(Model **models, int W, Slot *slots, int n, int with_labels, int32_t *scratch,
                          int Bmax) {
    int taken = 0;   /* batches handed out so far */
#pragma omp parallel
    {
        omp_set_num_threads(1);
        const int t = omp_get_thread_num();
        Model *mw = t < W ? models[t] : NULL;
        const size_t K = mw ? (size_t)mw->d.K : 0;
        while (mw) {
            int j;
#pragma omp atomic capture
            j = taken++;
            if (j >= n) break;
            Slot *s = &slots[n - 1 - j];
            forward_batch(mw, &s->batch, with_labels, scratch ? scratch + (size_t)t * Bmax : NULL);
            memcpy(s->probs, mw->h_probs, (size_t)s->batch.B * K * sizeof *s->probs);
            if (with_labels) memcpy(s->losses, mw->h_losses, (size_t)s->batch.B * sizeof *s->losses);
        }
    }
}

/* Rounds of batches: copied, run on W workers, then handed to the sinks in batch order (with
 * m, whose activations are not those of the batch); scratch: NULL, or room for W batches'
 * labels (forward_batch). Returns 0, or -1 with nothing run when memory for two workers and
 * their round is lacking. */
static int run_parallel(Model *m, Batcher *bt, int W, int with_labels, int32_t *scratch, ExampleSink sink,
                        void *ctx) {
    W = model_replicas(m, W - 1) + 1;
    const int R = W * ROUND_PER_WORKER;
    Model **models = malloc((size_t)W * sizeof *models);
    Slot *slots = calloc((size_t)R, sizeof *slots);
    int ok = W > 1 && models && slots;
    for (int i = 0; ok && i < R; i++) ok = slot_alloc(&slots[i], bt->batch_size, bt->max_len, m->d.K) == 0;
    for (int w = 0; ok && w < W; w++) models[w] = w ? &m->replicas[w - 1] : m;
    while (ok) {
        int n = 0;
        const Batch *b;
        while (n < R && (b = batcher_next(bt)) != NULL) batch_copy(&slots[n++].batch, b);
        if (n == 0) break;
        forward_round(models, W, slots, n, with_labels, scratch, bt->batch_size);
        for (int i = 0; i < n; i++)
            sink_batch(m, &slots[i].batch, slots[i].probs, with_labels ? slots[i].losses : NULL, sink, ctx);
    }
    for (int i = 0; slots && i < R; i++) slot_free(&slots[i]);
    free(slots);
    free(models);
    return ok ? 0 : -1;
}

/* Runs forward over every batch (sorted by length, no shuffling) and hands each example's
 * probabilities and loss to `sink`, in batch order; reads_model: the sink reads the
 * activations of the example's batch from the model it gets (one batch at a time). */
static int run_batches(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                       int add_cls, int with_labels, int reads_model, ExampleSink sink, void *ctx) {
    Batcher bt;
    if (batcher_init(&bt, ds, batch_size, max_len, truncate, add_cls, 1, 0) != 0) return EVAL_NO_MEMORY;
    /* a sink that reads the model runs one batch at a time with ops on all threads, where
     * whole batches are faster: no cap there */
    batcher_set_max_tokens(&bt, reads_model ? 0 : max_tokens);
    batcher_start_epoch(&bt, 0, 0, 0);
    int W = reads_model ? 1 : worker_count(m, bt.n_batches), rc = EVAL_OK;
    int32_t *scratch = NULL;   /* labels the model does not know: a copy per worker (forward_batch) */
    if (with_labels && dataset_unknown_label_count(ds) > 0 &&
        !(scratch = malloc((size_t)W * bt.batch_size * sizeof *scratch))) {
        batcher_free(&bt);
        return EVAL_NO_MEMORY;
    }
    if (W <= 1 || run_parallel(m, &bt, W, with_labels, scratch, sink, ctx) != 0) {
        const Batch *b;
        while ((b = batcher_next(&bt)) != NULL) {
            if (cancel_flag && *cancel_flag) { rc = EVAL_CANCELLED; break; }
            forward_batch(m, b, with_labels, scratch);
            sink_batch(m, b, m->h_probs, with_labels ? m->h_losses : NULL, sink, ctx);
        }
    }
    free(scratch);
    batcher_free(&bt);
    return rc;
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

int evaluate_dataset(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                     int add_cls, Metrics *out) {
    if (metrics_init_unknown(out, m->d.K, dataset_unknown_label_count(ds)) != 0) return EVAL_NO_MEMORY;
    EvalCtx e = {out, m->d.K};
    int rc = run_batches(m, ds, batch_size, max_len, truncate, add_cls, 1, 0, eval_sink, &e);
    if (rc != EVAL_OK) metrics_free(out);
    return rc;
}

typedef struct { float *probs; int K; ExampleSink extra; void *extra_ctx; } PredCtx;
static void pred_sink(void *ctx, const Model *m, const Batch *b, int row, const float *probs, float loss) {
    PredCtx *p = ctx;
    memcpy(p->probs + (size_t)b->index[row] * p->K, probs, (size_t)p->K * sizeof(float));
    if (p->extra) p->extra(p->extra_ctx, m, b, row, probs, loss);
}

int predict_dataset(Model *m, const Dataset *ds, int batch_size, int max_len, int truncate,
                    int add_cls, float *probs, ExampleSink extra, void *extra_ctx) {
    PredCtx p = {probs, m->d.K, extra, extra_ctx};
    return run_batches(m, ds, batch_size, max_len, truncate, add_cls, 0, extra != NULL, pred_sink, &p);
}
