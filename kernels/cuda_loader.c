/* kernels/cuda_loader.c: mha_cuda_backend() and mha_cuda_device_visible() for the programs of
 * a build with CUDA. The CUDA backend itself (kernels/cuda/) is a shared module,
 * libmha-cuda.so, opened here the first time a GPU is wanted: mha-train with train.device
 * "cuda" or "auto", mha-predict with --device cuda or auto. A run on the CPU never loads it, nor
 * the CUDA runtime and cuBLAS behind it (a CUDA 13 cuBLAS costs a program about 0.1-0.2 s and
 * 200 MiB of resident memory at start), so `mha-predict` on the CPU starts as fast in a CUDA
 * build as in a CPU-only one.
 *
 * Before the module, the NVIDIA driver (libcuda.so.1) is asked how many devices it sees: on a
 * machine without a driver or without a GPU, "auto" decides for the CPU without loading the
 * module either. The module is looked for beside the program (the build folder) and then in
 * the folder it is installed to (MHA_CUDA_MODULE_DIR, set by meson.build); a module built
 * against another Backend table (MHA_BACKEND_ABI_ID, kernels/backend.h) is refused; its own
 * mha_cuda_backend() (kernels/cuda/backend_cuda.cu) does the rest. The CUDA tests link the
 * backend statically instead (tests/cuda/meson.build).
 */
#include "kernels/backend.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef MHA_CUDA_MODULE_DIR
#define MHA_CUDA_MODULE_DIR "/usr/local/lib/mha"
#endif
#define MODULE_NAME "libmha-cuda.so"

typedef const Backend *(*BackendFn)(int tf32, int bf16, char *why, size_t why_len);

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_devices = -2;            /* -2 not asked yet, -1 no usable driver, else the count */
static char g_driver_why[256];        /* why there is no device, when g_devices <= 0 */
static void *g_module;                /* the opened module, or NULL */
static char g_module_why[2 * PATH_MAX + 512];   /* why it could not be opened (a path and dlerror) */
static int g_module_tried;

/* The devices the driver sees, asked once (cuInit and cuDeviceGetCount of libcuda.so.1). */
static int driver_devices(void) {
    if (g_devices != -2) return g_devices;
    void *drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    if (!drv) {
        snprintf(g_driver_why, sizeof g_driver_why,
                 "no CUDA device visible (no NVIDIA driver: libcuda.so.1 not found)");
        return g_devices = -1;
    }
    /* CUresult cuInit(unsigned), cuDeviceGetCount(int *): 0 is CUDA_SUCCESS */
    int (*cu_init)(unsigned) = (int (*)(unsigned))dlsym(drv, "cuInit");
    int (*cu_count)(int *) = (int (*)(int *))dlsym(drv, "cuDeviceGetCount");
    if (!cu_init || !cu_count) {
        snprintf(g_driver_why, sizeof g_driver_why,
                 "no CUDA device visible (libcuda.so.1 lacks cuInit or cuDeviceGetCount)");
        return g_devices = -1;
    }
    int count = 0, rc = cu_init(0);
    if (rc == 0) rc = cu_count(&count);
    if (rc == 100) count = 0;   /* CUDA_ERROR_NO_DEVICE */
    else if (rc != 0) {
        /* CUresult cuGetErrorName(CUresult, const char **) */
        int (*cu_name)(int, const char **) = (int (*)(int, const char **))dlsym(drv, "cuGetErrorName");
        const char *name = NULL;
        if (!cu_name || cu_name(rc, &name) != 0 || !name) name = "an unknown CUresult";
        snprintf(g_driver_why, sizeof g_driver_why,
                 "no CUDA device visible (the NVIDIA driver's cuInit failed: %s, %d)", name, rc);
        return g_devices = -1;
    }
    if (count == 0)
        snprintf(g_driver_why, sizeof g_driver_why,
                 "no CUDA device visible (the NVIDIA driver reports 0 devices; CUDA_VISIBLE_DEVICES?)");
    return g_devices = count;   /* the driver stays loaded: the CUDA runtime uses it next */
}

