// Shared by every kernel file, each of which includes it: bf16 conversions, loads and stores
// generic over fp32 and bf16, warp and block reductions, 16-byte vector loads and stores.
//
// bf16 is handled as its bit pattern (unsigned short) so that no CUDA header is needed: loads
// widen exactly, stores round to nearest even as PyTorch's casts do. block_sum and block_max need
// blockDim.x a multiple of 32, at most 1024.

#ifndef COMMON_CUH
#define COMMON_CUH

typedef unsigned short bf16_t;
typedef long long i64;

#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float bf16_to_f32(bf16_t h) { return __uint_as_float(((unsigned)h) << 16); }

__device__ __forceinline__ bf16_t f32_to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (bf16_t)(u >> 16);
}

__device__ __forceinline__ float ld(const float* p, i64 i) { return p[i]; }
__device__ __forceinline__ float ld(const bf16_t* p, i64 i) { return bf16_to_f32(p[i]); }
__device__ __forceinline__ void st(float* p, i64 i, float v) { p[i] = v; }
__device__ __forceinline__ void st(bf16_t* p, i64 i, float v) { p[i] = f32_to_bf16(v); }

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // `part` may still be read by a previous call
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < nwarps ? part[lane] : 0.0f;
    return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v) {
    __shared__ float part[32];
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    v = lane < nwarps ? part[lane] : NEG_INF;
    return warp_max(v);
}

// Instantiate a templated kernel body for fp32 and bf16 activations as `name_f32`/`name_bf16`.
#define FOR_ACT_TYPES(X) X(f32, float) X(bf16, bf16_t)

// 16 bytes of T at p (16-byte aligned) as VEC16<T> floats, and floats back into 16 bytes (bf16
// rounded to nearest even). Element 2i of a bf16 vector is the low half of its word i.
template <typename T> struct Vec16 { static constexpr int N = 16 / sizeof(T); };

__device__ __forceinline__ void load_vec16(const float* p, float* o) {
    float4 v = *reinterpret_cast<const float4*>(p);
    o[0] = v.x; o[1] = v.y; o[2] = v.z; o[3] = v.w;
}

__device__ __forceinline__ void load_vec16(const bf16_t* p, float* o) {
    uint4 v = *reinterpret_cast<const uint4*>(p);
    unsigned w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        o[2 * i] = __uint_as_float(w[i] << 16);
        o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

__device__ __forceinline__ void store_vec16(float* p, const float* o) {
    *reinterpret_cast<float4*>(p) = make_float4(o[0], o[1], o[2], o[3]);
}

__device__ __forceinline__ void store_vec16(bf16_t* p, const float* o) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = (unsigned)f32_to_bf16(o[2 * i]) | ((unsigned)f32_to_bf16(o[2 * i + 1]) << 16);
    *reinterpret_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
}

#endif  // COMMON_CUH
