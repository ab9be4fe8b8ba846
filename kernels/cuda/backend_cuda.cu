/* kernels/cuda/backend_cuda.cu: the CUDA backend's table, memory, scratch and errors.
 *
 * Two tables share everything: fp32, and mixed precision (bf16 products, see gemm_bf16.cu and
 * attention_flash_tc.cu). mha_cuda_backend() returns NULL with a reason when no device is
 * visible (or bf16 is asked of a GPU older than sm_80), so a build with
 * CUDA still runs (and its GPU tests skip) on machines without one. Device failures after
 * that are fatal with file:line and a hint (see cuda_common.h); only alloc() reports out of
 * memory by returning NULL, so the model can print what it tried to allocate.
 */
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/mha_cuda.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

/* ------------------------------------------------------------------ errors */

static const char *cuda_hint(cudaError_t e) {
    switch (e) {
    case cudaErrorMemoryAllocation:
        return "the GPU is out of memory: lower the tokens per batch (batch size or max_len), "
               "or use the fused attention, which never holds a (T, T) matrix";
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorInvalidKernelImage:
        return "this binary has kernels for sm_80 and sm_90 (+ PTX for newer GPUs); rebuild "
               "for this GPU's architecture (kernels/cuda/meson.build)";
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorInsufficientDriver:
        return "the NVIDIA driver is older than the CUDA toolkit this was built with: update "
               "the driver or build with an older toolkit";
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
        return "a kernel accessed memory out of bounds (a bug, or buffers smaller than the shapes "
               "passed); rerun with MHA_CUDA_SYNC=1 to name the kernel, or under compute-sanitizer";
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidValue:
        return "an invalid launch configuration or argument: are the shapes within range?";
    case cudaErrorNoDevice:
        return "no CUDA device is visible (CUDA_VISIBLE_DEVICES?)";
    default:
        return "rerun with MHA_CUDA_SYNC=1 to report the failing kernel at its launch";
    }
}

void mha_cu_fail_cuda(cudaError_t e, const char *what, const char *file, int line) {
    fprintf(stderr, "mha: CUDA error at %s:%d: %s: %s (%s)\n  hint: %s\n", file, line, what,
            cudaGetErrorString(e), cudaGetErrorName(e), cuda_hint(e));
    fflush(stderr);
    exit(1);
}

static const char *cublas_hint(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_ALLOC_FAILED:
        return "cuBLAS could not allocate its workspace: the GPU is out of memory";
    case CUBLAS_STATUS_NOT_INITIALIZED:
        return "cuBLAS is not initialised (driver problem or out of memory at start)";
    case CUBLAS_STATUS_INVALID_VALUE:
        return "a GEMM got invalid dimensions or leading dimensions (a shape bug?)";
    case CUBLAS_STATUS_ARCH_MISMATCH:
        return "the GPU lacks a feature this call needs";
    case CUBLAS_STATUS_EXECUTION_FAILED:
        return "the GEMM failed to run; an earlier kernel may have faulted: rerun with "
               "MHA_CUDA_SYNC=1";
    default:
        return "rerun with MHA_CUDA_SYNC=1 to report the failing call at its launch";
    }
}

void mha_cu_fail_cublas(cublasStatus_t s, const char *what, const char *file, int line) {
    fprintf(stderr, "mha: cuBLAS error at %s:%d: %s: %s\n  hint: %s\n", file, line, what,
            cublasGetStatusString(s), cublas_hint(s));
    fflush(stderr);
    exit(1);
}

void mha_cu_fail_msg(const char *msg, const char *file, int line) {
    fprintf(stderr, "mha: CUDA backend error at %s:%d: %s\n", file, line, msg);
    fflush(stderr);
    exit(1);
}

static int g_sync_each_launch = 0;   /* MHA_CUDA_SYNC=1 */

