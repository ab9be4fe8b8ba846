/* tests/model/test_evaluate.c: data-parallel prediction and evaluation (model/evaluate.c).
 *  - a small random model over 300 random-length examples: probabilities and metrics with 2
 *    and 3 workers are the same bits as one batch at a time with ops on 1 thread, on the fp32,
 *    bf16 and int8 CPU tables (bf16 when the CPU has AVX512_BF16, int8 with AVX512_VNNI), for
 *    two architectures (pre-LN, fused attention, GELU, mean pooling; post-LN, materialising
 *    attention, ReLU, max pooling). One batch at a time with ops on 3 threads gives those
 *    bits too, and so do batches of 1 (each example alone) and of 7: an example's output does
 *    not depend on the examples batched with it (fp32: on x86-64 with AVX2 and FMA, see
 *    mha_f32_rows_batch_invariant and layers_impl.h);
 *  - after the parameters change, the workers run the new ones (replicas read the model's);
 *  - the same with batches capped at 400 tokens (evaluate_set_max_tokens, as mha-predict
 *    caps them on the CPU); the cap reaches the batches (a spy on the pooling op), except
 *    for a sink that reads the model; evaluate_cpu_max_tokens' values;
 *  - the mechanism: with workers, every op is called from a worker at nesting level 1 with
 *    omp_get_max_threads() == 1, its own parallel regions get one thread even where nesting
 *    is allowed, at least two workers run, and the caller's thread count is unchanged;
 *  - failures are returned: no memory for the batches, the cancel flag (test_failures_returned). */
#include "kernels/backend.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/rng.h"
#include "model/classifier.h"
#include "model/config.h"
#include "model/evaluate.h"
#include "tests/test_util.h"
#include <omp.h>
#include <signal.h>
#include <string.h>

/* AddressSanitizer: a request larger than it serves (test_failures_returned) returns NULL,
 * as malloc does, instead of ending the test. */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }

enum { V = 200, K = 5, N_EX = 300, BATCH = 32, MAX_LEN = 64, THREADS = 3 };

/* N_EX examples with lengths 0 .. 90 (some empty, some cut at MAX_LEN), ids in [3, V),
 * labels in [0, K). */
static void random_dataset(Dataset *ds, uint64_t seed) {
    memset(ds, 0, sizeof *ds);
    ds->n = N_EX;
    ds->labels = malloc(N_EX * sizeof *ds->labels);
    ds->line_no = malloc(N_EX * sizeof *ds->line_no);
    ds->offsets = malloc((N_EX + 1) * sizeof *ds->offsets);
    ds->ids = malloc((size_t)N_EX * 91 * sizeof *ds->ids);
    ds->offsets[0] = 0;
    for (int i = 0; i < N_EX; i++) {
        int len = (int)(mha_rng_u64(seed, 3u * i) % 91);
        ds->labels[i] = (int)(mha_rng_u64(seed, 3u * i + 1) % K);
        ds->line_no[i] = i + 1;
        for (int t = 0; t < len; t++)
            ds->ids[ds->offsets[i] + t] = 3 + (int)(mha_rng_u64(seed ^ 0x5eed, (uint64_t)i * 100 + t) % (V - 3));
        ds->offsets[i + 1] = ds->offsets[i] + len;
    }
}

static void small_config(Config *c, int variant) {
    config_defaults(c);
    c->d_model = 64; c->n_heads = 4; c->d_ff = 128; c->n_layers = 2; c->max_len = MAX_LEN;
    c->dropout = 0.0f; c->attn_dropout = 0.0f;
    snprintf(c->norm, sizeof c->norm, "%s", variant ? "post" : "pre");
    snprintf(c->attention, sizeof c->attention, "%s", variant ? "math" : "fused");
    snprintf(c->activation, sizeof c->activation, "%s", variant ? "relu" : "gelu");
    snprintf(c->pooling, sizeof c->pooling, "%s", variant ? "max" : "mean");
}

enum { FP32 = 0, BF16, INT8, PRECISIONS };
static const char *const precision_name[PRECISIONS] = {"fp32", "bf16", "int8"};

