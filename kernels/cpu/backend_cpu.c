/* kernels/cpu/backend_cpu.c: the CPU backend (OpenBLAS + OpenMP), the reference one.
 * The layer kernels are the float instantiation of layers_impl.h (layers_f32.c); this file
 * adds memory, the plain elementwise ops, the optimizer and thread setup, and fills the table. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>
#include <omp.h>
#include "kernels/backend.h"
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/cpu/layers_bf16.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/layers_int8.h"
#include "kernels/cpu/packed_cache.h"
#include <stdio.h>

/* ---- memory: host memory, 64-byte aligned ---- */
/* A buffer larger than the machine's memory is refused at once, whatever the kernel's
 * overcommit policy would allow (an address range that large would only be touched into
 * swapping or the OOM killer later), so the caller's out-of-memory error comes first. */
static void *cpu_alloc(size_t bytes) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && bytes / (size_t)page > (size_t)pages) return NULL;
    return mha_cpu_aligned_alloc(bytes);
}
static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memcpy(dst, src, bytes);
}
/* Zeroing feeds every accumulating backward op, several MB a step: split over the
 * threads in 64 KiB pieces when large (one memset is memory-bound on one core). */
#define MHA_ZERO_PIECE ((size_t)1 << 16)
static void cpu_zero(void *p, size_t bytes) {
    if (bytes < 4 * MHA_ZERO_PIECE) {
        if (bytes) memset(p, 0, bytes);
        return;
    }
    const long pieces = (long)((bytes + MHA_ZERO_PIECE - 1) / MHA_ZERO_PIECE);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < pieces; i++) {
        size_t at = (size_t)i * MHA_ZERO_PIECE;
        memset((char *)p + at, 0, bytes - at < MHA_ZERO_PIECE ? bytes - at : MHA_ZERO_PIECE);
    }
}
static void cpu_sync(void) {}
/* Nothing is queued on the CPU: the copy is done at once, the wait has nothing to wait for. */
static void cpu_to_host_wait(void) {}

/* ---- elementwise ---- */
static void cpu_add(float *out, const float *a, const float *b, size_t n) {
#pragma omp parallel for schedule(static) if (n >= MHA_OMP_MIN)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void cpu_accumulate(float *dst, const float *src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= MHA_OMP_MIN)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void cpu_scale(float *x, size_t n, float s) {
#pragma omp parallel for schedule(static) if (n >= MHA_OMP_MIN)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* The gradients' sum of squares in double over fixed chunks added in order: the same bits for
 * any number of threads; then the clipping factor from it (Backend.grad_norm). */
static void cpu_grad_norm(double *stats, float *grad_scale, const float *x, size_t n, float clip_norm) {
    enum { MAX_CHUNKS = 1024 };
    size_t chunk = 65536;
    while ((n + chunk - 1) / chunk > MAX_CHUNKS) chunk *= 2;
    const size_t nch = (n + chunk - 1) / chunk;
    double part[MAX_CHUNKS];
#pragma omp parallel for schedule(static) if (nch > 1)
    for (size_t ch = 0; ch < nch; ch++) {
        size_t i0 = ch * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * (double)x[i];
        part[ch] = s;
    }
    double total = 0;
    for (size_t ch = 0; ch < nch; ch++) total += part[ch];
    stats[1] = total;
    *grad_scale = mha_grad_scale(stats[0], total, clip_norm);
}

static void cpu_sum_into(double *acc, const float *x, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += x[i];
    *acc += s;
}

/* ---- AdamW as torch.optim.AdamW (t is the 1-based step) ----
 * Memory-bound (7 streams per element). g * grad_scale is the value an in-place clip
 * (g *= scale) would have stored. */

/* AdamW on elements [i0, i1) of one tensor: p -= lr * wd * p, then the Adam step on the
 * scaled gradient (bias corrections folded into step and inv_bc2_sqrt). */
typedef struct {
    float grad_scale, beta1, beta2, a1, a2, step, inv_bc2_sqrt, eps, decay;
} AdamwStep;
static MHA_CPU_CLONES void adamw_range(float *p, const float *g, float *m, float *v, size_t i0, size_t i1,
                                       const AdamwStep *s) {
    const float grad_scale = s->grad_scale, beta1 = s->beta1, beta2 = s->beta2, a1 = s->a1, a2 = s->a2;
    const float step = s->step, inv_bc2_sqrt = s->inv_bc2_sqrt, eps = s->eps, decay = s->decay;
#pragma omp simd
    for (size_t i = i0; i < i1; i++) {
        float gi = g[i] * grad_scale;
        float mi = beta1 * m[i] + a1 * gi;
        float vi = beta2 * v[i] + a2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * inv_bc2_sqrt + eps);
    }
}

