// AdamW over the flat parameter buffer, step for step as torch.optim.AdamW (foreach=False,
// non-capturable) computes it:
//   p *= 1 - lr*wd;  m += (1-b1)*(g - m);  v = v*b2 + (1-b2)*g*g;
//   p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
// Four elements per thread (the buffer's length is a multiple of 64).

__device__ __forceinline__ void adamw_one(float& p, float g, float& m, float& v, float decay, float b1, float b2,
                                          float eps, float step_size, float bc2_sqrt) {
    p *= decay;
    m += (1.0f - b1) * (g - m);
    v = v * b2 + (1.0f - b2) * g * g;
    p -= step_size * (m / (sqrtf(v) / bc2_sqrt + eps));
}

extern "C" __global__ void adamw_x4(float4* p, const float4* g, float4* m, float4* v, i64 n4, float decay, float b1,
                                    float b2, float eps, float step_size, float bc2_sqrt) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n4; i += (i64)gridDim.x * blockDim.x) {
        float4 pp = p[i], gg = g[i], mm = m[i], vv = v[i];
        adamw_one(pp.x, gg.x, mm.x, vv.x, decay, b1, b2, eps, step_size, bc2_sqrt);
        adamw_one(pp.y, gg.y, mm.y, vv.y, decay, b1, b2, eps, step_size, bc2_sqrt);
        adamw_one(pp.z, gg.z, mm.z, vv.z, decay, b1, b2, eps, step_size, bc2_sqrt);
        adamw_one(pp.w, gg.w, mm.w, vv.w, decay, b1, b2, eps, step_size, bc2_sqrt);
        p[i] = pp;
        m[i] = mm;
        v[i] = vv;
    }
}
