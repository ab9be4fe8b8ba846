/* kernels/cuda/adamw.cu: AdamW exactly as torch.optim.AdamW (single-tensor path):
 *   p *= 1 - lr*wd;  m = lerp(m, g, 1 - beta1);  v = beta2*v + (1 - beta2)*g*g;
 *   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * The bias corrections are computed on the host in double, as Python does.
 */
#include "kernels/cuda/cuda_common.h"

#include <cmath>

__global__ void adamw_kernel(float *p, const float *g, float *m, float *v, size_t n, float decay,
                             float w1, float beta2, float w2, float step_size, float bc2_sqrt,
                             float eps) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const float gi = g[i];
        float pi = p[i] * decay;
        float mi = m[i];
        mi = w1 < 0.5f ? mi + w1 * (gi - mi) : gi - (gi - mi) * (1.0f - w1);   /* torch lerp */
        float vi = v[i] * beta2 + w2 * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        pi = pi - step_size * (mi / denom);
        p[i] = pi;
        m[i] = mi;
        v[i] = vi;
    }
}

void mha_cu_adamw(float *p, const float *g, float *m, float *v, size_t n, float lr, float beta1,
                  float beta2, float eps, float weight_decay, int t) {
    if (!n) return;
    MHA_CU_REQUIRE(t >= 1, "adamw: step t is 1-based");
    const double bc1 = 1.0 - pow((double)beta1, (double)t);
    const double bc2 = 1.0 - pow((double)beta2, (double)t);
    const float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    const float step_size = (float)((double)lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    mha_launch(adamw_kernel, mha_cu_blocks(n, 256), 256)(p, g, m, v, n, decay, 1.0f - beta1, beta2,
                                                 1.0f - beta2, step_size, bc2_sqrt, eps);
    LAUNCH_CHECK();
}