static void cpu_adamw(float *p, const float *g, float *m, float *v, const AdamwTensor *tensors,
                      int n_tensors, float lr, float beta1, float beta2, float eps, const float *grad_scale_at,
                      int t) {
    const float grad_scale = *grad_scale_at;
    if (!isfinite(grad_scale)) return;   /* a skipped update */
    const double bc1 = 1.0 - pow((double)beta1, (double)t);
    const double bc2 = 1.0 - pow((double)beta2, (double)t);
    AdamwStep st = {.grad_scale = grad_scale, .beta1 = beta1, .beta2 = beta2, .a1 = 1.0f - beta1,
                    .a2 = 1.0f - beta2, .eps = eps,
                    .step = (float)((double)lr / bc1),               /* lr / (1 - beta1^t) */
                    .inv_bc2_sqrt = (float)(1.0 / sqrt(bc2))};       /* 1 / sqrt(1 - beta2^t) */
    size_t total = 0;
    for (int k = 0; k < n_tensors; k++) total += tensors[k].n;
    /* One parallel region for all tensors (a region per tensor cost a thread wake-up each):
     * each thread updates its share of every tensor, split at multiples of 16 elements. The
     * elements are independent, so any split gives the same bits. */
#pragma omp parallel if (total >= MHA_OMP_MIN / 4)
    {
        const size_t nt = (size_t)omp_get_num_threads(), th = (size_t)omp_get_thread_num();
        AdamwStep s = st;
        for (int k = 0; k < n_tensors; k++) {
            const size_t n = tensors[k].n, lines = (n + 15) / 16, off = tensors[k].offset;
            const size_t i0 = lines * th / nt * 16, i1 = th + 1 == nt ? n : lines * (th + 1) / nt * 16;
            s.decay = 1.0f - lr * tensors[k].weight_decay;
            if (i0 < i1) adamw_range(p + off, g + off, m + off, v + off, i0, i1, &s);
        }
    }
}

static const Backend cpu_backend = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .copy = cpu_copy,
    .zero = cpu_zero,
    .sync = cpu_sync,
    .to_host_async = cpu_copy,
    .to_host_wait = cpu_to_host_wait,
    .linear_forward = mha_linear_forward_f32,
    .linear_backward = mha_linear_backward_f32,
    .linear_forward_post = mha_linear_forward_post_f32,
    .weights_fixed = mha_weights_fixed,   /* the packed-weights cache of our own products */
    .embed_forward = mha_embed_forward_f32,
    .embed_backward = mha_embed_backward_f32,
    .layernorm_forward = mha_layernorm_forward_f32,
    .layernorm_backward = mha_layernorm_backward_f32,
    .act_forward = mha_act_forward_f32,
    .act_backward = mha_act_backward_f32,
    .add = cpu_add,
    .accumulate = cpu_accumulate,
    .dropout_forward = mha_dropout_forward_f32,
    .dropout_backward = mha_dropout_backward_f32,
    .attention_forward_math = mha_attention_forward_math_f32,
    .attention_backward_math = mha_attention_backward_math_f32,
    .attention_forward_fused = mha_attention_forward_fused_f32,
    .attention_backward_fused = mha_attention_backward_fused_f32,
    .pool_forward = mha_pool_forward_f32,
    .pool_backward = mha_pool_backward_f32,
    .crossentropy = mha_crossentropy_f32,
    .adamw = cpu_adamw,
    .sum_into = cpu_sum_into,
    .grad_norm = cpu_grad_norm,
    .scale = cpu_scale,
};

