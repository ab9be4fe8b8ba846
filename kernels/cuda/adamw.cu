/* kernels/cuda/adamw.cu: AdamW exactly as torch.optim.AdamW (single-tensor path), for every
 * parameter tensor of the model in one launch (up to ADAMW_GROUP tensors per launch):
 *   g *= *grad_scale;  p *= 1 - lr*wd;  m = lerp(m, g, 1 - beta1);  v = beta2*v + (1 - beta2)*g*g;
 *   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * The factor is read on the device (grad_norm wrote it, reduce.cu); when it is not finite the
 * update is skipped and nothing is written.
 * The bias corrections are computed on the host in double, as Python does. The tensors'
 * blocks are laid end to end (tensor k owns blocks first[k] .. first[k+1]-1), so no block
 * idles whatever the tensors' sizes; one launch replaces one per tensor (18 for one layer).
 */
#include "kernels/cuda/cuda_common.h"

#include <cmath>

#define ADAMW_GROUP 64        /* tensors per launch: the table travels as a kernel argument */
#define ADAMW_THREADS 256
#define ADAMW_PER_BLOCK 2048  /* elements per block: 8 per thread */

struct AdamwTable {
    int n;                                /* tensors in this launch */
    size_t offset[ADAMW_GROUP], numel[ADAMW_GROUP];
    float decay[ADAMW_GROUP];             /* 1 - lr * wd */
    int first[ADAMW_GROUP + 1];           /* first block of each tensor; first[n] = grid size */
};

struct AdamwStep {
    float w1, beta2, w2, step_size, bc2_sqrt, eps;
};

__global__ void __launch_bounds__(ADAMW_THREADS) adamw_kernel(float *__restrict__ p, const float *__restrict__ g,
                                                              float *__restrict__ m, float *__restrict__ v,
                                                              AdamwTable tab, AdamwStep s,
                                                              const float *__restrict__ grad_scale_at) {
    const float grad_scale = *grad_scale_at;
    if (!isfinite(grad_scale)) return;   /* a skipped update: nothing changes */
    int k = 0;
    while (k + 1 < tab.n && (int)blockIdx.x >= tab.first[k + 1]) k++;   /* at most 64 steps, uniform */
    const size_t base = tab.offset[k], n = tab.numel[k];
    const size_t i0 = (size_t)(blockIdx.x - tab.first[k]) * ADAMW_PER_BLOCK;
    const float decay = tab.decay[k];
    for (size_t j = i0 + threadIdx.x; j < n && j < i0 + ADAMW_PER_BLOCK; j += ADAMW_THREADS) {
        const size_t i = base + j;
        const float gi = __fmul_rn(g[i], grad_scale);   /* rounded, as the old in-place clip stored it */
        float pi = p[i] * decay;
        float mi = m[i];
        mi = s.w1 < 0.5f ? mi + s.w1 * (gi - mi) : gi - (gi - mi) * (1.0f - s.w1);   /* torch lerp */
        float vi = v[i] * s.beta2 + s.w2 * gi * gi;
        const float denom = sqrtf(vi) / s.bc2_sqrt + s.eps;
        pi = pi - s.step_size * (mi / denom);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

void mha_cu_adamw(float *p, const float *g, float *m, float *v, const AdamwTensor *tensors,
                  int n_tensors, float lr, float beta1, float beta2, float eps, const float *grad_scale,
                  int t) {
    MHA_CU_REQUIRE(t >= 1, "adamw: step t is 1-based");
    const double bc1 = 1.0 - pow((double)beta1, (double)t);
    const double bc2 = 1.0 - pow((double)beta2, (double)t);
    AdamwStep s;
    s.w1 = 1.0f - beta1;
    s.beta2 = beta2;
    s.w2 = 1.0f - beta2;
    s.step_size = (float)((double)lr / bc1);
    s.bc2_sqrt = (float)sqrt(bc2);
    s.eps = eps;
    for (int k0 = 0; k0 < n_tensors; k0 += ADAMW_GROUP) {
        AdamwTable tab;
        tab.n = 0;
        long long blocks = 0;
        for (int k = k0; k < n_tensors && k < k0 + ADAMW_GROUP; k++) {
            if (!tensors[k].n) continue;
            tab.offset[tab.n] = tensors[k].offset;
            tab.numel[tab.n] = tensors[k].n;
            tab.decay[tab.n] = (float)(1.0 - (double)lr * (double)tensors[k].weight_decay);
            tab.first[tab.n] = (int)blocks;
            blocks += (long long)((tensors[k].n + ADAMW_PER_BLOCK - 1) / ADAMW_PER_BLOCK);
            tab.n++;
        }
        if (!tab.n) continue;
        MHA_CU_REQUIRE(blocks <= 0x7fffffffLL, "adamw: more than 2^31 blocks of parameters");
        tab.first[tab.n] = (int)blocks;
        mha_launch(adamw_kernel, (unsigned int)blocks, ADAMW_THREADS)(p, g, m, v, tab, s, grad_scale);
        LAUNCH_CHECK();
    }
}
