/* tests/cuda/emu/test_emu_schedule.cpp: the emulation's schedule (cuda_emu.h) finds the races
 * it is there to find. Small kernels with a planted race (a missing __syncthreads(), one where
 * only a __syncwarp() stands, a missing __syncwarp(), a block that reads another block's
 * output) must give a wrong result in at least one of the orders forward, reverse and
 * shuffle, and their race-free versions the right result in all of them; shuffles must be
 * right in every order; a __syncthreads() skipped by part of the block must abort. */
#include "cuda_emu.h"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <algorithm>
#include <vector>

#define NT 64   /* threads per block: two warps */

static int failures = 0, checks = 0;
#define CHECK(cond, ...)                                     \
    do {                                                     \
        checks++;                                            \
        if (!(cond)) {                                       \
            failures++;                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                    \
            fputc('\n', stderr);                             \
        }                                                    \
    } while (0)

/* Every thread writes its slot, then reads the slot of the thread 32 places on (the other
 * warp), with a __syncthreads() (sync = 2), only a __syncwarp() (1) or nothing (0) between. */
__global__ void exchange_across_warps(float *out, int sync) {
    MHA_DYNAMIC_SMEM(float, s);
    const int t = threadIdx.x;
    s[t] = (float)(t + 1);
    if (sync == 2) __syncthreads();
    if (sync == 1) __syncwarp();
    out[blockIdx.x * NT + t] = s[(t + 32) % NT];
}

/* Within one warp: lane l reads lane 31 - l's write, with or without a __syncwarp(). */
__global__ void exchange_within_warp(float *out, int sync) {
    MHA_DYNAMIC_SMEM(float, s);
    const int t = threadIdx.x;
    s[t] = (float)(t + 1);
    if (sync) __syncwarp();
    out[blockIdx.x * NT + t] = s[(t & ~31) | (31 - (t & 31))];
}

/* A tile reused in a loop: the fix for the race here is the __syncthreads() at the top of the
 * loop (every warp done with the previous tile), while a __syncwarp() ends each iteration, as
 * in the fused attention kernels. */
__global__ void reuse_tile(float *out, int top_sync) {
    MHA_DYNAMIC_SMEM(float, s);
    const int t = threadIdx.x;
    float acc = 0.0f;
    for (int it = 0; it < 3; it++) {
        if (top_sync) __syncthreads();
        s[t] = (float)(100 * it + t);
        __syncthreads();
        acc += s[NT - 1 - t];   /* the other warp's element of this iteration's tile */
        __syncwarp();
    }
    out[blockIdx.x * NT + t] = acc;
}

/* Each warp writes its own slots and reads them back (a __syncwarp() between), then, with
 * only a __syncwarp() (overlap = 1) instead of a __syncthreads() (0) before it, writes
 * scratch over the other warp's slots, as a staging buffer laid over other warps' rows would.
 * The race shows only when the other warp's write falls between a warp's write and its
 * read: the interleaving of MHA_EMU_ORDER=shuffle (run on many blocks). */
__global__ void overlapping_staging(float *out, int overlap) {
    MHA_DYNAMIC_SMEM(float, s);
    const int t = threadIdx.x, other = (t + 32) % NT;
    s[t] = (float)(t + 1);
    __syncwarp();
    const float mine = s[t ^ 1];   /* a neighbour lane's write: needs the __syncwarp() */
    __syncwarp();
    if (overlap) __syncwarp();
    else __syncthreads();
    s[other] = -1.0f;
    __syncwarp();
    out[blockIdx.x * NT + t] = mine;
}

/* Block b reads what block b - 1 wrote in the same launch: order-dependent. */
__global__ void read_previous_block(float *buf) {
    const int b = blockIdx.x;
    if (threadIdx.x == 0) buf[b] = (b == 0 ? 1.0f : buf[b - 1] + 1.0f);
}

/* A warp sum by butterfly shuffles. */
__global__ void warp_sum(float *out) {
    float v = (float)(threadIdx.x + 1);
    for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
    out[threadIdx.x] = v;
}

