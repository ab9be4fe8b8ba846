/* tests/model/test_reference.c: the whole model against PyTorch (float64) reference
 * tensors from scripts/make-reference.py: logits, loss, every parameter gradient, and the
 * losses of 10 AdamW updates with warmup, linear decay and clipping, for every fixture
 * in tests/fixtures and both attention paths. Tolerance: 1e-5 normwise relative error. */
#include "kernels/backend.h"
#include "model/classifier.h"
#include "model/config.h"
#include "model/optimizer.h"
#include "tests/test_util.h"
#include <cjson/cJSON.h>
#include <string.h>

#define TOL 1e-5

static const char *FIXTURES[] = {"post_relu_mean", "pre_gelu_mean", "post_relu_causal", "post_gelu_cls",
                                 "pre_relu_max", "single_head", "sinusoidal"};

static int geti(const cJSON *o, const char *k) { return cJSON_GetObjectItem(o, k)->valueint; }
static double getd(const cJSON *o, const char *k) { return cJSON_GetObjectItem(o, k)->valuedouble; }
static const char *gets_(const cJSON *o, const char *k) { return cJSON_GetObjectItem(o, k)->valuestring; }

static double *doubles(const cJSON *arr, size_t *n) {
    *n = (size_t)cJSON_GetArraySize(arr);
    double *d = malloc(*n * sizeof *d);
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) d[i++] = x->valuedouble;
    return d;
}
static int32_t *ints(const cJSON *arr) {
    int32_t *d = malloc((size_t)cJSON_GetArraySize(arr) * sizeof *d);
    size_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) d[i++] = x->valueint;
    return d;
}

/* Builds a Config matching the fixture (the optimizer reads it). */
static void fixture_config(Config *c, const cJSON *cfg, const cJSON *train, int fused) {
    config_defaults(c);
    c->d_model = geti(cfg, "C");
    c->n_heads = geti(cfg, "NH");
    c->d_ff = geti(cfg, "F");
    c->n_layers = geti(cfg, "L");
    c->max_len = geti(cfg, "P");
    c->dropout = c->attn_dropout = 0.0f;
    snprintf(c->norm, sizeof c->norm, "%s", gets_(cfg, "norm"));
    snprintf(c->activation, sizeof c->activation, "%s", gets_(cfg, "activation"));
    snprintf(c->pooling, sizeof c->pooling, "%s", gets_(cfg, "pooling"));
    snprintf(c->position, sizeof c->position, "%s", gets_(cfg, "position"));
    snprintf(c->attention, sizeof c->attention, "%s", fused ? "fused" : "math");
    c->causal = geti(cfg, "causal");
    c->label_smoothing = (float)getd(cfg, "label_smoothing");
    if (train) {
        c->lr = (float)getd(train, "lr");
        c->warmup = (float)getd(train, "warmup");
        snprintf(c->decay, sizeof c->decay, "%s", gets_(train, "decay"));
        c->min_lr_ratio = (float)getd(train, "min_lr_ratio");
        c->clip_norm = (float)getd(train, "clip_norm");
        c->weight_decay = (float)getd(train, "weight_decay");
        c->beta1 = (float)getd(train, "beta1");
        c->beta2 = (float)getd(train, "beta2");
        c->adam_eps = (float)getd(train, "eps");
    }
}

/* Loads the fixture's parameters into the model, checking names and sizes. */
static void load_params(Model *m, const cJSON *params, const char *name) {
    float *h = calloc(m->lay.total, sizeof *h);
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, params) {
        const char *pname = gets_(p, "name");
        size_t n;
        double *d = doubles(cJSON_GetObjectItem(p, "data"), &n);
        CHECK(i < m->lay.n && strcmp(m->lay.t[i].name, pname) == 0, "%s: tensor %d is %s, layout has %s",
              name, i, pname, i < m->lay.n ? m->lay.t[i].name : "(none)");
        if (i < m->lay.n) {
            CHECK(n == m->lay.t[i].numel, "%s: %s has %zu values, layout %zu", name, pname, n, m->lay.t[i].numel);
            for (size_t k = 0; k < n && k < m->lay.t[i].numel; k++) h[m->lay.t[i].offset + k] = (float)d[k];
        }
        free(d);
        i++;
    }
    CHECK(i == m->lay.n, "%s: fixture has %d tensors, layout %d", name, i, m->lay.n);
    m->be->to_device(m->params, h, m->lay.total * sizeof(float));
    free(h);
}