const Backend *mha_cpu_backend(int threads) {
    /* threads 0: OMP_NUM_THREADS when set (the OpenMP runtime has read it: its value stands),
     * else one thread per processor */
    const char *env = getenv("OMP_NUM_THREADS");
    if (threads > 0 || !env || !*env) {
        int n = threads > 0 ? threads : omp_get_num_procs();
        if (n < 1) n = 1;
        omp_set_num_threads(n);
    }
    /* All parallelism is OpenMP's: BLAS calls run on the calling thread (see linear_*). */
    openblas_set_num_threads(1);
    return &cpu_backend;
}

const Backend *mha_cpu_backend_bf16(int threads, char *why, size_t why_len) {
    static Backend table;
    if (!mha_bf16_fast()) {
        if (why)
            snprintf(why, why_len, "%s", mha_bf16_cpu_supported() ? "the AVX512_BF16 path is switched off (mha_bf16_force_portable)"
                                                                  : "this CPU has no AVX512_BF16 instructions");
        return NULL;
    }
    table = *mha_cpu_backend(threads);
    table.bf16 = 1;
    table.linear_forward = mha_linear_forward_bf16;
    table.linear_forward_post = mha_linear_forward_post_bf16;
    table.linear_backward = mha_linear_backward_bf16;
    table.attention_forward_math = mha_attention_forward_math_bf16;
    table.attention_backward_math = mha_attention_backward_math_bf16;
    table.attention_forward_fused = mha_attention_forward_packed_bf16;
    table.attention_backward_fused = mha_attention_backward_fused_bf16;
    return &table;
}

const Backend *mha_cpu_backend_int8(int threads, char *why, size_t why_len) {
    static Backend table;
    if (!mha_i8_fast()) {
        if (why) snprintf(why, why_len, "%s", mha_i8_cpu_supported() ? "the AVX512_VNNI path is switched off (mha_i8_force_portable)"
                                                                 : "this CPU has no AVX512_VNNI instructions");
        return NULL;
    }
    const Backend *base = mha_cpu_backend_bf16(threads, NULL, 0);
    table = base ? *base : *mha_cpu_backend(threads);
    table.int8 = 1;
    table.linear_forward = mha_linear_forward_int8;
    table.linear_forward_post = mha_linear_forward_post_int8;
    return &table;
}

/* libgomp's spins before a waiting thread sleeps: nominally 20 us (its own estimate is 100 spins
 * per us), longer than most gaps between one op's parallel region and the next in a training
 * step, far shorter than another process's time slice. */
#define MHA_GOMP_SPIN_COUNT "2000"

void mha_cpu_set_thread_wait(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT")) return;   /* the user's choice */
    /* the program's own path, not /proc/self/exe: exec'd by that name, the process would be
     * called "exe" (pgrep mha-train, top and ps would not find it) */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0 || n >= (ssize_t)sizeof self - 1) return;
    self[n] = '\0';
    /* PASSIVE for any OpenMP runtime; libgomp then still spins GOMP_SPINCOUNT times */
    if (setenv("OMP_WAIT_POLICY", "PASSIVE", 1) != 0 || setenv("GOMP_SPINCOUNT", MHA_GOMP_SPIN_COUNT, 1) != 0)
        return;
    execv(self, argv);
    /* exec failed (the file replaced or removed since it started): carry on with the default
     * policy */
    unsetenv("OMP_WAIT_POLICY");
    unsetenv("GOMP_SPINCOUNT");
}
