/* tests/cuda/emu/cuda_emu.h: a host emulation of the slice of CUDA the backend uses, so the
 * kernels in kernels/cuda/ can be run and tested on a machine without a GPU.
 *
 * Test-only. kernels/cuda/cuda_common.h includes this instead of cuda_runtime.h and
 * cublas_v2.h when MHA_CUDA_EMU is defined; the emu_NAME.cpp files compile each .cu as C++.
 *
 *  - A launch runs the blocks one after another. The threads of a block are fibers (ucontext).
 *    Each warp runs as far as it can, until every lane waits at a __syncthreads() or has
 *    exited, before the next warp runs (MHA_EMU_ORDER=shuffle: warps interleave at their
 *    warp-level operations); then every thread must be at the same __syncthreads(), which
 *    releases them all. Within a warp the lanes run one after another
 *    from one warp-level operation (shuffle, vote, __syncwarp, mma_sync) to the next, where all 32
 *    lanes must meet. A __syncthreads() reached by only part of the block (divergent code, an
 *    early return) or threads at different barriers, and a warp-level op with lanes of its
 *    warp exited or elsewhere, abort with the call site, as they would hang or be undefined
 *    on a GPU. The order of blocks, warps and lanes is forward, reverse or shuffled
 *    (MHA_EMU_ORDER): a race shows as a result that depends on it (see read_schedule).
 *  - __shared__ is a static (one block runs at a time); dynamic shared memory is a fresh
 *    allocation of exactly the launch's size, filled with NaN bytes, per launch.
 *  - Launch configurations are validated as the driver does (threads per block, grid limits,
 *    dynamic shared memory against the opt-in attribute) and reported by cudaGetLastError.
 *    The device is an sm_90 (227 KiB of shared memory per block), or the GPU MHA_EMU_GPU names
 *    (see read_gpu).
 *  - Asynchronous copies from or to pinned host memory (cudaMallocHost) are deferred, as a
 *    GPU runs them asynchronously: they happen at the next launch, GEMM, other copy, memset or
 *    synchronisation, reading the source then, so a host that rewrites a pinned source before
 *    waiting for its copy (cudaEventSynchronize) sends the new contents, as it could on a GPU;
 *    a pinned destination receives its bytes only when the host waits (an event, a
 *    synchronisation, a synchronous copy), so one read before that finds the old ones.
 *  - cudaMalloc is malloc of the exact size (so AddressSanitizer sees overruns), filled with
 *    NaN bytes (a read of device memory nothing wrote shows), on a device of 1 GiB (more
 *    fails with cudaErrorMemoryAllocation, as on a full GPU); cuBLAS SGEMM
 *    is a column-major reference with cuBLAS's argument checks, accumulating in double.
 *
 * What it cannot show: performance, memory coalescing, a race the orders do not expose (the
 * fibers switch only at barriers, so two threads' read-modify-writes of one location never
 * interleave; writes of equal values; a race through global memory between blocks, which run
 * one after another), or anything about real hardware limits beyond the checks above.
 */
#ifndef MHA_TESTS_CUDA_EMU_H
#define MHA_TESTS_CUDA_EMU_H

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <tuple>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int a = 1, unsigned int b = 1, unsigned int c = 1) : x(a), y(b), z(c) {}
};
struct alignas(16) float4 {
    float x, y, z, w;
};

using std::max;
using std::min;
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline float __fmul_rn(float a, float b) { return a * b; }   /* a rounded product, never fused */
static inline float __fadd_rn(float a, float b) { return a + b; }   /* a rounded sum, never fused */
static inline unsigned int __float_as_uint(float x) {
    unsigned int u;
    memcpy(&u, &x, 4);
    return u;
}
static inline float __uint_as_float(unsigned int u) {
    float x;
    memcpy(&x, &u, 4);
    return x;
}

inline dim3 threadIdx, blockIdx, blockDim, gridDim;

/* ------------------------------------------------------------------ runtime API */

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInsufficientDriver = 35,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidKernelImage = 200,
    cudaErrorNoKernelImageForDevice = 209,
    cudaErrorUnsupportedPtxVersion = 222,
    cudaErrorIllegalAddress = 700,
    cudaErrorMisalignedAddress = 716,
    cudaErrorLaunchFailure = 719,
};
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
typedef struct CUstream_st *cudaStream_t;
typedef struct CUevent_st *cudaEvent_t;
enum { cudaEventDisableTiming = 2 };
struct cudaDeviceProp {
    char name[256];
    int major, minor, multiProcessorCount;
};