static void run_fixture(const char *fx, int fused) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/ref_%s.json", fx);
    char *text = test_read_file(path, NULL);
    CHECK(text != NULL, "cannot read %s", path);
    if (!text) return;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *cfg = cJSON_GetObjectItem(root, "config"), *in = cJSON_GetObjectItem(root, "inputs");
    const cJSON *train = cJSON_GetObjectItem(root, "train");
    char name[96];
    snprintf(name, sizeof name, "%s/%s", fx, fused ? "fused" : "math");
    Config c;
    fixture_config(&c, cfg, train, fused);
    ModelDims d;
    model_dims_from_config(&d, &c, geti(cfg, "V"), geti(cfg, "K"));
    int B = geti(cfg, "B"), T = geti(cfg, "T"), K = d.K;
    Model m;
    MhaError err;
    const Backend *be = mha_cpu_backend(2);
    CHECK(model_create(&m, &d, be, B, T, 0, 0, &err) == 0, "%s", err.msg);
    load_params(&m, cJSON_GetObjectItem(root, "params"), name);
    int32_t *ids = ints(cJSON_GetObjectItem(in, "ids")), *lengths = ints(cJSON_GetObjectItem(in, "lengths"));
    int32_t *labels = ints(cJSON_GetObjectItem(in, "labels"));

    /* forward + backward */
    model_forward(&m, ids, lengths, labels, B, T, 1, 7);
    double loss = model_loss_sum(&m) / B;
    double ref_loss = getd(root, "loss");
    CHECK(fabs(loss - ref_loss) <= TOL * fabs(ref_loss), "%s: loss %.9g vs torch %.9g", name, loss, ref_loss);
    size_t n;
    double *ref_logits = doubles(cJSON_GetObjectItem(root, "logits"), &n);
    float *logits = malloc((size_t)B * K * sizeof *logits);
    be->to_host(logits, m.logits, (size_t)B * K * sizeof(float));
    double e = rel_err_f_d(logits, ref_logits, n);
    CHECK(n == (size_t)B * K && e < TOL, "%s: logits rel err %.3g", name, e);
    model_zero_grads(&m);
    model_backward(&m, 1.0f / B, 7);
    float *g = malloc(m.lay.total * sizeof *g);
    be->to_host(g, m.grads, m.lay.total * sizeof(float));
    double worst = 0;
    int i = 0;
    const cJSON *gt;
    cJSON_ArrayForEach(gt, cJSON_GetObjectItem(root, "grads")) {
        double *ref = doubles(cJSON_GetObjectItem(gt, "data"), &n);
        const ParamInfo *p = &m.lay.t[i++];
        double ge = rel_err_f_d(g + p->offset, ref, n);
        CHECK(ge < TOL, "%s: gradient of %s rel err %.3g", name, p->name, ge);
        if (ge > worst) worst = ge;
        free(ref);
    }
    printf("%-24s loss err %.2e  logits err %.2e  worst gradient err %.2e\n", name,
           fabs(loss - ref_loss) / fabs(ref_loss), e, worst);

    /* The forward fuses each linear layer with its activation or residual
     * (Backend.linear_forward_post): the logits of a model on a table without it (the separate
     * ops) are the same bits, with and without gradients, and so are the gradients. */
    Backend separate = *be;
    separate.linear_forward_post = NULL;
    Model ms;
    CHECK(model_create(&ms, &d, &separate, B, T, 0, 0, &err) == 0, "%s", err.msg);
    load_params(&ms, cJSON_GetObjectItem(root, "params"), name);
    float *sep_logits = malloc((size_t)B * K * sizeof *sep_logits);
    float *sep_g = malloc(m.lay.total * sizeof *sep_g);
    model_forward(&ms, ids, lengths, labels, B, T, 1, 7);
    model_zero_grads(&ms);
    model_backward(&ms, 1.0f / B, 7);
    be->to_host(sep_g, ms.grads, m.lay.total * sizeof(float));
    be->to_host(sep_logits, ms.logits, (size_t)B * K * sizeof(float));
    CHECK(be->linear_forward_post != NULL && memcmp(sep_logits, logits, (size_t)B * K * sizeof(float)) == 0 &&
          memcmp(sep_g, g, m.lay.total * sizeof(float)) == 0,
          "%s: fused training forward/backward differs from the separate ops", name);
    model_forward(&m, ids, lengths, labels, B, T, 0, 0);
    be->to_host(logits, m.logits, (size_t)B * K * sizeof(float));
    model_forward(&ms, ids, lengths, labels, B, T, 0, 0);
    be->to_host(sep_logits, ms.logits, (size_t)B * K * sizeof(float));
    CHECK(memcmp(sep_logits, logits, (size_t)B * K * sizeof(float)) == 0,
          "%s: fused forward (train = 0) differs from the separate ops", name);
    model_destroy(&ms);
    /* a forward-only model (mha-predict's): no gradients, the same logits */
    CHECK(model_create_forward_only(&ms, &d, be, B, T, &err) == 0, "%s", err.msg);
    load_params(&ms, cJSON_GetObjectItem(root, "params"), name);
    model_forward(&ms, ids, lengths, labels, B, T, 0, 0);
    be->to_host(sep_logits, ms.logits, (size_t)B * K * sizeof(float));
    CHECK(ms.grads == NULL && ms.dx == NULL && ms.acts[0].fc1 == NULL &&
          memcmp(sep_logits, logits, (size_t)B * K * sizeof(float)) == 0,
          "%s: forward-only model: gradients allocated or other logits", name);
    model_destroy(&ms);
    free(sep_logits), free(sep_g);

    /* 10 AdamW updates on the same batch */
    AdamW opt;
    CHECK(adamw_create(&opt, &m, &err) == 0, "%s", err.msg);
    size_t n_steps;
    double *ref_losses = doubles(cJSON_GetObjectItem(train, "losses"), &n_steps);
    long total = geti(train, "total");
    double worst_step = 0;
    for (size_t s = 0; s < n_steps; s++) {
        model_zero_grads(&m);
        model_forward(&m, ids, lengths, labels, B, T, 1, 7);
        double l = model_loss_sum(&m) / B;
        model_backward(&m, 1.0f / B, 7);
        double se = fabs(l - ref_losses[s]) / fabs(ref_losses[s]);
        if (se > worst_step) worst_step = se;
        CHECK(se < TOL, "%s: step %zu loss %.9g vs torch %.9g", name, s, l, ref_losses[s]);
        double norm;
        CHECK(adamw_step(&opt, &m, &c, schedule_lr(&c, (long)s, total), &norm) == 0, "%s: step skipped", name);
    }
    printf("%-24s 10 AdamW steps: worst loss err %.2e (first %.4f, last %.4f)\n", name, worst_step,
           ref_losses[0], ref_losses[n_steps - 1]);
    adamw_destroy(&opt, &m);
    free(ref_losses);
    free(g);
    free(logits);
    free(ref_logits);
    free(ids);
    free(lengths);
    free(labels);
    model_destroy(&m);
    cJSON_Delete(root);
}

int main(void) {
    FILE *f = fopen("tests/fixtures/ref_post_relu_mean.json", "r");
    if (!f) return test_skip("tests/fixtures not found (run from the project root)");
    fclose(f);
    for (size_t i = 0; i < sizeof FIXTURES / sizeof *FIXTURES; i++)
        for (int fused = 0; fused <= 1; fused++) run_fixture(FIXTURES[i], fused);
    return test_finish("reference");
}
