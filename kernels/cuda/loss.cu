/* kernels/cuda/loss.cu: softmax cross-entropy with label smoothing (torch semantics).
 * One warp per example:
 *   lse = log sum_k exp(x_k),  probs_k = exp(x_k - lse),
 *   loss = (1 - eps) * (lse - x_y) + eps * (lse - mean_k x_k)
 *        (= -[(1 - eps) logp_y + (eps / K) sum_k logp_k], as torch),
 *   dlogits_k += (probs_k - target_k) * dscale,  target = (1 - eps) * onehot(y) + eps / K.
 * A label outside [0, K) gives a NaN loss, so it cannot pass unnoticed (as the CPU backend).
 */
#include "kernels/cuda/cuda_common.h"

#include <cmath>

__global__ void crossentropy_kernel(float *losses, float *probs, float *dlogits, const float *logits,
                                    const int32_t *labels, int B, int K, float eps, float dscale) {
    const int lane = threadIdx.x & 31;
    const int b = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= B) return;
    const float *x = logits + (size_t)b * K;
    float m = -INFINITY;
    for (int k = lane; k < K; k += 32) m = fmaxf(m, x[k]);
    m = warp_max(m);
    float s = 0.0f, sx = 0.0f;
    for (int k = lane; k < K; k += 32) {
        s += expf(x[k] - m);
        sx += x[k];
    }
    s = warp_sum(s);
    sx = warp_sum(sx);
    const float lse = m + logf(s);
    const int y = labels[b];
    const bool ok = y >= 0 && y < K;
    const float smooth = eps / (float)K;
    for (int k = lane; k < K; k += 32) {
        const float p = expf(x[k] - lse);
        if (probs) probs[(size_t)b * K + k] = p;
        if (dlogits) {
            const float target = (k == y ? 1.0f - eps : 0.0f) + smooth;
            dlogits[(size_t)b * K + k] += (p - target) * dscale;
        }
    }
    if (lane == 0 && losses) {
        if (!ok) {
            losses[b] = NAN;
        } else {
            losses[b] = (1.0f - eps) * (lse - x[y]) + eps * (lse - sx / (float)K);
        }
    }
}

void mha_cu_crossentropy(float *losses, float *probs, float *dlogits, const float *logits,
                         const int32_t *labels, int B, int K, float smoothing, float dscale) {
    if (B <= 0 || K <= 0) return;
    mha_launch(crossentropy_kernel, (B + 7) / 8, 256)(losses, probs, dlogits, logits, labels, B, K, smoothing,
                                              dscale);
    LAUNCH_CHECK();
}
