/* kernels/cuda/reduce.cu: the sums an update needs, in double, deterministic, left on the
 * device (Backend.grad_norm, Backend.sum_into).
 * grad_norm: stage 1, a grid whose size depends only on n; each thread accumulates a fixed
 * strided subset of g*g, each block reduces by a fixed tree into one partial. Stage 2: one
 * block reduces the partials the same way and derives the clipping factor (mha_grad_scale).
 * sum_into: one block stages x in shared memory, one thread adds it up in index order (the
 * CPU's order: the loss sum has the same bits on both backends).
 */
#include "kernels/cuda/cuda_common.h"

#define SS_THREADS 256
#define SS_MAX_BLOCKS 1024

__device__ __forceinline__ double block_sum_double(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = SS_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    return sh[0];
}

__global__ void __launch_bounds__(SS_THREADS) sum_squares_stage1(double *partial, const float *x, size_t n) {
    __shared__ double sh[SS_THREADS];
    double acc = 0.0;
    for (size_t i = blockIdx.x * (size_t)SS_THREADS + threadIdx.x; i < n; i += (size_t)gridDim.x * SS_THREADS) {
        double v = x[i];
        acc += v * v;
    }
    double s = block_sum_double(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* stats[1] = the sum of the partials; *grad_scale from stats[0] (the loss sum) and it */
__global__ void __launch_bounds__(SS_THREADS)
grad_norm_stage2(double *stats, float *grad_scale, const double *partial, int G, float clip_norm) {
    __shared__ double sh[SS_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < G; i += SS_THREADS) acc += partial[i];
    double s = block_sum_double(acc, sh);
    if (threadIdx.x == 0) {
        stats[1] = s;
        *grad_scale = mha_grad_scale(stats[0], s, clip_norm);
    }
}

void mha_cu_grad_norm(double *stats, float *grad_scale, const float *g, size_t n, float clip_norm) {
    size_t want = (n + SS_THREADS * 4 - 1) / (SS_THREADS * 4);   /* ~4 elements per thread minimum */
    int G = (int)(want < 1 ? 1 : (want > SS_MAX_BLOCKS ? SS_MAX_BLOCKS : want));
    double *partial = (double *)mha_cu_scratch(MHA_SCRATCH_A, (size_t)G * sizeof(double));
    mha_launch(sum_squares_stage1, G, SS_THREADS)(partial, g, n);
    LAUNCH_CHECK();
    mha_launch(grad_norm_stage2, 1, SS_THREADS)(stats, grad_scale, partial, G, clip_norm);
    LAUNCH_CHECK();
}

__global__ void __launch_bounds__(SS_THREADS) sum_into_kernel(double *acc, const float *x, size_t n) {
    __shared__ float sh[SS_THREADS];
    double s = 0.0;
    for (size_t i0 = 0; i0 < n; i0 += SS_THREADS) {
        const size_t i = i0 + threadIdx.x;
        if (i < n) sh[threadIdx.x] = x[i];
        __syncthreads();
        if (threadIdx.x == 0) {
            const int m = n - i0 < SS_THREADS ? (int)(n - i0) : SS_THREADS;
            for (int j = 0; j < m; j++) s += sh[j];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) *acc += s;
}

void mha_cu_sum_into(double *acc, const float *x, size_t n) {
    mha_launch(sum_into_kernel, 1, SS_THREADS)(acc, x, n);
    LAUNCH_CHECK();
}
