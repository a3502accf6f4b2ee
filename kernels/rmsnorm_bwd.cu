// RMSNorm's backward: the input's gradient and the gain's.
//   dx = dy*w*r - x * r^3 * mean(dy*w*x) (+ dres, the gradient arriving through the residual)
//   dw[j] = sum over rows of dy*x*r
// dy is the fp32 output of the GEMM that consumed y. dx is written in fp32 and, when dx_bf16 is
// given, its bf16 copy for the bf16 GEMMs that consume it next. dx may alias dres.
//
// rmsnorm_bwd_fused_c{4,8,16} computes both in one launch; rmsnorm_bwd and rmsnorm_dw, one each,
// serve rows wider than the fused kernel takes (or no scratch for its sums).

#include "common.cuh"

// dx alone, one block per row.
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

// dw alone. Block (32, 16) owns 32 columns; its 16 rows of threads split the rows and add up in
// shared memory, so each dw[j] is written once (no atomics, no zeroing).
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

// The fused backward. Block b owns rows [b * rows_per_block, ...), 256 threads, thread t the
// float4 columns t, t + 256, ... (V of them: d a multiple of 4, at most 1024 * V). Each row's dy,
// x and dres are loaded, 16 bytes at a time, before anything is written (dx may alias dres), and
// kept in registers between the dot product and the writes; the block's sums of dw stay in
// registers across its rows. dx: the same dot product as rmsnorm_bwd, summed in another order.
//
// dw without a second launch: each block writes its sums to row b of `parts` and takes a ticket;
// the last R blocks to arrive (R = min(blocks, 32-column slices of d, 64)) wait until every block
// has arrived, then each adds up, in a fixed order, the columns of its slices over all rows of
// `parts` into dw. Which blocks reduce changes from run to run, the order of every sum does not:
// dw is the same bits every time (fp32 atomics into dw would not be). The wait is safe because
// at most R - 1 < 64 blocks wait while the others finish: blocks not yet started find room.
// `parts` holds `blocks` rows of d; `tickets` two counters, zero before the launch and left zero.
// Launches that share `tickets` must not run at the same time (one stream).
#define RMS_BWD_THREADS 256
#define RMS_MAX_REDUCERS 64

// The four elements of float4 column c of a row, 0 outside d.
__device__ __forceinline__ float4 ld4(const float* row, int c, int d) {
    return 4 * c < d ? *reinterpret_cast<const float4*>(row + 4 * c) : make_float4(0.f, 0.f, 0.f, 0.f);
}

__device__ __forceinline__ float dot4(float4 a, float4 b, float4 c) {
    return a.x * b.x * c.x + a.y * b.y * c.y + a.z * b.z * c.z + a.w * b.w * c.w;
}

// Row `row` (its first element) of dy, x and dres (zero without dres), thread t's float4 columns.
template <int V>
__device__ __forceinline__ void load_row(const float* dy, const float* x, const float* dres, i64 row, int d,
                                         float4 (&g4)[V], float4 (&x4)[V], float4 (&res4)[V]) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int c = threadIdx.x + k * RMS_BWD_THREADS;
        g4[k] = ld4(dy + row, c, d);
        x4[k] = ld4(x + row, c, d);
        res4[k] = dres != 0 ? ld4(dres + row, c, d) : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

