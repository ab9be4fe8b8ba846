/* tests/kernels/test_cpu_ops.c: the float CPU backend (through its Backend table) against
 * the double instantiation of the same kernels, on random inputs of awkward sizes.
 *
 * Errors are normwise, max|a - b| / max|b| with b the double reference; the limit is 1e-5.
 * Also: math vs fused attention (forward and backward, padding, causal, dropout), zeros on
 * padded query rows, no NaN when an example has no valid key, untouched gradients on padded
 * rows, exact dropout masks, embed_backward bitwise identical with 1 and 2 threads, AdamW
 * against a hand-computed step, the vectorised expf against exp, the fused
 * linear_forward_post of the fp32, bf16 and int8 tables bit for bit against their separate ops,
 * and their linear forward's rows the same bits alone as in any batch. The fp32 linear tests
 * run twice where the CPU has AVX2 and FMA: on OpenBLAS and on our own product (gemm_f32.c),
 * whose every element is also checked bit for bit against a scalar chain of fmaf. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kernels/backend.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_f32.h"
#include "kernels/cpu/packed_cache.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/layers_bf16.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/cpu/layers_f64.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

#define TOL 1e-5

static const Backend *be;
static uint64_t fill_counter = 0;
static const char *fp32_path = "";   /* the fp32 linear forward's product, in check names */
static int fp32_only;                /* the linear table tests skip bf16 and int8 (checked once) */


/* ---- buffers: every float buffer has a double twin holding the same values ---- */
static float *falloc(size_t n) {
    float *p = be->alloc((n ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 0, (n ? n : 1) * sizeof(float));
    return p;
}
/* f (n) uniform in [lo, hi) and d (n) = the same values in double */
static void fill2(float *f, double *d, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) {
        f[i] = lo + (hi - lo) * mha_rng_uniform(2024, fill_counter++);
        if (d) d[i] = f[i];
    }
}
/* ---------------------------------- linear ---------------------------------- */
/* accumulate: dinp starts non-zero and backward must add to it; else dinp starts as NaN and
 * backward must overwrite all of it (dw, dbias accumulate either way) */
static void test_linear(int with_bias, int accumulate) {
    const int N = 67, IC = 48, OC = 40;
    size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *inp = falloc(ni), *w = falloc(nw), *bias = falloc(OC), *out = falloc(no), *dout = falloc(no);
    float *dinp = falloc(ni), *dw = falloc(nw), *db = falloc(OC);
    double *inp_d = dalloc(ni), *w_d = dalloc(nw), *bias_d = dalloc(OC), *out_d = dalloc(no);
    double *dout_d = dalloc(no), *dinp_d = dalloc(ni), *dw_d = dalloc(nw), *db_d = dalloc(OC);
    fill2(inp, inp_d, ni, -1, 1), fill2(w, w_d, nw, -1, 1), fill2(bias, bias_d, OC, -1, 1);
    fill2(dout, dout_d, no, -1, 1);
    /* gradients start non-zero: backward must accumulate */
    fill2(dinp, dinp_d, ni, -1, 1), fill2(dw, dw_d, nw, -1, 1), fill2(db, db_d, OC, -1, 1);
    if (!accumulate)
        for (size_t i = 0; i < ni; i++) dinp[i] = NAN;
    be->linear_forward(out, inp, w, with_bias ? bias : NULL, N, IC, OC);
    mha_linear_forward_f64(out_d, inp_d, w_d, with_bias ? bias_d : NULL, N, IC, OC);
    be->linear_backward(dinp, dw, db, dout, inp, w, N, IC, OC, accumulate);
    mha_linear_backward_f64(dinp_d, dw_d, db_d, dout_d, inp_d, w_d, N, IC, OC, accumulate);
    char what[96];
    snprintf(what, sizeof what, "linear forward (%s, %s)", with_bias ? "bias" : "no bias", fp32_path);
    test_result(what, rel_err_f_d(out, out_d, no), TOL);
    if (!accumulate) {
        test_result("linear backward dinp overwritten (was NaN)", rel_err_f_d(dinp, dinp_d, ni), TOL);
        test_result("linear backward dw += (dinp overwritten)", rel_err_f_d(dw, dw_d, nw), TOL);
        test_result("linear backward dbias += (dinp overwritten)", rel_err_f_d(db, db_d, OC), TOL);
    } else if (with_bias) {
        test_result("linear backward dinp", rel_err_f_d(dinp, dinp_d, ni), TOL);
        test_result("linear backward dw", rel_err_f_d(dw, dw_d, nw), TOL);
        test_result("linear backward dbias", rel_err_f_d(db, db_d, OC), TOL);
    }
    be->free(inp), be->free(w), be->free(bias), be->free(out), be->free(dout);
    be->free(dinp), be->free(dw), be->free(db);
    free(inp_d), free(w_d), free(bias_d), free(out_d), free(dout_d), free(dinp_d), free(dw_d), free(db_d);
}

/* The empty product (OC = 0): an overwritten dinp becomes zeros, an accumulated one stays, in
 * the fp32 table and in the bf16 one (when this CPU has it). */
static void test_linear_empty(void) {
    const int N = 5, IC = 7;
    char why[128];
    const Backend *tables[2] = {be, mha_cpu_backend_bf16(0, why, sizeof why)};
    for (int t = 0; t < 2 && tables[t]; t++) {
        float dinp[5 * 7], dummy[1] = {0};
        for (int i = 0; i < N * IC; i++) dinp[i] = NAN;
        tables[t]->linear_backward(dinp, dummy, dummy, dummy, dummy, dummy, N, IC, 0, 0);
        int zeros = 1;
        for (int i = 0; i < N * IC; i++) zeros &= dinp[i] == 0;
        for (int i = 0; i < N * IC; i++) dinp[i] = (float)i;
        tables[t]->linear_backward(dinp, dummy, dummy, dummy, dummy, dummy, N, IC, 0, 1);
        int kept = 1;
        for (int i = 0; i < N * IC; i++) kept &= dinp[i] == (float)i;
        char what[96];
        snprintf(what, sizeof what, "linear backward OC=0 (%s): overwritten -> 0, += -> unchanged",
                 t ? "bf16" : "fp32");
        test_expect(what, zeros && kept);
    }
}

/* -------------------------------- embedding -------------------------------- */
static void test_embedding(void) {
    const int B = 8, T = 64, C = 96, V = 50, maxT = 80;
    size_t nt = (size_t)V * C, np = (size_t)maxT * C, no = (size_t)B * T * C;
    int32_t *ids = be->alloc((size_t)B * T * sizeof(int32_t));
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)(mha_rng_u64(5, (uint64_t)i) % V);
    float *tok = falloc(nt), *pos = falloc(np), *out = falloc(no), *dout = falloc(no);
    float *dtok = falloc(nt), *dpos = falloc(np);
    double *tok_d = dalloc(nt), *pos_d = dalloc(np), *out_d = dalloc(no), *dout_d = dalloc(no);
    double *dtok_d = dalloc(nt), *dpos_d = dalloc(np);
    fill2(tok, tok_d, nt, -1, 1), fill2(pos, pos_d, np, -1, 1), fill2(dout, dout_d, no, -1, 1);
    fill2(dtok, dtok_d, nt, -1, 1), fill2(dpos, dpos_d, np, -1, 1);
    be->embed_forward(out, ids, tok, pos, B, T, C);
    mha_embed_forward_f64(out_d, ids, tok_d, pos_d, B, T, C);
    test_result("embed forward", rel_err_f_d(out, out_d, no), TOL);

    /* determinism: bitwise equal results with 1 and 2 threads */
    float *dtok1 = falloc(nt), *dpos1 = falloc(np), *dtok2 = falloc(nt), *dpos2 = falloc(np);
    memcpy(dtok1, dtok, nt * sizeof(float)), memcpy(dpos1, dpos, np * sizeof(float));
    memcpy(dtok2, dtok, nt * sizeof(float)), memcpy(dpos2, dpos, np * sizeof(float));
    mha_cpu_backend(1)->embed_backward(dtok1, dpos1, dout, ids, B, T, C);
    mha_cpu_backend(2)->embed_backward(dtok2, dpos2, dout, ids, B, T, C);
    test_expect("embed backward bitwise equal, 1 vs 2 threads",
           memcmp(dtok1, dtok2, nt * sizeof(float)) == 0 &&
               memcmp(dpos1, dpos2, np * sizeof(float)) == 0);

    be->embed_backward(dtok, dpos, dout, ids, B, T, C);
    mha_embed_backward_f64(dtok_d, dpos_d, dout_d, ids, B, T, C);
    test_result("embed backward dtok", rel_err_f_d(dtok, dtok_d, nt), TOL);
    test_result("embed backward dpos", rel_err_f_d(dpos, dpos_d, np), TOL);
    be->free(ids), be->free(tok), be->free(pos), be->free(out), be->free(dout), be->free(dtok);
    be->free(dpos), be->free(dtok1), be->free(dpos1), be->free(dtok2), be->free(dpos2);
    free(tok_d), free(pos_d), free(out_d), free(dout_d), free(dtok_d), free(dpos_d);
}

/* -------------------------------- layernorm -------------------------------- */
/* C 72: the portable forward; C 64: the AVX-512 forward where the CPU has it (the backward
 * then reads the statistics that one saved) */
