/* tests/cuda/bench_attention.cu: times our attention (fused fp32 or bf16, materialising fp32) the way
 * scripts/bench-attention-gpu.py times PyTorch's SDPA, and dumps small cases for that script
 * to check against a float64 reference.
 *
 *   bench_attention [--tokens 32768] [--hs 64] [--nh 8] [--T 128,512,2048,8192] [--causal 0|1]
 *                   [--dtype fp32,bf16] [--input padded,unpadded] [--no-math] [--no-alt] [--dump FILE]
 *                   [--budget-ms 400]
 *
 * --dtype (default fp32): fp32 runs the fp32 table's fused attention (and the materialising
 * path) as impl=mha-fused, on the kernel the model uses (kernel=tf32x3 for HS <= 64 on sm_80+,
 * else simt; see kernels/cuda/mha_cuda.h), and the other fp32 kernel too where it can run, as
 * impl=mha-fused-simt or mha-fused-tf32x3 (--no-alt skips it); bf16 runs the mixed-precision
 * fused kernel (train.precision = "bf16": bf16 WMMA products, fp32 softmax; inputs and
 * outputs fp32 as in training). The materialising path is fp32 only.
 *
 * Per T: B = tokens / T examples, lengths[b] = T/2 + floor(u * (T - T/2 + 1)) with
 * u = mha_rng_uniform(7, b) (the Python side computes the same lengths). FLOPs count real
 * tokens only: forward 4 * L^2 * HS per (example, head) (L(L+1)/2 instead of L^2 when causal),
 * backward 2.5x forward (FlashAttention's convention), so fwd+bwd = 3.5x forward.
 * --input (default padded): unpadded also (or only) times every length = T, the case PyTorch's
 * FLASH kernel handles (the materialising path runs on padded input only).
 * Prints one line per (impl, dtype, input, T):
 *   RESULT impl=mha-fused dtype=fp32|bf16 input=padded|unpadded kernel=tf32x3|simt|wmma-bf16
 *          T=.. B=.. NH=.. HS=.. causal=.. real_tokens=.. fwd_ms=.. fwd_tflops=.. fwdbwd_ms=..
 *          fwdbwd_tflops=.. peak_mib=..
 * --dump FILE writes the float64 check's cases, once per fp32 kernel (a line per case says
 * which kernel its record holds).
 * Exits 77 when no CUDA device is visible.
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "kernels/backend.h"
#include "kernels/cuda/mha_cuda.h"
#include "kernels/rng.h"
}

#define CK(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
    fprintf(stderr, "bench_attention: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
            cudaGetErrorString(e_)); exit(1); } } while (0)

static const Backend *be;     /* fp32: memory, the dump, the materialising path */
static const Backend *be16;   /* mixed precision (--dtype bf16) */

struct Shape { int B, T, NH, HS, causal; };

__global__ void fill_kernel(float *x, size_t n, uint64_t seed, float lo, float hi) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = lo + (hi - lo) * mha_rng_uniform(seed, i);
}

static void fill(float *x, size_t n, uint64_t seed, float lo, float hi) {
    size_t blocks = (n + 255) / 256;
    if (blocks > 65535 * 4) blocks = 65535 * 4;
    fill_kernel<<<(unsigned)blocks, 256>>>(x, n, seed, lo, hi);
    CK(cudaGetLastError());
}

static void *dalloc(size_t bytes) {
    void *p = be->alloc(bytes);
    if (!p) {
        fprintf(stderr, "bench_attention: out of device memory allocating %.1f MiB\n",
                bytes / 1048576.0);
        exit(1);
    }
    return p;
}

static std::vector<int32_t> make_lengths(int B, int T) {
    std::vector<int32_t> len(B);
    for (int b = 0; b < B; b++) {
        int lo = T / 2;
        int l = lo + (int)(mha_rng_uniform(7, (uint64_t)b) * (float)(T - lo + 1));
        len[b] = l > T ? T : (l < 1 ? 1 : l);
    }
    return len;
}

