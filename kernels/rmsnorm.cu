// RMSNorm's forward, computed in fp32 whatever the activation type:
// y = x * rsqrt(mean(x^2) + eps) * w. The residual stream x is always fp32; y is written in the
// activation type (fp32, or bf16 when it only feeds bf16 GEMMs, which is what autocast would cast
// it to). The backward is rmsnorm_bwd.cu.

#include "common.cuh"

// Four outputs at y[i..i+4) (i a multiple of 4): 16 bytes of fp32, 8 of bf16.
__device__ __forceinline__ void st4(float* y, i64 i, float4 o) { *reinterpret_cast<float4*>(y + i) = o; }
__device__ __forceinline__ void st4(bf16_t* y, i64 i, float4 o) {
    uint2 b;
    b.x = (unsigned)f32_to_bf16(o.x) | ((unsigned)f32_to_bf16(o.y) << 16);
    b.y = (unsigned)f32_to_bf16(o.z) | ((unsigned)f32_to_bf16(o.w) << 16);
    *reinterpret_cast<uint2*>(y + i) = b;
}

// One block per row. Rows of up to 16 floats a thread, d a multiple of 4, are read once, 16 bytes
// at a time, and kept in registers between the sum and the writes; wider rows are read twice.
#define RMS_FWD_VEC 4

template <typename TO>
__device__ void rmsnorm_fwd_body(const float* x, const float* w, TO* y, float* rstd, int d, float eps) {
    i64 r = blockIdx.x;
    const float* xr = x + r * d;
    if ((d & 3) == 0 && d <= 4 * RMS_FWD_VEC * (int)blockDim.x) {
        float4 v[RMS_FWD_VEC];
        float ss = 0.0f;
#pragma unroll
        for (int k = 0; k < RMS_FWD_VEC; ++k) {
            const int c = threadIdx.x + k * blockDim.x;
            v[k] = 4 * c < d ? *reinterpret_cast<const float4*>(xr + 4 * c) : make_float4(0.f, 0.f, 0.f, 0.f);
            ss += v[k].x * v[k].x + v[k].y * v[k].y + v[k].z * v[k].z + v[k].w * v[k].w;
        }
        ss = block_sum(ss);
        const float rs = rsqrtf(ss / (float)d + eps);
        if (rstd != 0 && threadIdx.x == 0) rstd[r] = rs;
#pragma unroll
        for (int k = 0; k < RMS_FWD_VEC; ++k) {
            const int c = threadIdx.x + k * blockDim.x;
            if (4 * c >= d) continue;
            const float4 wk = *reinterpret_cast<const float4*>(w + 4 * c);
            st4(y, r * d + 4 * c,
                make_float4(v[k].x * rs * wk.x, v[k].y * rs * wk.y, v[k].z * rs * wk.z, v[k].w * rs * wk.w));
        }
        return;
    }
    float ss = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = xr[j];
        ss += v * v;
    }
    ss = block_sum(ss);
    float rs = rsqrtf(ss / (float)d + eps);
    if (rstd != 0 && threadIdx.x == 0) rstd[r] = rs;
    for (int j = threadIdx.x; j < d; j += blockDim.x) st(y, r * d + j, xr[j] * rs * w[j]);
}

#define RMSNORM_FWD(S, T) \
    extern "C" __global__ void rmsnorm_fwd_##S(const float* x, const float* w, T* y, float* rstd, int d, float eps) { \
        rmsnorm_fwd_body<T>(x, w, y, rstd, d, eps); }
FOR_ACT_TYPES(RMSNORM_FWD)
