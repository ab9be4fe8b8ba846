/* kernels/cpu/cpu_common.h: small helpers shared by the CPU kernels (float and double
 * instantiations of layers_impl.h and backend_cpu.c): aligned allocation, workspaces kept
 * across calls and per-thread ones freed when their thread exits (thread_exit.c), BLAS thread
 * control around OpenMP regions, a vectorisable expf, and length clamping. */
#ifndef MHA_KERNELS_CPU_COMMON_H
#define MHA_KERNELS_CPU_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cblas.h>

/* In the pthread OpenBLAS these exist; declared again in case a cblas.h lacks them. */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);

/* A function attribute for compute-bound helpers: AVX-512 and AVX2/FMA clones, picked at load
 * time (GCC 12 or later on x86-64 Linux: older GCCs reject arch=x86-64-v4 here; elsewhere
 * none), while the build itself targets baseline x86-64. OpenMP's outlined loop bodies get no
 * clones, so the loops call such helpers per range. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__x86_64__) && defined(__linux__)
#define MHA_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MHA_CPU_CLONES
#endif

/* Elementwise loops below this many elements run on one thread (fork/join costs more). */
#define MHA_OMP_MIN ((size_t)16384)

/* 64-byte aligned allocation; the size is rounded up as aligned_alloc requires. */
static inline void *mha_cpu_aligned_alloc(size_t bytes) {
    size_t sz = (bytes + 63) & ~(size_t)63;
    if (sz == 0) sz = 64;
    return aligned_alloc(64, sz);
}

/* A workspace grown on demand and kept (a warm call allocates nothing). A per-thread one is
 * an MhaThreadBuffer (below), freed when its thread exits. */
typedef struct {
    void *p;
    size_t cap;   /* bytes */
} MhaBuffer;

/* Bytes held by all MhaBuffers of all threads (thread_exit.c): changed only when a buffer
 * grows or is freed; tests/kernels/test_cpu_thread_exit.c checks that threads leave none. */
extern _Atomic size_t mha_buffer_bytes;

static inline void mha_buffer_free(MhaBuffer *b) {
    if (b->p) mha_buffer_bytes -= b->cap;
    free(b->p);
    b->p = NULL;
    b->cap = 0;
}

/* b's memory, grown to `bytes` if smaller; NULL when out of memory (b is then empty). */
static inline void *mha_buffer_try_get(MhaBuffer *b, size_t bytes) {
    if (bytes > b->cap) {
        mha_buffer_free(b);
        b->p = mha_cpu_aligned_alloc(bytes);
        if (b->p) {
            b->cap = bytes;
            mha_buffer_bytes += bytes;
        }
    }
    return b->p;
}

/* mha_buffer_try_get with out of memory fatal, with a message naming `what`. */
static inline void *mha_buffer_get(MhaBuffer *b, size_t bytes, const char *what) {
    void *p = mha_buffer_try_get(b, bytes);
    if (!p && bytes > 0) {
        fprintf(stderr, "mha: out of memory (%zu MiB for %s)\n", bytes >> 20, what);
        exit(1);
    }
    return p;
}

/* Memory that _Thread_local variables point to is not freed when their thread exits, and
 * threads do exit: libgomp ends surplus workers when a region asks for fewer threads than the
 * one before, and host threads (prediction workers) come and go. A cleanup fn(arg) armed by a
 * thread runs when that thread exits (thread_exit.c: one pthread key for all of them). Each
 * MhaThreadExit belongs to its user, _Thread_local and zero-initialised (not armed); arming
 * links it into the thread's list, allocating nothing, and once armed a call costs a test of
 * fn (hot paths arm at every product). It is disarmed as it runs: used again later in the
 * thread's exit (from another key's destructor), it is armed again and runs again. */
typedef struct MhaThreadExit {
    void (*fn)(void *arg);   /* NULL: not armed */
    void *arg;
    struct MhaThreadExit *next;   /* the thread's armed cleanups */
} MhaThreadExit;