/* The folder of the running program (with a trailing '/'), or "" when unknown. */
static void program_dir(char *dir, size_t len) {
    dir[0] = '\0';
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    slash[1] = '\0';
    snprintf(dir, len, "%s", exe);
}

/* Opens the module at `path` and checks that it was built with this program's Backend table;
 * NULL with the reason in `err` otherwise. */
static void *open_checked(const char *path, char *err, size_t len) {
    void *m = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!m) {
        const char *e = dlerror();
        e = e ? e : "dlopen failed";
        snprintf(err, len, "the CUDA backend %s could not be loaded (%s)%s", path, e,
                 strstr(e, "cannot open shared object file")
                     ? ": are the CUDA runtime and cuBLAS libraries it was built with on the loader "
                       "path (LD_LIBRARY_PATH)?"
                     : "");
        return NULL;
    }
    unsigned long (*abi)(void) = (unsigned long (*)(void))dlsym(m, "mha_cuda_module_abi");
    const unsigned long want = MHA_BACKEND_ABI_ID;
    if (!abi || abi() != want) {
        snprintf(err, len, "the CUDA backend %s was built from other sources than this program "
                 "(interface %#lx, the program's %#lx): rebuild both (ninja -C BUILD) or reinstall",
                 path, abi ? abi() : 0UL, want);
        return NULL;   /* left loaded: closing it would run the CUDA runtime's teardown for nothing */
    }
    return m;
}

static void *open_module(void) {
    if (g_module_tried) return g_module;
    g_module_tried = 1;
    char dir[PATH_MAX], paths[2][PATH_MAX + 64];
    program_dir(dir, sizeof dir);
    int n = 0;
    if (dir[0]) snprintf(paths[n++], sizeof paths[0], "%s%s", dir, MODULE_NAME);
    snprintf(paths[n++], sizeof paths[0], "%s/%s", MHA_CUDA_MODULE_DIR, MODULE_NAME);
    for (int k = 0; k < n; k++) {   /* the first one that exists is the one used, or reported */
        if (access(paths[k], F_OK) != 0) continue;
        g_module = open_checked(paths[k], g_module_why, sizeof g_module_why);
        return g_module;
    }
    snprintf(g_module_why, sizeof g_module_why,
             "the CUDA backend of this build, %s, is neither beside the program (%s) nor in %s: "
             "rebuild (ninja -C BUILD builds it beside mha-train) or reinstall",
             MODULE_NAME, dir[0] ? dir : "its folder is unknown", MHA_CUDA_MODULE_DIR);
    return NULL;
}

static void *module_symbol(const char *name) {
    void *m = open_module();
    if (!m) return NULL;
    void *f = dlsym(m, name);
    if (!f) snprintf(g_module_why, sizeof g_module_why, "the CUDA backend %s has no %s: rebuild it",
                     MODULE_NAME, name);
    return f;
}

const Backend *mha_cuda_backend(int tf32, int bf16, char *why, size_t why_len) {
    pthread_mutex_lock(&g_lock);
    const Backend *be = NULL;
    BackendFn fn = NULL;
    if (driver_devices() <= 0) {
        if (why && why_len) snprintf(why, why_len, "%s", g_driver_why);
    } else if (!(fn = (BackendFn)module_symbol("mha_cuda_backend"))) {
        if (why && why_len) snprintf(why, why_len, "%s", g_module_why);
    }
    pthread_mutex_unlock(&g_lock);
    if (fn) be = fn(tf32, bf16, why, why_len);
    return be;
}

int mha_cuda_device_visible(void) {
    pthread_mutex_lock(&g_lock);
    const int n = driver_devices();
    pthread_mutex_unlock(&g_lock);
    return n > 0;
}