void mha_cu_launch_check(const char *file, int line) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) mha_cu_fail_cuda(e, "kernel launch", file, line);
    if (g_sync_each_launch) {
        e = cudaDeviceSynchronize();
        if (e != cudaSuccess) mha_cu_fail_cuda(e, "kernel execution (MHA_CUDA_SYNC=1)", file, line);
    }
}

/* ------------------------------------------------------------------ state */

static cublasHandle_t g_cublas = nullptr;

cublasHandle_t mha_cu_cublas(void) { return g_cublas; }

/* Memory accounting: bytes held through alloc() and scratch, and the peak. */
static std::mutex g_mem_mutex;
static std::unordered_map<void *, size_t> g_sizes;
static size_t g_in_use = 0, g_peak = 0;

static void account_add(void *p, size_t bytes) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    g_sizes[p] = bytes;
    g_in_use += bytes;
    if (g_in_use > g_peak) g_peak = g_in_use;
}

static void account_remove(void *p) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    auto it = g_sizes.find(p);
    if (it != g_sizes.end()) {
        g_in_use -= it->second;
        g_sizes.erase(it);
    }
}

extern "C" size_t mha_cuda_bytes_in_use(void) { return g_in_use; }
extern "C" size_t mha_cuda_peak_bytes(void) { return g_peak; }
extern "C" void mha_cuda_reset_peak(void) {
    std::lock_guard<std::mutex> lock(g_mem_mutex);
    g_peak = g_in_use;
}

extern "C" void mha_cuda_describe(char *buf, size_t len) {
    if (!buf || !len) return;
    int dev = 0;
    cudaDeviceProp prop;
    size_t free_b = 0, total_b = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess ||
        cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        snprintf(buf, len, "CUDA device unavailable");
        return;
    }
    snprintf(buf, len, "%s (sm_%d%d, %d SMs), %.1f of %.1f GiB free", prop.name, prop.major,
             prop.minor, prop.multiProcessorCount, free_b / 1073741824.0, total_b / 1073741824.0);
}

/* ------------------------------------------------------------------ memory ops */

static void *cu_alloc(size_t bytes) {
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaErrorMemoryAllocation) {
        cudaGetLastError();   /* clear it: out of memory is not a sticky error */
        return nullptr;
    }
    if (e != cudaSuccess) mha_cu_fail_cuda(e, "cudaMalloc", __FILE__, __LINE__);
    account_add(p, bytes);
    return p;
}

static void cu_free(void *p) {
    if (!p) return;
    account_remove(p);
    CUDA_CHECK(cudaDeviceSynchronize());   /* no queued kernel loses it (see mha_cu_scratch) */
    CUDA_CHECK(cudaFree(p));
}

/* Small host-to-device copies (a batch's ids, lengths and labels) go through a ring of pinned
 * staging buffers and cudaMemcpyAsync: to_device returns as soon as the source is copied into
 * the ring (the caller may reuse it at once, as with cudaMemcpy), and the transfer runs in
 * stream order before the kernels launched after it. A cudaMemcpy from pageable memory would
 * first wait for every kernel already queued, so the device would sit idle while the host
 * sets up the next step. Before a slot is reused, the host waits for the event recorded after
 * its last transfer. Larger copies (parameters) and a failed pinned allocation fall back to
 * cudaMemcpy. */
#define MHA_STAGE_BYTES ((size_t)1 << 20)
#define MHA_STAGE_SLOTS 4
static struct {
    void *host;           /* pinned, MHA_STAGE_BYTES; NULL until first used */
    cudaEvent_t read;     /* recorded after the slot's last transfer */
} g_stage[MHA_STAGE_SLOTS];
static int g_stage_next = 0, g_stage_off = 0;
static std::mutex g_stage_mutex;

/* A pinned buffer of `bytes` and an event for the copies through it. On failure (the error is
 * not sticky, and is cleared) *host is NULL and *off set: the caller's copies wait from then on
 * (cudaMemcpy). */
