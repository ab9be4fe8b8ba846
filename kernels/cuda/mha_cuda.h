/* kernels/cuda/mha_cuda.h: extras of the CUDA backend beyond the Backend table (C API).
 *
 * These symbols exist only where the CUDA backend is linked in: the CUDA tests and the
 * attention benchmark (cuda_test_dep in meson.build). The programs open the backend as a module
 * (kernels/cuda_loader.c) and reach it through the Backend table only; neither
 * kernels/cuda_absent.c nor the loader provides these.
 */
#ifndef MHA_KERNELS_CUDA_MHA_CUDA_H
#define MHA_KERNELS_CUDA_MHA_CUDA_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device bytes currently held through alloc(), and the most ever held at once (including
 * the backend's own scratch buffers). */
size_t mha_cuda_bytes_in_use(void);
size_t mha_cuda_peak_bytes(void);
/* Resets the peak to the current use. */
void mha_cuda_reset_peak(void);
/* Device name and free/total memory in one line, e.g. for a training log. */
void mha_cuda_describe(char *buf, size_t len);

/* The kernel behind the fp32 table's fused attention for heads of size <= 64:
 *   MHA_CUDA_ATTN_TF32X3: its products on tf32 tensor cores, each operand split into two tf32
 *     parts and three products summed (fp32 accuracy, as PyTorch's fp32 memory-efficient
 *     attention); the default on sm_80 and newer;
 *   MHA_CUDA_ATTN_SIMT: plain fp32 FFMA on the CUDA cores (always used for larger heads, before
 *     sm_80, and where the tf32x3 kernels need more shared memory per block than the GPU
 *     allows: heads of 33-64 on sm_86/sm_89, which allow 99 KiB).
 * The environment variable MHA_CUDA_FP32_ATTENTION=tf32x3|simt sets it when the backend
 * starts (another value exits with code 2 and a message). set returns 0, or -1 when the GPU
 * cannot run the kernel asked for (tf32x3 before sm_80) or the backend has not started. */
enum { MHA_CUDA_ATTN_SIMT = 0, MHA_CUDA_ATTN_TF32X3 = 1 };
int mha_cuda_fp32_attention(void);
int mha_cuda_set_fp32_attention(int kind);
/* The kernel the fp32 fused attention runs for heads of size hs on this GPU under the setting
 * `kind` (MHA_CUDA_ATTN_SIMT whenever tf32x3 cannot run there); changes nothing. */
int mha_cuda_fp32_attention_kernel(int kind, int hs);

#ifdef __cplusplus
}
#endif
#endif