namespace mha_emu {
inline cudaError_t last_error = cudaSuccess;
inline std::map<const void *, size_t> live;            /* allocations */
inline size_t live_bytes = 0;                           /* their sum */
constexpr size_t kDeviceBytes = (size_t)1 << 30;        /* the emulated device: 1 GiB */
inline std::map<const void *, int> smem_optin;          /* kernel -> max dynamic smem */

/* The GPU the emulation poses as, from MHA_EMU_GPU: its compute capability and the most dynamic
 * shared memory a block may opt in to (the CUDA C++ Programming Guide's table of compute
 * capabilities). sm_90 (H100/H200) by default; sm_80 (A100) allows 163 KiB, sm_86 and sm_89
 * (RTX 30xx/40xx, A10, L4, L40) 99 KiB, which the attention kernels' tiles must fit too.
 * sm_75 (T4) and sm_70 (V100) are older than anything the build has kernels for
 * (kernels/cuda/meson.build: sm_80, sm_90 and compute_90 PTX): there, as on such a GPU,
 * cudaFuncGetAttributes and every launch fail with cudaErrorNoKernelImageForDevice. */
struct Gpu {
    const char *name;
    int major, minor;
    int optin;   /* bytes */
};
inline Gpu read_gpu(void) {
    static const Gpu gpus[] = {{"sm_90", 9, 0, 232448}, {"sm_80", 8, 0, 166912},
                               {"sm_86", 8, 6, 101376}, {"sm_89", 8, 9, 101376},
                               {"sm_75", 7, 5, 65536},  {"sm_70", 7, 0, 98304}};
    const char *e = getenv("MHA_EMU_GPU");
    if (!e || !*e) return gpus[0];
    for (const Gpu &g : gpus)
        if (strcmp(e, g.name) == 0) return g;
    fprintf(stderr, "cuda_emu: MHA_EMU_GPU=%s: expected sm_90, sm_80, sm_86, sm_89, sm_75 or sm_70\n",
            e);
    exit(2);
}
inline const Gpu gpu = read_gpu();
inline const int kOptinLimit = gpu.optin;
inline bool has_kernel_image(void) { return gpu.major >= 8; }
constexpr size_t kStack = 256 * 1024;

inline std::map<const void *, size_t> pinned;         /* cudaMallocHost allocations */
/* Calls after which the host has waited for the device (mha_emu_waits): device_waits for all
 * queued work (cudaDeviceSynchronize, cudaFree, a copy between host and device memory that is
 * not an asynchronous one of pinned memory), event_waits for the work before an event. */
inline long device_waits, event_waits;
struct PendingCopy {   /* from or to pinned memory */
    void *dst;
    const void *src;
    size_t n;
};
inline std::vector<PendingCopy> pending;                /* copies from or to pinned memory, in order */

inline bool is_pinned(const void *p) {
    auto it = pinned.upper_bound(p);
    if (it == pinned.begin()) return false;
    --it;
    return (const char *)p < (const char *)it->first + it->second;
}
/* Device-to-pinned copies the device has run, whose bytes the host sees only once it waits
 * (land_copies): a host that reads a pinned destination without waiting finds the old bytes. */
struct LandingCopy {
    void *dst;
    std::vector<char> bytes;
};
inline std::vector<LandingCopy> landing;
/* Runs the deferred copies: called wherever the device would next use or return data. A copy
 * to pinned memory takes the device's bytes now (stream order), and lands at the next wait. */
inline void flush_copies(void) {
    for (const PendingCopy &c : pending) {
        if (is_pinned(c.dst) && !is_pinned(c.src))
            landing.push_back({c.dst, std::vector<char>((const char *)c.src, (const char *)c.src + c.n)});
        else
            memmove(c.dst, c.src, c.n);
    }
    pending.clear();
}
/* A wait for the device (an event, a synchronisation, a synchronous copy): every copy runs,
 * and what it wrote to pinned memory is there for the host. */
inline void land_copies(void) {
    flush_copies();
    for (const LandingCopy &l : landing) memcpy(l.dst, l.bytes.data(), l.bytes.size());
    landing.clear();
}

inline void fail(const char *what) {
    fprintf(stderr, "cuda_emu: %s\n", what);
    abort();
}

inline void check_range(const void *p, size_t bytes, const char *what) {
    if (!bytes) return;
    auto it = live.upper_bound(p);
    if (it == live.begin()) return;   /* host memory: not ours to check */
    --it;
    const char *base = (const char *)it->first, *q = (const char *)p;
    if (q >= base && q < base + it->second && q + bytes > base + it->second) {
        fprintf(stderr, "cuda_emu: %s of %zu bytes runs past the end of a %zu-byte allocation\n",
                what, bytes, it->second);
        abort();
    }
}
}  // namespace mha_emu