void mha_thread_exit_arm(MhaThreadExit *e, void (*fn)(void *), void *arg);

static inline void mha_at_thread_exit(MhaThreadExit *e, void (*fn)(void *), void *arg) {
    if (!e->fn) mha_thread_exit_arm(e, fn, arg);
}

/* A workspace of one thread (declared _Thread_local), freed when the thread exits. */
typedef struct {
    MhaBuffer buf;
    MhaThreadExit at_exit;
} MhaThreadBuffer;

void mha_thread_buffer_free(void *thread_buffer);   /* an MhaThreadBuffer's cleanup */

static inline void *mha_thread_buffer_get(MhaThreadBuffer *t, size_t bytes, const char *what) {
    mha_at_thread_exit(&t->at_exit, mha_thread_buffer_free, t);
    return mha_buffer_get(&t->buf, bytes, what);
}
static inline void *mha_thread_buffer_try_get(MhaThreadBuffer *t, size_t bytes) {
    mha_at_thread_exit(&t->at_exit, mha_thread_buffer_free, t);
    return mha_buffer_try_get(&t->buf, bytes);
}

/* Forces single-threaded BLAS for sgemm calls made inside an OpenMP parallel loop
 * (each OpenMP thread then runs its own small gemm, no oversubscription). Returns the
 * previous BLAS thread count, to be given to mha_blas_parallel_leave. */
static inline int mha_blas_parallel_enter(void) {
    int n = openblas_get_num_threads();
    if (n != 1) openblas_set_num_threads(1);
    return n;
}
static inline void mha_blas_parallel_leave(int n) {
    if (n != 1) openblas_set_num_threads(n);
}

/* OpenBLAS runs single-threaded (mha_cpu_backend sets it); the linear layers split their
 * products into row blocks that the OpenMP threads take dynamically, so one thread pool does
 * all the work and BLAS and OpenMP never compete for the cores. A few blocks per thread (not
 * one): when another process takes a core for a while, the other threads take its blocks
 * instead of waiting for it at the end of the region. Products below MHA_GEMM_PAR_MIN
 * multiply-adds stay on one thread. */
#define MHA_GEMM_PAR_MIN ((size_t)1 << 18)
#define MHA_GEMM_BLOCKS_PER_THREAD 4
#define MHA_GEMM_MIN_ROWS 128   /* a block keeps at least this many rows (packing overhead) */

/* How many blocks of rows (multiples of `align`) to cut n rows into for nt threads. */
static inline int mha_gemm_row_blocks(int n, int nt, int align) {
    int want = nt > 1 ? nt * MHA_GEMM_BLOCKS_PER_THREAD : 1;
    int most = n / (MHA_GEMM_MIN_ROWS > align ? MHA_GEMM_MIN_ROWS : align);
    if (want > most) want = most > nt ? most : nt;
    return want < 1 ? 1 : want;
}

/* [lo, hi) of block t of nb over n rows, block bounds in multiples of `align` rows. */
static inline void mha_split_rows(int n, int t, int nb, int align, int *lo, int *hi) {
    int units = (n + align - 1) / align;
    int b0 = (int)((long)units * t / nb), b1 = (int)((long)units * (t + 1) / nb);
    *lo = b0 * align < n ? b0 * align : n;
    *hi = b1 * align < n ? b1 * align : n;
}

/* The real length of example b: lengths[b] clamped to [0, T]. */
static inline int mha_clamp_len(int32_t len, int T) {
    return len < 0 ? 0 : (len > T ? T : (int)len);
}

/* Dropout threshold: mha_rng_uniform(seed, c) = k / 2^24 with k = mha_rng_u64(seed, c) >> 40,
 * so uniform >= p exactly when k >= ceil(p 2^24) (p 2^24 is exact in double). Comparing
 * integers keeps the mask bit-identical to rng.h while letting the loops vectorise. */
