// RMSNorm, computed in fp32 whatever the activation type: y = x * rsqrt(mean(x^2) + eps) * w.
// The residual stream x is always fp32; y is written in the activation type (fp32, or bf16 when
// it only feeds bf16 GEMMs, which is what autocast would cast it to).

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

// dx = dy*w*r - x * r^3 * mean(dy*w*x) (+ dres, the gradient arriving through the residual).
// dy is the fp32 output of the GEMM that consumed y. Writes dx in fp32 and, when dx_bf16 is
// given, its bf16 copy for the bf16 GEMMs that consume it next. dx may alias dres.
extern "C" __global__ void rmsnorm_bwd(const float* dy, const float* x, const float* w, const float* rstd,
                                       const float* dres, float* dx, bf16_t* dx_bf16, int d) {
    i64 r = blockIdx.x;
    const float* dyr = dy + r * d;
    const float* xr = x + r * d;
    float rs = rstd[r];
    float dot = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) dot += dyr[j] * w[j] * xr[j];
    dot = block_sum(dot);
    float c = rs * rs * rs * dot / (float)d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float g = dyr[j] * w[j] * rs - xr[j] * c;
        if (dres != 0) g += dres[r * d + j];
        dx[r * d + j] = g;
        if (dx_bf16 != 0) dx_bf16[r * d + j] = f32_to_bf16(g);
    }
}

// dw[j] = sum over rows of dy*x*r. Block (32, 16) owns 32 columns; its 16 rows of threads split
// the rows and add up in shared memory, so each dw[j] is written once (no atomics, no zeroing).
extern "C" __global__ void rmsnorm_dw(const float* dy, const float* x, const float* rstd, float* dw, int rows, int d) {
    __shared__ float part[16][33];
    int j = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (j < d)
        for (int r = threadIdx.y; r < rows; r += blockDim.y) acc += dy[(i64)r * d + j] * x[(i64)r * d + j] * rstd[r];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < d) {
        float s = 0.0f;
        for (int k = 0; k < blockDim.y; ++k) s += part[k][threadIdx.x];
        dw[j] = s;
    }
}