inline const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorNoKernelImageForDevice: return "no kernel image is available for execution on the device";
    default: return "emulated error";
    }
}
inline const char *cudaGetErrorName(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorNoKernelImageForDevice: return "cudaErrorNoKernelImageForDevice";
    default: return "cudaErrorUnknown";
    }
}
inline cudaError_t cudaGetLastError(void) {
    cudaError_t e = mha_emu::last_error;
    mha_emu::last_error = cudaSuccess;
    return e;
}
inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize(void) {
    mha_emu::device_waits++;
    mha_emu::land_copies();
    return cudaSuccess;
}
inline cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (bytes > mha_emu::kDeviceBytes - mha_emu::live_bytes) return cudaErrorMemoryAllocation;
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    /* Garbage, as device memory from cudaMalloc is (often zeros on a fresh context, old data
     * once memory is reused): all bits set, a NaN in every float and -1 in every integer, so
     * an op that reads an element nothing wrote (a missing zero fill before +=, an unwritten
     * scratch entry) fails the comparisons instead of adding a near-zero value. */
    memset(*p, 0xff, bytes);
    mha_emu::live[*p] = bytes;
    mha_emu::live_bytes += bytes;
    return cudaSuccess;
}
inline cudaError_t cudaFree(void *p) {
    mha_emu::device_waits++;
    mha_emu::land_copies();
    if (!p) return cudaSuccess;
    auto it = mha_emu::live.find(p);
    if (it == mha_emu::live.end()) mha_emu::fail("cudaFree of a pointer cudaMalloc did not return");
    mha_emu::live_bytes -= it->second;
    mha_emu::live.erase(it);
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind k) {
    if (k != cudaMemcpyDeviceToDevice) mha_emu::device_waits++;   /* device to device: the host goes on */
    if (k != cudaMemcpyDeviceToDevice) mha_emu::land_copies();
    else mha_emu::flush_copies();
    mha_emu::check_range(dst, n, "cudaMemcpy destination");
    mha_emu::check_range(src, n, "cudaMemcpy source");
    if (n) memmove(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind k,
                                   cudaStream_t = nullptr) {
    if (!mha_emu::is_pinned(src) && !mha_emu::is_pinned(dst)) return cudaMemcpy(dst, src, n, k);
    mha_emu::check_range(dst, n, "cudaMemcpyAsync destination");
    mha_emu::check_range(src, n, "cudaMemcpyAsync source");
    if (n) mha_emu::pending.push_back({dst, src, n});
    return cudaSuccess;
}
/* Pinned host memory: host memory whose asynchronous copies are deferred (see the head
 * comment); waiting for an event runs every deferred copy. */
inline cudaError_t cudaMallocHost(void **p, size_t bytes) {
    *p = malloc(bytes ? bytes : 1);
    if (!*p) return cudaErrorMemoryAllocation;
    mha_emu::pinned[*p] = bytes ? bytes : 1;
    return cudaSuccess;
}
inline cudaError_t cudaFreeHost(void *p) {
    mha_emu::land_copies();
    mha_emu::pinned.erase(p);
    free(p);
    return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned) {
    static char dummy;
    *e = (cudaEvent_t)(void *)&dummy;
    return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t = nullptr) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) {
    mha_emu::event_waits++;
    mha_emu::land_copies();
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t = nullptr) {
    mha_emu::flush_copies();
    mha_emu::check_range(p, n, "cudaMemset");
    if (n) memset(p, v, n);
    return cudaSuccess;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuda_emu (host emulation)");
    p->major = mha_emu::gpu.major;
    p->minor = mha_emu::gpu.minor;
    p->multiProcessorCount = 1;
    return cudaSuccess;
}
inline cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b) {
    *free_b = mha_emu::kDeviceBytes - mha_emu::live_bytes;
    *total_b = mha_emu::kDeviceBytes;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
    if (a == cudaDevAttrComputeCapabilityMajor) {
        *v = mha_emu::gpu.major;
        return cudaSuccess;
    }
    if (a != cudaDevAttrMaxSharedMemoryPerBlockOptin) return cudaErrorInvalidValue;
    *v = mha_emu::kOptinLimit;
    return cudaSuccess;
}
inline cudaError_t cudaDeviceReset(void) {
    mha_emu::flush_copies();
    return cudaSuccess;
}
struct cudaFuncAttributes {
    int maxThreadsPerBlock;
};
template <class K>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *attr, K) {
    if (!mha_emu::has_kernel_image()) return cudaErrorNoKernelImageForDevice;
    attr->maxThreadsPerBlock = 1024;
    return cudaSuccess;
}
template <class K>
inline cudaError_t cudaFuncSetAttribute(K kernel, cudaFuncAttribute a, int v) {
    if (a != cudaFuncAttributeMaxDynamicSharedMemorySize || v < 0 || v > mha_emu::kOptinLimit)
        return cudaErrorInvalidValue;
    mha_emu::smem_optin[(const void *)kernel] = v;
    return cudaSuccess;
}