/* Mean milliseconds of fn over enough runs to fill budget_ms (at least 3, at most 50). */
template <class Fn>
static double time_ms(Fn fn, double budget_ms) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    fn();   /* warm-up (kernel attributes, scratch allocation) */
    CK(cudaDeviceSynchronize());
    CK(cudaEventRecord(a));
    fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float once = 0;
    CK(cudaEventElapsedTime(&once, a, b));
    int iters = once > 0 ? (int)(budget_ms / once) : 50;
    iters = iters < 3 ? 3 : (iters > 50 ? 50 : iters);
    CK(cudaEventRecord(a));
    for (int i = 0; i < iters; i++) fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float total = 0;
    CK(cudaEventElapsedTime(&total, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return total / iters;
}

/* ---- dump of small cases for the float64 check in scripts/bench-attention-gpu.py ---- */

static void write_f(FILE *f, const float *dev, size_t n) {
    std::vector<float> h(n);
    be->to_host(h.data(), dev, n * sizeof(float));
    fwrite(h.data(), sizeof(float), n, f);
}

static void dump_case(FILE *f, int B, int T, int NH, int HS, int causal, float p, uint64_t seed) {
    const int C = NH * HS;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    const size_t natt = (size_t)B * NH * T * T;
    std::vector<int32_t> len = make_lengths(B, T);
    if (B > 1) len[1] = 1;
    int32_t *dlen = (int32_t *)dalloc(B * sizeof(int32_t));
    be->to_device(dlen, len.data(), B * sizeof(int32_t));
    float *qkv = (float *)dalloc(nqkv * 4), *dout = (float *)dalloc(nout * 4);
    float *out = (float *)dalloc(nout * 4), *lse = (float *)dalloc(nlse * 4);
    float *dqkv = (float *)dalloc(nqkv * 4), *outm = (float *)dalloc(nout * 4);
    float *dqkvm = (float *)dalloc(nqkv * 4), *att = (float *)dalloc(natt * 4);
    float *datt = (float *)dalloc(natt * 4);
    fill(qkv, nqkv, seed, -1.5f, 1.5f);
    fill(dout, nout, seed + 1, -1.0f, 1.0f);
    be->zero(dqkv, nqkv * 4);
    be->zero(dqkvm, nqkv * 4);
    be->attention_forward_fused(out, lse, qkv, dlen, B, T, C, NH, causal, p, seed);
    be->attention_backward_fused(dqkv, dout, out, qkv, lse, dlen, B, T, C, NH, causal, p, seed);
    be->attention_forward_math(outm, att, qkv, dlen, B, T, C, NH, causal, p, seed);
    be->attention_backward_math(dqkvm, datt, dout, qkv, att, dlen, B, T, C, NH, causal, p, seed);
    be->sync();
    int32_t hdr[5] = {B, T, C, NH, causal};
    fwrite("MHAC", 1, 4, f);
    fwrite(hdr, sizeof(int32_t), 5, f);
    fwrite(&p, sizeof(float), 1, f);
    fwrite(&seed, sizeof(uint64_t), 1, f);
    fwrite(len.data(), sizeof(int32_t), B, f);
    write_f(f, qkv, nqkv);
    write_f(f, dout, nout);
    write_f(f, out, nout);
    write_f(f, lse, nlse);
    write_f(f, dqkv, nqkv);
    write_f(f, outm, nout);
    write_f(f, dqkvm, nqkv);
    void *all[] = {dlen, qkv, dout, out, lse, dqkv, outm, dqkvm, att, datt};
    for (void *x : all) be->free(x);
}

/* The kernel the fp32 fused attention runs for heads of size HS under setting `kind`. */
static const char *fp32_kernel_name(int kind, int HS) {
    return mha_cuda_fp32_attention_kernel(kind, HS) == MHA_CUDA_ATTN_TF32X3 ? "tf32x3" : "simt";
}

/* The two fp32 settings, the default first; callers skip the second where it runs the same
 * kernel as the first (large heads, or a GPU without tf32x3). */
static std::vector<int> fp32_kernels(void) {
    const int k0 = mha_cuda_fp32_attention();
    return {k0, k0 == MHA_CUDA_ATTN_TF32X3 ? MHA_CUDA_ATTN_SIMT : MHA_CUDA_ATTN_TF32X3};
}

static int write_dump(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        fprintf(stderr, "bench_attention: cannot write %s\n", path);
        return 1;
    }
    /* the last: T = 2048, where tensor-core accumulation (truncating on some GPUs) has run
     * through 3 * 2048 / 8 products of each output */
    static const Shape cases[6] = {{3, 77, 2, 64, 0}, {4, 130, 3, 16, 1}, {2, 33, 2, 128, 0},
                                   {3, 200, 2, 4, 1}, {2, 300, 4, 32, 0}, {1, 2048, 2, 64, 0}};
    static const float ps[6] = {0.0f, 0.1f, 0.1f, 0.0f, 0.2f, 0.0f};
    const int k0 = mha_cuda_fp32_attention();
    int n = 0;
    for (int kind : fp32_kernels()) {
        mha_cuda_set_fp32_attention(kind);
        for (int c = 0; c < 6; c++) {
            const Shape &s = cases[c];
            if (kind != k0 && strcmp(fp32_kernel_name(kind, s.HS), fp32_kernel_name(k0, s.HS)) == 0)
                continue;   /* the same kernel as in the first pass */
            dump_case(f, s.B, s.T, s.NH, s.HS, s.causal, ps[c], 11 + c);
            printf("dumped case %d: B=%d T=%d NH=%d HS=%d causal=%d kernel=%s\n", n++, s.B, s.T, s.NH,
                   s.HS, s.causal, fp32_kernel_name(kind, s.HS));
        }
    }
    mha_cuda_set_fp32_attention(k0);
    fclose(f);
    printf("dumped %d attention cases to %s\n", n, path);
    return 0;
}

