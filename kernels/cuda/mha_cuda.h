/* kernels/cuda/mha_cuda.h: extras of the CUDA backend beyond the Backend table (C API).
 *
 * These symbols exist only in builds with the CUDA backend (meson defines have_cuda);
 * kernels/cuda_absent.c does not provide them, so callers outside kernels/cuda/ must be
 * compiled only when CUDA is built, or check mha_cuda_backend() != NULL first and guard
 * the call with a build-time macro.
 */
#ifndef MHA_KERNELS_CUDA_MHA_CUDA_H
#define MHA_KERNELS_CUDA_MHA_CUDA_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bytes asked for by the most recent alloc() of the CUDA backend (for an OOM message). */
size_t mha_cuda_last_alloc_request(void);
/* Device bytes currently held through alloc(), and the most ever held at once (including
 * the backend's own scratch buffers). */
size_t mha_cuda_bytes_in_use(void);
size_t mha_cuda_peak_bytes(void);
/* Resets the peak to the current use. */
void mha_cuda_reset_peak(void);
/* Device name and free/total memory in one line, e.g. for a training log. */
void mha_cuda_describe(char *buf, size_t len);

#ifdef __cplusplus
}
#endif
#endif
