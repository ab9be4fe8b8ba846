/* kernels/profile.c: the timing wrapper backend and its report (see profile.h). Each
 * wrapped op syncs the inner backend before and after, so device ops are timed too. */
#include "kernels/profile.h"
#include <stdio.h>
#include <time.h>

static const Backend *inner;
static ProfileCounters counters;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define TIMED(family, work, call)               \
    do {                                        \
        inner->sync();                          \
        double t0_ = now();                     \
        call;                                   \
        inner->sync();                          \
        counters.seconds[family] += now() - t0_; \
        counters.flops[family] += (work);       \
        counters.calls[family]++;               \
    } while (0)

/* Attention work on the padded shape: QK^T and PV forward, four products backward. */
static double att_flops(int B, int T, int C, double products) { return products * 2.0 * B * (double)T * T * C; }

static void *p_alloc(size_t n) { return inner->alloc(n); }
static void p_free(void *p) { inner->free(p); }
static void p_to_device(void *d, const void *s, size_t n) { TIMED(PROF_MEMORY, 0, inner->to_device(d, s, n)); }
static void p_to_host(void *d, const void *s, size_t n) { TIMED(PROF_MEMORY, 0, inner->to_host(d, s, n)); }
static void p_copy(void *d, const void *s, size_t n) { TIMED(PROF_MEMORY, 0, inner->copy(d, s, n)); }
static void p_zero(void *p, size_t n) { TIMED(PROF_MEMORY, 0, inner->zero(p, n)); }
static void p_sync(void) { inner->sync(); }
static void p_to_host_async(void *d, const void *s, size_t n) { TIMED(PROF_MEMORY, 0, inner->to_host_async(d, s, n)); }
static void p_to_host_wait(void) { TIMED(PROF_MEMORY, 0, inner->to_host_wait()); }
static void p_linear_forward(float *o, const float *i, const float *w, const float *b, int N, int IC, int OC) {
    TIMED(PROF_GEMM, 2.0 * N * IC * OC, inner->linear_forward(o, i, w, b, N, IC, OC));
}
/* the fused linear layer counts as GEMM: its bias, activation, dropout and residual are part of it */
static void p_linear_forward_post(float *o, float *pre, const float *i, const float *w, const float *b, int N,
                                  int IC, int OC, int act, float p, uint64_t seed, const float *res) {
    TIMED(PROF_GEMM, 2.0 * N * IC * OC, inner->linear_forward_post(o, pre, i, w, b, N, IC, OC, act, p, seed, res));
}
static void p_linear_backward(float *di, float *dw, float *db, const float *d, const float *i, const float *w,
                              int N, int IC, int OC, int acc) {
    TIMED(PROF_GEMM, (di ? 4.0 : 2.0) * N * IC * OC, inner->linear_backward(di, dw, db, d, i, w, N, IC, OC, acc));
}
static void p_embed_forward(float *o, const int32_t *ids, const float *t, const float *p, int B, int T, int C) {
    TIMED(PROF_EMBED_POOL_LOSS, 0, inner->embed_forward(o, ids, t, p, B, T, C));
}
static void p_embed_backward(float *dt, float *dp, const float *d, const int32_t *ids, int B, int T, int C) {
    TIMED(PROF_EMBED_POOL_LOSS, 0, inner->embed_backward(dt, dp, d, ids, B, T, C));
}
static void p_ln_forward(float *o, float *m, float *r, const float *i, const float *w, const float *b, int N, int C) {
    TIMED(PROF_LAYERNORM, 0, inner->layernorm_forward(o, m, r, i, w, b, N, C));
}
static void p_ln_backward(float *di, float *dw, float *db, const float *d, const float *i, const float *w,
                          const float *m, const float *r, int N, int C) {
    TIMED(PROF_LAYERNORM, 0, inner->layernorm_backward(di, dw, db, d, i, w, m, r, N, C));
}
static void p_act_forward(float *o, const float *i, size_t n, int a) { TIMED(PROF_ELEMENTWISE, 0, inner->act_forward(o, i, n, a)); }
static void p_act_backward(float *di, const float *d, const float *i, size_t n, int a) {
    TIMED(PROF_ELEMENTWISE, 0, inner->act_backward(di, d, i, n, a));
}
static void p_add(float *o, const float *a, const float *b, size_t n) { TIMED(PROF_ELEMENTWISE, 0, inner->add(o, a, b, n)); }
static void p_accumulate(float *d, const float *s, size_t n) { TIMED(PROF_ELEMENTWISE, 0, inner->accumulate(d, s, n)); }
static void p_dropout_forward(float *o, const float *i, size_t n, float p, uint64_t s, uint64_t off) {
    TIMED(PROF_ELEMENTWISE, 0, inner->dropout_forward(o, i, n, p, s, off));
}
static void p_dropout_backward(float *di, const float *d, size_t n, float p, uint64_t s, uint64_t off) {
    TIMED(PROF_ELEMENTWISE, 0, inner->dropout_backward(di, d, n, p, s, off));
}
static void p_att_fwd_math(float *o, float *att, const float *qkv, const int32_t *len, int B, int T, int C, int NH,
                           int causal, float p, uint64_t s) {
    TIMED(PROF_ATTENTION, att_flops(B, T, C, 2), inner->attention_forward_math(o, att, qkv, len, B, T, C, NH, causal, p, s));
}
static void p_att_bwd_math(float *dqkv, float *datt, const float *d, const float *qkv, const float *att,
                           const int32_t *len, int B, int T, int C, int NH, int causal, float p, uint64_t s) {
    TIMED(PROF_ATTENTION, att_flops(B, T, C, 4),
          inner->attention_backward_math(dqkv, datt, d, qkv, att, len, B, T, C, NH, causal, p, s));
}
static void p_att_fwd_fused(float *o, float *lse, const float *qkv, const int32_t *len, int B, int T, int C, int NH,
                            int causal, float p, uint64_t s) {
    TIMED(PROF_ATTENTION, att_flops(B, T, C, 2), inner->attention_forward_fused(o, lse, qkv, len, B, T, C, NH, causal, p, s));
}
static void p_att_bwd_fused(float *dqkv, const float *d, const float *o, const float *qkv, const float *lse,
                            const int32_t *len, int B, int T, int C, int NH, int causal, float p, uint64_t s) {
    TIMED(PROF_ATTENTION, att_flops(B, T, C, 5),
          inner->attention_backward_fused(dqkv, d, o, qkv, lse, len, B, T, C, NH, causal, p, s));
}
static void p_pool_forward(float *o, int32_t *am, const float *i, const int32_t *len, int B, int T, int C, int mode) {
    TIMED(PROF_EMBED_POOL_LOSS, 0, inner->pool_forward(o, am, i, len, B, T, C, mode));
}
static void p_pool_backward(float *di, const float *d, const int32_t *am, const int32_t *len, int B, int T, int C, int mode) {
    TIMED(PROF_EMBED_POOL_LOSS, 0, inner->pool_backward(di, d, am, len, B, T, C, mode));
}
static void p_ce(float *l, float *pr, float *dl, const float *lg, const int32_t *lab, int B, int K, float sm, float ds) {
    TIMED(PROF_EMBED_POOL_LOSS, 0, inner->crossentropy(l, pr, dl, lg, lab, B, K, sm, ds));
}
static void p_adamw(float *p, const float *g, float *m, float *v, const AdamwTensor *ts, int nt, float lr,
                    float b1, float b2, float eps, const float *gs, int t) {
    TIMED(PROF_OPTIMIZER, 0, inner->adamw(p, g, m, v, ts, nt, lr, b1, b2, eps, gs, t));
}
static void p_grad_norm(double *stats, float *gs, const float *g, size_t n, float clip) {
    TIMED(PROF_OPTIMIZER, 0, inner->grad_norm(stats, gs, g, n, clip));
}
static void p_sum_into(double *acc, const float *x, size_t n) { TIMED(PROF_EMBED_POOL_LOSS, 0, inner->sum_into(acc, x, n)); }
static void p_scale(float *x, size_t n, float s) { TIMED(PROF_OPTIMIZER, 0, inner->scale(x, n, s)); }