/* ---- benchmark ---- */

static void report(const char *impl, const char *dtype, const char *input, const char *kernel, int T,
                   int B, int NH, int HS, int causal, long long real, double flops_fwd, double fwd_ms,
                   double fb_ms, double peak_mib) {
    printf("RESULT impl=%s dtype=%s input=%s kernel=%s T=%d B=%d NH=%d HS=%d causal=%d real_tokens=%lld "
           "fwd_ms=%.4f fwd_tflops=%.2f fwdbwd_ms=%.4f fwdbwd_tflops=%.2f peak_mib=%.1f\n",
           impl, dtype, input, kernel, T, B, NH, HS, causal, real, fwd_ms, flops_fwd / (fwd_ms * 1e9),
           fb_ms, 3.5 * flops_fwd / (fb_ms * 1e9), peak_mib);
    fflush(stdout);
}

static std::vector<std::string> split_commas(const std::string &s) {
    std::vector<std::string> out;
    for (size_t p = 0; p < s.size();) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        if (q > p) out.push_back(s.substr(p, q - p));
        p = q + 1;
    }
    return out;
}

/* Times the fused kernel in every dtype (and the materialising path in fp32 on padded input)
 * for one T and one kind of input, printing a RESULT line each. */
static void bench_case(const Shape &s, bool unpadded, const std::vector<std::string> &dlist,
                       bool do_math, bool do_alt, double budget) {
    const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, causal = s.causal, C = NH * HS;
    const char *input = unpadded ? "unpadded" : "padded";
    std::vector<int32_t> len = unpadded ? std::vector<int32_t>(B, T) : make_lengths(B, T);
    long long real = 0;
    double flops = 0;
    for (int b = 0; b < B; b++) {
        double L = len[b];
        real += len[b];
        flops += 4.0 * HS * NH * (causal ? L * (L + 1) / 2 : L * L);
    }
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    mha_cuda_reset_peak();
    size_t base = mha_cuda_bytes_in_use();
    int32_t *dlen = (int32_t *)dalloc(B * sizeof(int32_t));
    be->to_device(dlen, len.data(), B * sizeof(int32_t));
    float *qkv = (float *)dalloc(nqkv * 4), *dout = (float *)dalloc(nout * 4);   /* (B, T, 3C), (B, T, C) */
    float *out = (float *)dalloc(nout * 4), *lse = (float *)dalloc(nlse * 4);    /* (B, T, C), (B, NH, T) */
    float *dqkv = (float *)dalloc(nqkv * 4);
    fill(qkv, nqkv, 1, -1.5f, 1.5f);
    fill(dout, nout, 2, -1.0f, 1.0f);
    be->zero(dqkv, nqkv * 4);
    /* each (dtype, kernel) to time: impl name, table, fp32 kernel (-1: bf16) */
    struct Run { std::string impl, dtype; const Backend *table; int kind; };
    std::vector<Run> runs;
    const int k0 = mha_cuda_fp32_attention();
    for (const std::string &d : dlist) {
        if (d == "bf16") {
            runs.push_back({"mha-fused", d, be16, -1});
            continue;
        }
        for (int kind : fp32_kernels()) {
            if (kind == k0) runs.push_back({"mha-fused", d, be, kind});
            else if (do_alt && strcmp(fp32_kernel_name(kind, HS), fp32_kernel_name(k0, HS)) != 0)
                runs.push_back({std::string("mha-fused-") + fp32_kernel_name(kind, HS), d, be, kind});
        }
    }
    for (const Run &r : runs) {
        if (r.kind >= 0) mha_cuda_set_fp32_attention(r.kind);
        mha_cuda_reset_peak();
        double f_ms = time_ms([&] {
            r.table->attention_forward_fused(out, lse, qkv, dlen, B, T, C, NH, causal, 0.0f, 0);
        }, budget);
        double fb_ms = time_ms([&] {
            r.table->attention_forward_fused(out, lse, qkv, dlen, B, T, C, NH, causal, 0.0f, 0);
            r.table->attention_backward_fused(dqkv, dout, out, qkv, lse, dlen, B, T, C, NH, causal, 0.0f, 0);
        }, budget);
        /* the bf16 table runs FFMA where its tiles do not fit the GPU (D = 128 on 99 KiB GPUs) */
        const char *kernel = r.kind >= 0 ? fp32_kernel_name(r.kind, HS)
                           : strncmp(r.table->attention_kernel(HS), "bf16", 4) == 0 ? "wmma-bf16" : "simt";
        report(r.impl.c_str(), r.dtype.c_str(), input, kernel,
               T, B, NH, HS, causal, real, flops, f_ms, fb_ms, (mha_cuda_peak_bytes() - base) / 1048576.0);
        mha_cuda_set_fp32_attention(k0);
    }

    const bool fp32_listed = std::find(dlist.begin(), dlist.end(), "fp32") != dlist.end();
    if (do_math && fp32_listed && !unpadded) {
        const size_t natt = (size_t)B * NH * T * T;
        size_t free_b = 0, total_b = 0;
        CK(cudaMemGetInfo(&free_b, &total_b));
        if (2.2 * natt * 4 > (double)free_b) {
            printf("NOTE math path skipped at T=%d: needs %.1f GiB\n", T, 2.0 * natt * 4 / 1073741824.0);
        } else {
            mha_cuda_reset_peak();
            float *att = (float *)dalloc(natt * 4), *datt = (float *)dalloc(natt * 4);   /* (B, NH, T, T) */
            double mf = time_ms([&] {
                be->attention_forward_math(out, att, qkv, dlen, B, T, C, NH, causal, 0.0f, 0);
            }, budget);
            double mfb = time_ms([&] {
                be->attention_forward_math(out, att, qkv, dlen, B, T, C, NH, causal, 0.0f, 0);
                be->attention_backward_math(dqkv, datt, dout, qkv, att, dlen, B, T, C, NH, causal,
                                            0.0f, 0);
            }, budget);
            report("mha-math", "fp32", input, "cublas", T, B, NH, HS, causal, real, flops, mf, mfb,
                   (mha_cuda_peak_bytes() - base) / 1048576.0);
            be->free(att);
            be->free(datt);
        }
    }
    void *all[] = {dlen, qkv, dout, out, lse, dqkv};
    for (void *x : all) be->free(x);
}