static void test_layernorm(int C) {
    const int N = 300;
    printf("layernorm, C = %d:\n", C);
    size_t n = (size_t)N * C;
    float *inp = falloc(n), *w = falloc(C), *b = falloc(C), *out = falloc(n), *mean = falloc(N);
    float *rstd = falloc(N), *dout = falloc(n), *dinp = falloc(n), *dw = falloc(C), *db = falloc(C);
    double *inp_d = dalloc(n), *w_d = dalloc(C), *b_d = dalloc(C), *out_d = dalloc(n);
    double *mean_d = dalloc(N), *rstd_d = dalloc(N), *dout_d = dalloc(n), *dinp_d = dalloc(n);
    double *dw_d = dalloc(C), *db_d = dalloc(C);
    fill2(inp, inp_d, n, -3, 5), fill2(w, w_d, C, 0.5f, 1.5f), fill2(b, b_d, C, -1, 1);
    fill2(dout, dout_d, n, -1, 1), fill2(dinp, dinp_d, n, -1, 1);
    fill2(dw, dw_d, C, -1, 1), fill2(db, db_d, C, -1, 1);
    be->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    mha_layernorm_forward_f64(out_d, mean_d, rstd_d, inp_d, w_d, b_d, N, C);
    test_result("layernorm forward out", rel_err_f_d(out, out_d, n), TOL);
    test_result("layernorm forward mean", rel_err_f_d(mean, mean_d, N), TOL);
    test_result("layernorm forward rstd", rel_err_f_d(rstd, rstd_d, N), TOL);
    be->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    mha_layernorm_backward_f64(dinp_d, dw_d, db_d, dout_d, inp_d, w_d, mean_d, rstd_d, N, C);
    test_result("layernorm backward dinp", rel_err_f_d(dinp, dinp_d, n), TOL);
    test_result("layernorm backward dw", rel_err_f_d(dw, dw_d, C), TOL);
    test_result("layernorm backward db", rel_err_f_d(db, db_d, C), TOL);

    /* dw, db: per 64-row block sums added in block order, so the bits do not depend on the
     * thread count (300 rows: five blocks, the last partial); without dinp, the same dw, db */
    float *dinp1 = falloc(n), *dinp3 = falloc(n), *dw1 = falloc(C), *db1 = falloc(C), *dw3 = falloc(C);
    float *db3 = falloc(C), *dw0 = falloc(C), *db0 = falloc(C);
    fill2(dinp1, dinp_d, n, -1, 1), fill2(dw1, dw_d, C, -1, 1), fill2(db1, db_d, C, -1, 1);
    memcpy(dinp3, dinp1, n * sizeof(float)), memcpy(dw3, dw1, C * sizeof(float)), memcpy(db3, db1, C * sizeof(float));
    memcpy(dw0, dw1, C * sizeof(float)), memcpy(db0, db1, C * sizeof(float));
    mha_cpu_backend(1)->layernorm_backward(dinp1, dw1, db1, dout, inp, w, mean, rstd, N, C);
    mha_cpu_backend(3)->layernorm_backward(dinp3, dw3, db3, dout, inp, w, mean, rstd, N, C);
    mha_cpu_backend(2)->layernorm_backward(NULL, dw0, db0, dout, inp, w, mean, rstd, N, C);
    test_expect("layernorm backward bitwise equal, 1 vs 3 threads",
                memcmp(dinp1, dinp3, n * sizeof(float)) == 0 && memcmp(dw1, dw3, C * sizeof(float)) == 0 &&
                    memcmp(db1, db3, C * sizeof(float)) == 0);
    test_expect("layernorm backward without dinp: the same dw, db",
                memcmp(dw0, dw1, C * sizeof(float)) == 0 && memcmp(db0, db1, C * sizeof(float)) == 0);
    be->free(dinp1), be->free(dinp3), be->free(dw1), be->free(db1), be->free(dw3), be->free(db3);
    be->free(dw0), be->free(db0);
    be = mha_cpu_backend(0);
    be->free(inp), be->free(w), be->free(b), be->free(out), be->free(mean), be->free(rstd);
    be->free(dout), be->free(dinp), be->free(dw), be->free(db);
    free(inp_d), free(w_d), free(b_d), free(out_d), free(mean_d), free(rstd_d), free(dout_d);
    free(dinp_d), free(dw_d), free(db_d);
}

/* ------------------------------- elementwise ------------------------------- */
static void test_elementwise(void) {
    const size_t n = 40000;   /* above the OpenMP threshold */
    float *x = falloc(n), *y = falloc(n), *out = falloc(n), *g = falloc(n), *d = falloc(n);
    double *x_d = dalloc(n), *out_d = dalloc(n), *g_d = dalloc(n), *d_d = dalloc(n);
    fill2(x, x_d, n, -6, 6), fill2(g, g_d, n, -1, 1);
    for (int act = 0; act < 2; act++) {
        const char *nm = act == MHA_ACT_GELU ? "gelu" : "relu";
        char what[64];
        for (size_t i = 0; i < n; i++) d[i] = NAN;   /* act_backward overwrites dinp */
        be->act_forward(out, x, n, act);
        mha_act_forward_f64(out_d, x_d, n, act);
        snprintf(what, sizeof what, "%s forward", nm);
        test_result(what, rel_err_f_d(out, out_d, n), TOL);
        be->act_backward(d, g, x, n, act);
        mha_act_backward_f64(d_d, g_d, x_d, n, act);
        snprintf(what, sizeof what, "%s backward", nm);
        test_result(what, rel_err_f_d(d, d_d, n), TOL);
        /* in place (dinp = dout): the same bits */
        memcpy(y, g, n * sizeof(float));
        be->act_backward(y, y, x, n, act);
        snprintf(what, sizeof what, "%s backward in place, bitwise", nm);
        test_expect(what, memcmp(y, d, n * sizeof(float)) == 0);
    }

    /* dropout: the mask is exactly the RNG's, kept values scaled by 1/(1-p) */
    const float p = 0.25f;
    const uint64_t seed = 77, offset = 123456;
    be->dropout_forward(out, x, n, p, seed, offset);
    mha_dropout_forward_f64(out_d, x_d, n, p, seed, offset);
    test_result("dropout forward vs double", rel_err_f_d(out, out_d, n), TOL);
    size_t wrong = 0, kept = 0;
    for (size_t i = 0; i < n; i++) {
        int keep = mha_rng_uniform(seed, offset + i) >= p;
        kept += keep;
        if (keep ? out[i] != x[i] * (1.0f / (1.0f - p)) : out[i] != 0) wrong++;
    }
    test_expect("dropout forward mask exact", wrong == 0);
    printf("  dropout kept fraction %.4f (expected %.2f)\n", (double)kept / n, 1.0 - p);
    fill2(d, d_d, n, -1, 1);
    float *d0 = falloc(n);
    memcpy(d0, d, n * sizeof(float));
    be->dropout_backward(d, g, n, p, seed, offset);
    mha_dropout_backward_f64(d_d, g_d, n, p, seed, offset);
    test_result("dropout backward", rel_err_f_d(d, d_d, n), TOL);
    wrong = 0;
    for (size_t i = 0; i < n; i++) {
        float add = mha_rng_uniform(seed, offset + i) >= p ? g[i] * (1.0f / (1.0f - p)) : 0.0f;
        if (d[i] != d0[i] + add) wrong++;
    }
    test_expect("dropout backward = start + mask * dout / (1-p)", wrong == 0);
    /* what model_backward relies on (dropout_grad): backward into zeros = forward of dout */
    for (int k = 0; k < 2; k++) {
        const float pk = k ? p : 0.0f;
        memset(d, 0, n * sizeof(float));
        be->dropout_backward(d, g, n, pk, seed, offset);
        be->dropout_forward(d0, g, n, pk, seed, offset);
        wrong = 0;
        for (size_t i = 0; i < n; i++) wrong += d[i] != d0[i];
        test_expect(k ? "dropout backward into zeros = forward (p=0.25)"
                      : "dropout backward into zeros = forward (p=0)", wrong == 0);
    }
    be->free(d0);
    be->dropout_forward(out, x, n, 0.0f, seed, offset);
    test_expect("dropout p=0 copies", memcmp(out, x, n * sizeof(float)) == 0);

    /* add, accumulate, scale, grad_norm, sum_into */
    fill2(y, NULL, n, -1, 1);
    be->add(out, x, y, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= out[i] == x[i] + y[i];
    test_expect("add", ok);
    memcpy(d, x, n * sizeof(float));
    be->accumulate(d, y, n);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= d[i] == x[i] + y[i];
    test_expect("accumulate", ok);
    be->scale(d, n, 0.5f);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= d[i] == (x[i] + y[i]) * 0.5f;
    test_expect("scale", ok);
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += x_d[i] * x_d[i];
    double stats[2] = {3.0, -1.0};   /* a finite loss sum; stats[1] overwritten */
    float gs = -1.0f;
    be->grad_norm(stats, &gs, x, n, 0.0f);
    test_result("grad_norm sum of squares", fabs(stats[1] - ss) / ss, 1e-12);
    test_expect("grad_norm: no clipping asked, factor 1", gs == 1.0f && stats[0] == 3.0);
    const float clip = (float)(sqrt(ss) / 2);   /* the norm is twice the limit: factor ~0.5 */
    be->grad_norm(stats, &gs, x, n, clip);
    test_expect("grad_norm: the clipping factor clip / (norm + 1e-6)", gs == (float)(clip / (sqrt(stats[1]) + 1e-6)) &&
                fabs(gs - 0.5) < 1e-6);
    be->grad_norm(stats, &gs, x, n, 4 * clip);
    test_expect("grad_norm: a norm under the limit is not clipped", gs == 1.0f);
    stats[0] = NAN;
    be->grad_norm(stats, &gs, x, n, clip);
    test_expect("grad_norm: a non-finite loss sum skips (NaN factor)", isnan(gs));
    stats[0] = 3.0;
    float keep = x[n / 2];
    x[n / 2] = INFINITY;
    be->grad_norm(stats, &gs, x, n, clip);
    test_expect("grad_norm: a non-finite gradient skips (NaN factor)", isnan(gs) && isinf(stats[1]));
    x[n / 2] = keep;
    double acc = 0.25, acc_ref = 0;
    for (size_t i = 0; i < n; i++) acc_ref += x[i];
    acc_ref += 0.25;
    be->sum_into(&acc, x, n);
    test_expect("sum_into: acc + the sum in index order, in double", acc == acc_ref);
    const size_t nbig = 3000000;
    float *big = falloc(nbig);
    fill2(big, NULL, nbig, -1, 1);
    double st1[2] = {0, 0}, st2[2] = {0, 0};
    float gs1, gs2;
    mha_cpu_backend(1)->grad_norm(st1, &gs1, big, nbig, 1.0f);
    mha_cpu_backend(2)->grad_norm(st2, &gs2, big, nbig, 1.0f);
    be = mha_cpu_backend(0);
    test_expect("grad_norm bitwise equal, 1 vs 2 threads", st1[1] == st2[1] && gs1 == gs2);
    be->free(big);
    be->free(x), be->free(y), be->free(out), be->free(g), be->free(d);
    free(x_d), free(out_d), free(g_d), free(d_d);
}

/* -------------------------------- attention -------------------------------- */
enum { AB = 6, AT = 150, AC = 64, ANH = 4 };
/* lengths: full, odd, none (no valid key anywhere), one, block edges 64 and 65 */
static const int32_t att_len[AB] = {150, 77, 0, 1, 64, 65};

static int all_finite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return 0;
    return 1;
}

