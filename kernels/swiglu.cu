// SwiGLU's gate: g = silu(h1) * h3, where [h1 | h3] is one row of the fused W1/W3 GEMM's output
// ([rows, 2*dff]). Math in fp32.

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
