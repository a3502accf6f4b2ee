// Token embedding: a row gather forward, a scatter-add backward.

#include "common.cuh"

// x[r, :] = emb[tokens[r], :]; one block per row.
extern "C" __global__ void embedding_fwd(const int* tokens, const float* emb, float* x, int d) {
    i64 r = blockIdx.x;
    const float* src = emb + (i64)tokens[r] * d;
    float* dst = x + r * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) dst[j] = src[j];
}

// demb[tokens[r], :] += dx[r, :] (demb zeroed first); repeated tokens add atomically.
extern "C" __global__ void embedding_bwd(const int* tokens, const float* dx, float* demb, int d) {
    i64 r = blockIdx.x;
    float* dst = demb + (i64)tokens[r] * d;
    const float* src = dx + r * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) atomicAdd(dst + j, src[j]);
}