template <int V>
__device__ void rmsnorm_bwd_fused_body(const float* dy, const float* x, const float* w, const float* rstd,
                                       const float* dres, float* dx, bf16_t* dx_bf16, float* dw, float* parts,
                                       unsigned* tickets, int rows, int rows_per_block, int d) {
    float4 wk[V], acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
        wk[k] = ld4(w, threadIdx.x + k * RMS_BWD_THREADS, d);
        acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    const int r0 = blockIdx.x * rows_per_block, r1 = min(rows, r0 + rows_per_block);
    // The next row's loads are issued before this row's sum and writes, so that a block's rows
    // wait for memory once rather than once each (rows are the block's own: dx aliasing dres
    // only ever aliases the row being written).
    float4 g4[V], x4[V], res4[V];
    if (r0 < r1) load_row(dy, x, dres, (i64)r0 * d, d, g4, x4, res4);
    for (int r = r0; r < r1; ++r) {
        const i64 row = (i64)r * d;
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < V; ++k) dot += dot4(g4[k], wk[k], x4[k]);
        float4 gn[V], xn[V], resn[V];
        if (r + 1 < r1) load_row(dy, x, dres, row + d, d, gn, xn, resn);
        const float rs = rstd[r];
        dot = block_sum(dot);
        const float cr = rs * rs * rs * dot / (float)d;
#pragma unroll
        for (int k = 0; k < V; ++k) {
            const int c = threadIdx.x + k * RMS_BWD_THREADS;
            if (4 * c >= d) continue;
            float4 o;
            o.x = g4[k].x * wk[k].x * rs - x4[k].x * cr + res4[k].x;
            o.y = g4[k].y * wk[k].y * rs - x4[k].y * cr + res4[k].y;
            o.z = g4[k].z * wk[k].z * rs - x4[k].z * cr + res4[k].z;
            o.w = g4[k].w * wk[k].w * rs - x4[k].w * cr + res4[k].w;
            *reinterpret_cast<float4*>(dx + row + 4 * c) = o;
            if (dx_bf16 != 0) {
                uint2 b;
                b.x = (unsigned)f32_to_bf16(o.x) | ((unsigned)f32_to_bf16(o.y) << 16);
                b.y = (unsigned)f32_to_bf16(o.z) | ((unsigned)f32_to_bf16(o.w) << 16);
                *reinterpret_cast<uint2*>(dx_bf16 + row + 4 * c) = b;
            }
            acc[k].x += g4[k].x * x4[k].x * rs;
            acc[k].y += g4[k].y * x4[k].y * rs;
            acc[k].z += g4[k].z * x4[k].z * rs;
            acc[k].w += g4[k].w * x4[k].w * rs;
        }
#pragma unroll
        for (int k = 0; k < V; ++k) {
            g4[k] = gn[k];
            x4[k] = xn[k];
            res4[k] = resn[k];
        }
    }
#pragma unroll
    for (int k = 0; k < V; ++k) {
        const int c = threadIdx.x + k * RMS_BWD_THREADS;
        if (4 * c < d) *reinterpret_cast<float4*>(parts + (i64)blockIdx.x * d + 4 * c) = acc[k];
    }

    // Arrive; the last R blocks go on.
    __shared__ unsigned ticket;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) ticket = atomicAdd(&tickets[0], 1u);
    __syncthreads();
    const unsigned blocks = gridDim.x, slices = (d + 31) / 32;
    const unsigned reducers = min(min(blocks, slices), (unsigned)RMS_MAX_REDUCERS);
    if (ticket < blocks - reducers) return;
    const unsigned q = ticket - (blocks - reducers);
    if (threadIdx.x == 0)
        while (*(volatile unsigned*)&tickets[0] < blocks) __nanosleep(64);
    __syncthreads();
    __threadfence();

    // Slices q, q + R, ...: thread (group g, lane l) adds rows g, g + 8, ... of column l of the
    // slice, in order; then the 8 groups' sums are added in group order.
    __shared__ float part[8][33];
    const int lane = threadIdx.x & 31, g = threadIdx.x >> 5;
    for (unsigned s = q; s < slices; s += reducers) {
        const int col = s * 32 + lane;
        float sum = 0.0f;
        if (col < d) {
            int p = g;
            for (; p + 24 < (int)blocks; p += 32) {
                float v0 = __ldcg(parts + (i64)p * d + col), v1 = __ldcg(parts + (i64)(p + 8) * d + col);
                float v2 = __ldcg(parts + (i64)(p + 16) * d + col), v3 = __ldcg(parts + (i64)(p + 24) * d + col);
                sum += v0;
                sum += v1;
                sum += v2;
                sum += v3;
            }
            for (; p < (int)blocks; p += 8) sum += __ldcg(parts + (i64)p * d + col);
        }
        part[g][lane] = sum;
        __syncthreads();
        if (g == 0 && col < d) {
            float t = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; ++k) t += part[k][lane];
            dw[col] = t;
        }
        __syncthreads();
    }

    // The last reducer to finish leaves the tickets at zero for the next launch.
    if (threadIdx.x == 0 && atomicAdd(&tickets[1], 1u) == reducers - 1) {
        atomicExch(&tickets[0], 0u);
        atomicExch(&tickets[1], 0u);
    }
}

#define RMSNORM_BWD_FUSED(V)                                                                                   \
    extern "C" __global__ void __launch_bounds__(RMS_BWD_THREADS) rmsnorm_bwd_fused_v##V(                     \
        const float* dy, const float* x, const float* w, const float* rstd, const float* dres, float* dx,       \
        bf16_t* dx_bf16, float* dw, float* parts, unsigned* tickets, int rows, int rows_per_block, int d) {   \
        rmsnorm_bwd_fused_body<V>(dy, x, w, rstd, dres, dx, dx_bf16, dw, parts, tickets, rows, rows_per_block, \
                                  d);                                                                         \
    }
RMSNORM_BWD_FUSED(1)
RMSNORM_BWD_FUSED(2)
RMSNORM_BWD_FUSED(3)
RMSNORM_BWD_FUSED(4)