/* Attention straight from its definition (docs/model.md, backend.h), in double and plain
 * loops, independent of attention_impl.h: y (B, T, C) from qkv (B, T, 3C). */
static void naive_attention(double *y, const double *qkv, const int32_t *len, int B, int T, int C,
                            int NH, int causal, float p, uint64_t seed) {
    const int HS = C / NH;
    double *s = dalloc((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                double *yi = y + ((size_t)b * T + i) * C + (size_t)h * HS;
                for (int c = 0; c < HS; c++) yi[c] = 0;
                if (i >= len[b]) continue;
                const double *qi = qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * HS;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < T; j++) {
                    int valid = j < len[b] && (!causal || j <= i);
                    const double *kj = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * HS;
                    double d = 0;
                    for (int c = 0; c < HS; c++) d += qi[c] * kj[c];
                    s[j] = valid ? d / sqrt((double)HS) : -INFINITY;
                    if (s[j] > mx) mx = s[j];
                }
                for (int j = 0; j < T; j++) sum += s[j] == -INFINITY ? 0 : exp(s[j] - mx);
                for (int j = 0; j < T; j++) {
                    if (s[j] == -INFINITY) continue;
                    double pr = exp(s[j] - mx) / sum;
                    uint64_t ctr = (((uint64_t)b * NH + h) * T + i) * T + j;
                    if (p > 0) pr = mha_rng_uniform(seed, ctr) < p ? 0 : pr / (1 - (double)p);
                    const double *vj = qkv + ((size_t)b * T + j) * 3 * C + 2 * C + (size_t)h * HS;
                    for (int c = 0; c < HS; c++) yi[c] += pr * vj[c];
                }
            }
    free(s);
}

static int rows_portable = 0;   /* the softmax rows in use: AVX-512 (where the CPU has it) or portable */

/* Scores far past exp's float range (|q k^T / sqrt(HS)| up to about 200 with entries of
 * up to 14): softmax must subtract each row's max first (else exp overflows to inf and the
 * rows turn NaN). Both paths, math and fused, forward, against float64. A tolerance of 1e-4:
 * at scores near 200 the float inputs' rounding alone moves a probability by about 1e-5. */
static void test_attention_large_scores(void) {
    const int B = AB, T = AT, C = AC, NH = ANH;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    int32_t *len = be->alloc(B * sizeof(int32_t));
    memcpy(len, att_len, sizeof att_len);
    float *qkv = falloc(nq), *att = falloc(na), *out_m = falloc(no), *out_f = falloc(no);
    float *lse = falloc((size_t)B * NH * T);
    double *qkv_d = dalloc(nq), *att_d = dalloc(na), *out_d = dalloc(no);
    fill2(qkv, qkv_d, nq, -14, 14);
    be->attention_forward_math(out_m, att, qkv, len, B, T, C, NH, 0, 0.0f, 1);
    be->attention_forward_fused(out_f, lse, qkv, len, B, T, C, NH, 0, 0.0f, 1);
    mha_attention_forward_math_f64(out_d, att_d, qkv_d, len, B, T, C, NH, 0, 0.0f, 1);
    char what[96];
    snprintf(what, sizeof what, "attention, scores to ~200%s: math fwd", rows_portable ? " portable rows" : "");
    test_result(what, all_finite(out_m, no) ? rel_err_f_d(out_m, out_d, no) : INFINITY, 1e-4);
    snprintf(what, sizeof what, "attention, scores to ~200%s: fused fwd", rows_portable ? " portable rows" : "");
    test_result(what, all_finite(out_f, no) ? rel_err_f_d(out_f, out_d, no) : INFINITY, 1e-4);
    be->free(len), be->free(qkv), be->free(att), be->free(out_m), be->free(out_f), be->free(lse);
    free(qkv_d), free(att_d), free(out_d);
}

static void test_attention(int causal, float p) {
    const int B = AB, T = AT, C = AC, NH = ANH;
    const uint64_t seed = 31337;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    size_t nl = (size_t)B * NH * T;
    int32_t *len = be->alloc(B * sizeof(int32_t));
    memcpy(len, att_len, sizeof att_len);
    float *qkv = falloc(nq), *dout = falloc(no), *att = falloc(na), *datt = falloc(na);
    float *out_m = falloc(no), *out_f = falloc(no), *lse = falloc(nl);
    float *dq_m = falloc(nq), *dq_f = falloc(nq), *dq0 = falloc(nq);
    double *qkv_d = dalloc(nq), *dout_d = dalloc(no), *att_d = dalloc(na), *datt_d = dalloc(na);
    double *out_d = dalloc(no), *dq_d = dalloc(nq);
    fill2(qkv, qkv_d, nq, -2, 2), fill2(dout, dout_d, no, -1, 1), fill2(dq0, dq_d, nq, -1, 1);
    memcpy(dq_m, dq0, nq * sizeof(float)), memcpy(dq_f, dq0, nq * sizeof(float));
    /* outputs start as NaN: every element must be written */
    for (size_t i = 0; i < no; i++) out_m[i] = out_f[i] = NAN;
    for (size_t i = 0; i < na; i++) att[i] = NAN;
    for (size_t i = 0; i < nl; i++) lse[i] = NAN;

    be->attention_forward_math(out_m, att, qkv, len, B, T, C, NH, causal, p, seed);
    be->attention_forward_fused(out_f, lse, qkv, len, B, T, C, NH, causal, p, seed);
    mha_attention_forward_math_f64(out_d, att_d, qkv_d, len, B, T, C, NH, causal, p, seed);
    be->attention_backward_math(dq_m, datt, dout, qkv, att, len, B, T, C, NH, causal, p, seed);
    be->attention_backward_fused(dq_f, dout, out_f, qkv, lse, len, B, T, C, NH, causal, p, seed);
    mha_attention_backward_math_f64(dq_d, datt_d, dout_d, qkv_d, att_d, len, B, T, C, NH, causal,
                                    p, seed);
    char tag[48], what[96];
    snprintf(tag, sizeof tag, "attention%s p=%.1f%s", causal ? " causal" : "", (double)p,
             rows_portable ? " portable rows" : "");
    snprintf(what, sizeof what, "%s math fwd out", tag);
    test_result(what, rel_err_f_d(out_m, out_d, no), TOL);
    naive_attention(out_d, qkv_d, len, B, T, C, NH, causal, p, seed);
    snprintf(what, sizeof what, "%s math fwd vs definition", tag);
    test_result(what, rel_err_f_d(out_m, out_d, no), TOL);
    snprintf(what, sizeof what, "%s math fwd att", tag);
    test_result(what, rel_err_f_d(att, att_d, na), TOL);
    snprintf(what, sizeof what, "%s fused fwd out", tag);
    test_result(what, rel_err_f_d(out_f, out_d, no), TOL);
    snprintf(what, sizeof what, "%s fused vs math fwd", tag);
    test_result(what, rel_err_f_f(out_f, out_m, no), TOL);
    snprintf(what, sizeof what, "%s math bwd dqkv", tag);
    test_result(what, rel_err_f_d(dq_m, dq_d, nq), TOL);
    snprintf(what, sizeof what, "%s fused bwd dqkv", tag);
    test_result(what, rel_err_f_d(dq_f, dq_d, nq), TOL);
    snprintf(what, sizeof what, "%s fused vs math bwd", tag);
    test_result(what, rel_err_f_f(dq_f, dq_m, nq), TOL);

    /* padded query rows: exact zeros; gradients of padded rows untouched; no NaN anywhere */
    int zeros = 1, untouched = 1;
    for (int b = 0; b < B; b++)
        for (int t = len[b]; t < T; t++) {
            for (int c = 0; c < C; c++) {
                size_t i = ((size_t)b * T + t) * C + c;
                zeros &= out_m[i] == 0.0f && out_f[i] == 0.0f;
            }
            for (int c = 0; c < 3 * C; c++) {
                size_t i = ((size_t)b * T + t) * 3 * C + c;
                untouched &= dq_m[i] == dq0[i] && dq_f[i] == dq0[i];
            }
        }
    snprintf(what, sizeof what, "%s padded rows: out zero", tag);
    test_expect(what, zeros);
    snprintf(what, sizeof what, "%s padded rows: dqkv untouched", tag);
    test_expect(what, untouched);
    snprintf(what, sizeof what, "%s finite (example with no key)", tag);
    test_expect(what, all_finite(out_m, no) && all_finite(out_f, no) && all_finite(att, na) &&
                     all_finite(lse, nl) && all_finite(dq_m, nq) && all_finite(dq_f, nq));
    /* att: zeros at masked entries, rows sum to 1 on real rows */
    int masked0 = 1;
    double rowsum_err = 0;
    for (int bh = 0; bh < B * NH; bh++) {
        int L = len[bh / NH];
        for (int i = 0; i < T; i++) {
            double s = 0;
            for (int j = 0; j < T; j++) {
                float a = att[((size_t)bh * T + i) * T + j];
                int valid = i < L && j < L && (!causal || j <= i);
                if (!valid) masked0 &= a == 0.0f;
                s += a;
            }
            if (i < L && fabs(s - 1) > rowsum_err) rowsum_err = fabs(s - 1);
        }
    }
    snprintf(what, sizeof what, "%s att masked entries zero", tag);
    test_expect(what, masked0);
    snprintf(what, sizeof what, "%s att rows sum to 1", tag);
    test_result(what, rowsum_err, 1e-5);

    /* each (b, h) is one thread's work with single-threaded BLAS: the bits do not depend on
     * the thread count (here 1 vs 3, more threads than this test's machine may have) */
    float *o1 = falloc(no), *o3 = falloc(no), *l1 = falloc(nl), *l3 = falloc(nl);
    float *g1 = falloc(nq), *g3 = falloc(nq);
    const Backend *b1 = mha_cpu_backend(1);
    b1->attention_forward_fused(o1, l1, qkv, len, B, T, C, NH, causal, p, seed);
    b1->attention_backward_fused(g1, dout, o1, qkv, l1, len, B, T, C, NH, causal, p, seed);
    const Backend *b3 = mha_cpu_backend(3);
    b3->attention_forward_fused(o3, l3, qkv, len, B, T, C, NH, causal, p, seed);
    b3->attention_backward_fused(g3, dout, o3, qkv, l3, len, B, T, C, NH, causal, p, seed);
    int same = memcmp(o1, o3, no * sizeof(float)) == 0 && memcmp(l1, l3, nl * sizeof(float)) == 0 &&
               memcmp(g1, g3, nq * sizeof(float)) == 0;
    memset(g1, 0, nq * sizeof(float)), memset(g3, 0, nq * sizeof(float));
    b1 = mha_cpu_backend(1);
    b1->attention_forward_math(o1, att, qkv, len, B, T, C, NH, causal, p, seed);
    b1->attention_backward_math(g1, datt, dout, qkv, att, len, B, T, C, NH, causal, p, seed);
    b3 = mha_cpu_backend(3);
    b3->attention_forward_math(o3, att, qkv, len, B, T, C, NH, causal, p, seed);
    b3->attention_backward_math(g3, datt, dout, qkv, att, len, B, T, C, NH, causal, p, seed);
    same &= memcmp(o1, o3, no * sizeof(float)) == 0 && memcmp(g1, g3, nq * sizeof(float)) == 0;
    be = mha_cpu_backend(0);
    snprintf(what, sizeof what, "%s bitwise equal, 1 vs 3 threads", tag);
    test_expect(what, same);
    be->free(o1), be->free(o3), be->free(l1), be->free(l3), be->free(g1), be->free(g3);

    be->free(len), be->free(qkv), be->free(dout), be->free(att), be->free(datt);
    be->free(out_m), be->free(out_f), be->free(lse), be->free(dq_m), be->free(dq_f), be->free(dq0);
    free(qkv_d), free(dout_d), free(att_d), free(datt_d), free(out_d), free(dq_d);
}

