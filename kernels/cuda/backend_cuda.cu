/* kernels/cuda/backend_cuda.cu: placeholder until the CUDA backend is written. */
#include <cstdio>
extern "C" {
#include "kernels/backend.h"
const Backend *mha_cuda_backend(int tf32, char *why, size_t why_len) {
    (void)tf32;
    if (why && why_len) snprintf(why, why_len, "CUDA backend not written yet");
    return NULL;
}
}