int main(int argc, char **argv) {
    long long tokens = 32768;
    int HS = 64, NH = 8, causal = 0, do_math = 1, do_alt = 1;
    double budget = 400;
    std::string Ts = "128,512,2048,8192", dtypes = "fp32", inputs = "padded";
    const char *dump = nullptr;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        auto next = [&](void) -> const char * {
            if (i + 1 >= argc) {
                fprintf(stderr, "bench_attention: %s needs a value\n", a.c_str());
                exit(2);
            }
            return argv[++i];
        };
        if (a == "--tokens") tokens = atoll(next());
        else if (a == "--hs") HS = atoi(next());
        else if (a == "--nh") NH = atoi(next());
        else if (a == "--T") Ts = next();
        else if (a == "--causal") causal = atoi(next());
        else if (a == "--dtype") dtypes = next();
        else if (a == "--input") inputs = next();
        else if (a == "--no-math") do_math = 0;
        else if (a == "--no-alt") do_alt = 0;
        else if (a == "--dump") dump = next();
        else if (a == "--budget-ms") budget = atof(next());
        else {
            fprintf(stderr, "usage: bench_attention [--tokens N] [--hs HS] [--nh NH] [--T 128,512] "
                            "[--causal 0|1] [--dtype fp32,bf16] [--input padded,unpadded] [--no-math] [--no-alt] "
                            "[--dump FILE] [--budget-ms MS]\n");
            return 2;
        }
    }
    std::vector<std::string> dlist = split_commas(dtypes), ilist = split_commas(inputs);
    for (const std::string &d : dlist)
        if (d != "fp32" && d != "bf16") {
            fprintf(stderr, "bench_attention: --dtype %s: expected fp32 and/or bf16\n", d.c_str());
            return 2;
        }
    for (const std::string &k : ilist)
        if (k != "padded" && k != "unpadded") {
            fprintf(stderr, "bench_attention: --input %s: expected padded and/or unpadded\n", k.c_str());
            return 2;
        }
    char why[256];
    be = mha_cuda_backend(0, 0, why, sizeof why);
    if (!be) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    for (const std::string &d : dlist)
        if (d == "bf16" && !(be16 = mha_cuda_backend(0, 1, why, sizeof why))) {
            printf("SKIP: %s\n", why);
            return 77;
        }
    char desc[256];
    mha_cuda_describe(desc, sizeof desc);
    printf("device: %s\n", desc);
    if (dump && write_dump(dump)) return 1;

    for (const std::string &t : split_commas(Ts)) {
        int T = atoi(t.c_str());
        if (T <= 0) continue;
        int B = (int)(tokens / T);
        if (B < 1) B = 1;
        for (const std::string &k : ilist)
            bench_case(Shape{B, T, NH, HS, causal}, k == "unpadded", dlist, do_math, do_alt, budget);
    }
    return 0;
}