/* The CPU table of a precision with ops on `threads` threads (the constructors set the
 * count), or NULL when this CPU lacks its instructions (`why` says so). */
static const Backend *backend(int precision, int threads, char *why, size_t why_len) {
    if (precision == BF16) return mha_cpu_backend_bf16(threads, why, why_len);
    if (precision == INT8) return mha_cpu_backend_int8(threads, why, why_len);
    return mha_cpu_backend(threads);
}

typedef struct { float *probs; Metrics metrics; } Run;

/* Predicts and evaluates ds in batches of at most `batch` examples with ops on `threads`
 * threads and at most `workers` workers. */
static void run_batches(Model *m, const Dataset *ds, int precision, int threads, int workers, int batch, Run *r) {
    backend(precision, threads, NULL, 0);
    evaluate_set_workers(workers);
    r->probs = malloc((size_t)ds->n * K * sizeof *r->probs);
    predict_dataset(m, ds, batch, MAX_LEN, TRUNC_HEAD, 0, r->probs, NULL, NULL);
    evaluate_dataset(m, ds, batch, MAX_LEN, TRUNC_HEAD, 0, &r->metrics);
    evaluate_set_workers(0);
}

static void run(Model *m, const Dataset *ds, int precision, int threads, int workers, Run *r) {
    run_batches(m, ds, precision, threads, workers, BATCH, r);
}

static void run_free(Run *r) {
    free(r->probs);
    metrics_free(&r->metrics);
}

/* How many probabilities of r differ from ref's in any bit; the first at *first. */
static size_t count_differing(const Run *r, const Run *ref, size_t *first) {
    size_t n = (size_t)N_EX * K, bad = 0;
    *first = n;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&r->probs[i], &ref->probs[i], sizeof(float)) != 0) {
            bad++;
            if (*first == n) *first = i;
        }
    return bad;
}

/* r the same bits as ref: probabilities, confusion matrix and loss sum. */
static void check_same(const Run *r, const Run *ref, const char *what) {
    size_t n = (size_t)N_EX * K, first, bad = count_differing(r, ref, &first);
    CHECK(bad == 0, "%s: %zu of %zu probabilities differ from batches of 32 one at a time on 1 thread "
          "(first: example %zu class %zu, %.9g vs %.9g)", what, bad, n, first / K, first % K,
          bad ? r->probs[first] : 0.0, bad ? ref->probs[first] : 0.0);
    CHECK(r->metrics.n == ref->metrics.n && r->metrics.n == N_EX, "%s: %ld examples evaluated, %ld expected",
          what, r->metrics.n, ref->metrics.n);
    CHECK(memcmp(r->metrics.confusion, ref->metrics.confusion, (size_t)K * K * sizeof(long)) == 0,
          "%s: confusion matrices differ", what);
    CHECK(memcmp(&r->metrics.loss_sum, &ref->metrics.loss_sum, sizeof(double)) == 0,
          "%s: loss sum %.17g vs %.17g", what, r->metrics.loss_sum, ref->metrics.loss_sum);
}

/* One backend and architecture: 1 thread sequential is the reference; 2 and 3 workers must
 * equal it, and 3-thread ops sequential too; then new parameters, once more. */