static bool pinned_with_event(void **host, cudaEvent_t *event, size_t bytes, int *off) {
    if (cudaMallocHost(host, bytes) != cudaSuccess) {
        cudaGetLastError();
        *host = nullptr;
        *off = 1;
        return false;
    }
    if (cudaEventCreateWithFlags(event, cudaEventDisableTiming) != cudaSuccess) {
        cudaGetLastError();
        cudaFreeHost(*host);
        *host = nullptr;
        *off = 1;
        return false;
    }
    return true;
}

static bool staged_to_device(void *dst, const void *src, size_t bytes) {
    std::lock_guard<std::mutex> lock(g_stage_mutex);
    if (bytes > MHA_STAGE_BYTES || g_stage_off) return false;
    auto &s = g_stage[g_stage_next];
    if (!s.host) {
        if (!pinned_with_event(&s.host, &s.read, MHA_STAGE_BYTES, &g_stage_off)) return false;
    } else {
        CUDA_CHECK(cudaEventSynchronize(s.read));   /* its previous transfer is done */
    }
    memcpy(s.host, src, bytes);
    CUDA_CHECK(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, 0));
    CUDA_CHECK(cudaEventRecord(s.read, 0));
    g_stage_next = (g_stage_next + 1) % MHA_STAGE_SLOTS;
    if (g_sync_each_launch) CUDA_CHECK(cudaDeviceSynchronize());   /* MHA_CUDA_SYNC=1: report here */
    return true;
}

static void cu_to_device(void *dst, const void *src, size_t bytes) {
    if (!bytes || staged_to_device(dst, src, bytes)) return;
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

static void cu_to_host(void *dst, const void *src, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

/* Copies back that do not wait (Backend.to_host_async): cudaMemcpyAsync into one pinned
 * buffer, in stream order, with an event recorded after the latest; to_host_wait waits for that
 * event (for the ops queued before it, not after) and hands each copy to its destination.
 * The trainer reads an update's loss and gradient norm so while the next step runs. */
#define MHA_BACK_COPIES 16
static struct {
    char *host;           /* pinned, MHA_ASYNC_COPY_BYTES; NULL until first used */
    cudaEvent_t done;     /* recorded after the latest copy */
    size_t used;          /* bytes of host pending */
    int n, off;           /* copies pending; off: the pinned buffer could not be had */
    struct {
        void *dst;
        size_t at, bytes;
    } copy[MHA_BACK_COPIES];
} g_back;
static std::mutex g_back_mutex;

static void back_wait_locked(void) {
    if (!g_back.n) return;
    CUDA_CHECK(cudaEventSynchronize(g_back.done));
    for (int i = 0; i < g_back.n; i++)
        memcpy(g_back.copy[i].dst, g_back.host + g_back.copy[i].at, g_back.copy[i].bytes);
    g_back.n = 0;
    g_back.used = 0;
}

static void cu_to_host_wait(void) {
    std::lock_guard<std::mutex> lock(g_back_mutex);
    back_wait_locked();
}

static bool back_ready_locked(void) {
    if (g_back.host) return true;
    if (g_back.off) return false;
    void *host = nullptr;
    bool ok = pinned_with_event(&host, &g_back.done, MHA_ASYNC_COPY_BYTES, &g_back.off);
    g_back.host = (char *)host;
    return ok;
}

static void cu_to_host_async(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    std::unique_lock<std::mutex> lock(g_back_mutex);
    if (bytes > MHA_ASYNC_COPY_BYTES || !back_ready_locked()) {
        back_wait_locked();   /* the copies queued before it land first, in order */
        lock.unlock();
        cu_to_host(dst, src, bytes);   /* too large, or no pinned buffer: a copy that waits */
        return;
    }
    size_t at = (g_back.used + 15) & ~(size_t)15;
    if (g_back.n == MHA_BACK_COPIES || at + bytes > MHA_ASYNC_COPY_BYTES) {
        back_wait_locked();   /* full: the pending copies are delivered first */
        at = 0;
    }
    CUDA_CHECK(cudaMemcpyAsync(g_back.host + at, src, bytes, cudaMemcpyDeviceToHost, 0));
    CUDA_CHECK(cudaEventRecord(g_back.done, 0));
    g_back.copy[g_back.n].dst = dst;
    g_back.copy[g_back.n].at = at;
    g_back.copy[g_back.n].bytes = bytes;
    g_back.n++;
    g_back.used = at + bytes;
    if (g_sync_each_launch) CUDA_CHECK(cudaDeviceSynchronize());   /* MHA_CUDA_SYNC=1: report here */
}

static void cu_copy(void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0));
}

