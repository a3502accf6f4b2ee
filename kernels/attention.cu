// The non-GEMM parts of attention: RoPE (fused with the split of the QKV projection into
// head-major q, k, v), the causal softmax, and moving heads between head-major [B, H, T, dh] and
// token-major [B, T, H*dh]. Math in fp32 whatever the storage type.

#include "common.cuh"

// Split `idx` of a token-major walk over [B, T, H, inner] into batch b, token t, head h and
// position e within the head's `inner` elements (each part in the type of its variable).
template <typename I, typename J, typename TB, typename TS>
__device__ __forceinline__ void split_head_index(I idx, J inner, int H, int Tn, TB& b, TS& t, TS& h, TS& e) {
    e = idx % inner;
    I rest = idx / inner;
    h = rest % H;
    rest /= H;
    t = rest % Tn;
    b = rest / Tn;
}

// Where item `idx` of a RoPE pass (items of N elements in token-major order, `per_head` of them
// a head) lies: its offset in the [B*T, 3D] QKV projection (the q part; k and v follow at +D and
// +2D), its offset in a head-major [B, H, T, dh] buffer, its token t and its index e within the
// head (its first element is e * N). TB, TS: the types of the batch index and of the others.
template <typename TS>
struct RopePos {
    i64 qkv, head;
    TS t, e;
};
template <int N, typename TB, typename TS, typename I, typename J>
__device__ __forceinline__ RopePos<TS> rope_pos(I idx, J per_head, int Tn, int H, int dh, i64 D) {
    TB b;
    TS t, h, e;
    split_head_index(idx, per_head, H, Tn, b, t, h, e);
    const TS e0 = e * N;
    RopePos<TS> p;
    p.qkv = ((i64)b * Tn + t) * 3 * D + (i64)h * dh + e0;
    p.head = (((i64)b * H + h) * Tn + t) * dh + e0;
    p.t = t;
    p.e = e;
    return p;
}

// cs holds cos and sin for (position t, pair i) at cs[2*(t*dh/2 + i)] and the next element.
// RoPE rotates interleaved pairs (x[2i], x[2i+1]) by t * theta^(-2i/dh).
//
// f(p, c, s, D) for every pair of a RoPE pass, one thread per pair in token-major order (64-bit
// index): p its position, c and s the cos and sin of its angle, D = H * dh.
template <typename F>
__device__ __forceinline__ void for_each_rope_pair(const float* cs, int B, int Tn, int H, int dh, const F& f) {
    int half = dh / 2;
    i64 n = (i64)B * Tn * H * half, D = (i64)H * dh;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < n; idx += (i64)gridDim.x * blockDim.x) {
        const RopePos<int> p = rope_pos<2, i64, int>(idx, half, Tn, H, dh, D);
        float c = cs[2 * ((i64)p.t * half + p.e)], s = cs[2 * ((i64)p.t * half + p.e) + 1];
        f(p, c, s, D);
    }
}

template <typename T>
__device__ void rope_fwd_body(const T* qkv, const float* cs, T* q, T* k, T* v, int B, int Tn, int H, int dh) {
    for_each_rope_pair(cs, B, Tn, H, dh, [&](const RopePos<int>& p, float c, float s, i64 D) {
        const i64 src = p.qkv, dst = p.head;
        float x1 = ld(qkv, src), x2 = ld(qkv, src + 1);
        st(q, dst, x1 * c - x2 * s);
        st(q, dst + 1, x1 * s + x2 * c);
        x1 = ld(qkv, src + D);
        x2 = ld(qkv, src + D + 1);
        st(k, dst, x1 * c - x2 * s);
        st(k, dst + 1, x1 * s + x2 * c);
        v[dst] = qkv[src + 2 * D];
        v[dst + 1] = qkv[src + 2 * D + 1];
    });
}