/* Half the block returns before a __syncthreads() the other half waits at. */
__global__ void divergent_barrier(float *out) {
    if (threadIdx.x < 32) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

static const char *order_name(mha_emu::Order o) {
    return o == mha_emu::kForward ? "forward" : o == mha_emu::kReverse ? "reverse" : "shuffle";
}
static const mha_emu::Order kOrders[3] = {mha_emu::kForward, mha_emu::kReverse, mha_emu::kShuffle};
static void set_order(mha_emu::Order o) {
    mha_emu::schedule.order = o;
    mha_emu::schedule.seed = 7;
}

/* out[t] == want(t) for every thread? (NaN never equals) */
template <class F>
static bool all_equal(const float *out, int n, F want) {
    for (int t = 0; t < n; t++)
        if (!(out[t] == want(t))) return false;
    return true;
}

/* The kernel KERNEL(out, variant) on NB blocks: the race-free variant is right in every order;
 * the racy one is wrong in some order, or (shuffle_only) in the shuffle order. The result of
 * thread t of block b is out[b * NT + t], expected want(t). */
template <class F>
static void check_race(const char *name, void (*kernel)(float *, int), int racy, int safe, F want,
                       int nb = 1, bool shuffle_only = false) {
    std::vector<float> out((size_t)nb * NT);
    const auto want_all = [&](int i) { return want(i % NT); };
    int shown = 0;
    for (mha_emu::Order o : kOrders) {
        set_order(o);
        std::fill(out.begin(), out.end(), 0.0f);
        mha_launch(kernel, nb, NT, NT * sizeof(float))(out.data(), safe);
        CHECK(all_equal(out.data(), nb * NT, want_all), "%s, race-free version: wrong in order %s", name,
              order_name(o));
        std::fill(out.begin(), out.end(), 0.0f);
        mha_launch(kernel, nb, NT, NT * sizeof(float))(out.data(), racy);
        const bool ok = all_equal(out.data(), nb * NT, want_all);
        if (!ok && (!shuffle_only || o == mha_emu::kShuffle)) shown++;
        printf("  %-28s racy version, %-7s: %s\n", name, order_name(o), ok ? "right (race not shown)" : "wrong (race shown)");
    }
    CHECK(shown > 0, "%s: the planted race gave the right result in %s", name,
          shuffle_only ? "the shuffle order" : "every order");
}

int main(void) {
    check_race("missing __syncthreads", exchange_across_warps, 0, 2,
               [](int t) { return (float)((t + 32) % NT + 1); });
    check_race("__syncwarp for __syncthreads", exchange_across_warps, 1, 2,
               [](int t) { return (float)((t + 32) % NT + 1); });
    check_race("missing __syncwarp", exchange_within_warp, 0, 1,
               [](int t) { return (float)(((t & ~31) | (31 - (t & 31))) + 1); });
    check_race("tile reuse, no top barrier", reuse_tile, 0, 1,
               [](int t) { return (float)(0 + 100 + 200 + 3 * (NT - 1 - t)); });

    /* interleaved warps: only the shuffle order shows this one (64 blocks) */
    check_race("staging over another warp", overlapping_staging, 1, 0,
               [](int t) { return (float)((t ^ 1) + 1); }, 64, true);

    /* blocks: forward gives 1, 2, 3, ...; reverse or shuffled reads unwritten (NaN) memory */
    int wrong = 0;
    for (mha_emu::Order o : kOrders) {
        set_order(o);
        float *buf = nullptr;
        cudaMalloc((void **)&buf, 8 * sizeof(float));   /* NaN-filled */
        mha_launch(read_previous_block, 8, 32)(buf);
        wrong += !all_equal(buf, 8, [](int b) { return (float)(b + 1); });
        cudaFree(buf);
    }
    CHECK(wrong > 0, "a block reading the previous block's output was right in every order");

    for (mha_emu::Order o : kOrders) {
        set_order(o);
        float out[NT];
        mha_launch(warp_sum, 1, NT)(out);
        CHECK(all_equal(out, NT, [](int t) { return t < 32 ? 528.0f : 1552.0f; }),
              "warp sums by shuffles wrong in order %s", order_name(o));
    }

    /* a divergent __syncthreads() aborts (in a child process) */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        float out[NT];
        mha_launch(divergent_barrier, 1, NT)(out);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
          "a __syncthreads() skipped by half the block did not abort (status %d)", status);

    /* the emulated tensor-core accumulation: 1 + (-2^-20)(2^-20) = 1 - 2^-40 is 1.0 rounded to
     * nearest, 1 - 2^-24 truncated; MHA_EMU_MMA=truncate (the cuda_emu_schedule_truncate run)
     * selects the truncating one */
    {
        namespace d = nvcuda::wmma::detail;
        float fa[16 * 8] = {}, fb[8 * 16] = {}, near[256], trunc[256];
        fa[0] = -1.0f / 1048576.0f;
        fb[0] = 1.0f / 1048576.0f;
        for (int e = 0; e < 256; e++) near[e] = trunc[e] = 1.0f;
        d::mma_tile<8>(near, fa, fb);
        d::mma_tile_truncating<8>(trunc, fa, fb);
        CHECK(near[0] == 1.0f && trunc[0] == nextafterf(1.0f, 0.0f) && trunc[1] == 1.0f,
              "mma accumulation: nearest %.9g, truncating %.9g %.9g\n", near[0], trunc[0], trunc[1]);
        const char *m = getenv("MHA_EMU_MMA");
        CHECK(d::mma_truncates() == (m && strcmp(m, "truncate") == 0),
              "MHA_EMU_MMA=%s but mma_truncates() is %d\n", m ? m : "", (int)d::mma_truncates());
    }

    printf("%d checks\n", checks);
    if (failures) {
        printf("test_emu_schedule: %d FAILED\n", failures);
        return 1;
    }
    printf("test_emu_schedule: all checks passed\n");
    return 0;
}
