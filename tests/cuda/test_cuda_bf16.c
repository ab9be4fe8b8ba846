/* tests/cuda/test_cuda_bf16.c: the mixed-precision ops of the CUDA backend (train.precision =
 * "bf16": linear layers on bf16 GEMMs, fused attention on bf16 WMMA) against the fp32 CPU
 * backend.
 *
 * Fresh random inputs for every case; overwritten outputs poisoned with NaN first, accumulated
 * outputs (+=) pre-filled with the same random values on both sides, and the backward also
 * run from zero (so the comparison is not diluted by the pre-filled values).
 * Pass: normwise relative error max|gpu - cpu| / max|cpu| < 1e-2 (the bar for bf16:
 * inputs rounded to 8 significant bits give about 2^-9 = 2e-3 relative error per operand,
 * fp32 accumulation keeps sums from adding more than that); any NaN fails. The bf16 results
 * must also differ from fp32 (rel > 1e-7), which shows the bf16 path is the one running.
 * The fused backward runs from each side's own forward (out, lse), as in training. dq and dk
 * are also compared alone, from zero, at 2e-2 (see TOL_DQK). Also: the bf16 fused backward
 * twice, bitwise equal (no atomics).
 *
 * Without a visible CUDA device: exits 77. MHA_TEST_FILTER selects checks by name;
 * MHA_TEST_EMU=1 (suite cuda-emu, the host emulation) runs smaller cases.
 */
#include "tests/cuda/paired.h"

#define TOL16 1e-2
/* dq and dk alone, from zero: dS = P o (dP - Di) subtracts nearly equal numbers, the first a
 * product of bf16 operands, so dq and dk carry bf16 rounding relative to |dP| rather than to
 * |dS| (a query with one key has dS = 0 exactly in fp32, and bf16 noise here). Measured on the
 * host emulation (exact bf16 rounding, fp32 accumulation): up to 1.02e-2 with dropout. The op's
 * output as defined, dqkv, is held to 1e-2 (measured there: at most 3e-3). */
#define TOL_DQK 2e-2

static const Backend *gpu16;   /* the bf16 table; shares memory with gpu (fp32) */

/* The bf16 result must not be the fp32 one: relative error against the fp32 CPU above 1e-7. */
static void check_not_fp32(const char *name, Buf *b, size_t n) {
    float *hc = malloc(n * sizeof(float) + 1), *hg = malloc(n * sizeof(float) + 1);
    cpu->to_host(hc, b->c, n * sizeof(float));
    gpu->to_host(hg, b->g, n * sizeof(float));
    double e = rel_err_f_f(hg, hc, n);
    n_checks++;
    printf("%-4s %-64s rel %.3g\n", e > 1e-7 ? "ok" : "FAIL", name, e);
    CHECK(e > 1e-7, "%s: bf16 result equals fp32 (rel %.3g): is the bf16 path used?", name, e);
    free(hc);
    free(hg);
}

