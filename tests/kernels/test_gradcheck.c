/* tests/kernels/test_gradcheck.c: finite-difference gradient checks of every layer kernel,
 * in double precision (layers_f64.h, the same source as the float backend).
 *
 * For each layer: a random projection loss L = sum(out * R), analytic gradients from the
 * backward kernel with dout = R (grads start at zero), numerical ones by central
 * differences with h = 1e-6 over every input element. Gradient buffers start with random
 * values that are subtracted afterwards, so the += contract is checked too; the gradient of
 * act_backward, which overwrites, starts as NaN instead.
 * Error = max|num - ana| / max|ana|
 * per input tensor; the test fails above 1e-6. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/backend.h"
#include "kernels/cpu/layers_f64.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

#define H 1e-6
#define TOL 1e-6

static int failures = 0;
static uint64_t fill_counter = 0;

/* x (n) uniform in [lo, hi) from the counter RNG (seeded once, advancing) */
static void fill(double *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * mha_rng_uniform(12345, fill_counter++);
}
/* x (n) with magnitudes in [lo, hi) and random signs (keeps away from zero, e.g. ReLU kinks) */
static void fill_away(double *x, size_t n, double lo, double hi) {
    fill(x, n, lo, hi);
    for (size_t i = 0; i < n; i++)
        if (mha_rng_uniform(777, fill_counter++) < 0.5f) x[i] = -x[i];
}
static double dot(const double *a, const double *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

/* Gradient buffers start random (backward must add to them): pre() fills g (n) and returns
 * a copy of the start, post() turns g into what backward added and frees the copy. */
static double *pre(double *g, size_t n) {
    fill(g, n, -1, 1);
    double *g0 = dalloc(n);
    memcpy(g0, g, n * sizeof(double));
    return g0;
}
static void post(double *g, double *g0, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] -= g0[i];
    free(g0);
}
/* A gradient the op overwrites starts as NaN: any element it fails to write shows. */
static void poison(double *g, size_t n) {
    for (size_t i = 0; i < n; i++) g[i] = NAN;
}

/* A layer under test: loss() recomputes L from the current inputs. */
typedef double (*loss_fn)(void *ctx);

/* Compares the analytic gradient ana (n) of L with respect to x (n) with central differences. */
static void check(const char *layer, const char *input, loss_fn loss, void *ctx,
                  double *x, const double *ana, size_t n) {
    double maxdiff = 0, maxana = 0;
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + H;
        double lp = loss(ctx);
        x[i] = x0 - H;
        double lm = loss(ctx);
        x[i] = x0;
        double num = (lp - lm) / (2 * H);
        double d = fabs(num - ana[i]);
        if (!(d <= maxdiff)) maxdiff = isnan(d) ? INFINITY : d;   /* NaN: an element not written */
        if (fabs(ana[i]) > maxana) maxana = fabs(ana[i]);
    }
    double rel = maxana > 0 ? maxdiff / maxana : maxdiff;
    int ok = rel < TOL && maxana > 0;
    printf("%-34s d%-6s n=%-4zu max|ana|=%.3e  rel err=%.3e  %s\n", layer, input, n, maxana, rel,
           ok ? "ok" : "FAIL");
    if (!ok) failures++;
}

