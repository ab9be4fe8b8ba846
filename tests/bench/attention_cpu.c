/* tests/bench/attention_cpu.c: speed of the CPU backend's fused attention (forward, and
 * forward + backward), fp32 and bf16, on padded batches; for development, not a test.
 *
 * usage: attention_cpu [--threads N] [--C 128] [--heads 4] [--T 128] [--batch 64]
 *                      [--min-len L] [--seconds 1] [--backward 0|1] [--precision fp32,bf16]
 *
 * Lengths are uniform in [min-len, T] (default T/2): the same draw for every run. Work is
 * counted on real tokens only: forward 4 L^2 C FLOPs per example (q k^T and P v), backward
 * 2.5x that (the recomputed scores, dP, dV, dQ, dK). Each configuration: a warm-up call, then
 * repeated until --seconds have passed; the best of three such runs is printed. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/backend.h"
#include "tests/bench/bench_util.h"

static float *alloc_fill(size_t n, unsigned seed) { return bench_fill(n, seed, 2.0f, "attention_cpu"); }

static int arg_int(int argc, char **argv, const char *name, int def) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return atoi(argv[i + 1]);
    return def;
}

static const char *arg_str(int argc, char **argv, const char *name, const char *def) {
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], name)) return argv[i + 1];
    return def;
}

int main(int argc, char **argv) {
    const int threads = arg_int(argc, argv, "--threads", 0), C = arg_int(argc, argv, "--C", 128);
    const int NH = arg_int(argc, argv, "--heads", 4), T = arg_int(argc, argv, "--T", 128);
    const int B = arg_int(argc, argv, "--batch", 64), bwd = arg_int(argc, argv, "--backward", 1);
    const int lmin = arg_int(argc, argv, "--min-len", T / 2 > 0 ? T / 2 : 1);
    const double seconds = atof(arg_str(argc, argv, "--seconds", "1"));
    const char *precisions = arg_str(argc, argv, "--precision", "fp32,bf16");
    if (C <= 0 || NH <= 0 || C % NH || T <= 0 || B <= 0 || lmin < 1 || lmin > T) {
        fprintf(stderr, "attention_cpu: bad sizes (C %d, heads %d, T %d, batch %d, min-len %d)\n", C,
                NH, T, B, lmin);
        return 2;
    }
    int32_t *len = malloc((size_t)B * sizeof *len);
    unsigned s = 12345;
    double flops_fwd = 0;
    for (int b = 0; b < B; b++) {
        s = s * 1664525u + 1013904223u;
        len[b] = lmin + (int)((s >> 8) % (unsigned)(T - lmin + 1));
        flops_fwd += 4.0 * len[b] * len[b] * C;
    }
    float *qkv = alloc_fill((size_t)B * T * 3 * C, 1), *dout = alloc_fill((size_t)B * T * C, 2);
    float *out = alloc_fill((size_t)B * T * C, 3), *lse = alloc_fill((size_t)B * NH * T, 4);
    float *dqkv = alloc_fill((size_t)B * T * 3 * C, 5);
    printf("| precision | pass | B | T | C | heads | ms | GFLOP/s (real tokens) |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
    char why[256];
    for (int pass = 0; pass < 2; pass++) {
        const char *pname = pass ? "bf16" : "fp32";
        if (!strstr(precisions, pname)) continue;
        const Backend *be = pass ? mha_cpu_backend_bf16(threads, why, sizeof why) : mha_cpu_backend(threads);
        if (!be) {
            printf("| %s | skipped: %s |||||||\n", pname, why);
            continue;
        }
        for (int with_bwd = 0; with_bwd <= bwd; with_bwd++) {
            double best = 1e30;
            for (int run = 0; run < 4; run++) {   /* run 0: warm-up */
                int reps = 0;
                const double t0 = bench_now();
                do {
                    be->attention_forward_fused(out, lse, qkv, len, B, T, C, NH, 0, 0.0f, 7);
                    if (with_bwd)
                        be->attention_backward_fused(dqkv, dout, out, qkv, lse, len, B, T, C, NH, 0, 0.0f, 7);
                    reps++;
                } while (run > 0 && bench_now() - t0 < seconds / 3);
                const double per = (bench_now() - t0) / reps;
                if (run > 0 && per < best) best = per;
            }
            const double fl = flops_fwd * (with_bwd ? 3.5 : 1.0);
            printf("| %s | %s | %d | %d | %d | %d | %.3f | %.1f |\n", pname,
                   with_bwd ? "forward+backward" : "forward", B, T, C, NH, best * 1e3, fl / best * 1e-9);
        }
    }
    free(len);
    free(qkv);
    free(dout);
    free(out);
    free(lse);
    free(dqkv);
    return 0;
}