/* --------------------------------- pooling --------------------------------- */
static void test_pool(int mode, const char *name) {
    const int B = 5, T = 33, C = 40;
    static const int32_t lens[5] = {33, 1, 17, 0, 32};
    size_t ni = (size_t)B * T * C, no = (size_t)B * C;
    int32_t *len = be->alloc(sizeof lens), *am = be->alloc(no * sizeof(int32_t));
    int32_t *am_d = malloc(no * sizeof(int32_t));
    memcpy(len, lens, sizeof lens);
    float *inp = falloc(ni), *out = falloc(no), *dout = falloc(no), *dinp = falloc(ni), *d0 = falloc(ni);
    double *inp_d = dalloc(ni), *out_d = dalloc(no), *dout_d = dalloc(no), *dinp_d = dalloc(ni);
    fill2(inp, inp_d, ni, -1, 1), fill2(dout, dout_d, no, -1, 1), fill2(dinp, dinp_d, ni, -1, 1);
    memcpy(d0, dinp, ni * sizeof(float));
    be->pool_forward(out, am, inp, len, B, T, C, mode);
    mha_pool_forward_f64(out_d, am_d, inp_d, len, B, T, C, mode);
    be->pool_backward(dinp, dout, am, len, B, T, C, mode);
    mha_pool_backward_f64(dinp_d, dout_d, am_d, len, B, T, C, mode);
    char what[64];
    snprintf(what, sizeof what, "%s forward", name);
    test_result(what, rel_err_f_d(out, out_d, no), TOL);
    snprintf(what, sizeof what, "%s backward", name);
    test_result(what, rel_err_f_d(dinp, dinp_d, ni), TOL);
    int untouched = 1;
    for (int b = 0; b < B; b++)
        for (size_t i = ((size_t)b * T + lens[b]) * C; i < (size_t)(b + 1) * T * C; i++)
            untouched &= dinp[i] == d0[i];
    snprintf(what, sizeof what, "%s padded rows untouched", name);
    test_expect(what, untouched);
    be->free(len), be->free(am), be->free(inp), be->free(out), be->free(dout), be->free(dinp);
    be->free(d0);
    free(am_d), free(inp_d), free(out_d), free(dout_d), free(dinp_d);
}

/* ------------------------------ cross-entropy ------------------------------ */
static void test_crossentropy(float eps) {
    const int B = 37, K = 11;
    size_t n = (size_t)B * K;
    int32_t *labels = be->alloc(B * sizeof(int32_t));
    for (int b = 0; b < B; b++) labels[b] = (int32_t)(mha_rng_u64(9, (uint64_t)b) % K);
    float *logits = falloc(n), *probs = falloc(n), *dl = falloc(n), *losses = falloc(B);
    double *logits_d = dalloc(n), *probs_d = dalloc(n), *dl_d = dalloc(n), *losses_d = dalloc(B);
    fill2(logits, logits_d, n, -8, 8), fill2(dl, dl_d, n, -1, 1);
    be->crossentropy(losses, probs, dl, logits, labels, B, K, eps, 1.0f / B);
    mha_crossentropy_f64(losses_d, probs_d, dl_d, logits_d, labels, B, K, eps, 1.0 / B);
    char what[64];
    snprintf(what, sizeof what, "crossentropy eps=%.1f losses", (double)eps);
    test_result(what, rel_err_f_d(losses, losses_d, B), TOL);
    snprintf(what, sizeof what, "crossentropy eps=%.1f probs", (double)eps);
    test_result(what, rel_err_f_d(probs, probs_d, n), TOL);
    snprintf(what, sizeof what, "crossentropy eps=%.1f dlogits", (double)eps);
    test_result(what, rel_err_f_d(dl, dl_d, n), TOL);
    /* the loss by its definition, independently of the kernel */
    double maxerr = 0;
    for (int b = 0; b < B; b++) {
        const double *l = logits_d + (size_t)b * K;
        double mx = l[0], s = 0, mean_nll = 0;
        for (int k = 1; k < K; k++) mx = l[k] > mx ? l[k] : mx;
        for (int k = 0; k < K; k++) s += exp(l[k] - mx);
        for (int k = 0; k < K; k++) mean_nll += -(l[k] - mx - log(s)) / K;
        double ref = (1 - (double)eps) * -(l[labels[b]] - mx - log(s)) + (double)eps * mean_nll;
        double e = fabs(losses_d[b] - ref) / fabs(ref);
        if (e > maxerr) maxerr = e;
    }
    snprintf(what, sizeof what, "crossentropy eps=%.1f loss definition", (double)eps);
    test_result(what, maxerr, 1e-12);
    be->free(labels), be->free(logits), be->free(probs), be->free(dl), be->free(losses);
    free(logits_d), free(probs_d), free(dl_d), free(losses_d);
}

/* LayerNorm forward rows on both paths (AVX-512 where the CPU has it and C is a multiple of
 * 16; portable): against double, and every row of a 103-row batch the same bits as the row
 * alone (prediction's batch invariance). */
static void test_layernorm_rows(void) {
    const int N = 103, Cs[3] = {128, 48, 40};   /* 40: the portable row on both paths */
    for (int path = 0; path < 2; path++)
        for (int ci = 0; ci < 3; ci++) {
            const int C = Cs[ci];
            const size_t n = (size_t)N * C;
            mha_rows_force_portable(path);
            float *inp = falloc(n), *w = falloc(C), *b = falloc(C), *out = falloc(n), *alone = falloc(n);
            float *mean = falloc(N), *rstd = falloc(N), *m1 = falloc(N), *r1 = falloc(N);
            double *inp_d = dalloc(n), *w_d = dalloc(C), *b_d = dalloc(C), *out_d = dalloc(n);
            double *mean_d = dalloc(N), *rstd_d = dalloc(N);
            fill2(inp, inp_d, n, -3, 5), fill2(w, w_d, C, 0.5f, 1.5f), fill2(b, b_d, C, -1, 1);
            be->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
            for (int r = 0; r < N; r++)   /* rows alone; without mean and rstd, as prediction */
                be->layernorm_forward(alone + (size_t)r * C, r % 2 ? NULL : m1 + r, r % 2 ? NULL : r1 + r,
                                      inp + (size_t)r * C, w, b, 1, C);
            mha_layernorm_forward_f64(out_d, mean_d, rstd_d, inp_d, w_d, b_d, N, C);
            char what[112];
            const char *tag = path ? "portable" : C % 16 ? "portable (C not a multiple of 16)"
                                                  : mha_rows_fast() ? "AVX-512" : "portable (no AVX-512)";
            snprintf(what, sizeof what, "layernorm rows %s C=%d: out vs double", tag, C);
            test_result(what, rel_err_f_d(out, out_d, n), TOL);
            snprintf(what, sizeof what, "layernorm rows %s C=%d: mean, rstd vs double", tag, C);
            test_result(what, fmax(rel_err_f_d(mean, mean_d, N), rel_err_f_d(rstd, rstd_d, N)), TOL);
            int same = memcmp(out, alone, n * sizeof(float)) == 0;
            for (int r = 0; r < N; r += 2) same &= mean[r] == m1[r] && rstd[r] == r1[r];
            snprintf(what, sizeof what, "layernorm rows %s C=%d: 103 rows at once = each row alone, bit for bit",
                     tag, C);
            test_expect(what, same);
            be->free(inp), be->free(w), be->free(b), be->free(out), be->free(alone), be->free(mean);
            be->free(rstd), be->free(m1), be->free(r1);
            free(inp_d), free(w_d), free(b_d), free(out_d), free(mean_d), free(rstd_d);
        }
    mha_rows_force_portable(0);
}

