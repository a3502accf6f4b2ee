// RMSNorm's forward, computed in fp32 whatever the activation type:
// y = x * rsqrt(mean(x^2) + eps) * w. The residual stream x is always fp32; y is written in the
// activation type (fp32, or bf16 when it only feeds bf16 GEMMs, which is what autocast would cast
// it to). The backward is rmsnorm_bwd.cu.

#include "common.cuh"

template <typename TO>
__device__ void rmsnorm_fwd_body(const float* x, const float* w, TO* y, float* rstd, int d, float eps) {
    i64 r = blockIdx.x;
    const float* xr = x + r * d;
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