static void test_linear_bf16(int N, int IC, int OC, int with_bias) {
    char name[128], n2[180];
    snprintf(name, sizeof name, "bf16 linear N=%d IC=%d OC=%d bias=%d", N, IC, OC, with_bias);
    if (!wanted(name)) return;
    Buf *inp = in_rand((size_t)N * IC, -1, 1), *w = in_rand((size_t)OC * IC, -0.5f, 0.5f);
    Buf *bias = with_bias ? in_rand(OC, -1, 1) : NULL;
    Buf *out = out_poison((size_t)N * OC, 4);   /* (N, OC) */
    cpu->linear_forward(FC(out), FC(inp), FC(w), bias ? FC(bias) : NULL, N, IC, OC);
    gpu16->linear_forward(F(out), F(inp), F(w), bias ? F(bias) : NULL, N, IC, OC);
    snprintf(n2, sizeof n2, "%s forward out", name);
    cmp_f(n2, out, (size_t)N * OC, TOL16);
    snprintf(n2, sizeof n2, "%s forward out differs from fp32", name);
    check_not_fp32(n2, out, (size_t)N * OC);

    Buf *dout = in_rand((size_t)N * OC, -1, 1);
    for (int from_zero = 0; from_zero < 2; from_zero++) {
        Buf *dinp, *dw, *db = NULL;   /* (N, IC), (OC, IC), (OC) */
        if (from_zero) {   /* dinp overwritten (poisoned first), dw and dbias from zero */
            float *z = calloc((size_t)(N > OC ? N : OC) * IC + OC + 1, sizeof(float));
            dinp = out_poison((size_t)N * IC, 4);
            dw = in_f(z, (size_t)OC * IC);
            if (with_bias) db = in_f(z, OC);
            free(z);
        } else {
            dinp = in_rand((size_t)N * IC, -1, 1);
            dw = in_rand((size_t)OC * IC, -1, 1);
            if (with_bias) db = in_rand(OC, -1, 1);
        }
        Buf *dinp_use = with_bias || from_zero ? dinp : NULL;   /* also dinp == NULL */
        cpu->linear_backward(dinp_use ? FC(dinp_use) : NULL, FC(dw), db ? FC(db) : NULL, FC(dout),
                             FC(inp), FC(w), N, IC, OC, !from_zero);
        gpu16->linear_backward(dinp_use ? F(dinp_use) : NULL, F(dw), db ? F(db) : NULL, F(dout),
                               F(inp), F(w), N, IC, OC, !from_zero);
        const char *how = from_zero ? "overwritten / from zero" : "+= prefilled";
        snprintf(n2, sizeof n2, "%s backward dinp %s", name, how);
        cmp_f(n2, dinp, (size_t)N * IC, TOL16);
        snprintf(n2, sizeof n2, "%s backward dw %s", name, how);
        cmp_f(n2, dw, (size_t)OC * IC, TOL16);
        if (db) {
            snprintf(n2, sizeof n2, "%s backward dbias %s", name, how);
            cmp_f(n2, db, OC, TOL16);
        }
    }
    free_all();
}

