/* kernels/cuda_absent.c: stands in for the CUDA backend in builds without nvcc. */
#include "kernels/backend.h"
#include <stdio.h>

int mha_cuda_device_visible(void) { return 0; }

const Backend *mha_cuda_backend(int tf32, int bf16, char *why, size_t why_len) {
    (void)tf32;
    (void)bf16;
    if (why && why_len)
        snprintf(why, why_len, "this mha was built without CUDA (rebuild with nvcc installed "
                 "and meson -Dcuda=enabled)");
    return NULL;
}
