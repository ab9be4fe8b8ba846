/* tests/cuda/test_cuda_model.c: the whole model on the CUDA backend against the CPU backend:
 * forward (logits, loss) and every parameter gradient for both attention paths, post- and
 * pre-LN, with padded batches; then 50 training updates (dropout on: the counter RNG gives
 * both backends the same masks) whose losses must follow the CPU run. Then the same in mixed
 * precision (train.precision = "bf16": bf16 GEMMs and WMMA attention) against the fp32 CPU
 * run, with the tolerances stated in main(). First, the out-of-memory error of model_create,
 * and updates queued as the trainer queues them (test_pipelined_updates: on the emulation, no
 * wait for the whole device in a step).
 * Skips (77) without a visible device. Built twice: against the real CUDA backend, and
 * against the host emulation of the kernels (suite cuda-emu) so the logic is checked on
 * machines without a GPU. */
#include "kernels/backend.h"
#include "kernels/cuda/mha_cuda.h"
#include "kernels/rng.h"
#include "model/classifier.h"
#include "model/config.h"
#include "model/optimizer.h"
#include "tests/test_util.h"
#include <math.h>
#include <string.h>

static void random_batch(int B, int T, int V, int K, uint64_t seed, int32_t *ids, int32_t *len, int32_t *lab) {
    for (int b = 0; b < B; b++) {
        len[b] = b == 0 ? T : 1 + (int)(mha_rng_u64(seed, 1000 + b) % (uint64_t)T);
        lab[b] = (int)(mha_rng_u64(seed, 2000 + b) % (uint64_t)K);
        for (int t = 0; t < T; t++)
            ids[b * T + t] = t < len[b] ? 3 + (int)(mha_rng_u64(seed, (uint64_t)(b * T + t)) % (uint64_t)(V - 3)) : 0;
    }
}

static float *to_host(const Backend *be, const float *p, size_t n) {
    float *h = malloc(n * sizeof *h);
    be->to_host(h, p, n * sizeof(float));
    return h;
}

/* Tolerances (relative): first forward (loss, probabilities), each parameter gradient, and the
 * losses of the following updates. */
typedef struct {
    double forward, grad, steps;
} Tol;