static inline uint64_t mha_drop_threshold(double p) {
    if (p <= 0) return 0;
    if (p >= 1) return (uint64_t)1 << 24;
    double t = p * 16777216.0;
    uint64_t k = (uint64_t)t;
    return (double)k < t ? k + 1 : k;
}

/* exp(x) in float, branch-free so loops over it vectorise: x = n ln2 + r with |r| <= ln2/2,
 * exp(r) by its degree-7 Taylor polynomial (truncation < 6e-9 relative), times 2^n built
 * in the exponent bits. Inputs below -87.3 give 0, above 88 are clamped (exp(88) ~ 1.65e38). */
static inline float mha_expf_degree(float x, int degree) {   /* degree 7 or 5 */
    const float hi = 88.0f, lo = -87.3f;
    float xc = x > hi ? hi : x;
    xc = xc < lo ? lo : xc;
    const float shifter = 12582912.0f;              /* 1.5 * 2^23: adds round to integer */
    float t = xc * 1.44269504088896341f + shifter;
    float n = t - shifter;                          /* nearest integer to x / ln2 */
    float r = xc - n * 0.693359375f;                /* Cody-Waite: ln2 = hi + lo */
    r = r - n * -2.12194440e-4f;
    float p = 1.0f / 120.0f;
    if (degree >= 7) {                              /* a constant at every call: folds away */
        p = 1.0f / 5040.0f;
        p = p * r + 1.0f / 720.0f;
        p = p * r + 1.0f / 120.0f;
    }
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    /* 2^n from t's bits: t = 1.5 * 2^23 + n exactly, so its bits are the shifter's plus n. In
     * unsigned arithmetic, so that a NaN x (whose n is NaN: converting it to int would be
     * undefined, UBSan's "left shift of negative value") gives some scale, and p's NaN the result */
    uint32_t tbits;
    memcpy(&tbits, &t, sizeof tbits);
    const uint32_t bits = (tbits - 0x4B400000u + 127u) << 23;   /* 0x4B400000: the shifter's bits */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    float y = p * scale;
    return x < lo ? 0.0f : y;
}
static inline float mha_expf(float x) { return mha_expf_degree(x, 7); }

/* exp(x) for the softmax of the bf16 attention, whose probabilities are rounded to bf16
 * (relative 2^-9) before their product: the Taylor polynomial cut at degree 5 (truncation
 * < 2.5e-6 relative on |r| <= ln2/2), two multiply-adds fewer. */
static inline float mha_expf_bf16(float x) { return mha_expf_degree(x, 5); }

/* erf(x) in float with one branch-free formula, so GELU loops vectorise:
 *   erf(|x|) = 1 - t e^{-x^2} P(2t - 1),  t = 1 / (1 + |x|),
 * P of degree 8 fitted for this file by least squares weighted for absolute error in erf
 * over |x| in [0, 10] (exp(-x^2) is 0 in float beyond). Absolute error < 2.5e-7 (about
 * 2 ulp of 1; the relative error near 0 is larger, which GELU's 1 + erf does not see).
 * Measured against libm in tests/kernels/test_cpu_ops.c. */
static inline float mha_erff(float x) {
    float z = x < 0 ? -x : x;
    float t = 1.0f / (1.0f + z);
    float s = 2.0f * t - 1.0f;
    float p = -4.521259689e-04f;
    p = p * s + 1.559238648e-03f;
    p = p * s - 1.399858593e-04f;
    p = p * s - 9.679846466e-03f;
    p = p * s + 2.529683150e-02f;
    p = p * s - 1.387442369e-02f;
    p = p * s - 9.555713832e-02f;
    p = p * s + 2.376802713e-01f;
    p = p * s + 8.551671505e-01f;
    float r = 1.0f - t * mha_expf(-z * z) * p;
    return x < 0 ? -r : r;
}

#endif
