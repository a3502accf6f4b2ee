// SwiGLU's gate: g = silu(h1) * h3, where [h1 | h3] is one row of the fused W1/W3 GEMM's output
// ([rows, 2*dff]). Math in fp32.

#include "common.cuh"

template <typename T>
__device__ void swiglu_fwd_body(const T* h13, T* g, i64 rows, int dff) {
    i64 n = rows * dff;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < n; idx += (i64)gridDim.x * blockDim.x) {
        i64 r = idx / dff;
        int j = idx % dff;
        float a = ld(h13, r * 2 * dff + j), b = ld(h13, r * 2 * dff + dff + j);
        st(g, idx, a / (1.0f + expf(-a)) * b);
    }
}

template <typename T>
__device__ void swiglu_bwd_body(const T* h13, const T* dg, T* dh13, i64 rows, int dff) {
    i64 n = rows * dff;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < n; idx += (i64)gridDim.x * blockDim.x) {
        i64 r = idx / dff;
        int j = idx % dff;
        float a = ld(h13, r * 2 * dff + j), b = ld(h13, r * 2 * dff + dff + j), gr = ld(dg, idx);
        float s = 1.0f / (1.0f + expf(-a));
        st(dh13, r * 2 * dff + j, gr * b * s * (1.0f + a * (1.0f - s)));
        st(dh13, r * 2 * dff + dff + j, gr * a * s);
    }
}

#define SWIGLU_KERNELS(S, T) \
    extern "C" __global__ void swiglu_fwd_##S(const T* h13, T* g, i64 rows, int dff) { swiglu_fwd_body<T>(h13, g, rows, dff); } \
    extern "C" __global__ void swiglu_bwd_##S(const T* h13, const T* dg, T* dh13, i64 rows, int dff) { \
        swiglu_bwd_body<T>(h13, dg, dh13, rows, dff); }
FOR_ACT_TYPES(SWIGLU_KERNELS)

// The same, 16 bytes per thread (8 bf16 or 4 fp32 elements): d_ff a multiple of 8 and the
// buffers 16-byte aligned, rows * d_ff under 2^31. Identical arithmetic, so identical bits.
template <typename T>
__device__ void swiglu_fwd_vec_body(const T* h13, T* g, unsigned rows, unsigned dff) {
    constexpr int N = Vec16<T>::N;
    unsigned nv = dff / N, n = rows * nv;
    for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        unsigned r = idx / nv, j = (idx % nv) * N;
        float a[N], b[N], o[N];
        load_vec16(h13 + (i64)r * 2 * dff + j, a);
        load_vec16(h13 + (i64)r * 2 * dff + dff + j, b);
#pragma unroll
        for (int e = 0; e < N; ++e) o[e] = a[e] / (1.0f + expf(-a[e])) * b[e];
        store_vec16(g + (i64)r * dff + j, o);
    }
}

template <typename T>
__device__ void swiglu_bwd_vec_body(const T* h13, const T* dg, T* dh13, unsigned rows, unsigned dff) {
    constexpr int N = Vec16<T>::N;
    unsigned nv = dff / N, n = rows * nv;
    for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        unsigned r = idx / nv, j = (idx % nv) * N;
        float a[N], b[N], gr[N], d1[N], d3[N];
        load_vec16(h13 + (i64)r * 2 * dff + j, a);
        load_vec16(h13 + (i64)r * 2 * dff + dff + j, b);
        load_vec16(dg + (i64)r * dff + j, gr);
#pragma unroll
        for (int e = 0; e < N; ++e) {
            float s = 1.0f / (1.0f + expf(-a[e]));
            d1[e] = gr[e] * b[e] * s * (1.0f + a[e] * (1.0f - s));
            d3[e] = gr[e] * a[e] * s;
        }
        store_vec16(dh13 + (i64)r * 2 * dff + j, d1);
        store_vec16(dh13 + (i64)r * 2 * dff + dff + j, d3);
    }
}

#define SWIGLU_VEC_KERNELS(S, T) \
    extern "C" __global__ void swiglu_fwd_vec_##S(const T* h13, T* g, unsigned rows, unsigned dff) { \
        swiglu_fwd_vec_body<T>(h13, g, rows, dff); } \
    extern "C" __global__ void swiglu_bwd_vec_##S(const T* h13, const T* dg, T* dh13, unsigned rows, unsigned dff) { \
        swiglu_bwd_vec_body<T>(h13, dg, dh13, rows, dff); }
FOR_ACT_TYPES(SWIGLU_VEC_KERNELS)