// The transpose: the rotation by -angle, scattered back into the [B*T, 3D] gradient of the QKV
// projection.
template <typename T>
__device__ void rope_bwd_body(const T* dq, const T* dk, const T* dv, const float* cs, T* dqkv, int B, int Tn, int H, int dh) {
    for_each_rope_pair(cs, B, Tn, H, dh, [&](const RopePos<int>& p, float c, float s, i64 D) {
        const i64 src = p.head, dst = p.qkv;
        float g1 = ld(dq, src), g2 = ld(dq, src + 1);
        st(dqkv, dst, g1 * c + g2 * s);
        st(dqkv, dst + 1, g2 * c - g1 * s);
        g1 = ld(dk, src);
        g2 = ld(dk, src + 1);
        st(dqkv, dst + D, g1 * c + g2 * s);
        st(dqkv, dst + D + 1, g2 * c - g1 * s);
        dqkv[dst + 2 * D] = dv[src];
        dqkv[dst + 2 * D + 1] = dv[src + 1];
    });
}

// In place over rows of scores already scaled by 1/sqrt(dh): row r is query position r % Tn,
// keys after it are masked. P = exp(s - rowmax) / sum, zero where masked. One warp per row.
template <typename T>
__device__ void softmax_causal_fwd_body(T* s, int Tn, i64 rows) {
    i64 row = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    int lane = threadIdx.x & 31;
    int n = (int)(row % Tn) + 1;
    T* p = s + row * Tn;
    float m = NEG_INF;
    for (int j = lane; j < n; j += 32) m = fmaxf(m, ld(p, j));
    m = warp_max(m);
    float sum = 0.0f;
    for (int j = lane; j < n; j += 32) sum += expf(ld(p, j) - m);
    sum = warp_sum(sum);
    for (int j = lane; j < Tn; j += 32) st(p, j, j < n ? expf(ld(p, j) - m) / sum : 0.0f);
}

// dS = P * (dP - sum_j P*dP), in place over dP.
template <typename T>
__device__ void softmax_causal_bwd_body(const T* p, T* dp, int Tn, i64 rows) {
    i64 row = blockIdx.x * (i64)(blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;
    int lane = threadIdx.x & 31;
    int n = (int)(row % Tn) + 1;
    const T* pr = p + row * Tn;
    T* g = dp + row * Tn;
    float dot = 0.0f;
    for (int j = lane; j < n; j += 32) dot += ld(pr, j) * ld(g, j);
    dot = warp_sum(dot);
    for (int j = lane; j < Tn; j += 32) st(g, j, j < n ? ld(pr, j) * (ld(g, j) - dot) : 0.0f);
}

// [B, H, T, dh] -> [B, T, H*dh] (TO_TOKENS) and back, an element per thread, indexed in
// token-major order.
template <bool TO_TOKENS, typename T>
__device__ void move_heads_body(const T* src, T* dst, int B, int Tn, int H, int dh) {
    i64 n = (i64)B * Tn * H * dh;
    for (i64 idx = blockIdx.x * (i64)blockDim.x + threadIdx.x; idx < n; idx += (i64)gridDim.x * blockDim.x) {
        i64 b;
        int t, h, e;
        split_head_index(idx, dh, H, Tn, b, t, h, e);
        const i64 head = ((b * H + h) * Tn + t) * dh + e;
        if constexpr (TO_TOKENS)
            dst[idx] = src[head];
        else
            dst[head] = src[idx];
    }
}

#define ATTENTION_KERNELS(S, T) \
    extern "C" __global__ void rope_fwd_##S(const T* qkv, const float* cs, T* q, T* k, T* v, int B, int Tn, int H, int dh) { \
        rope_fwd_body<T>(qkv, cs, q, k, v, B, Tn, H, dh); } \
    extern "C" __global__ void rope_bwd_##S(const T* dq, const T* dk, const T* dv, const float* cs, T* dqkv, int B, int Tn, int H, int dh) { \
        rope_bwd_body<T>(dq, dk, dv, cs, dqkv, B, Tn, H, dh); } \
    extern "C" __global__ void softmax_causal_fwd_##S(T* s, int Tn, i64 rows) { softmax_causal_fwd_body<T>(s, Tn, rows); } \
    extern "C" __global__ void softmax_causal_bwd_##S(const T* p, T* dp, int Tn, i64 rows) { softmax_causal_bwd_body<T>(p, dp, Tn, rows); } \
    extern "C" __global__ void heads_to_tokens_##S(const T* src, T* dst, int B, int Tn, int H, int dh) { \
        move_heads_body<true, T>(src, dst, B, Tn, H, dh); } \
    extern "C" __global__ void tokens_to_heads_##S(const T* src, T* dst, int B, int Tn, int H, int dh) { \
        move_heads_body<false, T>(src, dst, B, Tn, H, dh); }