static void cu_zero(void *p, size_t bytes) {
    if (bytes) CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, 0));
}

static void cu_sync(void) { CUDA_CHECK(cudaDeviceSynchronize()); }

/* Scratch: grows to the largest request (+1/8 slack). Before the old buffer is released the
 * device is synchronised, so no kernel still queued on it loses it (cudaFree "may perform
 * implicit synchronization", says the runtime's header: not a promise). Growing is rare. */
static void *g_scratch[MHA_SCRATCH_COUNT];
static size_t g_scratch_cap[MHA_SCRATCH_COUNT];

void *mha_cu_scratch(int slot, size_t bytes) {
    if (bytes <= g_scratch_cap[slot] && g_scratch[slot]) return g_scratch[slot];
    if (g_scratch[slot]) {
        account_remove(g_scratch[slot]);
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaFree(g_scratch[slot]));
        g_scratch[slot] = nullptr;
        g_scratch_cap[slot] = 0;
    }
    size_t want = bytes + bytes / 8 + 256;
    void *p = nullptr;
    cudaError_t e = cudaMalloc(&p, want);
    if (e != cudaSuccess) {
        cudaGetLastError();
        e = cudaMalloc(&p, bytes ? bytes : 1);   /* retry without slack */
        want = bytes ? bytes : 1;
    }
    if (e != cudaSuccess) {
        char msg[160];
        snprintf(msg, sizeof msg, "cannot allocate %.1f MiB of scratch memory (%s); the GPU is out "
                 "of memory: lower the tokens per batch", bytes / 1048576.0, cudaGetErrorString(e));
        mha_cu_fail_msg(msg, __FILE__, __LINE__);
    }
    account_add(p, want);
    g_scratch[slot] = p;
    g_scratch_cap[slot] = want;
    return p;
}

/* ------------------------------------------------------------------ the table */

static Backend g_table, g_table_bf16;   /* fp32, and mixed precision (bf16 products) */
static int g_ready = 0;
static int g_major = 0;                              /* compute capability of the device */
static int g_fp32_attention = MHA_CUDA_ATTN_SIMT;    /* set when the backend starts */

extern "C" int mha_cuda_fp32_attention(void) { return g_fp32_attention; }

extern "C" int mha_cuda_set_fp32_attention(int kind) {
    if (!g_ready || (kind != MHA_CUDA_ATTN_SIMT && kind != MHA_CUDA_ATTN_TF32X3)) return -1;
    if (kind == MHA_CUDA_ATTN_TF32X3 && g_major < 8) return -1;
    g_fp32_attention = kind;
    return 0;
}

extern "C" int mha_cuda_fp32_attention_kernel(int kind, int hs) {
    return kind == MHA_CUDA_ATTN_TF32X3 && g_major >= 8 && mha_cu_tf32x3_fits(hs) ? MHA_CUDA_ATTN_TF32X3
                                                                                : MHA_CUDA_ATTN_SIMT;
}

int mha_cu_fp32_attention_tc(int hs) {
    return mha_cuda_fp32_attention_kernel(g_fp32_attention, hs) == MHA_CUDA_ATTN_TF32X3;
}

static size_t cu_peak_bytes(void) { return mha_cuda_peak_bytes(); }

static const char *cu_attention_kernel(int hs) {
    return mha_cu_fp32_attention_tc(hs) ? "tf32x3 tensor cores" : "FFMA";
}
static const char *cu_attention_kernel_bf16(int hs) {
    return mha_cu_bf16_attention_fits(hs) ? "bf16 tensor cores"
                                          : "FFMA: the bf16 tiles do not fit this GPU's shared memory";
}