/* ---------------------------------- linear ---------------------------------- */
typedef struct { int N, IC, OC; double *inp, *w, *bias, *out, *R; } LinearCtx;
static double linear_loss(void *p) {
    LinearCtx *c = p;
    mha_linear_forward_f64(c->out, c->inp, c->w, c->bias, c->N, c->IC, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}
static void test_linear(void) {
    LinearCtx c = {.N = 6, .IC = 5, .OC = 4};
    size_t ni = (size_t)c.N * c.IC, nw = (size_t)c.OC * c.IC, no = (size_t)c.N * c.OC;
    c.inp = dalloc(ni), c.w = dalloc(nw), c.bias = dalloc(c.OC), c.out = dalloc(no), c.R = dalloc(no);
    fill(c.inp, ni, -1, 1), fill(c.w, nw, -1, 1), fill(c.bias, c.OC, -1, 1), fill(c.R, no, -1, 1);
    double *dinp = dalloc(ni), *dw = dalloc(nw), *db = dalloc(c.OC);
    linear_loss(&c);
    double *dinp0 = pre(dinp, ni), *dw0 = pre(dw, nw), *db0 = pre(db, c.OC);
    mha_linear_backward_f64(dinp, dw, db, c.R, c.inp, c.w, c.N, c.IC, c.OC, 1);
    post(dinp, dinp0, ni), post(dw, dw0, nw), post(db, db0, c.OC);
    check("linear", "inp", linear_loss, &c, c.inp, dinp, ni);
    check("linear", "w", linear_loss, &c, c.w, dw, nw);
    check("linear", "bias", linear_loss, &c, c.bias, db, c.OC);
    free(c.inp), free(c.w), free(c.bias), free(c.out), free(c.R), free(dinp), free(dw), free(db);
}

/* -------------------------------- embedding -------------------------------- */
typedef struct { int B, T, C; int32_t *ids; double *tok, *pos, *out, *R; } EmbedCtx;
static double embed_loss(void *p) {
    EmbedCtx *c = p;
    mha_embed_forward_f64(c->out, c->ids, c->tok, c->pos, c->B, c->T, c->C);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}
static void test_embedding(void) {
    const int V = 7, maxT = 6;
    EmbedCtx c = {.B = 2, .T = 5, .C = 8};
    int32_t ids[10] = {1, 3, 3, 0, 6, 2, 1, 1, 5, 3};   /* repeats: the scatter must add */
    c.ids = ids;
    size_t no = (size_t)c.B * c.T * c.C;
    c.tok = dalloc((size_t)V * c.C), c.pos = dalloc((size_t)maxT * c.C);
    c.out = dalloc(no), c.R = dalloc(no);
    fill(c.tok, (size_t)V * c.C, -1, 1), fill(c.pos, (size_t)maxT * c.C, -1, 1), fill(c.R, no, -1, 1);
    double *dtok = dalloc((size_t)V * c.C), *dpos = dalloc((size_t)maxT * c.C);
    double *dtok0 = pre(dtok, (size_t)V * c.C), *dpos0 = pre(dpos, (size_t)maxT * c.C);
    mha_embed_backward_f64(dtok, dpos, c.R, c.ids, c.B, c.T, c.C);
    post(dtok, dtok0, (size_t)V * c.C), post(dpos, dpos0, (size_t)maxT * c.C);
    check("embedding", "tok", embed_loss, &c, c.tok, dtok, (size_t)V * c.C);
    check("embedding", "pos", embed_loss, &c, c.pos, dpos, (size_t)c.T * c.C);
    free(c.tok), free(c.pos), free(c.out), free(c.R), free(dtok), free(dpos);
}

/* -------------------------------- layernorm -------------------------------- */
typedef struct { int N, C; double *inp, *w, *b, *out, *mean, *rstd, *R; } LnCtx;
static double ln_loss(void *p) {
    LnCtx *c = p;
    mha_layernorm_forward_f64(c->out, c->mean, c->rstd, c->inp, c->w, c->b, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}
static void test_layernorm(void) {
    LnCtx c = {.N = 6, .C = 8};
    size_t n = (size_t)c.N * c.C;
    c.inp = dalloc(n), c.w = dalloc(c.C), c.b = dalloc(c.C), c.out = dalloc(n), c.R = dalloc(n);
    c.mean = dalloc(c.N), c.rstd = dalloc(c.N);
    fill(c.inp, n, -2, 2), fill(c.w, c.C, 0.5, 1.5), fill(c.b, c.C, -1, 1), fill(c.R, n, -1, 1);
    double *dinp = dalloc(n), *dw = dalloc(c.C), *db = dalloc(c.C);
    ln_loss(&c);
    double *dinp0 = pre(dinp, n), *dw0 = pre(dw, c.C), *db0 = pre(db, c.C);
    mha_layernorm_backward_f64(dinp, dw, db, c.R, c.inp, c.w, c.mean, c.rstd, c.N, c.C);
    post(dinp, dinp0, n), post(dw, dw0, c.C), post(db, db0, c.C);
    check("layernorm", "inp", ln_loss, &c, c.inp, dinp, n);
    check("layernorm", "w", ln_loss, &c, c.w, dw, c.C);
    check("layernorm", "b", ln_loss, &c, c.b, db, c.C);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.R), free(c.mean), free(c.rstd);
    free(dinp), free(dw), free(db);
}

/* ------------------------------ act, dropout ------------------------------ */
typedef struct { size_t n; int act; double p; double *inp, *out, *R; } EwCtx;
static double act_loss(void *p) {
    EwCtx *c = p;
    mha_act_forward_f64(c->out, c->inp, c->n, c->act);
    return dot(c->out, c->R, c->n);
}
static double dropout_loss(void *p) {
    EwCtx *c = p;
    mha_dropout_forward_f64(c->out, c->inp, c->n, c->p, 99, 1000);
    return dot(c->out, c->R, c->n);
}
static void test_elementwise(void) {
    EwCtx c = {.n = 80};
    c.inp = dalloc(c.n), c.out = dalloc(c.n), c.R = dalloc(c.n);
    double *d = dalloc(c.n);
    fill(c.R, c.n, -1, 1);

    c.act = MHA_ACT_RELU;
    fill_away(c.inp, c.n, 0.05, 2);   /* no element within 0.05 of the kink */
    poison(d, c.n);   /* act_backward overwrites */
    mha_act_backward_f64(d, c.R, c.inp, c.n, c.act);
    check("relu", "inp", act_loss, &c, c.inp, d, c.n);

    c.act = MHA_ACT_GELU;
    fill(c.inp, c.n, -4, 4);
    poison(d, c.n);
    mha_act_backward_f64(d, c.R, c.inp, c.n, c.act);
    check("gelu", "inp", act_loss, &c, c.inp, d, c.n);

    c.p = (double)0.3f;
    fill(c.inp, c.n, -2, 2);
    double *d0 = pre(d, c.n);
    mha_dropout_backward_f64(d, c.R, c.n, c.p, 99, 1000);
    post(d, d0, c.n);
    check("dropout p=0.3", "inp", dropout_loss, &c, c.inp, d, c.n);
    free(c.inp), free(c.out), free(c.R), free(d);
}

/* -------------------------------- attention -------------------------------- */
typedef struct {
    int B, T, C, NH, causal, fused;
    double p;
    const int32_t *len;
    double *qkv, *out, *att, *lse, *R;
} AttCtx;
static double att_loss(void *p) {
    AttCtx *c = p;
    if (c->fused)
        mha_attention_forward_fused_f64(c->out, c->lse, c->qkv, c->len, c->B, c->T, c->C, c->NH,
                                        c->causal, c->p, 4242);
    else
        mha_attention_forward_math_f64(c->out, c->att, c->qkv, c->len, c->B, c->T, c->C, c->NH,
                                       c->causal, c->p, 4242);
    return dot(c->out, c->R, (size_t)c->B * c->T * c->C);
}
static void test_attention(int fused, int causal, double p) {
    static const int32_t len[2] = {5, 3};
    AttCtx c = {.B = 2, .T = 5, .C = 8, .NH = 2, .causal = causal, .fused = fused, .p = p, .len = len};
    size_t nq = (size_t)c.B * c.T * 3 * c.C, no = (size_t)c.B * c.T * c.C;
    size_t na = (size_t)c.B * c.NH * c.T * c.T;
    c.qkv = dalloc(nq), c.out = dalloc(no), c.R = dalloc(no);
    c.att = dalloc(na), c.lse = dalloc((size_t)c.B * c.NH * c.T);
    double *datt = dalloc(na), *dqkv = dalloc(nq);
    fill(c.qkv, nq, -1.5, 1.5), fill(c.R, no, -1, 1);
    att_loss(&c);
    double *dqkv0 = pre(dqkv, nq);
    if (fused)
        mha_attention_backward_fused_f64(dqkv, c.R, c.out, c.qkv, c.lse, c.len, c.B, c.T, c.C,
                                         c.NH, causal, p, 4242);
    else
        mha_attention_backward_math_f64(dqkv, datt, c.R, c.qkv, c.att, c.len, c.B, c.T, c.C,
                                        c.NH, causal, p, 4242);
    post(dqkv, dqkv0, nq);
    char name[64];
    snprintf(name, sizeof name, "attention %s%s p=%.1f", fused ? "fused" : "math",
             causal ? " causal" : "", p);
    check(name, "qkv", att_loss, &c, c.qkv, dqkv, nq);
    free(c.qkv), free(c.out), free(c.R), free(c.att), free(c.lse), free(datt), free(dqkv);
}

/* --------------------------------- pooling --------------------------------- */
typedef struct { int B, T, C, mode; const int32_t *len; int32_t *am; double *inp, *out, *R; } PoolCtx;
static double pool_loss(void *p) {
    PoolCtx *c = p;
    mha_pool_forward_f64(c->out, c->am, c->inp, c->len, c->B, c->T, c->C, c->mode);
    return dot(c->out, c->R, (size_t)c->B * c->C);
}
static void test_pool(int mode, const char *name) {
    static const int32_t len[2] = {5, 3};
    PoolCtx c = {.B = 2, .T = 5, .C = 8, .mode = mode, .len = len};
    size_t ni = (size_t)c.B * c.T * c.C, no = (size_t)c.B * c.C;
    int32_t am[16];
    c.am = am;
    c.inp = dalloc(ni), c.out = dalloc(no), c.R = dalloc(no);
    fill(c.inp, ni, -1, 1), fill(c.R, no, -1, 1);
    double *d = dalloc(ni);
    pool_loss(&c);
    double *d0 = pre(d, ni);
    mha_pool_backward_f64(d, c.R, c.am, c.len, c.B, c.T, c.C, mode);
    post(d, d0, ni);
    check(name, "inp", pool_loss, &c, c.inp, d, ni);
    free(c.inp), free(c.out), free(c.R), free(d);
}

/* ------------------------------ cross-entropy ------------------------------ */
typedef struct { int B, K; double eps, dscale; const int32_t *labels; double *logits, *losses, *probs; } CeCtx;
static double ce_loss(void *p) {
    CeCtx *c = p;
    mha_crossentropy_f64(c->losses, c->probs, NULL, c->logits, c->labels, c->B, c->K, c->eps, 0);
    double s = 0;
    for (int b = 0; b < c->B; b++) s += c->losses[b];
    return c->dscale * s;
}
static void test_crossentropy(double eps) {
    static const int32_t labels[3] = {2, 0, 4};
    CeCtx c = {.B = 3, .K = 5, .eps = eps, .dscale = 0.7, .labels = labels};
    size_t n = (size_t)c.B * c.K;
    c.logits = dalloc(n), c.losses = dalloc(c.B), c.probs = dalloc(n);
    fill(c.logits, n, -3, 3);
    double *d = dalloc(n), *d0 = pre(d, n);
    mha_crossentropy_f64(c.losses, c.probs, d, c.logits, c.labels, c.B, c.K, eps, c.dscale);
    post(d, d0, n);
    char name[64];
    snprintf(name, sizeof name, "crossentropy eps=%.1f", eps);
    check(name, "logits", ce_loss, &c, c.logits, d, n);
    free(c.logits), free(c.losses), free(c.probs), free(d);
}

int main(void) {
    test_linear();
    test_embedding();
    test_layernorm();
    test_elementwise();
    for (int fused = 0; fused < 2; fused++)
        for (int causal = 0; causal < 2; causal++) {
            test_attention(fused, causal, 0.0);
            test_attention(fused, causal, (double)0.2f);
        }
    test_pool(MHA_POOL_MEAN, "pool mean");
    test_pool(MHA_POOL_CLS, "pool cls");
    test_pool(MHA_POOL_MAX, "pool max");
    test_crossentropy(0.0);
    test_crossentropy(0.1);
    if (failures) {
        printf("%d gradient checks FAILED\n", failures);
        return 1;
    }
    printf("all gradient checks passed\n");
    return 0;
}
