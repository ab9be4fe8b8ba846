/* tests/bench/sgemm_ceiling.c: the matrix-product ceiling for the CPU backend: cblas_sgemm
 * GFLOP/s with a given number of threads, for the shapes the model's linear layers use
 * (rows N = B*T, C = d_model, F = d_ff), forward and both backward products, plus the
 * per-head attention products. Built for scripts/bench-train; not a test.
 *
 * usage: sgemm_ceiling [--threads N] [--C 128] [--F 512] [--heads 4] [--rows 1920,4096]
 *                      [--batch 32] [--seconds 0.25] [--json FILE]
 *
 * Linear layer y = x W^T, x (N, in), W (out, in), row-major like the model:
 *   forward     y  = x  W^T : sgemm(NoTrans, Trans)   M=N   N=out K=in
 *   backward dx     = dy W   : sgemm(NoTrans, NoTrans) M=N   N=in  K=out
 *   backward dW    += dy^T x : sgemm(Trans, NoTrans)   M=out N=in  K=N
 * Attention, one (batch, head): scores = q k^T (T, HS)x(HS, T); y = P v (T, T)x(T, HS),
 * with T = N / B (B = --batch), timed as B*NH separate calls, as a per-head loop makes them.
 * Each shape: one warm-up call, then repeated until --seconds have passed; the best of
 * three such runs is reported. The means: the plain mean of the GFLOP/s column and the
 * time-weighted one (all FLOPs / all time: what a model made of just these products in
 * these proportions would reach). */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "tests/bench/bench_util.h"

static float *alloc_fill(size_t n, unsigned seed) { return bench_fill(n, seed, 1.0f, "sgemm_ceiling"); }

typedef struct {
    char name[64];
    char op[24];
    int M, N, K, calls;          /* calls: independent products per measured unit */
    double gflops, flops, secs;  /* best GFLOP/s; FLOPs and seconds of one unit */
} Row;

/* One unit = `calls` sgemm calls of (M, N, K) with the given transposes. */
static void run_unit(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, int calls,
                     const float *A, const float *Bm, float *Cm, float beta) {
    int lda = ta == CblasNoTrans ? K : M;
    int ldb = tb == CblasNoTrans ? N : K;
    size_t sa = (size_t)M * K, sb = (size_t)K * N, sc = (size_t)M * N;
    for (int c = 0; c < calls; c++)
        cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A + (size_t)c * sa, lda, Bm + (size_t)c * sb, ldb,
                    beta, Cm + (size_t)c * sc, N);
}

static void measure(Row *r, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, float beta, double seconds) {
    size_t sa = (size_t)r->M * r->K * r->calls, sb = (size_t)r->K * r->N * r->calls,
           sc = (size_t)r->M * r->N * r->calls;
    float *A = alloc_fill(sa, 1), *Bm = alloc_fill(sb, 2), *Cm = alloc_fill(sc, 3);
    r->flops = 2.0 * r->M * r->N * (double)r->K * r->calls;
    run_unit(ta, tb, r->M, r->N, r->K, r->calls, A, Bm, Cm, beta);  /* warm-up */
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        long iters = 0;
        double t0 = bench_now(), t;
        do {
            run_unit(ta, tb, r->M, r->N, r->K, r->calls, A, Bm, Cm, beta);
            iters++;
            t = bench_now();
        } while (t - t0 < seconds / 3.0);
        double g = r->flops * iters / (t - t0) / 1e9;
        if (g > best) best = g;
    }
    r->gflops = best;
    r->secs = r->flops / (best * 1e9);
    free(A);
    free(Bm);
    free(Cm);
}