static void fill_table(Backend *t) {
    memset(t, 0, sizeof *t);
    t->name = "cuda";
    t->alloc = cu_alloc;
    t->free = cu_free;
    t->to_device = cu_to_device;
    t->to_host = cu_to_host;
    t->copy = cu_copy;
    t->zero = cu_zero;
    t->sync = cu_sync;
    t->to_host_async = cu_to_host_async;
    t->to_host_wait = cu_to_host_wait;
    t->linear_forward = mha_cu_linear_forward;
    t->linear_forward_post = mha_cu_linear_forward_post;
    t->linear_backward = mha_cu_linear_backward;
    t->embed_forward = mha_cu_embed_forward;
    t->embed_backward = mha_cu_embed_backward;
    t->layernorm_forward = mha_cu_layernorm_forward;
    t->layernorm_backward = mha_cu_layernorm_backward;
    t->act_forward = mha_cu_act_forward;
    t->act_backward = mha_cu_act_backward;
    t->add = mha_cu_add;
    t->accumulate = mha_cu_accumulate;
    t->dropout_forward = mha_cu_dropout_forward;
    t->dropout_backward = mha_cu_dropout_backward;
    t->attention_forward_math = mha_cu_attention_forward_math;
    t->attention_backward_math = mha_cu_attention_backward_math;
    t->attention_forward_fused = mha_cu_attention_forward_fused;
    t->attention_backward_fused = mha_cu_attention_backward_fused;
    t->pool_forward = mha_cu_pool_forward;
    t->pool_backward = mha_cu_pool_backward;
    t->crossentropy = mha_cu_crossentropy;
    t->adamw = mha_cu_adamw;
    t->sum_into = mha_cu_sum_into;
    t->grad_norm = mha_cu_grad_norm;
    t->scale = mha_cu_scale;
    t->peak_bytes = cu_peak_bytes;
    t->attention_kernel = cu_attention_kernel;
}

/* Mixed precision: the same table with the bf16 GEMMs and the bf16 (WMMA) fused attention.
 * The materialising attention, LayerNorm, softmax, loss and optimizer stay fp32. */
static void fill_table_bf16(Backend *t) {
    fill_table(t);
    t->bf16 = 1;
    t->linear_forward = mha_cu_linear_forward_bf16;
    t->linear_forward_post = mha_cu_linear_forward_post_bf16;
    t->linear_backward = mha_cu_linear_backward_bf16;
    t->attention_forward_fused = mha_cu_attention_forward_fused_bf16;
    t->attention_backward_fused = mha_cu_attention_backward_fused_bf16;
    t->attention_kernel = cu_attention_kernel_bf16;
}

/* Never launched: cudaFuncGetAttributes on it fails where the GPU can run none of this
 * build's kernel images (kernels/cuda/meson.build: sm_80, sm_90, compute_90 PTX). */
__global__ void cu_image_probe(void) {}

/* What the programs' loader (kernels/cuda_loader.c) compares with its own MHA_BACKEND_ABI_ID
 * before it uses this module's table. */
extern "C" unsigned long mha_cuda_module_abi(void) { return MHA_BACKEND_ABI_ID; }

extern "C" int mha_cuda_device_visible(void) {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) cudaGetLastError();
    return e == cudaSuccess && count > 0;
}

