/* kernels/cuda/reduce.cu: sum of squares in double, deterministic.
 * Stage 1: a grid whose size depends only on n; each thread accumulates a fixed strided
 * subset in double, each block reduces by a fixed tree into one partial. Stage 2: one block
 * reduces the partials the same way. The result is copied to the host (this synchronises).
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

__global__ void __launch_bounds__(SS_THREADS) sum_squares_stage2(double *result, const double *partial, int G) {
    __shared__ double sh[SS_THREADS];
    double acc = 0.0;
    for (int i = threadIdx.x; i < G; i += SS_THREADS) acc += partial[i];
    double s = block_sum_double(acc, sh);
    if (threadIdx.x == 0) *result = s;
}

double mha_cu_sum_squares(const float *x, size_t n) {
    if (!n) return 0.0;
    size_t want = (n + SS_THREADS * 4 - 1) / (SS_THREADS * 4);   /* ~4 elements per thread minimum */
    int G = (int)(want < 1 ? 1 : (want > SS_MAX_BLOCKS ? SS_MAX_BLOCKS : want));
    double *buf = (double *)mha_cu_scratch(MHA_SCRATCH_A, (size_t)(G + 1) * sizeof(double));
    mha_launch(sum_squares_stage1, G, SS_THREADS)(buf + 1, x, n);
    LAUNCH_CHECK();
    mha_launch(sum_squares_stage2, 1, SS_THREADS)(buf, buf + 1, G);
    LAUNCH_CHECK();
    double r = 0.0;
    CUDA_CHECK(cudaMemcpy(&r, buf, sizeof r, cudaMemcpyDeviceToHost));
    return r;
}