int main(int argc, char **argv) {
    int threads = 2, C = 128, F = 512, NH = 4, Bsz = 32;
    double seconds = 0.25;
    const char *rows_arg = "1920,4096", *json_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) { fprintf(stderr, "sgemm_ceiling: %s needs a value\n", a); return 2; }
        const char *v = argv[++i];
        if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--C")) C = atoi(v);
        else if (!strcmp(a, "--F")) F = atoi(v);
        else if (!strcmp(a, "--heads")) NH = atoi(v);
        else if (!strcmp(a, "--batch")) Bsz = atoi(v);
        else if (!strcmp(a, "--rows")) rows_arg = v;
        else if (!strcmp(a, "--seconds")) seconds = atof(v);
        else if (!strcmp(a, "--json")) json_path = v;
        else { fprintf(stderr, "sgemm_ceiling: unknown option %s\n", a); return 2; }
    }
    if (threads < 1 || C < 1 || F < 1 || NH < 1 || C % NH || Bsz < 1 || seconds <= 0) {
        fprintf(stderr, "sgemm_ceiling: bad arguments\n");
        return 2;
    }
    openblas_set_num_threads(threads);
    int HS = C / NH;

    int nrows[8], n_n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", rows_arg);
    for (char *tok = strtok(buf, ","); tok && n_n < 8; tok = strtok(NULL, ",")) nrows[n_n++] = atoi(tok);

    struct { const char *name; int in, out; } lin[4] = {
        {"qkv (C->3C)", C, 3 * C}, {"proj (C->C)", C, C}, {"fc1 (C->F)", C, F}, {"fc2 (F->C)", F, C}};
    Row rows[64];
    int nr = 0;
    printf("cblas_sgemm ceiling: %d thread(s) (openblas_set_num_threads), C=%d F=%d heads=%d batch=%d\n\n",
           threads, C, F, NH, Bsz);
    printf("| product | op | M | N | K | calls | GFLOP/s |\n|---|---|---:|---:|---:|---:|---:|\n");
    for (int q = 0; q < n_n; q++) {
        int N = nrows[q];
        for (int l = 0; l < 4; l++) {
            for (int v = 0; v < 3; v++) {
                Row *r = &rows[nr++];
                memset(r, 0, sizeof *r);
                r->calls = 1;
                CBLAS_TRANSPOSE ta = CblasNoTrans, tb = CblasNoTrans;
                float beta = 0.0f;
                if (v == 0) { r->M = N; r->N = lin[l].out; r->K = lin[l].in; tb = CblasTrans; snprintf(r->op, sizeof r->op, "fwd x W^T"); }
                else if (v == 1) { r->M = N; r->N = lin[l].in; r->K = lin[l].out; snprintf(r->op, sizeof r->op, "bwd dy W"); }
                else { r->M = lin[l].out; r->N = lin[l].in; r->K = N; ta = CblasTrans; beta = 1.0f; snprintf(r->op, sizeof r->op, "bwd dy^T x"); }
                snprintf(r->name, sizeof r->name, "%s, N=%d", lin[l].name, N);
                measure(r, ta, tb, beta, seconds);
                printf("| %s | %s | %d | %d | %d | %d | %.1f |\n", r->name, r->op, r->M, r->N, r->K, r->calls, r->gflops);
                fflush(stdout);
            }
        }
        /* attention per (example, head): B examples of T = N/B positions, NH heads each */
        int T = N / Bsz > 0 ? N / Bsz : 1, calls = Bsz * NH;
        Row *r = &rows[nr++];
        memset(r, 0, sizeof *r);
        r->M = T; r->N = T; r->K = HS; r->calls = calls;
        snprintf(r->name, sizeof r->name, "attn q k^T, T=%d HS=%d", T, HS);
        snprintf(r->op, sizeof r->op, "per head");
        measure(r, CblasNoTrans, CblasTrans, 0.0f, seconds);
        printf("| %s | %s | %d | %d | %d | %d | %.1f |\n", r->name, r->op, r->M, r->N, r->K, r->calls, r->gflops);
        r = &rows[nr++];
        memset(r, 0, sizeof *r);
        r->M = T; r->N = HS; r->K = T; r->calls = calls;
        snprintf(r->name, sizeof r->name, "attn P v, T=%d HS=%d", T, HS);
        snprintf(r->op, sizeof r->op, "per head");
        measure(r, CblasNoTrans, CblasNoTrans, 0.0f, seconds);
        printf("| %s | %s | %d | %d | %d | %d | %.1f |\n", r->name, r->op, r->M, r->N, r->K, r->calls, r->gflops);
        fflush(stdout);
    }
    double sum = 0, lin_sum = 0, flops = 0, secs = 0, lin_flops = 0, lin_secs = 0;
    int n_lin = 0;
    for (int i = 0; i < nr; i++) {
        sum += rows[i].gflops;
        flops += rows[i].flops;
        secs += rows[i].secs;
        if (rows[i].calls == 1) {
            lin_sum += rows[i].gflops;
            lin_flops += rows[i].flops;
            lin_secs += rows[i].secs;
            n_lin++;
        }
    }
    printf("\nmean GFLOP/s over all %d shapes: %.1f (time-weighted: %.1f)\n", nr, sum / nr, flops / secs / 1e9);
    printf("mean GFLOP/s over the %d linear-layer shapes: %.1f (time-weighted: %.1f)\n", n_lin,
           lin_sum / n_lin, lin_flops / lin_secs / 1e9);
    if (json_path) {
        FILE *f = fopen(json_path, "w");
        if (!f) { fprintf(stderr, "sgemm_ceiling: cannot write %s\n", json_path); return 1; }
        fprintf(f, "{\"threads\": %d, \"C\": %d, \"F\": %d, \"heads\": %d, \"batch\": %d, \"rows\": [", threads, C, F, NH, Bsz);
        for (int i = 0; i < nr; i++)
            fprintf(f, "%s\n  {\"product\": \"%s\", \"op\": \"%s\", \"M\": %d, \"N\": %d, \"K\": %d, \"calls\": %d, \"gflops\": %.3f}",
                    i ? "," : "", rows[i].name, rows[i].op, rows[i].M, rows[i].N, rows[i].K, rows[i].calls, rows[i].gflops);
        fprintf(f, "],\n \"mean_gflops\": %.3f, \"time_weighted_gflops\": %.3f,\n"
                   " \"linear_mean_gflops\": %.3f, \"linear_time_weighted_gflops\": %.3f}\n",
                sum / nr, flops / secs / 1e9, lin_sum / n_lin, lin_flops / lin_secs / 1e9);
        fclose(f);
    }
    return 0;
}