static Backend wrapped;

const Backend *profile_backend(const Backend *b) {
    inner = b;
    wrapped = (Backend){
        .name = b->name, .bf16 = b->bf16, .int8 = b->int8, .alloc = p_alloc, .free = p_free, .to_device = p_to_device, .to_host = p_to_host,
        .copy = p_copy, .zero = p_zero, .sync = p_sync, .to_host_async = p_to_host_async,
        .to_host_wait = p_to_host_wait, .linear_forward = p_linear_forward,
        .linear_backward = p_linear_backward, .embed_forward = p_embed_forward, .embed_backward = p_embed_backward,
        .layernorm_forward = p_ln_forward, .layernorm_backward = p_ln_backward, .act_forward = p_act_forward,
        .act_backward = p_act_backward, .add = p_add, .accumulate = p_accumulate,
        .dropout_forward = p_dropout_forward, .dropout_backward = p_dropout_backward,
        .attention_forward_math = p_att_fwd_math, .attention_backward_math = p_att_bwd_math,
        .attention_forward_fused = p_att_fwd_fused, .attention_backward_fused = p_att_bwd_fused,
        .pool_forward = p_pool_forward, .pool_backward = p_pool_backward, .crossentropy = p_ce,
        .sum_into = p_sum_into, .grad_norm = p_grad_norm, .adamw = p_adamw, .scale = p_scale,
        .peak_bytes = b->peak_bytes,
        .linear_forward_post = b->linear_forward_post ? p_linear_forward_post : NULL,
    };
    return &wrapped;
}