/* ------------------------------------------------------------------ blocks as fibers */

namespace mha_emu {
/* Where a thread waits: a __syncthreads() (block-wide), or a warp-level operation (shuffle,
 * __syncwarp, wmma::mma_sync: the lanes of its warp); see warp_step and run_block. */
enum SyncKind { kBlockSync, kWarpSync, kRunnable /* not waiting: free to run */ };
struct SyncSite {
    const char *file;
    int line;
    int kind;
};
struct Fiber {
    ucontext_t ctx;
    bool done;
    SyncSite at;   /* the barrier it waits at (valid while !done, after its first yield) */
};
inline ucontext_t sched_ctx;
inline std::vector<Fiber> fibers;
inline std::vector<char> stacks;
inline int cur = 0;
inline std::function<void()> *body = nullptr;
inline void *dyn_smem = nullptr;

inline void trampoline(void) {
    (*body)();
    fibers[cur].done = true;   /* returns to uc_link: the scheduler */
}

inline void set_thread(int t) {
    threadIdx.x = t % blockDim.x;
    threadIdx.y = (t / blockDim.x) % blockDim.y;
    threadIdx.z = t / (blockDim.x * blockDim.y);
}

inline bool same_site(const SyncSite &a, const SyncSite &b) {
    return a.line == b.line && a.kind == b.kind && strcmp(a.file, b.file) == 0;
}

[[noreturn]] inline void sync_fail(int t, const char *what, const SyncSite &s) {
    fprintf(stderr, "cuda_emu: block (%u,%u,%u), thread %d: %s (%s at %s:%d)\n", blockIdx.x,
            blockIdx.y, blockIdx.z, t, what, s.kind == kBlockSync ? "__syncthreads" : "warp-level op",
            s.file, s.line);
    abort();
}

/* The order things run in, from MHA_EMU_ORDER: "forward" (the default: blocks, warps and lanes
 * in index order), "reverse", or "shuffle[:SEED]" (a fresh permutation at every step, from a
 * generator seeded per launch by SEED and the launch's number, so a run repeats).
 *
 * A kernel free of races gives the same bits in every order. The schedule is built to make a
 * race show as a different (wrong) result:
 *  - forward and reverse: each warp runs as far as it can (until every lane waits at a
 *    __syncthreads() or has exited) before the next warp starts: a warp that reads shared
 *    memory another warp writes, with no __syncthreads() between them (only a __syncwarp(),
 *    a shuffle or an mma_sync, which order one warp's lanes alone), reads it before the write
 *    in one order and after it in the other;
 *  - shuffle: warps interleave, one warp-level step of a randomly drawn warp at a time, so
 *    that also a warp's write lands, in some blocks, between another warp's write and its
 *    read back of the same place;
 *  - within a warp, the lanes run one after another from one warp-level operation to the
 *    next: a lane that reads what another lane of its warp writes without a __syncwarp()
 *    between them reads it before or after the write depending on the order (with the
 *    lane-wise WMMA stores of cuda_emu_bf16.h, that covers a store_matrix_sync too);
 *  - the blocks of a launch run in the order too: a block must not depend on another.
 * Read before the write, shared memory holds the previous contents (dynamic shared memory: NaN
 * bytes, fresh per block; static __shared__ arrays keep the previous block's data). */
enum Order { kForward, kReverse, kShuffle };
struct Schedule {
    Order order = kForward;
    uint64_t seed = 0;
};
inline Schedule read_schedule(void) {
    Schedule s;
    const char *e = getenv("MHA_EMU_ORDER");
    if (!e || !*e || strcmp(e, "forward") == 0) return s;
    if (strcmp(e, "reverse") == 0) {
        s.order = kReverse;
        return s;
    }
    if (strcmp(e, "shuffle") == 0) {
        s.order = kShuffle;
        s.seed = 1;
        return s;
    }
    if (strncmp(e, "shuffle:", 8) == 0 && e[8] >= '0' && e[8] <= '9' && strlen(e + 8) <= 18) {
        char *end = nullptr;
        s.order = kShuffle;
        s.seed = strtoull(e + 8, &end, 10);
        if (*end == '\0') return s;
    }
    fprintf(stderr, "cuda_emu: MHA_EMU_ORDER=%s: expected forward, reverse or shuffle[:SEED] "
            "(SEED: up to 18 digits)\n", e);
    exit(2);
}
inline Schedule schedule = read_schedule();
inline uint64_t launch_state = 0;   /* the generator of the running launch (shuffle) */

/* splitmix64: the permutations of MHA_EMU_ORDER=shuffle */
inline uint64_t next_random(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* out = the order of 0 .. n-1 for the next step */
inline void next_order(std::vector<int> &out, int n) {
    out.resize(n);
    for (int i = 0; i < n; i++) out[i] = schedule.order == kReverse ? n - 1 - i : i;
    if (schedule.order == kShuffle)
        for (int i = n - 1; i > 0; i--) std::swap(out[i], out[next_random(&launch_state) % (uint64_t)(i + 1)]);
}

/* The blocks of one launch in the schedule's order: forward, reverse, or an affine permutation
 * i -> (a i + c) mod n with a coprime to n (the grids run to millions of blocks). */
struct BlockOrder {
    size_t n, a = 1, c = 0;
    explicit BlockOrder(size_t nblocks) : n(nblocks) {
        if (schedule.order != kShuffle) return;
        c = next_random(&launch_state) % n;
        do a = (next_random(&launch_state) % n) | 1; while (std::gcd(a, n) != 1);
    }
    size_t operator[](size_t i) const {
        if (schedule.order == kForward) return i;
        if (schedule.order == kReverse) return n - 1 - i;
        return (size_t)(((unsigned __int128)a * i + c) % n);
    }
};

/* Starts a launch: the shuffle generator from the seed and the launch's number. The number
 * counts every launch of the process, so a failure seen under shuffle repeats when the same
 * test binary runs again with the same seed, but not necessarily under MHA_TEST_FILTER (fewer
 * launches before it): rerun the whole binary, or try other seeds with the filter. */
inline void begin_launch(void) {
    static uint64_t launches = 0;
    launch_state = schedule.seed * 0x100000001b3ull + ++launches;
}

inline void run_thread(int t) {
    cur = t;
    set_thread(t);
    swapcontext(&sched_ctx, &fibers[t].ctx);
}

/* One step of warp w of a block of n threads: each runnable lane runs to its next barrier.
 * Lanes meet at a warp-level operation (shuffle, vote, __syncwarp, mma_sync) before any goes on; the
 * hardware requires (full mask) all 32 lanes of the warp at the same one, which releases them.
 * Returns 1 when the warp is parked: every live lane waits at a __syncthreads() or has exited. */
inline int warp_step(int w, int n) {
    static std::vector<int> lanes;
    const int lo = 32 * w, hi = std::min(n, lo + 32);
    next_order(lanes, hi - lo);
    for (int i : lanes) {
        Fiber &f = fibers[lo + i];
        if (!f.done && f.at.kind == kRunnable) run_thread(lo + i);
    }
    int first = -1;   /* a lane at a warp-level op */
    for (int t = lo; t < hi && first < 0; t++)
        if (!fibers[t].done && fibers[t].at.kind == kWarpSync) first = t;
    if (first < 0) return 1;
    const SyncSite &s = fibers[first].at;
    if (hi - lo < 32) sync_fail(first, "warp-level op in a warp of fewer than 32 threads", s);
    for (int t = lo; t < hi; t++) {
        if (fibers[t].done) sync_fail(t, "exited while lanes of its warp wait at a warp-level op", s);
        if (!same_site(fibers[t].at, s)) {
            fprintf(stderr, "cuda_emu: thread %d waits at a warp-level op at %s:%d\n", first, s.file, s.line);
            sync_fail(t, "lanes of one warp at different barriers", fibers[t].at);
        }
    }
    for (int t = lo; t < hi; t++) fibers[t].at.kind = kRunnable;
    return 0;
}

/* Runs the warps of a block until all are parked (see warp_step). Forward and reverse: one
 * warp at a time, each as far as it goes (the most skew between warps). Shuffle: a randomly
 * drawn unparked warp takes one step at a time, so that warps interleave at their warp-level
 * barriers too (a warp's write landing between another warp's write and its read back). */
inline void run_warps(int nwarps, int n) {
    static std::vector<int> warps;
    if (schedule.order != kShuffle) {
        next_order(warps, nwarps);
        for (int w : warps)
            while (!warp_step(w, n)) {
            }
        return;
    }
    warps.resize(nwarps);
    for (int w = 0; w < nwarps; w++) warps[w] = w;
    int active = nwarps;   /* warps[0 .. active) are not parked */
    while (active > 0) {
        const int k = (int)(next_random(&launch_state) % (uint64_t)active);
        if (warp_step(warps[k], n)) std::swap(warps[k], warps[--active]);
    }
}

/* Runs one block: the warps until all are parked (run_warps); then every thread
 * must wait at the same __syncthreads() (CUDA: only in code uniform across the block; an
 * early return before it counts as divergence), which releases them all. Otherwise the
 * emulation would pass a barrier the hardware would hang at or treat as undefined. */
inline void run_block(int nthreads, std::function<void()> &fn) {
    body = &fn;
    if (fibers.size() < (size_t)nthreads) {
        /* never reallocated (a moved ucontext_t keeps pointers into its old copy): the
         * launcher allows at most 1024 threads per block */
        fibers.reserve(1024);
        size_t old = fibers.size();
        fibers.resize(nthreads);
        for (size_t t = old; t < (size_t)nthreads; t++) getcontext(&fibers[t].ctx);   /* once */
    }
    if (stacks.size() < (size_t)nthreads * kStack) stacks.resize((size_t)nthreads * kStack);
    for (int t = 0; t < nthreads; t++) {
        Fiber &f = fibers[t];
        f.ctx.uc_stack.ss_sp = stacks.data() + (size_t)t * kStack;
        f.ctx.uc_stack.ss_size = kStack;
        f.ctx.uc_link = &sched_ctx;
        makecontext(&f.ctx, trampoline, 0);
        /* makecontext has put the stack into the context; swapcontext never reads uc_stack.
         * AddressSanitizer's swapcontext does: it clears the shadow of the whole stack it
         * finds there on every switch into the fiber (twice 32 KiB of memset, half the time
         * of a training step). A fiber only ever ends by returning from the kernel, which
         * unpoisons its frames, so the shadow is already clear: hide the size from it. (The
         * clearing also wiped the redzones of a frame waiting at a barrier, so an overflow of a
         * kernel's local array after a __syncthreads() went unseen; now it shows.) */
        f.ctx.uc_stack.ss_size = 0;
        f.done = false;
        f.at = SyncSite{"(start)", 0, kRunnable};
    }
    const int nwarps = (nthreads + 31) / 32;
    for (;;) {
        run_warps(nwarps, nthreads);
        int first = -1;
        for (int t = 0; t < nthreads && first < 0; t++)
            if (!fibers[t].done) first = t;
        if (first < 0) return;   /* every thread exited */
        const SyncSite &s = fibers[first].at;
        for (int t = 0; t < nthreads; t++) {
            if (fibers[t].done) sync_fail(t, "exited while other threads wait at a barrier", s);
            if (!same_site(fibers[t].at, s)) {
                fprintf(stderr, "cuda_emu: thread %d waits at %s at %s:%d\n", t,
                        fibers[t].at.kind == kBlockSync ? "__syncthreads" : "a warp-level op",
                        fibers[t].at.file, fibers[t].at.line);
                sync_fail(first, "threads of the block wait at different barriers", s);
            }
        }
        for (int t = 0; t < nthreads; t++) fibers[t].at.kind = kRunnable;
    }
}

inline int linear_tid(void) {
    return (int)(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
}  // namespace mha_emu

namespace mha_emu {
/* Yields to the scheduler, recording where the thread waits (see warp_step and run_block). */
inline void barrier(int kind, const char *file, int line) {
    Fiber &f = fibers[cur];
    f.at = SyncSite{file, line, kind};
    swapcontext(&f.ctx, &sched_ctx);
}

template <class T>
inline T shfl_xor(unsigned int mask, T v, int lane_mask, const char *file, int line) {
    static T buf[1024];
    if (mask != 0xffffffffu) {
        fprintf(stderr, "cuda_emu: %s:%d: shuffle mask %#x: only full-warp shuffles are emulated\n",
                file, line, mask);
        abort();
    }
    const int t = linear_tid();
    buf[t] = v;
    barrier(kWarpSync, file, line);
    const int src = (t & ~31) | ((t & 31) ^ lane_mask);
    T r = buf[src];
    barrier(kWarpSync, file, line);
    return r;
}

/* __any_sync: 1 when the predicate is nonzero on any lane of the warp (full mask only) */
inline int any_sync(unsigned int mask, int pred, const char *file, int line) {
    static int buf[1024];
    if (mask != 0xffffffffu) {
        fprintf(stderr, "cuda_emu: %s:%d: vote mask %#x: only full-warp votes are emulated\n",
                file, line, mask);
        abort();
    }
    const int t = linear_tid(), w0 = t & ~31;
    buf[t] = pred != 0;
    barrier(kWarpSync, file, line);
    int r = 0;
    for (int k = w0; k < w0 + 32; k++) r |= buf[k];
    barrier(kWarpSync, file, line);
    return r;
}
}  // namespace mha_emu

#define __syncthreads() mha_emu::barrier(mha_emu::kBlockSync, __FILE__, __LINE__)
#define __shfl_xor_sync(mask, v, lane_mask) \
    mha_emu::shfl_xor((mask), (v), (lane_mask), __FILE__, __LINE__)
#define __any_sync(mask, pred) mha_emu::any_sync((mask), (pred), __FILE__, __LINE__)
/* The warp-level barrier: warp_step requires all 32 lanes of the warp at the same one. */
#define __syncwarp(...) mha_emu::barrier(mha_emu::kWarpSync, __FILE__, __LINE__)

#define MHA_DYNAMIC_SMEM(type, name) type *name = reinterpret_cast<type *>(mha_emu::dyn_smem)

template <class... P>
struct MhaEmuLauncher {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t smem;
    template <class... A>
    void operator()(A... args) const {
        const size_t nthreads = (size_t)block.x * block.y * block.z;
        bool bad = nthreads == 0 || nthreads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 ||
                   grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535;
        if (!mha_emu::has_kernel_image()) {
            mha_emu::last_error = cudaErrorNoKernelImageForDevice;
            return;
        }
        if (bad) {
            fprintf(stderr, "cuda_emu: invalid launch grid (%u,%u,%u) block (%u,%u,%u)\n", grid.x,
                    grid.y, grid.z, block.x, block.y, block.z);
            mha_emu::last_error = cudaErrorInvalidConfiguration;
            return;
        }
        if (smem > 49152) {
            auto it = mha_emu::smem_optin.find((const void *)kernel);
            if (it == mha_emu::smem_optin.end() || (size_t)it->second < smem) {
                fprintf(stderr, "cuda_emu: %zu bytes of dynamic shared memory without the opt-in "
                        "attribute\n", smem);
                mha_emu::last_error = cudaErrorInvalidValue;
                return;
            }
        }
        std::tuple<P...> params(args...);
        void (*k)(P...) = kernel;
        std::function<void()> fn = [&params, k]() { std::apply(k, params); };
        gridDim = grid;
        blockDim = block;
        /* the blocks in the order of MHA_EMU_ORDER (see there) */
        const size_t nblocks = (size_t)grid.x * grid.y * grid.z;
        mha_emu::flush_copies();
        mha_emu::begin_launch();
        const mha_emu::BlockOrder block_order(nblocks);
        for (size_t i = 0; i < nblocks; i++) {
            const size_t b = block_order[i];
            void *sm = nullptr;
            if (smem) {
                sm = aligned_alloc(128, (smem + 127) / 128 * 128);
                memset(sm, 0xff, smem);   /* NaN: reading unwritten shared memory shows */
            }
            mha_emu::dyn_smem = sm;
            blockIdx = dim3(b % grid.x, b / grid.x % grid.y, b / ((size_t)grid.x * grid.y));
            mha_emu::run_block((int)nthreads, fn);
            free(sm);
            mha_emu::dyn_smem = nullptr;
        }
    }
};
template <class... P>
static inline MhaEmuLauncher<P...> mha_launch(void (*kernel)(P...), dim3 grid, dim3 block,
                                              size_t smem = 0) {
    return MhaEmuLauncher<P...>{kernel, grid, block, smem};
}

/* ------------------------------------------------------------------ cuBLAS */

typedef struct cublasContext *cublasHandle_t;
enum cublasStatus_t {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TF32_TENSOR_OP_MATH = 3 };

inline cublasStatus_t cublasCreate(cublasHandle_t *h) {
    *h = reinterpret_cast<cublasHandle_t>(&mha_emu::last_error);
    return CUBLAS_STATUS_SUCCESS;
}
namespace mha_emu {
/* The handle's math mode: with CUBLAS_TF32_TENSOR_OP_MATH the emulated SGEMMs take their
 * operands rounded to tf32, as a GPU's TF32 tensor cores read them (train.tf32). */
inline cublasMath_t math_mode = CUBLAS_DEFAULT_MATH;

/* x rounded to tf32, to nearest with ties away from zero (cvt.rna.tf32.f32): the low 13
 * mantissa bits cleared. NaN and infinity pass through. */
inline float tf32_rna(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&x, &u, 4);
    return x;
}
}  // namespace mha_emu

inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t mode) {
    mha_emu::math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
inline const char *cublasGetStatusString(cublasStatus_t s) {
    return s == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS" : "CUBLAS_STATUS_INVALID_VALUE";
}

namespace mha_emu {
inline cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, const float *A, int lda, const float *B, int ldb,
                           float beta, float *C, int ldc) {
    flush_copies();
    if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < std::max(1, ta == CUBLAS_OP_N ? m : k)) return CUBLAS_STATUS_INVALID_VALUE;
    if (ldb < std::max(1, tb == CUBLAS_OP_N ? k : n)) return CUBLAS_STATUS_INVALID_VALUE;
    if (ldc < std::max(1, m)) return CUBLAS_STATUS_INVALID_VALUE;
    const bool tf32 = math_mode == CUBLAS_TF32_TENSOR_OP_MATH;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double s = 0;
            for (int l = 0; l < k; l++) {
                float a = ta == CUBLAS_OP_N ? A[i + (size_t)l * lda] : A[l + (size_t)i * lda];
                float b = tb == CUBLAS_OP_N ? B[l + (size_t)j * ldb] : B[j + (size_t)l * ldb];
                if (tf32) {
                    a = tf32_rna(a);
                    b = tf32_rna(b);
                }
                s += (double)a * b;
            }
            float *c = &C[i + (size_t)j * ldc];
            *c = beta == 0.0f ? (float)(alpha * s) : (float)(alpha * s + (double)beta * *c);
        }
    return CUBLAS_STATUS_SUCCESS;
}
}  // namespace mha_emu

inline cublasStatus_t cublasSgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m,
                                  int n, int k, const float *alpha, const float *A, int lda,
                                  const float *B, int ldb, const float *beta, float *C, int ldc) {
    return mha_emu::gemm(ta, tb, m, n, k, *alpha, A, lda, B, ldb, *beta, C, ldc);
}

inline cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t ta,
                                                cublasOperation_t tb, int m, int n, int k,
                                                const float *alpha, const float *A, int lda,
                                                long long sA, const float *B, int ldb, long long sB,
                                                const float *beta, float *C, int ldc, long long sC,
                                                int batch) {
    if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    for (int b = 0; b < batch; b++) {
        cublasStatus_t s = mha_emu::gemm(ta, tb, m, n, k, *alpha, A + b * sA, lda, B + b * sB, ldb,
                                         *beta, C + b * sC, ldc);
        if (s != CUBLAS_STATUS_SUCCESS) return s;
    }
    return CUBLAS_STATUS_SUCCESS;
}

#include "cuda_emu_bf16.h"

#endif