/* key_ramp: see in_qkv (0: none); its inputs are bf16 values */
static void test_attention_bf16(int B, int T, int NH, int HS, int causal, float p, int with_zero,
                                int key_ramp) {
    char name[160], n2[240], ramp[32] = "";
    if (key_ramp) snprintf(ramp, sizeof ramp, " keys x(1+j/%d)", key_ramp);
    /* where the bf16 tiles do not fit the GPU's shared memory (D = 128 on sm_86/89) the table
     * runs the fp32 FFMA kernels: held to the same tolerance, but not expected to differ from fp32 */
    const int tc = strncmp(gpu16->attention_kernel(HS), "bf16", 4) == 0;
    snprintf(name, sizeof name, "bf16 attention B=%d T=%d NH=%d HS=%d causal=%d p=%.1f%s%s", B, T,
             NH, HS, causal, p, ramp, tc ? "" : " [FFMA]");
    if (!wanted(name)) return;
    const int C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    const uint64_t seed = 199 + (uint64_t)T;
    int32_t *hl = make_lengths(B, T, with_zero);
    Buf *len = in_i(hl, B);
    Buf *qkv = in_qkv(B, T, C, key_ramp, key_ramp > 0);   /* (B, T, 3C) */

    Buf *out = out_poison(nout, 4), *lse = out_poison(nlse, 4);   /* (B, T, C), (B, NH, T) */
    cpu->attention_forward_fused(FC(out), FC(lse), FC(qkv), IC(len), B, T, C, NH, causal, p, seed);
    gpu16->attention_forward_fused(F(out), F(lse), F(qkv), I(len), B, T, C, NH, causal, p, seed);
    snprintf(n2, sizeof n2, "%s fused out", name);
    cmp_f(n2, out, nout, TOL16);
    snprintf(n2, sizeof n2, "%s fused lse", name);
    cmp_f(n2, lse, nlse, TOL16);
    if (tc) {
        snprintf(n2, sizeof n2, "%s fused out differs from fp32", name);
        check_not_fp32(n2, out, nout);
    } else {   /* the fp32 table's kernels: their bits */
        float *o32 = gpu->alloc(nout * 4), *l32 = gpu->alloc(nlse * 4);
        gpu->attention_forward_fused(o32, l32, F(qkv), I(len), B, T, C, NH, causal, p, seed);
        snprintf(n2, sizeof n2, "%s fused out = the fp32 table's", name);
        cmp_bits_gpu(n2, F(out), o32, nout * 4);
        snprintf(n2, sizeof n2, "%s fused lse = the fp32 table's", name);
        cmp_bits_gpu(n2, F(lse), l32, nlse * 4);
        gpu->free(o32);
        gpu->free(l32);
    }

    /* backward as in training: each side from its own forward's out and lse */
    Buf *o_in = out, *lse_in = lse;
    Buf *dout = in_rand(nout, -1, 1);
    Buf *dqkv = in_rand(nqkv, -1, 1);   /* += into pre-filled */
    cpu->attention_backward_fused(FC(dqkv), FC(dout), FC(o_in), FC(qkv), FC(lse_in), IC(len), B, T,
                                  C, NH, causal, p, seed);
    gpu16->attention_backward_fused(F(dqkv), F(dout), F(o_in), F(qkv), F(lse_in), I(len), B, T, C,
                                    NH, causal, p, seed);
    snprintf(n2, sizeof n2, "%s fused dqkv += prefilled", name);
    cmp_f(n2, dqkv, nqkv, TOL16);

    /* from zero: against the cpu from zero, per part (dq, dk, dv) and twice bitwise equal */
    float *z = calloc(nqkv + 1, sizeof(float));
    Buf *dz = in_f(z, nqkv);
    free(z);
    float *z2 = gpu->alloc(nqkv * 4);
    gpu->zero(z2, nqkv * 4);
    cpu->attention_backward_fused(FC(dz), FC(dout), FC(o_in), FC(qkv), FC(lse_in), IC(len), B, T, C,
                                  NH, causal, p, seed);
    gpu16->attention_backward_fused(F(dz), F(dout), F(o_in), F(qkv), F(lse_in), I(len), B, T, C, NH,
                                    causal, p, seed);
    gpu16->attention_backward_fused(z2, F(dout), F(o_in), F(qkv), F(lse_in), I(len), B, T, C, NH,
                                    causal, p, seed);
    snprintf(n2, sizeof n2, "%s fused dqkv from zero", name);
    cmp_f(n2, dz, nqkv, TOL16);
    float *hc = malloc(nqkv * 4 + 1), *hg = malloc(nqkv * 4 + 1);
    cpu->to_host(hc, dz->c, nqkv * 4);
    gpu->to_host(hg, dz->g, nqkv * 4);
    static const char *part[3] = {"dq", "dk", "dv"};
    float *pc = malloc(nout * 4 + 1), *pg = malloc(nout * 4 + 1);   /* one part, (B, T, C) */
    for (int k = 0; k < 3; k++) {
        for (size_t r = 0; r < (size_t)B * T; r++) {
            memcpy(pc + r * C, hc + r * 3 * C + (size_t)k * C, (size_t)C * 4);
            memcpy(pg + r * C, hg + r * 3 * C + (size_t)k * C, (size_t)C * 4);
        }
        double e = rel_err_f_f(pg, pc, nout);
        const double tol = k < 2 ? TOL_DQK : TOL16;
        n_checks++;
        snprintf(n2, sizeof n2, "%s fused %s from zero", name, part[k]);
        printf("%-4s %-64s rel %.3g\n", e < tol ? "ok" : "FAIL", n2, e);
        CHECK(e < tol, "%s: relative error %.3g >= %.1g", n2, e, tol);
    }
    free(pc);
    free(pg);
    free(hc);
    free(hg);
    snprintf(n2, sizeof n2, "%s fused dqkv deterministic", name);
    cmp_bits_gpu(n2, F(dz), z2, nqkv * 4);
    gpu->free(z2);
    free(hl);
    free_all();
}

/* The bf16 fused attention with inputs off the 16-byte alignment of float4 loads */
static void test_attention_bf16_misaligned(int B, int T, int NH, int HS, int causal, float p) {
    char name[160];
    snprintf(name, sizeof name, "bf16 attention B=%d T=%d NH=%d HS=%d causal=%d p=%.1f", B, T, NH, HS,
             causal, p);
    if (!wanted(name)) return;
    const int C = NH * HS;
    int32_t *hl = make_lengths(B, T, 0);
    Buf *len = in_i(hl, B);
    Buf *qkv = in_qkv(B, T, C, 0, 0);   /* (B, T, 3C) */
    cmp_attention_misaligned(name, gpu16, F(qkv), I(len), B, T, C, NH, causal, p, 7 + (uint64_t)T);
    free(hl);
    free_all();
}

