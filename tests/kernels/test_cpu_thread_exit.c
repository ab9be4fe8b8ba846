/* tests/kernels/test_cpu_thread_exit.c: the CPU kernels' per-thread workspaces are freed when
 * their thread exits (kernels/cpu/thread_exit.c), without needing a leak checker.
 *
 * Every workspace is an MhaBuffer, and mha_buffer_bytes counts the bytes that all of them hold.
 * Each group of ops below runs in a fresh pthread, itself running 2 OpenMP threads (whose
 * workers take workspaces of their own): the group must have taken memory (the count above
 * what it was before the thread, read at the end of the thread), and once the thread is
 * joined the count must come back to what it was. libgomp ends the fresh thread's workers as
 * that thread exits but does not wait for them to finish exiting, so the count is polled
 * (up to 10 s) after the join. LLVM's libomp keeps workers in a pool for the next thread
 * instead: there the test skips. A workspace left out of the thread-exit cleanups (an
 * MhaBuffer used per thread without MhaThreadBuffer or mha_at_thread_exit) keeps the count
 * above where it started, and its group fails.
 *
 * Groups, by the files whose workspaces they take: the bf16 linear layer forward and backward
 * (linear_bf16.c, gemm_bf16.c's scratch, packed_cache.c's unkept packing); the bf16 attention
 * (attention_bf16.c's packed forward where the CPU has AVX512_BF16, and the generic one:
 * scratch_impl.h's bf16 scratch, gemm_bf16.c's packed B of mha_sgemm_bf16); the int8 linear
 * forward (linear_int8.c, packed_cache.c's kept entries); the fp32 and double attention and
 * linear layer (scratch_impl.h's float and double scratch). The bf16 and int8 groups run on
 * the portable kernels, which every CPU has, and also on the AVX-512 and AMX ones where the
 * CPU has them. Last, a workspace taken during the thread's exit, in another key's destructor. */
#include <dlfcn.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "kernels/cpu/cpu_common.h"
#include "kernels/cpu/gemm_bf16.h"
#include "kernels/cpu/gemm_int8.h"
#include "kernels/cpu/layers_bf16.h"
#include "kernels/cpu/layers_f32.h"
#include "kernels/cpu/layers_f64.h"
#include "kernels/cpu/layers_int8.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

/* The fast-path settings a group runs under (0 portable, 1 AVX-512, 2 AMX), those this CPU has. */
static int bf16_paths = 1, i8_paths = 1;

static uint64_t counter = 0;
static void fill(float *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = 2.0f * mha_rng_uniform(51, counter++) - 1.0f;
}
static void fill_d(double *x, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = 2.0 * mha_rng_uniform(52, counter++) - 1.0;
}

static void bf16_path(int path) {
    mha_bf16_force_portable(path == 0);
    mha_bf16_allow_amx(path == 2);
}
static void i8_path(int path) {
    mha_i8_force_portable(path == 0);
    mha_i8_allow_amx(path == 2);
}

/* Linear layers: one above MHA_GEMM_PAR_MIN (row blocks over the OpenMP threads) and one below. */
static const struct { int N, IC, OC; } linear_sizes[] = {{300, 96, 160}, {13, 40, 24}};
enum { LINEAR_SIZES = 2 };

static void bf16_linear(void) {
    for (int path = 0; path < bf16_paths; path++) {
        bf16_path(path);
        for (int s = 0; s < LINEAR_SIZES; s++) {
            const int N = linear_sizes[s].N, IC = linear_sizes[s].IC, OC = linear_sizes[s].OC;
            float *inp = test_malloc((size_t)N * IC * 4), *w = test_malloc((size_t)OC * IC * 4);
            float *bias = test_malloc((size_t)OC * 4), *out = test_malloc((size_t)N * OC * 4);
            float *dinp = test_malloc((size_t)N * IC * 4), *dw = test_malloc((size_t)OC * IC * 4);
            float *db = test_malloc((size_t)OC * 4);
            fill(inp, (size_t)N * IC), fill(w, (size_t)OC * IC), fill(bias, (size_t)OC);
            mha_linear_forward_bf16(out, inp, w, bias, N, IC, OC);
            mha_linear_backward_bf16(dinp, dw, db, out, inp, w, N, IC, OC, 0);
            free(inp), free(w), free(bias), free(out), free(dinp), free(dw), free(db);
        }
    }
    bf16_path(1);
}

