// AdamW over the flat parameter buffer, step for step as torch.optim.AdamW (foreach=False,
// non-capturable) computes it:
//   p *= 1 - lr*wd;  m += (1-b1)*(g - m);  v = v*b2 + (1-b2)*g*g;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// fp32 parameters, gradients and moments; four elements per thread (every range starts on a
// 64-element boundary of the flat buffer and its length is a multiple of 4, so float4 loads are
// aligned). Both kernels run the same `adamw_x4_at`, so they give the same bits.

#include "common.cuh"

__device__ __forceinline__ void adamw_one(float& p, float g, float& m, float& v, float decay, float b1, float b2,
                                          float eps, float step_size, float bc2_sqrt) {
    p *= decay;
    m += (1.0f - b1) * (g - m);
    v = v * b2 + (1.0f - b2) * g * g;
    p -= step_size * (m / (sqrtf(v) / bc2_sqrt + eps));
}

// The four elements of float4 `i`, updated in place; returns the new parameters.
__device__ __forceinline__ float4 adamw_x4_at(float4* p, const float4* g, float4* m, float4* v, i64 i, float decay,
                                              float b1, float b2, float eps, float step_size, float bc2_sqrt) {
    float4 pp = p[i], gg = g[i], mm = m[i], vv = v[i];
    adamw_one(pp.x, gg.x, mm.x, vv.x, decay, b1, b2, eps, step_size, bc2_sqrt);
    adamw_one(pp.y, gg.y, mm.y, vv.y, decay, b1, b2, eps, step_size, bc2_sqrt);
    adamw_one(pp.z, gg.z, mm.z, vv.z, decay, b1, b2, eps, step_size, bc2_sqrt);
    adamw_one(pp.w, gg.w, mm.w, vv.w, decay, b1, b2, eps, step_size, bc2_sqrt);
    p[i] = pp;
    m[i] = mm;
    v[i] = vv;
    return pp;
}

// The whole buffer in one grid-stride pass (the update after the backward).
extern "C" __global__ void adamw_x4(float4* p, const float4* g, float4* m, float4* v, i64 n4, float decay, float b1,
                                    float b2, float eps, float step_size, float bc2_sqrt) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n4; i += (i64)gridDim.x * blockDim.x) {
        adamw_x4_at(p, g, m, v, i, decay, b1, b2, eps, step_size, bc2_sqrt);
    }
}

// One range of the buffer (a block's parameters), launched on a low-priority stream beside the
// backward: one float4 per thread and a block per 256 of them, so that blocks are short and the
// backward's kernels, on the high-priority stream, take SMs back as soon as blocks end (a
// grid-stride loop would hold its SMs to the end). When `p_bf16` is not null the updated
// parameters are also written there rounded to bf16 (nearest even): the weight copy the next
// forward's bf16 GEMMs read, with no cast pass of its own.
extern "C" __global__ void adamw_range_x4(float4* p, const float4* g, float4* m, float4* v, uint2* p_bf16, i64 n4,
                                          float decay, float b1, float b2, float eps, float step_size,
                                          float bc2_sqrt) {
    i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x;
    if (i >= n4) return;
    const float4 pp = adamw_x4_at(p, g, m, v, i, decay, b1, b2, eps, step_size, bc2_sqrt);
    if (p_bf16 != 0) {
        uint2 o;
        o.x = (unsigned)f32_to_bf16(pp.x) | ((unsigned)f32_to_bf16(pp.y) << 16);
        o.y = (unsigned)f32_to_bf16(pp.z) | ((unsigned)f32_to_bf16(pp.w) << 16);
        p_bf16[i] = o;
    }
}