/* --------------------------------- AdamW --------------------------------- */
static void test_adamw(void) {
    /* hand-computed: p=1, g=0.5, lr=0.1, wd=0.01, t=1: decay -> 0.999; m=0.05, v=2.5e-4;
     * m/(1-0.9)=0.5, sqrt(v/(1-0.999))=0.5; p = 0.999 - 0.1 * 0.5/(0.5+1e-8) = 0.899 */
    float *p = falloc(4), *g = falloc(4), *m = falloc(4), *v = falloc(4);
    p[0] = 1.0f, g[0] = 0.5f;
    p[1] = -2.0f, g[1] = -0.25f;
    p[2] = 0.5f, g[2] = 0.0f;
    p[3] = 3.0f, g[3] = 4.0f;
    double pd[4], md[4] = {0}, vd[4] = {0};
    for (int i = 0; i < 4; i++) pd[i] = p[i];
    const double lr = 0.1, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
    double maxerr = 0;
    /* two tensors: [0, 3) with weight decay, [3, 4) without; step 3 clips (grad_scale 0.5) */
    const AdamwTensor tensors[2] = {{0, 3, (float)wd}, {3, 1, 0.0f}};
    float *scale = falloc(1);   /* Backend.adamw reads the factor from backend memory */
    for (int t = 1; t <= 3; t++) {
        const double gs = t == 3 ? 0.5 : 1.0;
        *scale = (float)gs;
        be->adamw(p, g, m, v, tensors, 2, (float)lr, (float)b1, (float)b2, (float)eps, scale, t);
        for (int i = 0; i < 4; i++) {   /* torch.optim.AdamW after clip_grad_norm_, in double */
            double gi = g[i] * gs;
            pd[i] -= lr * (i < 3 ? wd : 0.0) * pd[i];
            md[i] = b1 * md[i] + (1 - b1) * gi;
            vd[i] = b2 * vd[i] + (1 - b2) * gi * gi;
            double step = lr / (1 - pow(b1, t));
            double denom = sqrt(vd[i]) / sqrt(1 - pow(b2, t)) + eps;
            pd[i] -= step * md[i] / denom;
            double e = fabs(p[i] - pd[i]) / fmax(fabs(pd[i]), 1e-3);
            if (e > maxerr) maxerr = e;
        }
        if (t == 1) {
            char what[64];
            snprintf(what, sizeof what, "adamw step 1 hand value 0.899 (got %.7f)", (double)p[0]);
            test_result(what, fabs(p[0] - 0.899) / 0.899, 1e-6);
        }
    }
    test_result("adamw 3 steps vs double formula", maxerr, 1e-6);
    /* a NaN factor (grad_norm's skip) leaves every buffer as it was */
    float before[12];
    memcpy(before, p, 4 * sizeof(float)), memcpy(before + 4, m, 4 * sizeof(float)), memcpy(before + 8, v, 4 * sizeof(float));
    *scale = NAN;
    be->adamw(p, g, m, v, tensors, 2, (float)lr, (float)b1, (float)b2, (float)eps, scale, 4);
    test_expect("adamw with a NaN factor changes nothing", memcmp(before, p, 4 * sizeof(float)) == 0 &&
                memcmp(before + 4, m, 4 * sizeof(float)) == 0 && memcmp(before + 8, v, 4 * sizeof(float)) == 0);
    be->free(p), be->free(g), be->free(m), be->free(v), be->free(scale);
}

/* One parallel region updates every tensor, each thread a share of each (split at multiples
 * of 16 elements from the tensor's start): tensors of 0, 1, 15, 16, 17, 33 and 5000 elements,
 * packed back to back, on 1 and 3 threads, against a plain loop of the same float operations
 * (bit for bit: nothing missed, nothing updated twice). */
static void test_adamw_split(void) {
    enum { NT = 7 };
    const size_t sizes[NT] = {0, 1, 15, 16, 17, 33, 5000};
    AdamwTensor tensors[NT];
    size_t total = 0;
    for (int k = 0; k < NT; k++) {
        tensors[k] = (AdamwTensor){total, sizes[k], k % 2 ? 0.0f : 0.01f};
        total += sizes[k];
    }
    const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
    const int t = 5;
    float *g = falloc(total), *init = falloc(total), *scale = falloc(1);
    float *p[2], *m[2], *v[2];
    for (int r = 0; r < 2; r++) p[r] = falloc(total), m[r] = falloc(total), v[r] = falloc(total);
    fill2(g, NULL, total, -1, 1), fill2(init, NULL, total, -2, 2);
    *scale = 0.75f;
    for (int r = 0; r < 2; r++) {
        memcpy(p[r], init, total * sizeof(float));
        for (size_t i = 0; i < total; i++) m[r][i] = 0.1f * init[i], v[r][i] = 0.01f * init[i] * init[i];
        mha_cpu_backend(r == 0 ? 1 : 3)->adamw(p[r], g, m[r], v[r], tensors, NT, lr, b1, b2, eps, scale, t);
    }
    be = mha_cpu_backend(0);
    const float step = (float)((double)lr / (1.0 - pow((double)b1, t)));
    const float inv_bc2_sqrt = (float)(1.0 / sqrt(1.0 - pow((double)b2, t)));
    int same = 1;
    for (int k = 0; k < NT; k++)
        for (size_t i = tensors[k].offset; i < tensors[k].offset + tensors[k].n; i++) {
            const float decay = 1.0f - lr * tensors[k].weight_decay;
            float gi = g[i] * *scale, mi = b1 * (0.1f * init[i]) + (1.0f - b1) * gi;
            float vi = b2 * (0.01f * init[i] * init[i]) + (1.0f - b2) * gi * gi;
            float pi = init[i] * decay - step * mi / (sqrtf(vi) * inv_bc2_sqrt + eps);
            for (int r = 0; r < 2; r++) same &= p[r][i] == pi && m[r][i] == mi && v[r][i] == vi;
        }
    test_expect("adamw, 7 tensors (0-5000 elements), 1 and 3 threads = a plain loop, bit for bit", same);
    for (int r = 0; r < 2; r++) be->free(p[r]), be->free(m[r]), be->free(v[r]);
    be->free(g), be->free(init), be->free(scale);
}

/* ----------------------------- memory, expf ----------------------------- */
static void test_memory_and_expf(void) {
    char *a = be->alloc(1000), *b = be->alloc(1000);
    test_expect("alloc 64-byte aligned", ((uintptr_t)a % 64) == 0 && ((uintptr_t)b % 64) == 0);
    for (int i = 0; i < 1000; i++) a[i] = (char)i;
    be->copy(b, a, 1000);
    int ok = memcmp(a, b, 1000) == 0;
    be->zero(b, 1000);
    for (int i = 0; i < 1000; i++) ok &= b[i] == 0;
    be->to_host(b, a, 1000);
    ok &= memcmp(a, b, 1000) == 0;
    be->zero(b, 1000);
    be->to_host_async(b, a, 1000);
    be->to_host_wait();
    ok &= memcmp(a, b, 1000) == 0;
    be->sync();
    test_expect("copy, zero, to_host, to_host_async", ok);
    be->free(a), be->free(b);

    double maxrel = 0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -87.0f + 175.0f * (float)i / 2000000.0f;
        double r = exp((double)x), e = fabs((double)mha_expf(x) - r) / r;
        if (e > maxrel) maxrel = e;
    }
    test_result("mha_expf vs exp on [-87, 88] (relative)", maxrel, 4e-7);
    double maxabs = 0;
    for (int i = 0; i <= 2000000; i++) {
        float x = -12.0f + 24.0f * (float)i / 2000000.0f;
        double e = fabs((double)mha_erff(x) - erf((double)x));
        if (e > maxabs) maxabs = e;
    }
    test_result("mha_erff vs erf on [-12, 12] (absolute)", maxabs, 2.5e-7);
    /* integer dropout threshold == float comparison of rng.h, around the threshold */
    static const float ps[] = {1e-7f, 0.1f, 0.2f, 0.25f, 1.0f / 3.0f, 0.5f, 0.9f, 0.999999f};
    int thr_ok = mha_drop_threshold(0.0) == 0 && mha_drop_threshold(1.0) == (1u << 24);
    for (size_t a = 0; a < sizeof ps / sizeof ps[0]; a++) {
        uint64_t thr = mha_drop_threshold((double)ps[a]);
        for (int64_t k = (int64_t)thr - 3; k <= (int64_t)thr + 3; k++) {
            if (k < 0 || k >= (1 << 24)) continue;
            float u = (float)k * (1.0f / 16777216.0f);   /* as mha_rng_uniform builds it */
            thr_ok &= ((uint64_t)k >= thr) == (u >= ps[a]);
        }
    }
    test_expect("dropout threshold matches rng.h comparison", thr_ok);
    test_expect("mha_expf(-100) == 0, mha_expf(0) == 1", mha_expf(-100.0f) == 0.0f && mha_expf(0.0f) == 1.0f);
}

/* Our fp32 product (gemm_f32.c), every element bit for bit the scalar chain it promises:
 * fmaf over k in order from 0, then + bias. Shapes on both sides of its micro-tiles (6 rows x
 * 16 columns in AVX2, 12 x 32 in AVX-512) and depth block (256), rows and outputs with a stride wider than the matrix
 * (the cells between are never written), y poisoned with NaN first (or, accumulating, random
 * values); M = 0 and OC = 0 leave y alone, IC = 0 gives the bias. */
