// Cross-entropy over the vocabulary, in fp32 from logits of either type (PyTorch's
// `cross_entropy(logits.float(), targets)`, mean over rows), fused with its gradient.

#include "common.cuh"

// One block per row: row_loss[r] = logsumexp(x) - x[target]; when dlogits is given,
// dlogits = (softmax(x) - onehot(target)) * inv_n.
template <typename T>
__device__ void cross_entropy_body(const T* logits, const int* targets, float* row_loss, T* dlogits, int V, float inv_n) {
    i64 r = blockIdx.x;
    const T* x = logits + r * V;
    float m = NEG_INF;
    for (int j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, ld(x, j));
    m = block_max(m);
    float s = 0.0f;
    for (int j = threadIdx.x; j < V; j += blockDim.x) s += expf(ld(x, j) - m);
    s = block_sum(s);
    float lse = m + logf(s);
    int tgt = targets[r];
    if (threadIdx.x == 0) row_loss[r] = lse - ld(x, tgt);
    if (dlogits != 0)
        for (int j = threadIdx.x; j < V; j += blockDim.x)
            st(dlogits, r * V + j, (expf(ld(x, j) - lse) - (j == tgt ? 1.0f : 0.0f)) * inv_n);
}

#define LOSS_KERNELS(S, T) \
    extern "C" __global__ void cross_entropy_##S(const T* logits, const int* targets, float* row_loss, T* dlogits, int V, float inv_n) { \
        cross_entropy_body<T>(logits, targets, row_loss, dlogits, V, inv_n); }
FOR_ACT_TYPES(LOSS_KERNELS)

// out[0] = mean(x[0..n]); one block.
extern "C" __global__ void mean_f32(const float* x, int n, float* out) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
    s = block_sum(s);
    if (threadIdx.x == 0) out[0] = s / (float)n;
}