/* The attention's shape: two examples, one padded; T above the bf16 instantiation's 256-row
 * query blocks. Dropout on the math path (its scratch holds the masks), none on the fused
 * forward (attention_bf16.c's packed path takes no dropout). */
enum { AB = 2, AT = 260, ANH = 2, AHS = 16, AC = ANH * AHS };
static const int32_t att_len[AB] = {260, 77};
#define ATT_QKV ((size_t)AB * AT * 3 * AC)
#define ATT_OUT ((size_t)AB * AT * AC)
#define ATT_ATT ((size_t)AB * ANH * AT * AT)
#define ATT_LSE ((size_t)AB * ANH * AT)

static void bf16_attention(void) {
    float *qkv = test_malloc(ATT_QKV * 4), *dqkv = test_malloc(ATT_QKV * 4), *out = test_malloc(ATT_OUT * 4);
    float *dout = test_malloc(ATT_OUT * 4), *att = test_malloc(ATT_ATT * 4), *datt = test_malloc(ATT_ATT * 4);
    float *lse = test_malloc(ATT_LSE * 4);
    fill(qkv, ATT_QKV), fill(dout, ATT_OUT);
    for (int path = 0; path < bf16_paths; path++) {
        bf16_path(path);
        mha_attention_forward_packed_bf16(out, lse, qkv, att_len, AB, AT, AC, ANH, 0, 0.0f, 3);
        mha_attention_forward_fused_bf16(out, lse, qkv, att_len, AB, AT, AC, ANH, 1, 0.0f, 3);
        mha_attention_backward_fused_bf16(dqkv, dout, out, qkv, lse, att_len, AB, AT, AC, ANH, 1, 0.0f, 3);
        mha_attention_forward_math_bf16(out, att, qkv, att_len, AB, AT, AC, ANH, 0, 0.1f, 3);
        mha_attention_backward_math_bf16(dqkv, datt, dout, qkv, att, att_len, AB, AT, AC, ANH, 0, 0.1f, 3);
    }
    bf16_path(1);
    free(qkv), free(dqkv), free(out), free(dout), free(att), free(datt), free(lse);
}

static void int8_linear(void) {
    for (int path = 0; path < i8_paths; path++) {
        i8_path(path);
        for (int s = 0; s < LINEAR_SIZES; s++) {
            const int N = linear_sizes[s].N, IC = linear_sizes[s].IC, OC = linear_sizes[s].OC;
            float *inp = test_malloc((size_t)N * IC * 4), *w = test_malloc((size_t)OC * IC * 4);
            float *out = test_malloc((size_t)N * OC * 4);
            fill(inp, (size_t)N * IC), fill(w, (size_t)OC * IC);
            mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);   /* packs w, kept ... */
            mha_linear_forward_int8(out, inp, w, NULL, N, IC, OC);   /* ... and found again */
            free(inp), free(w), free(out);
        }
    }
    i8_path(1);
}

/* The float and double instantiations of layers_impl.h, each with its own scratch. */
static void fp32_ops(void) {
    float *qkv = test_malloc(ATT_QKV * 4), *dqkv = test_malloc(ATT_QKV * 4), *out = test_malloc(ATT_OUT * 4);
    float *dout = test_malloc(ATT_OUT * 4), *att = test_malloc(ATT_ATT * 4), *datt = test_malloc(ATT_ATT * 4);
    float *lse = test_malloc(ATT_LSE * 4);
    fill(qkv, ATT_QKV), fill(dout, ATT_OUT);
    mha_attention_forward_fused_f32(out, lse, qkv, att_len, AB, AT, AC, ANH, 1, 0.1f, 3);
    mha_attention_backward_fused_f32(dqkv, dout, out, qkv, lse, att_len, AB, AT, AC, ANH, 1, 0.1f, 3);
    mha_attention_forward_math_f32(out, att, qkv, att_len, AB, AT, AC, ANH, 0, 0.1f, 3);
    mha_attention_backward_math_f32(dqkv, datt, dout, qkv, att, att_len, AB, AT, AC, ANH, 0, 0.1f, 3);
    /* a few rows: the linear layer's padded copy of a short block */
    mha_linear_forward_f32(out, qkv, dout, NULL, 3, 40, 24);
    free(qkv), free(dqkv), free(out), free(dout), free(att), free(datt), free(lse);
}