static void test_gemm_f32_on(const char *isa) {
    const int Ms[] = {1, 2, 5, 6, 7, 11, 12, 13, 97}, OCs[] = {1, 7, 15, 16, 17, 32, 33, 40, 48};
    const int ICs[] = {1, 3, 255, 256, 257, 600};
    const int GAP = 3;   /* extra floats per row of x and y */
    int bad = 0, outside = 0, cases = 0, bad_wt = 0;
    for (size_t ki = 0; ki < sizeof ICs / sizeof ICs[0]; ki++)
        for (size_t oi = 0; oi < sizeof OCs / sizeof OCs[0]; oi++)
            for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
                const int M = Ms[mi], OC = OCs[oi], IC = ICs[ki];
                const size_t ldx = (size_t)IC + GAP, ldy = (size_t)OC + GAP;
                float *x = malloc((size_t)M * ldx * sizeof *x), *w = malloc((size_t)OC * IC * sizeof *w);
                float *b = malloc((size_t)OC * sizeof *b), *y = malloc((size_t)M * ldy * sizeof *y);
                float *wp = mha_cpu_aligned_alloc(mha_f32_packed_w_elems(OC, IC) * sizeof(float));
                for (size_t i = 0; i < (size_t)M * ldx; i++) x[i] = (float)(2 * mha_rng_uniform(98, i) - 1);
                for (size_t i = 0; i < (size_t)OC * IC; i++) w[i] = (float)(2 * mha_rng_uniform(99, i) - 1);
                for (int i = 0; i < OC; i++) b[i] = (float)(2 * mha_rng_uniform(100, (uint64_t)i) - 1);
                mha_f32_pack_w(wp, w, OC, IC, 0, mha_f32_panels(OC));
                /* the transposed packing (the backward's dinp) is the packing of the transpose */
                float *wt = malloc((size_t)OC * IC * sizeof *wt);
                float *wtp = mha_cpu_aligned_alloc(mha_f32_packed_w_elems(IC, OC) * sizeof(float));
                float *wtp_ref = mha_cpu_aligned_alloc(mha_f32_packed_w_elems(IC, OC) * sizeof(float));
                for (int c = 0; c < OC; c++)
                    for (int k = 0; k < IC; k++) wt[(size_t)k * OC + c] = w[(size_t)c * IC + k];
                mha_f32_pack_w(wtp_ref, wt, IC, OC, 0, mha_f32_panels(IC));
                mha_f32_pack_wt(wtp, w, OC, IC, 0, OC / 2);   /* in two row ranges */
                mha_f32_pack_wt(wtp, w, OC, IC, OC / 2, OC);
                bad_wt += memcmp(wtp, wtp_ref, mha_f32_packed_w_elems(IC, OC) * sizeof(float)) != 0;
                /* mode bit 0: with a bias; bit 1: accumulating into y's (random) values */
                for (int mode = 0; mode < 4; mode++) {
                    const int with_bias = mode & 1, accumulate = mode >> 1;
                    for (size_t i = 0; i < (size_t)M * ldy; i++)
                        y[i] = accumulate && i % ldy < (size_t)OC ? (float)(2 * mha_rng_uniform(97, i) - 1) : NAN;
                    mha_f32_gemm_nt(M, OC, IC, x, ldx, wp, with_bias ? b : NULL, y, ldy, accumulate);
                    for (int r = 0; r < M; r++) {
                        for (int c = 0; c < OC; c++) {
                            const size_t at = (size_t)r * ldy + c;
                            float acc = accumulate ? (float)(2 * mha_rng_uniform(97, at) - 1) : 0.0f;
                            for (int k = 0; k < IC; k++) acc = fmaf(x[(size_t)r * ldx + k], w[(size_t)c * IC + k], acc);
                            if (with_bias) acc += b[c];
                            bad += memcmp(&acc, &y[at], sizeof acc) != 0;
                        }
                        for (int c = OC; c < OC + GAP; c++) outside += !isnan(y[(size_t)r * ldy + c]);
                    }
                    cases++;
                }
                free(x), free(w), free(b), free(y), free(wp), free(wt), free(wtp), free(wtp_ref);
            }
    char what[128];
    snprintf(what, sizeof what,
             "gemm_f32 (%s): every element = fmaf chain over k (from 0 or y), + bias (%d products, %d differ)", isa,
             cases, bad);
    test_expect(what, bad == 0);
    snprintf(what, sizeof what, "gemm_f32 (%s): mha_f32_pack_wt(w) = mha_f32_pack_w(w^T)", isa);
    test_expect(what, bad_wt == 0);
    snprintf(what, sizeof what, "gemm_f32 (%s): nothing written between rows (ldy > OC)", isa);
    test_expect(what, outside == 0);
    float y[6] = {NAN, NAN, NAN, NAN, NAN, NAN}, x[2] = {1, 2}, b[3] = {1, 2, 3};
    float *wp = mha_cpu_aligned_alloc(mha_f32_packed_w_elems(3, 2) * sizeof(float));
    mha_f32_pack_w(wp, x, 1, 2, 0, 1);
    mha_f32_gemm_nt(0, 3, 2, x, 2, wp, b, y, 3, 0);
    mha_f32_gemm_nt(2, 0, 2, x, 2, wp, b, y, 3, 0);
    int alone = 1;
    for (int i = 0; i < 6; i++) alone &= isnan(y[i]) != 0;
    mha_f32_gemm_nt(2, 3, 0, x, 0, wp, b, y, 3, 0);
    snprintf(what, sizeof what, "gemm_f32 (%s): M = 0 / OC = 0 leave y alone, IC = 0 gives the bias", isa);
    test_expect(what, alone && y[0] == 1 && y[1] == 2 && y[2] == 3 && y[3] == 1 && y[4] == 2 && y[5] == 3);
    mha_f32_gemm_nt(2, 3, 0, x, 0, wp, b, y, 3, 1);   /* accumulating: y += bias */
    const int plus_bias = y[0] == 2 && y[1] == 4 && y[2] == 6 && y[3] == 2 && y[4] == 4 && y[5] == 6;
    mha_f32_gemm_nt(2, 3, 0, x, 0, wp, NULL, y, 3, 1);   /* without one: y unchanged */
    snprintf(what, sizeof what, "gemm_f32 (%s): IC = 0 accumulating adds the bias, or nothing", isa);
    test_expect(what, plus_bias && y[0] == 2 && y[1] == 4 && y[2] == 6 && y[3] == 2 && y[4] == 4 && y[5] == 6);
    free(wp);
}

/* test_gemm_f32_on with the AVX-512 tiles (where the CPU has them), then the AVX2 ones */
static void test_gemm_f32(void) {
    if (!mha_f32_gemm_cpu_supported()) {
        printf("gemm_f32: skipped (this CPU has no AVX2 and FMA)\n");
        return;
    }
    if (mha_f32_gemm_wide()) test_gemm_f32_on("AVX-512");
    else printf("gemm_f32 on AVX-512 tiles: skipped (this CPU has no AVX-512)\n");
    mha_f32_gemm_force_avx2(1);
    test_gemm_f32_on("AVX2");
    mha_f32_gemm_force_avx2(0);
}

/* The packed weights of the fp32 product of our own and of the bf16 one (linear_f32.c,
 * linear_bf16.c, through packed_cache.c): kept only while the weights are promised fixed
 * (mha-predict), never for weights in training. Without a
 * promise no call hits the cache and a change of the weights shows at once; under one, the
 * second call hits, with the bits of the first; a broken promise keeps the packing (it is
 * trusted, not checked); after the promise ends, or a new one starts (over changed weights,
 * then over restored ones), the weights as they are count again; weights outside the promised
 * range are not kept. */
typedef void (*LinearForward)(float *out, const float *inp, const float *w, const float *bias, int N, int IC, int OC);
static void test_linear_cache_of(LinearForward forward, const char *name) {
    const Backend *t = mha_cpu_backend(1);
    enum { N = 9, IC = 40, OC = 24 };
    const size_t nw = (size_t)OC * IC, no = (size_t)N * OC;
    float *x = malloc((size_t)N * IC * sizeof *x), *w = malloc(nw * sizeof *w);
    float *a = malloc(no * sizeof *a), *b = malloc(no * sizeof *b), *ref = malloc(no * sizeof *ref);
    for (size_t i = 0; i < (size_t)N * IC; i++) x[i] = (float)(2 * mha_rng_uniform(101, i) - 1);
    for (size_t i = 0; i < nw; i++) w[i] = (float)(2 * mha_rng_uniform(102, i) - 1);
    mha_packed_cache_clear();
    unsigned long h = mha_packed_cache_hits();
    forward(ref, x, w, NULL, N, IC, OC);
    forward(a, x, w, NULL, N, IC, OC);
    w[3] += 1.0f;
    forward(b, x, w, NULL, N, IC, OC);                /* a step of training */
    const int unpromised = mha_packed_cache_hits() == h && memcmp(a, ref, no * 4) == 0 && memcmp(b, ref, no * 4) != 0;
    w[3] -= 1.0f;
    t->weights_fixed(w, nw * sizeof *w);
    h = mha_packed_cache_hits();
    forward(a, x, w, NULL, N, IC, OC);                /* packed and kept */
    forward(b, x, w, NULL, N, IC, OC);                /* from the cache */
    const int hit = mha_packed_cache_hits() == h + 1 && memcmp(a, ref, no * 4) == 0 && memcmp(b, ref, no * 4) == 0;
    w[3] += 1.0f;                                                /* the promise broken */
    forward(b, x, w, NULL, N, IC, OC);
    const int trusted = memcmp(b, ref, no * 4) == 0;
    t->weights_fixed(NULL, 0);                                   /* the promise ends */
    forward(b, x, w, NULL, N, IC, OC);
    forward(b, x, w, NULL, N, IC, OC);
    int fresh = memcmp(b, ref, no * 4) != 0;
    memcpy(a, b, no * 4);                                        /* a: the changed weights' output */
    t->weights_fixed(w, nw * sizeof *w);                         /* a new promise, still changed */
    forward(b, x, w, NULL, N, IC, OC);
    fresh &= memcmp(b, a, no * 4) == 0;
    t->weights_fixed(NULL, 0);
    w[3] -= 1.0f;
    t->weights_fixed(w, nw * sizeof *w);                         /* and again, restored */
    forward(b, x, w, NULL, N, IC, OC);
    fresh &= memcmp(b, ref, no * 4) == 0;
    /* a promise over a range w does not lie in keeps nothing of w */
    t->weights_fixed(w + 1, (nw - 1) * sizeof *w);
    h = mha_packed_cache_hits();
    forward(b, x, w, NULL, N, IC, OC);
    forward(b, x, w, NULL, N, IC, OC);
    const int outside = mha_packed_cache_hits() == h && memcmp(b, ref, no * 4) == 0;
    t->weights_fixed(NULL, 0);
    char what[128];
    snprintf(what, sizeof what, "%s cache: without a promise, no hit and a changed weight shows at once", name);
    test_expect(what, unpromised);
    snprintf(what, sizeof what, "%s cache: under a promise, the second call hits, same bits", name);
    test_expect(what, hit);
    snprintf(what, sizeof what, "%s cache: a broken promise keeps the packing (trusted, not checked)", name);
    test_expect(what, trusted);
    snprintf(what, sizeof what, "%s cache: after the promise ends, or a new one starts, the weights as they are", name);
    test_expect(what, fresh);
    snprintf(what, sizeof what, "%s cache: weights outside the promised range are not kept", name);
    test_expect(what, outside);
    mha_packed_cache_clear();
    free(x), free(w), free(a), free(b), free(ref);
}

