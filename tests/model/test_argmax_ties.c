/* tests/model/test_argmax_ties.c: the predicted class of an evaluation (model/evaluate.c's
 * argmax, behind the dev and test metrics and mha-predict --eval) is the highest probability,
 * and on an exact tie the lowest class index. Ties made exactly: the head's weights zeroed,
 * so every example's logits are the head's bias, which holds each pattern below; each
 * example's label is the class the rule picks, so the confusion matrix must be diagonal
 * (a last-tied-index argmax, `>=` for `>`, predicts another class). Sequential and with 2
 * workers. */
#include "kernels/backend.h"
#include "kernels/rng.h"
#include "model/classifier.h"
#include "model/config.h"
#include "model/evaluate.h"
#include "tests/test_util.h"

enum { V = 50, K = 5, N_EX = 40, BATCH = 16, MAX_LEN = 16 };

/* N_EX examples of 1 .. MAX_LEN random tokens, all labelled `label`. */
static void dataset_of(Dataset *ds, int label) {
    memset(ds, 0, sizeof *ds);
    ds->n = N_EX;
    ds->labels = test_malloc(N_EX * sizeof *ds->labels);
    ds->line_no = test_malloc(N_EX * sizeof *ds->line_no);
    ds->offsets = test_malloc((N_EX + 1) * sizeof *ds->offsets);
    ds->ids = test_malloc((size_t)N_EX * MAX_LEN * sizeof *ds->ids);
    ds->offsets[0] = 0;
    for (int i = 0; i < N_EX; i++) {
        int len = 1 + (int)(mha_rng_u64(7, (uint64_t)i) % MAX_LEN);
        ds->labels[i] = label;
        ds->line_no[i] = i + 1;
        for (int t = 0; t < len; t++)
            ds->ids[ds->offsets[i] + t] = 3 + (int)(mha_rng_u64(8, (uint64_t)i * MAX_LEN + t) % (V - 3));
        ds->offsets[i + 1] = ds->offsets[i] + len;
    }
}

/* The class the tie rule picks: the first of the highest. */
static int first_max(const float *b) {
    int best = 0;
    for (int k = 1; k < K; k++) if (b[k] > b[best]) best = k;
    return best;
}

int main(void) {
    Config c;
    config_defaults(&c);
    c.d_model = 16; c.n_heads = 2; c.d_ff = 32; c.n_layers = 1; c.max_len = MAX_LEN;
    c.dropout = 0.0f;
    ModelDims d;
    model_dims_from_config(&d, &c, V, K);
    Model m;
    MhaError err;
    if (model_create(&m, &d, mha_cpu_backend(1), BATCH, MAX_LEN, 0, 0, &err) != 0) {
        fprintf(stderr, "model_create: %s\n", err.msg);
        return 1;
    }
    model_init_params(&m, 3);
    size_t bytes = m.lay.total * sizeof(float);
    float *host = test_malloc(bytes);
    m.be->to_host(host, m.params, bytes);
    memset(host + m.lay.head_w, 0, (size_t)K * d.C * sizeof(float));
    /* head biases: all tied, two tied above the rest, the first and the last tied, a tie
     * below a single best (no tie at the top: the plain maximum) */
    static const float patterns[][K] = {
        {0, 0, 0, 0, 0}, {0, 1, 0, 1, 0}, {-1, 0.5f, 2, -1, 2}, {3, 0, 0, 0, 3}, {0, 0, 1, 2, 2}, {0, 0, 0, 4, 0},
    };
    const int n_patterns = (int)(sizeof patterns / sizeof patterns[0]);
    float *probs = test_malloc((size_t)N_EX * K * sizeof *probs);
    for (int pi = 0; pi < n_patterns; pi++) {
        const float *b = patterns[pi];
        memcpy(host + m.lay.head_b, b, K * sizeof(float));
        m.be->to_device(m.params, host, bytes);
        int want = first_max(b);
        Dataset ds;
        dataset_of(&ds, want);
        /* the tie is exact: every class with the top bias has the same probability bits */
        predict_dataset(&m, &ds, BATCH, MAX_LEN, TRUNC_HEAD, 0, probs, NULL, NULL);
        int exact = 1;
        for (int i = 0; i < N_EX; i++)
            for (int k = 0; k < K; k++)
                if (b[k] == b[want] && f2u(probs[(size_t)i * K + k]) != f2u(probs[(size_t)i * K + want])) exact = 0;
        CHECK(exact, "bias pattern %d: the tied classes' probabilities are not the same bits (no tie to test)", pi);
        for (int workers = 0; workers <= 2; workers += 2) {
            evaluate_set_workers(workers);
            Metrics mt;
            CHECK(evaluate_dataset(&m, &ds, BATCH, MAX_LEN, TRUNC_HEAD, 0, &mt) == EVAL_OK, "evaluate_dataset failed");
            evaluate_set_workers(0);
            int other = -1;   /* a class predicted instead, for the message */
            for (int k = K - 1; k >= 0; k--)
                if (k != want && mt.confusion[(size_t)want * K + k] > 0) other = k;
            CHECK(mt.n == N_EX && mt.confusion[(size_t)want * K + want] == N_EX,
                  "bias pattern %d (%g %g %g %g %g), %d workers: %ld of %d examples predicted class %d, "
                  "the others class %d; expected the lowest tied index, %d", pi, b[0], b[1], b[2], b[3], b[4],
                  workers, mt.confusion[(size_t)want * K + want], N_EX, want, other, want);
            metrics_free(&mt);
        }
        dataset_free(&ds);
    }
    free(probs);
    free(host);
    model_destroy(&m);
    if (test_failures) {
        fprintf(stderr, "%d failure(s)\n", test_failures);
        return 1;
    }
    printf("argmax ties: the lowest tied class wins in %d bias patterns\n", n_patterns);
    return 0;
}