static void test_same_bits(int precision, int variant) {
    Config c;
    small_config(&c, variant);
    ModelDims d;
    model_dims_from_config(&d, &c, V, K);
    Model m;
    MhaError err;
    if (model_create(&m, &d, backend(precision, 1, NULL, 0), BATCH, MAX_LEN, 0, 0, &err) != 0) {
        CHECK(0, "model_create: %s", err.msg);
        return;
    }
    Dataset ds;
    random_dataset(&ds, 11 + (uint64_t)variant);
    char what[128];
    for (int round = 0; round < 3; round++) {
        model_init_params(&m, 5 + (uint64_t)(round & 1));   /* round 1: the replicas must follow */
        evaluate_set_max_tokens(round == 2 ? 400 : 0);      /* round 2: batches of at most 400 tokens */
        Run ref, r;
        run(&m, &ds, precision, 1, 0, &ref);
        const int workers[3] = {1, 2, 3};
        for (int i = 0; i < 3; i++) {
            run(&m, &ds, precision, THREADS, workers[i], &r);
            snprintf(what, sizeof what, "%s, %s, params %d, %d threads, %d worker(s)%s", precision_name[precision],
                     variant ? "post-LN math max" : "pre-LN fused mean", round & 1, THREADS, workers[i],
                     round == 2 ? ", at most 400 tokens a batch" : "");
            check_same(&r, &ref, what);
            run_free(&r);
        }
        /* batch invariance: each example alone, and in batches of 7 on workers (fp32: where
         * mha_f32_rows_batch_invariant says so) */
        const int batches[2] = {1, 7};
        const int invariant = precision != FP32 || mha_f32_rows_batch_invariant();
        if (!invariant && round == 0)
            printf("fp32 batches of 1 and 7: not checked (OpenBLAS's kernels for this CPU are not known "
                   "to give a row the same bits in any batch)\n");
        for (int i = 0; i < 2 && invariant; i++) {
            run_batches(&m, &ds, precision, i ? THREADS : 1, i ? 2 : 0, batches[i], &r);
            snprintf(what, sizeof what, "%s, %s, params %d, batches of %d%s", precision_name[precision],
                     variant ? "post-LN math max" : "pre-LN fused mean", round & 1, batches[i],
                     round == 2 ? ", at most 400 tokens a batch" : "");
            check_same(&r, &ref, what);
            run_free(&r);
        }
        evaluate_set_max_tokens(0);
        if (round == 0)
            printf("%s %s: accuracy %.4f, loss %.6f: the same bits with 1 thread and with 2 and 3 workers%s\n",
                   precision_name[precision], variant ? "post-LN/math/max " : "pre-LN/fused/mean",
                   metrics_accuracy(&ref.metrics), metrics_loss(&ref.metrics),
                   invariant ? ", with ops on 3 threads, and in batches of 1 and 7" : ", and with ops on 3 threads");
        run_free(&ref);
    }
    CHECK(m.n_replicas == THREADS - 1, "%d replicas kept, %d expected", m.n_replicas, THREADS - 1);
    model_destroy(&m);
    dataset_free(&ds);
}

/* ---- the mechanism, seen from the pooling op (once per forward) recording where it runs ---- */

static const Backend *spied;
static int spy_calls, spy_nested, spy_max_threads, spy_team, spy_workers_mask;
static long spy_max_bt;   /* the largest B x T of a batch of two or more examples */

static void spy_pool_forward(float *out, int32_t *argmax, const float *inp, const int32_t *lengths,
                             int B, int T, int C, int mode) {
    int team = 0;
#pragma omp parallel
    {
#pragma omp atomic
        team++;
    }
    const int level = omp_get_level(), max_threads = omp_get_max_threads();
    const int worker = level >= 1 ? omp_get_ancestor_thread_num(1) : 0;
#pragma omp critical(spy)
    {
        spy_calls++;
        spy_nested += level == 1;
        if (max_threads > spy_max_threads) spy_max_threads = max_threads;
        if (team > spy_team) spy_team = team;
        if (worker < 30) spy_workers_mask |= 1 << worker;
        if (B > 1 && (long)B * T > spy_max_bt) spy_max_bt = (long)B * T;
    }
    spied->pool_forward(out, argmax, inp, lengths, B, T, C, mode);
}

/* The small pre-LN model on `spy` (the CPU table whose pooling op is spy_pool_forward) with
 * parameters set, and the random dataset; 0, or -1 after a failed check. */
static int spied_model(Model *m, Dataset *ds, Backend *spy) {
    *spy = *mha_cpu_backend(THREADS);   /* embed_forward stays the CPU kernel's */
    spied = mha_cpu_backend(THREADS);
    spy->pool_forward = spy_pool_forward;
    Config c;
    small_config(&c, 0);
    ModelDims d;
    model_dims_from_config(&d, &c, V, K);
    MhaError err;
    if (model_create(m, &d, spy, BATCH, MAX_LEN, 0, 0, &err) != 0) {
        CHECK(0, "model_create: %s", err.msg);
        return -1;
    }
    model_init_params(m, 5);
    random_dataset(ds, 11);
    return 0;
}