static void test_linear_caches(void) {
    test_linear_cache_of(mha_linear_forward_bf16, mha_bf16_fast() ? "bf16" : "bf16 (portable)");
    if (!mha_f32_gemm_cpu_supported()) {
        printf("fp32 packed-weights cache: skipped (this CPU has no AVX2 and FMA)\n");
        return;
    }
    mha_f32_gemm_force(1);
    test_linear_cache_of(mha_linear_forward_f32, "fp32 own");
    mha_f32_gemm_force(0);
}

/* linear_forward_post of a table (fp32, bf16, int8) is bit for bit linear_forward, then
 * act_forward, dropout_forward, and add of the residual, for every act, with/without bias,
 * dropout and residual, and pre (the linear output) kept or not; every output cell written
 * (poisoned with NaN first). The dropout counters run over the whole (N, OC) output, so the
 * larger size (several row blocks, on threads) checks each block's offset. */
static void test_linear_post_table(const Backend *t, const char *name) {
    const int sizes[2][3] = {{37, 24, 40}, {300, 96, 160}};   /* the second above MHA_GEMM_PAR_MIN */
    const uint64_t seed = 77;
    for (int si = 0; si < 2; si++) {
        const int N = sizes[si][0], IC = sizes[si][1], OC = sizes[si][2];
        const size_t n = (size_t)N * OC;
        float *x = malloc((size_t)N * IC * sizeof *x), *w = malloc((size_t)OC * IC * sizeof *w);
        float *b = malloc((size_t)OC * sizeof *b), *r = malloc(n * sizeof *r);
        float *lin = malloc(n * sizeof *lin), *ref = malloc(n * sizeof *ref), *out = malloc(n * sizeof *out);
        float *pre = malloc(n * sizeof *pre);
        for (size_t i = 0; i < (size_t)N * IC; i++) x[i] = (float)(2 * mha_rng_uniform(91, i) - 1);
        for (size_t i = 0; i < (size_t)OC * IC; i++) w[i] = (float)(0.3 * (2 * mha_rng_uniform(92, i) - 1));
        for (int i = 0; i < OC; i++) b[i] = (float)(0.5 * (2 * mha_rng_uniform(93, (uint64_t)i) - 1));
        for (size_t i = 0; i < n; i++) r[i] = (float)(2 * mha_rng_uniform(94, i) - 1);
        int bad = 0, bad_pre = 0, cases = 0;
        for (int act = -1; act <= MHA_ACT_GELU; act++)
            for (int with_bias = 0; with_bias < 2; with_bias++)
                for (int with_res = 0; with_res < 2; with_res++)
                    for (int with_drop = 0; with_drop < 2; with_drop++)
                        for (int with_pre = 0; with_pre < 2; with_pre++) {
                            const float *bias = with_bias ? b : NULL, *res = with_res ? r : NULL;
                            const float p = with_drop ? 0.3f : 0.0f;
                            t->linear_forward(lin, x, w, bias, N, IC, OC);
                            if (act >= 0) t->act_forward(ref, lin, n, act);
                            else memcpy(ref, lin, n * sizeof *ref);
                            t->dropout_forward(ref, ref, n, p, seed, 0);
                            if (res) t->add(ref, res, ref, n);
                            for (size_t i = 0; i < n; i++) out[i] = pre[i] = NAN;
                            t->linear_forward_post(out, with_pre ? pre : NULL, x, w, bias, N, IC, OC, act,
                                                   p, seed, res);
                            bad += memcmp(out, ref, n * sizeof *out) != 0;
                            if (with_pre) bad_pre += memcmp(pre, lin, n * sizeof *pre) != 0;
                            else   /* pre NULL: nothing written there */
                                for (size_t i = 0; i < n; i++) bad_pre += !isnan(pre[i]);
                            cases++;
                        }
        char what[128];
        snprintf(what, sizeof what, "linear_forward_post %s %dx%d->%d = ops in turn (%d cases)", name, N,
                 IC, OC, cases);
        test_expect(what, bad == 0);
        snprintf(what, sizeof what, "linear_forward_post %s %dx%d->%d: pre = linear output", name, N, IC, OC);
        test_expect(what, bad_pre == 0);
        free(x), free(w), free(b), free(r), free(lin), free(ref), free(out), free(pre);
    }
}

static void test_linear_post(void) {
    char why[256];
    /* 2 threads (not all cores): several row blocks even on a 1-core machine */
    const Backend *t[3] = {mha_cpu_backend(2), mha_cpu_backend_bf16(2, why, sizeof why),
                           mha_cpu_backend_int8(2, why, sizeof why)};
    const char *names[3] = {fp32_path, "bf16", "int8"};
    for (int i = 0; i < (fp32_only ? 1 : 3); i++) {
        if (t[i]) test_linear_post_table(t[i], names[i]);
        else printf("linear_forward_post %s: skipped (this CPU lacks its instructions)\n", names[i]);
    }
    be = mha_cpu_backend(0);
}

/* The linear backward (fp32 and bf16 tables) gives the same bits on 1, 2 and 3 threads: dinp,
 * dw and dbias, for shapes above MHA_GEMM_PAR_MIN whose row counts are no multiple of the
 * blocks (before: dinp and dw were cut into blocks by the thread count, and OpenBLAS's AVX2
 * kernels gave their rows other bits, so a run resumed on another number of cores drifted). */
static void test_linear_backward_threads(void) {
    const int sizes[][3] = {{1000, 128, 384}, {4093, 128, 128}, {777, 512, 128}, {300, 96, 160}};
    char why[256];
    for (int table = 0; table < (fp32_only ? 1 : 2); table++) {
        const char *name = table ? "bf16" : "fp32";
        for (int si = 0; si < 4; si++) {
            const int N = sizes[si][0], IC = sizes[si][1], OC = sizes[si][2];
            const size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
            float *dout = falloc(no), *x = falloc(ni), *w = falloc(nw), *res[3][3];
            for (size_t i = 0; i < no; i++) dout[i] = (float)(2 * mha_rng_uniform(81, i) - 1);
            for (size_t i = 0; i < ni; i++) x[i] = (float)(2 * mha_rng_uniform(82, i) - 1);
            for (size_t i = 0; i < nw; i++) w[i] = (float)(0.3 * (2 * mha_rng_uniform(83, i) - 1));
            int ran = 1;
            for (int t = 0; t < 3; t++) {
                const Backend *b = table ? mha_cpu_backend_bf16(t + 1, why, sizeof why) : mha_cpu_backend(t + 1);
                res[t][0] = falloc(ni), res[t][1] = falloc(nw), res[t][2] = falloc((size_t)OC);
                for (size_t i = 0; i < nw; i++) res[t][1][i] = 0.25f;   /* dw and dbias accumulate */
                for (int i = 0; i < OC; i++) res[t][2][i] = -0.5f;
                if (b) b->linear_backward(res[t][0], res[t][1], res[t][2], dout, x, w, N, IC, OC, 0);
                else ran = 0;
            }
            if (ran) {
                int same = 1;
                for (int t = 1; t < 3; t++)
                    same &= memcmp(res[t][0], res[0][0], ni * sizeof(float)) == 0 &&
                            memcmp(res[t][1], res[0][1], nw * sizeof(float)) == 0 &&
                            memcmp(res[t][2], res[0][2], (size_t)OC * sizeof(float)) == 0;
                char what[160];
                snprintf(what, sizeof what, "linear backward %s %dx%d->%d: dinp, dw, dbias bitwise equal on 1, 2, 3 "
                         "threads", name, N, IC, OC);
                test_expect(what, same);
            } else if (si == 0) {
                printf("linear backward %s on 1-3 threads: skipped (this CPU lacks its instructions)\n", name);
            }
            for (int t = 0; t < 3; t++) free(res[t][0]), free(res[t][1]), free(res[t][2]);
            free(dout), free(x), free(w);
        }
    }
    be = mha_cpu_backend(0);
}