int main(void) {
    char why[256] = "";
    gpu = mha_cuda_backend(0, 0, why, sizeof why);
    if (!gpu) return test_skip(why[0] ? why : "no CUDA device visible");
    gpu16 = mha_cuda_backend(0, 1, why, sizeof why);
    if (!gpu16) return test_skip(why);
    CHECK(gpu16 != gpu, "the bf16 table is the fp32 one");
    cpu = mha_cpu_backend(1);
    filter = getenv("MHA_TEST_FILTER");
    if (filter && !*filter) filter = NULL;
    const char *emu_env = getenv("MHA_TEST_EMU");
    const int emu = emu_env && *emu_env && strcmp(emu_env, "0") != 0;

    test_linear_bf16(37, 24, 40, 1);
    test_linear_bf16(37, 24, 40, 0);
    test_linear_bf16(5, 3, 1, 1);
    test_linear_bf16(300, 96, 130, 1);
    if (!emu) {
        test_linear_bf16(1024, 128, 512, 1);   /* the model's feed-forward shapes */
        test_linear_bf16(4096, 512, 128, 1);
    }

    /* which kernel runs: bf16 WMMA where its tiles fit, the fp32 FFMA kernels where they do not
     * (heads of 65-128 on GPUs that allow 99 KiB of shared memory per block: either on a real
     * GPU; on the emulation, FFMA exactly when it poses as one, MHA_EMU_GPU=sm_86 or sm_89) */
    {
        static const char bf16[] = "bf16 tensor cores",
                          ffma[] = "FFMA: the bf16 tiles do not fit this GPU's shared memory";
        const char *pose = getenv("MHA_EMU_GPU");
        const int small_smem = pose && (!strcmp(pose, "sm_86") || !strcmp(pose, "sm_89"));
        const char *k64 = gpu16->attention_kernel(64), *k100 = gpu16->attention_kernel(100);
        n_checks++;
        const int ok = !strcmp(k64, bf16) &&
                       (emu ? !strcmp(k100, small_smem ? ffma : bf16) : !strcmp(k100, bf16) || !strcmp(k100, ffma));
        printf("%-4s bf16 attention kernels: HS 64 '%s', HS 100 '%s'\n", ok ? "ok" : "FAIL", k64, k100);
        CHECK(ok, "bf16 attention kernels: HS 64 '%s', HS 100 '%s'", k64, k100);
    }

    /* every head-size kernel (D = 16, 32, 64, 128, with padded columns), several query and key
     * tiles, partial tiles, lengths 0 and 1, causal, dropout */
    test_attention_bf16(4, 64, 2, 16, 0, 0.0f, 1, 0);
    test_attention_bf16(3, 130, 3, 8, 1, 0.0f, 0, 0);
    test_attention_bf16(3, 100, 2, 32, 0, 0.1f, 1, 0);
    test_attention_bf16(2, 70, 1, 64, 1, 0.1f, 0, 0);
    test_attention_bf16(2, 70, 1, 100, 0, 0.0f, 0, 0);
    test_attention_bf16(2, 70, 3, 6, 1, 0.1f, 0, 0);   /* HS 6: tiles loaded a column at a time */
    /* keys scaled up to 9.3x along the sequence (bf16 values): the forward moves each row's
     * reference maximum and rescales O (planted as a no-op, the rescaling fails both) */
    test_attention_bf16(2, 200, 2, 16, 0, 0.0f, 0, 24);
    test_attention_bf16(1, 200, 2, 64, 0, 0.1f, 0, 24);
    test_attention_bf16_misaligned(2, 100, 2, 64, 0, 0.1f);
    test_attention_bf16_misaligned(3, 70, 2, 16, 1, 0.0f);
    if (!emu) {
        test_attention_bf16(2, 50, 2, 48, 1, 0.0f, 0, 0);
        test_attention_bf16(2, 70, 1, 128, 1, 0.1f, 0, 0);
        static const int Ts[3] = {7, 64, 200}, HSs[3] = {4, 16, 64};
        for (int ti = 0; ti < 3; ti++)
            for (int hi = 0; hi < 3; hi++)
                for (int causal = 0; causal < 2; causal++)
                    for (int drop = 0; drop < 2; drop++)
                        test_attention_bf16(3 + (ti == 1), Ts[ti], 2, HSs[hi], causal,
                                            drop ? 0.1f : 0.0f, ti == 1, 0);
        test_attention_bf16(8, 512, 8, 64, 0, 0.0f, 1, 0);   /* many tiles, the benchmark's head size */
        test_attention_bf16(2, 300, 4, 128, 1, 0.1f, 0, 0);
    }

    printf("%d checks\n", n_checks);
    return test_finish("test_cuda_bf16");
}