static void test_workers_run_single_threaded_ops(void) {
    Backend spy;
    Model m;
    Dataset ds;
    if (spied_model(&m, &ds, &spy) != 0) return;
    float *probs = malloc((size_t)N_EX * K * sizeof *probs);
    const int levels = omp_get_max_active_levels();
    omp_set_max_active_levels(4);   /* nesting allowed: the workers must still keep ops to 1 thread */
    predict_dataset(&m, &ds, BATCH, MAX_LEN, TRUNC_HEAD, 0, probs, NULL, NULL);
    omp_set_max_active_levels(levels);
    int workers = 0;
    for (int b = 0; b < 30; b++) workers += (spy_workers_mask >> b) & 1;
    CHECK(spy_calls == (N_EX + BATCH - 1) / BATCH && spy_nested == spy_calls,
          "%d of %d forward passes inside a worker, %d expected", spy_nested, spy_calls, (N_EX + BATCH - 1) / BATCH);
    CHECK(spy_max_threads == 1, "omp_get_max_threads() is %d inside a worker, 1 expected", spy_max_threads);
    CHECK(spy_team == 1, "an op's parallel region got %d threads inside a worker, 1 expected", spy_team);
    CHECK(workers >= 2, "only %d worker(s) ran batches (mask %#x)", workers, (unsigned)spy_workers_mask);
    CHECK(omp_get_max_threads() == THREADS, "the caller's thread count changed: %d, %d expected",
          omp_get_max_threads(), THREADS);
    printf("workers: %d forward passes, all from %d workers at level 1, 1 thread each\n", spy_calls, workers);
    free(probs);
    model_destroy(&m);
    dataset_free(&ds);
}

/* evaluate_set_max_tokens reaches the batches: with a cap of 400 tokens no batch of two or
 * more examples is larger and there are more forward passes than batches of BATCH; a sink
 * that reads the model (one batch at a time) gets whole batches. evaluate_cpu_max_tokens:
 * 512 tokens at d_model 128, d_ff 512 (1 MiB of the 512-wide hidden layer), the 256 floor for
 * a wide model. */
static void noop_sink(void *ctx, const Model *m, const Batch *b, int row, const float *probs, float loss) {
    (void)ctx, (void)m, (void)b, (void)row, (void)probs, (void)loss;
}

static void test_token_cap(void) {
    Backend spy;
    Model m;
    Dataset ds;
    if (spied_model(&m, &ds, &spy) != 0) return;
    float *probs = malloc((size_t)N_EX * K * sizeof *probs);
    const int whole = (N_EX + BATCH - 1) / BATCH;
    evaluate_set_max_tokens(400);
    spy_calls = 0, spy_max_bt = 0;
    predict_dataset(&m, &ds, BATCH, MAX_LEN, TRUNC_HEAD, 0, probs, NULL, NULL);
    CHECK(spy_calls > whole && spy_max_bt > 0 && spy_max_bt <= 400,
          "cap 400: %d forward passes (%d without a cap), largest batch %ld tokens", spy_calls, whole, spy_max_bt);
    printf("cap 400 tokens: %d forward passes instead of %d, the largest batch %ld tokens\n", spy_calls, whole,
           spy_max_bt);
    spy_calls = 0, spy_max_bt = 0;
    predict_dataset(&m, &ds, BATCH, MAX_LEN, TRUNC_HEAD, 0, probs, noop_sink, NULL);
    CHECK(spy_calls == whole && spy_max_bt > 400, "a sink reading the model: %d forward passes (%d expected), "
          "largest batch %ld tokens", spy_calls, whole, spy_max_bt);
    evaluate_set_max_tokens(0);
    CHECK(evaluate_cpu_max_tokens(128, 512) == 512 && evaluate_cpu_max_tokens(1024, 4096) == 256 &&
              evaluate_cpu_max_tokens(64, 128) == 1365,
          "evaluate_cpu_max_tokens: %ld, %ld, %ld (512, 256, 1365 expected)", evaluate_cpu_max_tokens(128, 512),
          evaluate_cpu_max_tokens(1024, 4096), evaluate_cpu_max_tokens(64, 128));
    free(probs);
    model_destroy(&m);
    dataset_free(&ds);
}