/* Batch invariance of the linear forward (fp32, bf16, int8 tables; 1 and 2 threads): every
 * row of a product of N rows, at any offset into the input, is bit for bit the row computed
 * alone (N = 1), so a text gets the same output alone or in any batch. fp32 runs on our own
 * product (gemm_f32.c) or on OpenBLAS, where this holds with its AVX-512 kernels only
 * (mha_f32_rows_batch_invariant; the check says so and skips elsewhere); bf16 and int8 run our
 * own kernels. (Forced onto OpenBLAS's Zen kernels, 9,360 of 128->384's rows differ.) The shapes cover
 * classifier heads (OpenBLAS's small-matrix kernel would take them unpadded), the model's
 * layers, and N on both sides of the padding's row count and of the 96-row thread blocks. */
static void test_linear_rows_alone_table(const Backend *t, const char *name, int threads) {
    const int shapes[][2] = {{128, 10}, {128, 2}, {24, 5}, {1024, 8}, {64, 20}, {100, 81}, {128, 128},
                             {128, 384}, {512, 128}, {128, 512}, {200, 50}};
    const int counts[] = {1, 2, 5, 9, 10, 23, 25, 60, 61, 75, 76, 95, 97, 120, 121, 130, 211, 300, 513, 600, 601};
    const int NMAX = 700, OFFS = 3;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int IC = shapes[si][0], OC = shapes[si][1];
        float *x = malloc((size_t)NMAX * IC * sizeof *x), *w = malloc((size_t)OC * IC * sizeof *w);
        float *b = malloc((size_t)OC * sizeof *b), *alone = malloc((size_t)NMAX * OC * sizeof *alone);
        float *out = malloc((size_t)NMAX * OC * sizeof *out);
        for (size_t i = 0; i < (size_t)NMAX * IC; i++) x[i] = (float)(2 * mha_rng_uniform(95, i) - 1);
        for (size_t i = 0; i < (size_t)OC * IC; i++) w[i] = (float)(0.2 * (2 * mha_rng_uniform(96, i) - 1));
        for (int i = 0; i < OC; i++) b[i] = (float)(2 * mha_rng_uniform(97, (uint64_t)i) - 1);
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const float *bias = with_bias ? b : NULL;
            for (int n = 0; n < NMAX; n++)
                t->linear_forward(alone + (size_t)n * OC, x + (size_t)n * IC, w, bias, 1, IC, OC);
            int bad_rows = 0, calls = 0;
            for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
                for (int off = 0; off < OFFS; off++) {
                    const int N = counts[ci], at = off * 17;
                    if (at + N > NMAX) continue;
                    for (size_t i = 0; i < (size_t)N * OC; i++) out[i] = NAN;
                    t->linear_forward(out, x + (size_t)at * IC, w, bias, N, IC, OC);
                    for (int n = 0; n < N; n++)
                        bad_rows += memcmp(out + (size_t)n * OC, alone + (size_t)(at + n) * OC,
                                           (size_t)OC * sizeof *out) != 0;
                    calls++;
                }
            char what[160];
            snprintf(what, sizeof what, "linear forward %s, %d thread%s, %d->%d%s: rows in %d batches = rows alone "
                     "(%d rows differ)", name, threads, threads > 1 ? "s" : "", IC, OC, with_bias ? " +bias" : "",
                     calls, bad_rows);
            test_expect(what, bad_rows == 0);
        }
        free(x), free(w), free(b), free(alone), free(out);
    }
}

char *openblas_get_config(void);     /* OpenBLAS's own: version and build, for a failure's context */
char *openblas_get_corename(void);   /* the kernel family it picked for this CPU */

static void test_linear_rows_alone(void) {
    char why[256];
    printf("rows alone vs in batches, on %s (%s kernels)\n", openblas_get_config(), openblas_get_corename());
    for (int threads = 1; threads <= 2; threads++) {
        const Backend *t[3] = {mha_cpu_backend(threads), mha_cpu_backend_bf16(threads, why, sizeof why),
                               mha_cpu_backend_int8(threads, why, sizeof why)};
        const char *names[3] = {fp32_path, "bf16", "int8"};
        for (int i = 0; i < (fp32_only ? 1 : 3); i++) {
            if (!t[i]) printf("linear rows alone %s: skipped (this CPU lacks its instructions)\n", names[i]);
            else if (i == 0 && !mha_f32_rows_batch_invariant())
                printf("linear rows alone %s: skipped (OpenBLAS's %s kernels are not known to give a row "
                       "the same bits in any batch)\n", names[i], openblas_get_corename());
            else test_linear_rows_alone_table(t[i], names[i], threads);
        }
    }
    be = mha_cpu_backend(0);
}

/* The AVX-512 softmax rows (rows_avx512.h, dropout-free rows) against the portable rows on
 * this machine: the same exp of every score, row sums in another order, so outputs,
 * log-sum-exps and gradients agree to a few float roundings, far below TOL (both paths are
 * also checked against double above; the bf16 attention's are in test_cpu_bf16, where one
 * ulp of a probability can flip its bf16 rounding). */
static void test_rows_paths(void) {
    const Backend *t = be;
    const char *name = "fp32";
    const double tol = 2e-6;
    const int B = AB, T = AT, C = AC, NH = ANH;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    size_t na = (size_t)B * NH * T * T;
    int32_t *len = t->alloc(B * sizeof(int32_t));
    memcpy(len, att_len, sizeof att_len);
    float *qkv = falloc(nq), *dout = falloc(no), *att = falloc(na), *datt = falloc(na);
    fill2(qkv, NULL, nq, -2, 2), fill2(dout, NULL, no, -1, 1);
    float *out[2], *lse[2], *dq[2], *outm[2], *dqm[2];
    for (int path = 0; path < 2; path++) {
        out[path] = falloc(no), lse[path] = falloc(nl), dq[path] = falloc(nq);
        outm[path] = falloc(no), dqm[path] = falloc(nq);
    }
    char what[96];
    for (int causal = 0; causal < 2; causal++) {
        for (int path = 0; path < 2; path++) {
            mha_rows_force_portable(path);
            memset(dq[path], 0, nq * sizeof(float)), memset(dqm[path], 0, nq * sizeof(float));
            t->attention_forward_fused(out[path], lse[path], qkv, len, B, T, C, NH, causal, 0, 1);
            t->attention_backward_fused(dq[path], dout, out[path], qkv, lse[path], len, B, T, C, NH,
                                        causal, 0, 1);
            t->attention_forward_math(outm[path], att, qkv, len, B, T, C, NH, causal, 0, 1);
            t->attention_backward_math(dqm[path], datt, dout, qkv, att, len, B, T, C, NH, causal, 0, 1);
        }
        mha_rows_force_portable(0);
        double e = rel_err_f_f(out[0], out[1], no);
        double e2 = rel_err_f_f(lse[0], lse[1], nl);
        if (e2 > e) e = e2;
        e2 = rel_err_f_f(outm[0], outm[1], no);
        if (e2 > e) e = e2;
        snprintf(what, sizeof what, "%s rows AVX-512 = portable fwd%s", name, causal ? " causal" : "");
        test_result(what, e, tol);
        e = rel_err_f_f(dq[0], dq[1], nq);
        e2 = rel_err_f_f(dqm[0], dqm[1], nq);
        if (e2 > e) e = e2;
        snprintf(what, sizeof what, "%s rows AVX-512 = portable bwd%s", name, causal ? " causal" : "");
        test_result(what, e, tol);
    }
    for (int path = 0; path < 2; path++) {
        be->free(out[path]), be->free(lse[path]), be->free(dq[path]);
        be->free(outm[path]), be->free(dqm[path]);
    }
    t->free(len), be->free(qkv), be->free(dout), be->free(att), be->free(datt);
}

int main(void) {
    be = mha_cpu_backend(0);
    test_expect("fp32 linear forward batch invariant on a CPU with AVX2 and FMA",
                !mha_f32_gemm_cpu_supported() || mha_f32_rows_batch_invariant());
    test_gemm_f32();
    test_linear_caches();
    /* the fp32 linear tests on each product this CPU can run: OpenBLAS, then our own */
    for (int own = 0; own < 2; own++) {
        if (own && !mha_f32_gemm_cpu_supported()) {
            printf("fp32 linear forward on gemm_f32.c: skipped (this CPU has no AVX2 and FMA)\n");
            break;
        }
        mha_f32_gemm_force(own ? 1 : -1);
        fp32_path = own ? "fp32 own" : "fp32 OpenBLAS";
        fp32_only = own;   /* the bf16 and int8 tables were checked on the first pass */
        test_linear_post();
        test_linear_rows_alone();
        test_linear(1, 1);
        test_linear(0, 1);
        test_linear(1, 0);
    }
    mha_f32_gemm_force(0);
    fp32_only = 0;
    fp32_path = mha_f32_gemm_fast() ? "fp32 own" : "fp32 OpenBLAS";
    /* the backward's dinp on our own AVX-512 tiles where the CPU has them (mha_f32_gemm_wide),
     * else OpenBLAS's; its dw always OpenBLAS's */
    test_linear_backward_threads();
    test_memory_and_expf();
    test_linear_empty();
    test_embedding();
    be = mha_cpu_backend(0);
    test_layernorm(72);
    test_layernorm(64);
    test_layernorm_rows();
    test_elementwise();
    for (rows_portable = 0; rows_portable < 2; rows_portable++) {
        mha_rows_force_portable(rows_portable);
        for (int causal = 0; causal < 2; causal++) {
            test_attention(causal, 0.0f);
            test_attention(causal, 0.1f);
        }
        test_attention_large_scores();
    }
    mha_rows_force_portable(0);
    test_rows_paths();
    test_pool(MHA_POOL_MEAN, "pool mean");
    test_pool(MHA_POOL_CLS, "pool cls");
    test_pool(MHA_POOL_MAX, "pool max");
    test_crossentropy(0.0f);
    test_crossentropy(0.1f);
    test_adamw();
    test_adamw_split();
    if (test_failures) {
        printf("%d checks FAILED\n", test_failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