static void compare_model(const Backend *gpu, const Backend *cpu, const char *norm, const char *attention,
                          int C, int NH, int F, int B, int T, int steps, const char *prec, Tol tol) {
    Config c;
    config_defaults(&c);
    c.d_model = C; c.n_heads = NH; c.d_ff = F; c.n_layers = 2; c.max_len = T;
    c.dropout = 0.1f; c.attn_dropout = 0.1f; c.lr = 1e-3f;
    snprintf(c.norm, sizeof c.norm, "%s", norm);
    snprintf(c.attention, sizeof c.attention, "%s", attention);
    ModelDims d;
    model_dims_from_config(&d, &c, 50, 3);
    int32_t *ids = malloc((size_t)B * T * sizeof *ids), *len = malloc((size_t)B * sizeof *len);
    int32_t *lab = malloc((size_t)B * sizeof *lab);
    random_batch(B, T, 50, 3, 17, ids, len, lab);
    Model mg, mc;
    AdamW og, oc;
    MhaError err;
    char name[64];
    snprintf(name, sizeof name, "%s %s-LN/%s", prec, norm, attention);
    CHECK(model_create(&mg, &d, gpu, B, T, 0, 0, &err) == 0, "%s", err.msg);
    CHECK(model_create(&mc, &d, cpu, B, T, 0, 0, &err) == 0, "%s", err.msg);
    CHECK(adamw_create(&og, &mg, &err) == 0, "%s", err.msg);
    CHECK(adamw_create(&oc, &mc, &err) == 0, "%s", err.msg);
    model_init_params(&mg, 5);
    model_init_params(&mc, 5);
    double worst_loss = 0;
    for (int s = 0; s < steps; s++) {
        model_zero_grads(&mg);
        model_zero_grads(&mc);
        model_forward(&mg, ids, len, lab, B, T, 1, 40 + s);
        model_forward(&mc, ids, len, lab, B, T, 1, 40 + s);
        double lg = model_loss_sum(&mg) / B, lc = model_loss_sum(&mc) / B;
        model_backward(&mg, 1.0f / B, 40 + s);
        model_backward(&mc, 1.0f / B, 40 + s);
        double e = fabs(lg - lc) / fabs(lc);
        if (e > worst_loss) worst_loss = e;
        if (s == 0) {
            CHECK(e < tol.forward, "%s: loss %.9g (cuda) vs %.9g (cpu)", name, lg, lc);
            float *pg = to_host(gpu, mg.probs, (size_t)B * d.K), *pc = to_host(cpu, mc.probs, (size_t)B * d.K);
            double pe = rel_err_f_f(pg, pc, (size_t)B * d.K);
            CHECK(pe < tol.forward, "%s: probabilities rel err %.3g", name, pe);
            float *gg = to_host(gpu, mg.grads, mg.lay.total), *gc = to_host(cpu, mc.grads, mc.lay.total);
            double worst = 0;
            for (int k = 0; k < mg.lay.n; k++) {
                const ParamInfo *p = &mg.lay.t[k];
                double ge = rel_err_f_f(gg + p->offset, gc + p->offset, p->numel);
                CHECK(ge < tol.grad, "%s: gradient of %s rel err %.3g", name, p->name, ge);
                if (ge > worst) worst = ge;
            }
            printf("%-22s forward err %.2e, probabilities %.2e, worst gradient %.2e\n", name, e, pe, worst);
            free(pg); free(pc); free(gg); free(gc);
        } else {
            /* training is chaotic: losses must follow the CPU run closely, not bit for bit */
            CHECK(e < tol.steps, "%s: update %d loss %.9g (cuda) vs %.9g (cpu)", name, s, lg, lc);
        }
        double ng, nc;
        adamw_step(&og, &mg, &c, c.lr, &ng);
        adamw_step(&oc, &mc, &c, c.lr, &nc);
    }
    printf("%-22s %d updates: worst loss rel diff %.2e\n", name, steps, worst_loss);
    adamw_destroy(&og, &mg);
    adamw_destroy(&oc, &mc);
    model_destroy(&mg);
    model_destroy(&mc);
    free(ids); free(len); free(lab);
}

/* A model too large for the device: model_create fails with a runtime error (exit code 1)
 * that says how much was asked and which settings to lower, and frees what it took; the
 * backend still works afterwards (out of memory is not a sticky CUDA error). 2^15 x 2^15
 * tokens at d_model 64: one activation buffer alone is 256 GiB, beyond an H200's 141 GB (it
 * allocates the token ids, 4 GiB, and the parameters first, writing none of them; the
 * emulated device has 1 GiB and refuses the ids already). */
static void test_out_of_memory(const Backend *gpu) {
    Config c;
    config_defaults(&c);
    c.d_model = 64; c.n_heads = 2; c.d_ff = 128; c.n_layers = 1; c.max_len = 1 << 15;
    snprintf(c.attention, sizeof c.attention, "fused");
    ModelDims d;
    model_dims_from_config(&d, &c, 50, 3);
    Model m;
    MhaError err;
    memset(&err, 0, sizeof err);
    const size_t before = mha_cuda_bytes_in_use();
    const int rc = model_create(&m, &d, gpu, 1 << 15, 1 << 15, 0, 0, &err);
    printf("%-4s out of device memory: %s\n", rc == MHA_EXIT_DATA ? "ok" : "FAIL", err.msg);
    CHECK(rc == MHA_EXIT_DATA, "model_create of a 256 GiB model returned %d", rc);
    CHECK(strstr(err.msg, "out of memory") && strstr(err.msg, "needs at batch") && strstr(err.msg, "batch_size") &&
          strstr(err.msg, "max_len"), "the message does not say what was asked and what to lower: %s", err.msg);
    CHECK(mha_cuda_bytes_in_use() == before, "model_create left %zu bytes allocated after failing",
          mha_cuda_bytes_in_use() - before);
    CHECK(model_create(&m, &d, gpu, 2, 16, 0, 0, &err) == 0, "a small model after the failure: %s", err.msg);
    model_destroy(&m);
}

#ifdef MHA_CUDA_EMU
void mha_emu_waits(long *device, long *event);   /* tests/cuda/emu/emu_backend_cuda.cpp */
#endif