static void f64_ops(void) {
    double *qkv = test_malloc(ATT_QKV * 8), *dqkv = test_malloc(ATT_QKV * 8), *out = test_malloc(ATT_OUT * 8);
    double *dout = test_malloc(ATT_OUT * 8), *lse = test_malloc(ATT_LSE * 8);
    fill_d(qkv, ATT_QKV), fill_d(dout, ATT_OUT);
    mha_attention_forward_fused_f64(out, lse, qkv, att_len, AB, AT, AC, ANH, 0, 0.1, 3);
    mha_attention_backward_fused_f64(dqkv, dout, out, qkv, lse, att_len, AB, AT, AC, ANH, 0, 0.1, 3);
    mha_linear_forward_f64(out, qkv, dout, NULL, 3, 40, 24);
    free(qkv), free(dqkv), free(out), free(dout), free(lse);
}

/* A workspace taken again while the thread exits, in the destructor of another pthread key,
 * after the cleanups ran, must be freed too: the destructor below takes gemm_bf16.c's in two
 * rounds of destructors (setting its key again), so that whichever of the two keys runs first,
 * the second round takes the workspaces after they were freed, and arms their cleanup again. */
static pthread_key_t late_key;
static _Thread_local int late_rounds;

static void small_product(void) {
    float a[8 * 8], b[8 * 8], c[8 * 8];
    fill(a, 64), fill(b, 64);
    mha_sgemm_bf16(CblasRowMajor, CblasNoTrans, CblasNoTrans, 8, 8, 8, 1.0f, a, 8, b, 8, 0.0f, c, 8);
}
static void late_product(void *rounds) {
    small_product();
    if (--late_rounds > 0) pthread_setspecific(late_key, rounds);
}
static void late_workspace(void) {
    late_rounds = 2;
    pthread_setspecific(late_key, &late_rounds);
    small_product();
}

/* Every group in one thread: its cleanups, all armed together, all run. */
static void all_groups(void) {
    bf16_linear(), bf16_attention(), int8_linear(), fp32_ops(), f64_ops();
}

typedef struct {
    void (*ops)(void);
    size_t before;   /* mha_buffer_bytes before the thread */
    size_t taken;    /* what the thread's ops added to it, read before the thread exits */
} Group;

static void *group_thread(void *arg) {
    Group *g = arg;
    omp_set_num_threads(2);
    g->ops();
    size_t now = mha_buffer_bytes;
    g->taken = now > g->before ? now - g->before : 0;
    return NULL;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void run_group(const char *name, void (*ops)(void)) {
    Group g = {ops, mha_buffer_bytes, 0};
    pthread_t t;
    if (pthread_create(&t, NULL, group_thread, &g) != 0 || pthread_join(t, NULL) != 0) {
        perror("pthread");
        exit(1);
    }
    int waited_ms = 0;
    while (mha_buffer_bytes != g.before && waited_ms < 10000) sleep_ms(10), waited_ms += 10;
    const size_t after = mha_buffer_bytes;
    char what[128];
    printf("  %s: %zu bytes of workspaces in its threads; after the join %zu left (%d ms)\n", name,
           g.taken, after > g.before ? after - g.before : 0, waited_ms);
    snprintf(what, sizeof what, "%s: its threads took workspaces", name);
    test_expect(what, g.taken > 0);
    snprintf(what, sizeof what, "%s: all freed when its threads exit", name);
    test_expect(what, after == g.before);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (dlsym(RTLD_DEFAULT, "kmp_set_stacksize")) {   /* LLVM's (or Intel's) OpenMP runtime */
        printf("skipped: this OpenMP runtime keeps its workers for later threads (the test needs libgomp)\n");
        return 77;
    }
    mha_bf16_force_portable(0);
    mha_i8_force_portable(0);
    /* the portable path always; AVX-512, then AMX, where the CPU has them (and MHA_CPU_AMX is not 0) */
    bf16_paths = !mha_bf16_fast() ? 1 : mha_bf16_amx_supported() ? 3 : 2;
    i8_paths = !mha_i8_fast() ? 1 : mha_i8_amx_supported() ? 3 : 2;
    printf("bf16 paths: %d, int8 paths: %d (portable, AVX-512, AMX)\n", bf16_paths, i8_paths);
    run_group("bf16 linear", bf16_linear);
    run_group("bf16 attention", bf16_attention);
    run_group("int8 linear", int8_linear);
    run_group("fp32 attention and linear", fp32_ops);
    run_group("f64 attention and linear", f64_ops);
    run_group("all groups in one thread", all_groups);
    if (pthread_key_create(&late_key, late_product) != 0) {
        perror("pthread_key_create");
        return 1;
    }
    run_group("late bf16 product (destructor)", late_workspace);
    return test_finish("test_cpu_thread_exit");
}