/* Failures are returned, never results: batches that cannot be allocated (a batch of 2^30
 * examples of 2^20 tokens) give EVAL_NO_MEMORY with no forward pass run and the metrics freed
 * (before: evaluate_dataset returned nothing, and the caller used empty metrics, "accuracy 0
 * loss 0", as a real evaluation); the cancel flag stops an evaluation before its next batch
 * (EVAL_CANCELLED), and a flag left clear changes nothing. */
static volatile sig_atomic_t cancel_now;
static void cancel_sink(void *ctx, const Model *m, const Batch *b, int row, const float *probs, float loss) {
    (void)ctx, (void)m, (void)b, (void)row, (void)probs, (void)loss;
    cancel_now = 1;
}

static void test_failures_returned(void) {
    Backend spy;
    Model m;
    Dataset ds;
    if (spied_model(&m, &ds, &spy) != 0) return;
    float *probs = malloc((size_t)N_EX * K * sizeof *probs);
    Metrics mt;
    spy_calls = 0;
    int rc = evaluate_dataset(&m, &ds, 1 << 30, 1 << 20, TRUNC_HEAD, 0, &mt);
    CHECK(rc == EVAL_NO_MEMORY && spy_calls == 0 && mt.confusion == NULL,
          "evaluate_dataset without memory for its batches: %d (EVAL_NO_MEMORY %d expected), %d forward passes",
          rc, EVAL_NO_MEMORY, spy_calls);
    rc = predict_dataset(&m, &ds, 1 << 30, 1 << 20, TRUNC_HEAD, 0, probs, NULL, NULL);
    CHECK(rc == EVAL_NO_MEMORY && spy_calls == 0, "predict_dataset without memory for its batches: %d, %d "
          "forward passes", rc, spy_calls);
    evaluate_set_workers(1);
    cancel_now = 0;
    evaluate_set_cancel_flag(&cancel_now);
    rc = evaluate_dataset(&m, &ds, BATCH, MAX_LEN, TRUNC_HEAD, 0, &mt);
    CHECK(rc == EVAL_OK && mt.n == N_EX, "evaluate_dataset with the cancel flag clear: %d, %ld examples", rc, mt.n);
    metrics_free(&mt);
    spy_calls = 0;
    rc = predict_dataset(&m, &ds, BATCH, MAX_LEN, TRUNC_HEAD, 0, probs, cancel_sink, NULL);
    CHECK(rc == EVAL_CANCELLED && spy_calls == 1, "cancelled after the first batch: %d (EVAL_CANCELLED %d "
          "expected), %d forward passes (1 expected)", rc, EVAL_CANCELLED, spy_calls);
    spy_calls = 0;
    rc = evaluate_dataset(&m, &ds, BATCH, MAX_LEN, TRUNC_HEAD, 0, &mt);
    CHECK(rc == EVAL_CANCELLED && spy_calls == 0 && mt.confusion == NULL,
          "cancelled before the first batch: %d, %d forward passes", rc, spy_calls);
    evaluate_set_cancel_flag(NULL);
    evaluate_set_workers(0);
    printf("failures: no memory and cancellation returned, nothing used\n");
    free(probs);
    model_destroy(&m);
    dataset_free(&ds);
}

int main(void) {
    for (int precision = FP32; precision < PRECISIONS; precision++) {
        char why[160] = "";
        if (!backend(precision, 1, why, sizeof why)) {
            printf("%s: skipped (%s)\n", precision_name[precision], why);
            continue;
        }
        for (int variant = 0; variant < 2; variant++) test_same_bits(precision, variant);
    }
    test_workers_run_single_threaded_ops();
    test_token_cap();
    test_failures_returned();
    return test_finish("test_evaluate");
}