/* Updates queued as the trainer queues them (model/trainer.c: adamw_begin, forward, backward,
 * model_loss_accumulate, then the previous update's adamw_outcome, then adamw_queue) give the
 * parameters of updates waited for one at a time (adamw_step), bit for bit; so does a third
 * run with an update whose gradient is poisoned (NaN) queued among them, which must come out
 * skipped and change nothing (adamw_outcome gives its step count back). On the emulation,
 * after two updates (scratch buffers grown, the staging ring allocated), four more must not wait
 * for the whole device once, and at most 4 times each for an event: the staging ring's slot
 * for each of the batch's ids, lengths and labels, and the copy back of the previous update's
 * loss and gradient norm (adamw_outcome). */
static void test_pipelined_updates(const Backend *gpu, int emu) {
    const int B = emu ? 3 : 16, T = emu ? 9 : 70, steps = 6;
    Config c;
    config_defaults(&c);
    c.d_model = 16; c.n_heads = 2; c.d_ff = 32; c.n_layers = 1; c.max_len = T;
    c.dropout = 0.1f; c.lr = 1e-2f;
    snprintf(c.attention, sizeof c.attention, "fused");
    ModelDims d;
    model_dims_from_config(&d, &c, 50, 3);
    int32_t *ids = malloc((size_t)B * T * sizeof *ids), *len = malloc((size_t)B * sizeof *len);
    int32_t *lab = malloc((size_t)B * sizeof *lab);
    random_batch(B, T, 50, 3, 23, ids, len, lab);
    float *final[3];
    int t_end[3], skipped[3] = {0, 0, 0};
    const int poisoned = 3;   /* run 2: an extra, poisoned update before update 3 */
    size_t n = 0;
#ifdef MHA_CUDA_EMU
    const int warm = 2;   /* updates before the waits are counted */
    long dev0 = 0, ev0 = 0, dev1 = 0, ev1 = 0;
#endif
    MhaError err;
    for (int run = 0; run < 3; run++) {
        Model m;
        AdamW o;
        CHECK(model_create(&m, &d, gpu, B, T, 0, 0, &err) == 0, "%s", err.msg);
        CHECK(adamw_create(&o, &m, &err) == 0, "%s", err.msg);
        model_init_params(&m, 5);
        int queued = 0;
        for (int i = 0; i < steps + (run == 2); i++) {
            const int s = run == 2 && i > poisoned ? i - 1 : i;   /* the batch's dropout seed: 60 + s */
#ifdef MHA_CUDA_EMU
            if (run == 1 && s == warm) mha_emu_waits(&dev0, &ev0);
#endif
            model_zero_grads(&m);
            if (run) adamw_begin(&o, &m);
            model_forward(&m, ids, len, lab, B, T, 1, 60 + s);
            model_backward(&m, 1.0f / B, 60 + s);
            if (run == 0) {
                adamw_step(&o, &m, &c, c.lr, NULL);
                continue;
            }
            model_loss_accumulate(&m, o.stats);
            if (queued) skipped[run] += adamw_outcome(&o, &m, NULL, NULL);
            if (run == 2 && i == poisoned) {
                const float nan = NAN;
                gpu->to_device(m.grads + 7, &nan, sizeof nan);
            }
            adamw_queue(&o, &m, &c, c.lr);
            queued = 1;
        }
#ifdef MHA_CUDA_EMU
        if (run == 1) mha_emu_waits(&dev1, &ev1);
#endif
        if (run) skipped[run] += adamw_outcome(&o, &m, NULL, NULL);
        t_end[run] = o.t;
        n = m.lay.total;
        final[run] = to_host(gpu, m.params, n);
        adamw_destroy(&o, &m);
        model_destroy(&m);
    }
    int same = memcmp(final[0], final[1], n * sizeof(float)) == 0;
    int same_skip = memcmp(final[0], final[2], n * sizeof(float)) == 0;
    CHECK(same, "pipelined updates differ from updates waited for one at a time");
    CHECK(same_skip, "pipelined updates with a skipped one among them differ from updates waited for");
    CHECK(skipped[0] == 0 && skipped[1] == 0 && skipped[2] == 1, "skipped updates %d, %d (expected 0, 1)",
          skipped[1], skipped[2]);
    CHECK(t_end[0] == steps && t_end[1] == steps && t_end[2] == steps, "AdamW steps %d, %d, %d (expected %d)",
          t_end[0], t_end[1], t_end[2], steps);
    printf("%-4s %d pipelined updates, and with a skipped one among them: the parameters of updates waited for, "
           "bit for bit\n", same && same_skip && skipped[2] == 1 && t_end[2] == steps ? "ok" : "FAIL", steps);
#ifdef MHA_CUDA_EMU
    long dw = dev1 - dev0, ew = ev1 - ev0;
    printf("%-4s %d pipelined updates: %ld waits for the whole device, %ld for an event (at most %d)\n",
           dw == 0 && ew <= 4 * (steps - warm) ? "ok" : "FAIL", steps - warm, dw, ew, 4 * (steps - warm));
    CHECK(dw == 0, "%d pipelined updates waited %ld times for the whole device", steps - warm, dw);
    CHECK(ew <= 4 * (steps - warm), "%d pipelined updates waited %ld times for an event", steps - warm, ew);
#endif
    free(final[0]); free(final[1]); free(final[2]);
    free(ids); free(len); free(lab);
}