FOR_ACT_TYPES(ATTENTION_KERNELS)

// The same RoPE and head moves, 16 bytes per thread (8 bf16 or 4 fp32 elements of one head):
// d_head a multiple of 16 (so a vector never straddles heads and its cos/sin pairs are 16-byte
// aligned), the buffers 16-byte aligned, B * T * H * d_head under 2^31. One thread per vector
// in token-major order, 32-bit index arithmetic; the rotation is the scalar kernels' own
// arithmetic, so the results are the same bits.
// cos and sin of the N / 2 pairs from element e0 of token t's head (see `cs` above).
template <int N>
__device__ __forceinline__ void load_cos_sin(const float* cs, unsigned t, unsigned half, unsigned e0, float (&r)[N]) {
    const float* c = cs + 2 * ((i64)t * half + e0 / 2);
#pragma unroll
    for (int i = 0; i < N; i += 4) {
        float4 p = *reinterpret_cast<const float4*>(c + i);
        r[i] = p.x; r[i + 1] = p.y; r[i + 2] = p.z; r[i + 3] = p.w;
    }
}

// y = the pairs of x rotated by the angles whose cos and sin r holds, or by their negatives
// (INVERSE: the transpose, for the backward); the scalar kernels' arithmetic, term for term.
template <bool INVERSE, int N>
__device__ __forceinline__ void rope_rotate(const float (&x)[N], const float (&r)[N], float (&y)[N]) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
        float co = r[i], si = r[i + 1];
        if (INVERSE) {
            y[i] = x[i] * co + x[i + 1] * si;
            y[i + 1] = x[i + 1] * co - x[i] * si;
        } else {
            y[i] = x[i] * co - x[i + 1] * si;
            y[i + 1] = x[i] * si + x[i + 1] * co;
        }
    }
}

// The 16-byte vector at src, its pairs rotated by the angles whose cos and sin r holds
// (rope_rotate), stored at dst.
template <bool INVERSE, typename T, int N>
__device__ __forceinline__ void rope_vec16(const T* src, T* dst, const float (&r)[N]) {
    float x[N], y[N];
    load_vec16(src, x);
    rope_rotate<INVERSE>(x, r, y);
    store_vec16(dst, y);
}

// 16 bytes from src to dst (both 16-byte aligned), as they are.
template <typename T>
__device__ __forceinline__ void copy_vec16(T* dst, const T* src) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}

// f(p, r, D) for every 16-byte vector of a RoPE pass, one thread per vector in token-major order
// (32-bit index): p its position, r the cos and sin of its pairs, D = H * dh.
template <typename T, typename F>
__device__ __forceinline__ void for_each_rope_vec(const float* cs, int B, int Tn, int H, int dh, const F& f) {
    constexpr int N = Vec16<T>::N;
    unsigned nv = dh / N, n = (unsigned)B * Tn * H * nv, half = dh / 2;
    i64 D = (i64)H * dh;
    for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        const RopePos<unsigned> p = rope_pos<N, unsigned, unsigned>(idx, nv, Tn, H, dh, D);
        float r[N];
        load_cos_sin<N>(cs, p.t, half, p.e * N, r);
        f(p, r, D);
    }
}

