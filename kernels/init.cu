// Parameter initialisation and small fills.
//
// Truncated normal from a counter-based generator: element i of a tensor draws its k-th attempt
// from splitmix64(seed, i, k), so the weights depend only on the seed and not on launch shape.
// Box-Muller gives a standard normal; attempts outside [-3, 3] are redrawn, which is exactly
// torch.nn.init.trunc_normal_(std=s, a=-3s, b=3s) in distribution (not in values: PyTorch's
// generator is not reproduced).

#include "common.cuh"

__device__ __forceinline__ unsigned long long splitmix64(unsigned long long z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

extern "C" __global__ void init_trunc_normal(float* p, i64 n, float std, unsigned long long seed) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float z = 0.0f;
        for (unsigned k = 0; k < 64; ++k) {
            unsigned long long h = splitmix64(seed ^ splitmix64((unsigned long long)i * 64ull + k));
            // u1 in (0, 1], u2 in [0, 1): 24-bit mantissas, exact in float.
            float u1 = ((float)(h >> 40) + 1.0f) * 5.9604645e-08f;
            float u2 = (float)((h >> 16) & 0xffffffull) * 5.9604645e-08f;
            z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
            if (fabsf(z) <= 3.0f) break;
        }
        p[i] = fminf(fmaxf(z, -3.0f), 3.0f) * std;
    }
}

extern "C" __global__ void fill_f32(float* p, i64 n, float v) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) p[i] = v;
}

// fp32 -> bf16, four elements per thread (n a multiple of 4, both pointers 16-byte aligned).
extern "C" __global__ void cast_f32_bf16_x4(const float4* src, uint2* dst, i64 n4) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n4; i += (i64)gridDim.x * blockDim.x) {
        float4 v = src[i];
        uint2 o;
        o.x = (unsigned)f32_to_bf16(v.x) | ((unsigned)f32_to_bf16(v.y) << 16);
        o.y = (unsigned)f32_to_bf16(v.z) | ((unsigned)f32_to_bf16(v.w) << 16);
        dst[i] = o;
    }
}

// bf16 -> fp32 (for reading bf16 results back).
extern "C" __global__ void cast_bf16_f32(const bf16_t* src, float* dst, i64 n) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) dst[i] = bf16_to_f32(src[i]);
}