int main(void) {
    char why[256] = "";
    const Backend *gpu = mha_cuda_backend(0, 0, why, sizeof why);
    if (!gpu) return test_skip(why);
    const Backend *gpu16 = mha_cuda_backend(0, 1, why, sizeof why);
    if (!gpu16) return test_skip(why);
    const Backend *cpu = mha_cpu_backend(2);
    int emu = getenv("MHA_TEST_EMU") != NULL;  /* the host emulation is slow: smaller shapes */
    const char *norms[] = {"post", "pre"}, *paths[] = {"math", "fused"};
    test_out_of_memory(gpu);
    test_pipelined_updates(gpu, emu);
    const Tol fp32 = {1e-5, 1e-5, 1e-3};
    /* bf16 (mixed precision) against the fp32 CPU run: every GEMM and attention product rounds
     * its operands to 8 significant bits (2^-9 relative), so the first forward is held to the
     * per-op bar 1e-2. A gradient goes through the whole backward chain of such products, and
     * post-LN's LayerNorm backward subtracts the mean and the xhat component of the incoming
     * gradient, leaving a small remainder of large terms whose rounding does not cancel: the
     * emulation measured up to 0.17 (layer 0 fc1_w, post-LN; pre-LN 0.026), so gradients are
     * held to 0.3 only, which still catches a wrong operand or a missing term. The losses of later updates also carry the drift of the
     * parameters (AdamW normalises each step, so bf16 gradient noise of ~1% moves every
     * weight by ~1% of lr per update, on top of the forward rounding): 2e-2 per update. */
    const Tol bf16 = {1e-2, 0.3, 2e-2};
    /* the fp32 "fused" rows run the kernel the model gets by default (mha_cuda.h) */
    const int hs = emu ? 16 / 2 : 128 / 4;   /* C / NH of compare_model below */
    printf("fp32 fused attention kernel (heads of %d): %s\n", hs,
           mha_cuda_fp32_attention_kernel(mha_cuda_fp32_attention(), hs) == MHA_CUDA_ATTN_TF32X3
               ? "tf32x3 (tensor cores)" : "simt (FFMA)");
    for (int n = 0; n < 2; n++)
        for (int a = 0; a < 2; a++) {
            if (emu) compare_model(gpu, cpu, norms[n], paths[a], 16, 2, 32, 3, 9, 5, "fp32", fp32);
            else compare_model(gpu, cpu, norms[n], paths[a], 128, 4, 512, 16, 70, 50, "fp32", fp32);
        }
    for (int n = 0; n < 2; n++)
        for (int a = 0; a < 2; a++) {
            if (emu) compare_model(gpu16, cpu, norms[n], paths[a], 16, 2, 32, 3, 70, 5, "bf16", bf16);
            else compare_model(gpu16, cpu, norms[n], paths[a], 128, 4, 512, 16, 70, 50, "bf16", bf16);
        }
    return test_finish("cuda_model");
}