template <typename T>
__device__ void rope_fwd_vec_body(const T* qkv, const float* cs, T* q, T* k, T* v, int B, int Tn, int H, int dh) {
    for_each_rope_vec<T>(cs, B, Tn, H, dh, [&](const RopePos<unsigned>& p, const float (&r)[Vec16<T>::N], i64 D) {
        rope_vec16<false>(qkv + p.qkv, q + p.head, r);
        rope_vec16<false>(qkv + p.qkv + D, k + p.head, r);
        copy_vec16(v + p.head, qkv + p.qkv + 2 * D);
    });
}

template <typename T>
__device__ void rope_bwd_vec_body(const T* dq, const T* dk, const T* dv, const float* cs, T* dqkv, int B, int Tn, int H, int dh) {
    for_each_rope_vec<T>(cs, B, Tn, H, dh, [&](const RopePos<unsigned>& p, const float (&r)[Vec16<T>::N], i64 D) {
        rope_vec16<true>(dq + p.head, dqkv + p.qkv, r);
        rope_vec16<true>(dk + p.head, dqkv + p.qkv + D, r);
        copy_vec16(dqkv + p.qkv + 2 * D, dv + p.head);
    });
}

// [B, H, T, dh] <-> [B, T, H*dh], a 16-byte vector per thread, indexed in token-major order.
template <bool TO_TOKENS, typename T>
__device__ void move_heads_vec_body(const T* src, T* dst, int B, int Tn, int H, int dh) {
    constexpr int N = Vec16<T>::N;
    unsigned nv = dh / N, n = (unsigned)B * Tn * H * nv;
    for (unsigned idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n; idx += gridDim.x * blockDim.x) {
        unsigned b, t, h, e0;
        split_head_index(idx, nv, H, Tn, b, t, h, e0);
        e0 *= N;
        i64 tok = (i64)idx * N;
        i64 head = (((i64)b * H + h) * Tn + t) * dh + e0;
        if constexpr (TO_TOKENS)
            copy_vec16(dst + tok, src + head);
        else
            copy_vec16(dst + head, src + tok);
    }
}

#define ATTENTION_VEC_KERNELS(S, T) \
    extern "C" __global__ void rope_fwd_vec_##S(const T* qkv, const float* cs, T* q, T* k, T* v, int B, int Tn, int H, int dh) { \
        rope_fwd_vec_body<T>(qkv, cs, q, k, v, B, Tn, H, dh); } \
    extern "C" __global__ void rope_bwd_vec_##S(const T* dq, const T* dk, const T* dv, const float* cs, T* dqkv, int B, int Tn, int H, int dh) { \
        rope_bwd_vec_body<T>(dq, dk, dv, cs, dqkv, B, Tn, H, dh); } \
    extern "C" __global__ void heads_to_tokens_vec_##S(const T* src, T* dst, int B, int Tn, int H, int dh) { \
        move_heads_vec_body<true, T>(src, dst, B, Tn, H, dh); } \
    extern "C" __global__ void tokens_to_heads_vec_##S(const T* src, T* dst, int B, int Tn, int H, int dh) { \
        move_heads_vec_body<false, T>(src, dst, B, Tn, H, dh); }
FOR_ACT_TYPES(ATTENTION_VEC_KERNELS)

// A head widened to a kernel's width, or cut back: `rows` rows of `width` 16-byte vectors from
// `src` (rows `src_pitch` vectors apart) to `dst` (rows `dst_pitch` vectors apart), and zeros in
// the `dst_pitch - width` vectors after each row (none when cutting back, dst_pitch == width).
// One pass over the destination in place of a memset and a strided copy; rows * dst_pitch under
// 2^32, both buffers 16-byte aligned.
extern "C" __global__ void copy_rows_x16(const uint4* src, uint4* dst, unsigned rows, unsigned src_pitch,
                                         unsigned width, unsigned dst_pitch) {
    const unsigned n = rows * dst_pitch;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const unsigned r = i / dst_pitch, c = i - r * dst_pitch;
        dst[i] = c < width ? src[(size_t)r * src_pitch + c] : make_uint4(0u, 0u, 0u, 0u);
    }
}
