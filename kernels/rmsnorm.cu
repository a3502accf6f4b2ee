// RMSNorm, computed in fp32 whatever the activation type: y = x * rsqrt(mean(x^2) + eps) * w.
// The residual stream x is always fp32; y is written in the activation type (fp32, or bf16 when
// it only feeds bf16 GEMMs, which is what autocast would cast it to).

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

// The backward of a norm in one pass over dy and x: dx as rmsnorm_bwd computes it (same
// per-thread order of the dot product, so the same bits), and the gain's gradient summed over
// this block's rows into dw_part[blockIdx.x][:] (rmsnorm_dw_reduce adds the blocks' sums up, so
// dw is written once, no atomics). Block b owns rows [b * rows_per_block, ...), 256 threads,
// thread i the columns i, i + 256, ...: d at most 256 * RMS_BWD_MAX_COLS (4096), the row of dy
// and x held in registers between the dot product and the writes.
#define RMS_BWD_THREADS 256
#define RMS_BWD_MAX_COLS 16

extern "C" __global__ void __launch_bounds__(RMS_BWD_THREADS)
rmsnorm_bwd_dw_part(const float* dy, const float* x, const float* w, const float* rstd, const float* dres, float* dx,
                    bf16_t* dx_bf16, float* dw_part, int rows, int rows_per_block, int d) {
    float wk[RMS_BWD_MAX_COLS], acc[RMS_BWD_MAX_COLS];
#pragma unroll
    for (int k = 0; k < RMS_BWD_MAX_COLS; ++k) {
        int j = threadIdx.x + k * RMS_BWD_THREADS;
        wk[k] = j < d ? w[j] : 0.0f;
        acc[k] = 0.0f;
    }
    int r0 = blockIdx.x * rows_per_block, r1 = min(rows, r0 + rows_per_block);
    for (int r = r0; r < r1; ++r) {
        const float* dyr = dy + (i64)r * d;
        const float* xr = x + (i64)r * d;
        float dyv[RMS_BWD_MAX_COLS], xv[RMS_BWD_MAX_COLS];
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < RMS_BWD_MAX_COLS; ++k) {
            int j = threadIdx.x + k * RMS_BWD_THREADS;
            dyv[k] = j < d ? dyr[j] : 0.0f;
            xv[k] = j < d ? xr[j] : 0.0f;
            if (j < d) dot += dyv[k] * wk[k] * xv[k];
        }
        dot = block_sum(dot);
        float rs = rstd[r];
        float c = rs * rs * rs * dot / (float)d;
#pragma unroll
        for (int k = 0; k < RMS_BWD_MAX_COLS; ++k) {
            int j = threadIdx.x + k * RMS_BWD_THREADS;
            if (j < d) {
                float g = dyv[k] * wk[k] * rs - xv[k] * c;
                if (dres != 0) g += dres[(i64)r * d + j];
                dx[(i64)r * d + j] = g;
                if (dx_bf16 != 0) dx_bf16[(i64)r * d + j] = f32_to_bf16(g);
                acc[k] += dyv[k] * xv[k] * rs;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < RMS_BWD_MAX_COLS; ++k) {
        int j = threadIdx.x + k * RMS_BWD_THREADS;
        if (j < d) dw_part[(i64)blockIdx.x * d + j] = acc[k];
    }
}

// dw[j] = sum over the parts p of part[p][j], as rmsnorm_dw sums rows: block (32, 16) owns 32
// columns, its 16 rows of threads split the parts and add up in shared memory.
extern "C" __global__ void rmsnorm_dw_reduce(const float* part, float* dw, int parts, int d) {
    __shared__ float s[16][33];
    int j = blockIdx.x * 32 + threadIdx.x;
    float acc = 0.0f;
    if (j < d)
        for (int p = threadIdx.y; p < parts; p += blockDim.y) acc += part[(i64)p * d + j];
    s[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && j < d) {
        float t = 0.0f;
        for (int k = 0; k < blockDim.y; ++k) t += s[k][threadIdx.x];
        dw[j] = t;
    }
}