ProfileCounters *profile_counters(void) { return &counters; }

const char *profile_family_name(int f) {
    static const char *names[PROF_FAMILIES] = {"GEMM (linear layers)", "attention", "LayerNorm", "elementwise (act, dropout, add)",
                                               "embedding, pooling, loss", "optimizer (AdamW, norm, clip)", "zero / copies"};
    return f >= 0 && f < PROF_FAMILIES ? names[f] : "?";
}

/* GEMM GFLOP/s of the backend's linear layer (sgemm, or the bf16 GEMM in mixed precision) on
 * the feed-forward shape at this batch size: the ceiling the whole step is compared with. */
static double gemm_ceiling(const Backend *be, int N, int C, int F) {
    size_t fl = sizeof(float);
    float *a = be->alloc((size_t)N * C * fl), *w = be->alloc((size_t)F * C * fl), *o = be->alloc((size_t)N * F * fl);
    if (!a || !w || !o) return 0;
    be->zero(a, (size_t)N * C * fl);
    be->zero(w, (size_t)F * C * fl);
    int reps = 0;
    double t0 = now(), t;
    do {
        be->linear_forward(o, a, w, NULL, N, C, F);
        be->sync();
        reps++;
    } while ((t = now() - t0) < 0.3);
    be->free(a);
    be->free(w);
    be->free(o);
    return 2.0 * N * C * F * reps / t / 1e9;
}

void profile_print_report(double total, double data_seconds, long tokens, int N, int C, int F) {
    const Backend *be = inner;   /* the ceiling is timed without the wrapper */
    const ProfileCounters *pc = &counters;
    double op_total = 0, flops = pc->flops[PROF_GEMM] + pc->flops[PROF_ATTENTION];
    for (int f = 0; f < PROF_FAMILIES; f++) op_total += pc->seconds[f];
    fprintf(stderr, "\nprofile: %.2f s of training, %ld real tokens (%.0f tokens/s)\n", total, tokens, tokens / total);
    fprintf(stderr, "| op family | seconds | share | calls | GFLOP/s |\n|---|---:|---:|---:|---:|\n");
    for (int f = 0; f < PROF_FAMILIES; f++) {
        fprintf(stderr, "| %s | %.3f | %.1f%% | %ld |", profile_family_name(f), pc->seconds[f],
                100.0 * pc->seconds[f] / total, pc->calls[f]);
        if (pc->flops[f] > 0) fprintf(stderr, " %.1f |\n", pc->flops[f] / pc->seconds[f] / 1e9);
        else fprintf(stderr, " |\n");
    }
    fprintf(stderr, "| data (batching) | %.3f | %.1f%% | | |\n", data_seconds, 100.0 * data_seconds / total);
    fprintf(stderr, "| other (host side) | %.3f | %.1f%% | | |\n", total - op_total - data_seconds,
            100.0 * (total - op_total - data_seconds) / total);
    /* before the ceiling's own buffers below; parsed by benchmark scripts: keep the format */
    if (be->peak_bytes) fprintf(stderr, "peak device memory: %.1f MiB\n", be->peak_bytes() / 1048576.0);
    double ceiling = gemm_ceiling(be, N, C, F);
    double achieved = flops / total / 1e9;
    const char *kind = be->bf16 ? "bf16 GEMM" : "sgemm";
    fprintf(stderr, "whole step: %.1f GFLOP/s (GEMM + attention work on padded shapes) = %.0f%% of the %s "
            "ceiling %.1f GFLOP/s (%d x %d x %d, %s backend)\n", achieved, 100.0 * achieved / ceiling, kind,
            ceiling, N, C, F, be->name);
}