extern "C" const Backend *mha_cuda_backend(int tf32, int bf16, char *why, size_t why_len) {
    static std::mutex init_mutex;
    std::lock_guard<std::mutex> lock(init_mutex);
    if (!g_ready) {
        int count = 0;
        cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess || count == 0) {
            if (e != cudaSuccess) cudaGetLastError();
            if (why && why_len)
                snprintf(why, why_len, "no CUDA device visible (cudaGetDeviceCount: %s)",
                         e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
            return nullptr;
        }
        e = cudaFree(nullptr);   /* creates the context now, so failures show here */
        if (e != cudaSuccess) {
            cudaGetLastError();
            if (why && why_len)
                snprintf(why, why_len, "CUDA device present but unusable (%s: %s)",
                         cudaGetErrorName(e), cudaGetErrorString(e));
            return nullptr;
        }
        cudaFuncAttributes probe;
        e = cudaFuncGetAttributes(&probe, cu_image_probe);
        if (e != cudaSuccess) {   /* e.g. a T4 (7.5) or a V100 (7.0): fails here, not at a launch */
            cudaGetLastError();
            int dev = 0;
            cudaDeviceProp prop;
            char gpu[300] = "the GPU";
            bool too_old = false;   /* else, say what the error's hint says (a driver too old for the PTX) */
            if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess) {
                snprintf(gpu, sizeof gpu, "the GPU (%s, compute capability %d.%d)", prop.name,
                         prop.major, prop.minor);
                too_old = prop.major < 8;
            }
            cudaGetLastError();
            if (why && why_len)
                snprintf(why, why_len, "%s cannot run this build's kernels (%s): %s", gpu, cudaGetErrorName(e),
                         too_old ? "they need compute capability 8.0 or newer (A100, RTX 30xx, and later)"
                                 : cuda_hint(e));
            cudaDeviceReset();   /* the context cudaFree made: not kept (a cpu run holds no GPU memory) */
            cudaGetLastError();
            return nullptr;
        }
        cublasStatus_t s = cublasCreate(&g_cublas);
        if (s != CUBLAS_STATUS_SUCCESS) {
            if (why && why_len)
                snprintf(why, why_len, "cuBLAS could not start (%s)", cublasGetStatusString(s));
            g_cublas = nullptr;
            return nullptr;
        }
        const char *sync = getenv("MHA_CUDA_SYNC");
        g_sync_each_launch = sync && *sync && strcmp(sync, "0") != 0;
        int dev = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&g_major, cudaDevAttrComputeCapabilityMajor, dev));
        /* the fp32 fused attention's kernel (mha_cuda.h); a wrong setting is a usage error,
         * also under train.device = "auto", rather than a silent fall-back */
        const char *att = getenv("MHA_CUDA_FP32_ATTENTION");
        const int want_simt = att && strcmp(att, "simt") == 0, want_tc = att && strcmp(att, "tf32x3") == 0;
        if ((att && *att && !want_simt && !want_tc) || (want_tc && g_major < 8)) {
            if (want_tc)
                fprintf(stderr, "mha: MHA_CUDA_FP32_ATTENTION=tf32x3 needs a GPU of compute capability 8.0 "
                        "or newer (this one is %d.x): unset it or set simt\n", g_major);
            else
                fprintf(stderr, "mha: MHA_CUDA_FP32_ATTENTION=%s: expected simt or tf32x3 (or unset it: "
                        "tf32x3 on sm_80 and newer, simt before)\n", att);
            exit(2);
        }
        g_fp32_attention = !want_simt && g_major >= 8 ? MHA_CUDA_ATTN_TF32X3 : MHA_CUDA_ATTN_SIMT;
        fill_table(&g_table);
        fill_table_bf16(&g_table_bf16);
        g_ready = 1;
    }
    /* TF32 tensor cores for the GEMMs only when asked: fp32 (bit-for-bit closer to the CPU
     * reference) is the default. */
    CUBLAS_CHECK(cublasSetMathMode(g_cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    if (bf16 && g_major < 8) {   /* bf16 tensor cores (WMMA, cublasGemmEx with bf16 inputs) need sm_80 */
        if (why && why_len)
            snprintf(why, why_len, "train.precision = \"bf16\" needs a GPU of compute "
                     "capability 8.0 or newer (this one is %d.x); use \"fp32\"", g_major);
        return nullptr;
    }
    if (why && why_len) why[0] = '\0';
    return bf16 ? &g_table_bf16 : &g_table;
}
