// FlashAttention backward for Hopper (sm_90a: warpgroup MMA, wgmma.mma_async). Needs NVRTC option
// --gpu-architecture=sm_90a (the wgmma wrappers of tensor_core.cuh exist only there); runs on
// compute capability 9.0 only. Tiles, descriptors and loaders are those of flash_common.cuh.
//
// Same contract and results as flash_bwd_bf16_d<D> of flash_attention_bwd.cu (with its
// flash_bwd_preprocess_bf16_d<D> before and flash_dq_convert_bf16 after): from Q, K, V, dO, L
// (the forward's logsumexp, natural log) and Delta = rowsum(dO * O),
//   P = exp(scale * Q K^T - L) (recomputed, causal and sequence masks as in the forward),
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Delta),  dK = scale * dS^T Q,  dQ = scale * dS K.
// Q, K, V, dO, dK, dV: [BH, T, D] bf16 row-major, contiguous, 16-byte aligned; L, Delta: [BH, T]
// fp32; dq_accum: [BH, T, D] fp32 (16-byte aligned), zeroed by the preprocess, accumulated with
// bulk reductions (cp.reduce.async.bulk). D in {16, 32, 64, 128}; any T >= 1 (rows past T
// zero-filled on load, masked, never written).
//
// Algorithm:
// - One block owns BC = 128 keys of one head and walks the query tiles of BR rows (BR = 128 up
//   to d 64, 64 at d 128; causal: from the first tile that reaches its first key, so only the
//   diagonal tile is masked). Two warpgroups; warpgroup w owns keys
//   [64w, 64w + 64) of the block and accumulates their dK, dV (fp32, registers) over all tiles.
// - K, V (once) and Q, dO (double-buffered, cp.async, zero-fill past T) in shared memory in the
//   canonical wgmma layout (rows of min(2D, 128) bytes, XOR swizzle 128/64/32 bytes, d 128 as two
//   64-column blocks; see flash_common.cuh), L and Delta of the tile next to them.
// - Per query tile, warpgroup w (M = its 64 keys):
//     S^T  = K_w Q^T        wgmma m64n(BR)k16, A = K, B = Q from shared memory (both K-major)
//     dP^T = V_w dO^T       the same with V, dO
//     P^T = exp2(S^T * scale*log2e - L*log2e), dS^T = scale * P^T * (dP^T - Delta), in registers
//                           (the masks cost instructions on the tiles that cross a warpgroup's
//                           diagonal or the sequence end only: a second, unmasked copy of the
//                           loop serves the others)
//     dV += P^T dO          wgmma m64nDk16, A = P^T from registers (the accumulator layout is the
//     dK += dS^T Q          A-fragment layout), B = dO / Q from shared memory, N-major (transpose bit)
//     dS^T -> shared memory (bf16, [128 keys][BR queries], 128-byte swizzle, stmatrix),
//     fence.proxy.async;
//     after the next block barrier, dQ = dS K over the 128 keys, A = dS^T from shared memory
//     M-major (transpose bit), B = K N-major; BR 128: warpgroup w takes queries [64w, 64w + 64)
//     (wgmma m64nDk16), BR 64: columns [w D/2, (w+1) D/2) (m64n(D/2)k16; both warpgroups read all
//     of dS^T). Each warp stages its 16 rows of dQ in shared memory (fp32, groups of 4 rows, 2 at
//     d 128, padded by 32 bytes) and adds them to dq_accum with bulk reductions of the copy engine
//     (cp.reduce.async.bulk .add.f32, a group each, a row each at d 128), not per-thread
//     red.global.add.
//   Pipelining (d <= 64): the dQ product of tile i - 1 is issued at the top of iteration i (the
//   barrier there makes its dS^T visible; dS^T is double-buffered) with S^T of tile i behind it;
//   dQ is staged and its reductions issued while S^T is on the tensor cores, then dP^T is issued
//   (the dQ and dP^T accumulators never live at once: 248 registers at d 64), and the exp2 of P^T
//   runs under it.
//   d 128: dQ of tile i is issued after a second barrier in iteration i and reduced right away (its
//   32 accumulator registers cannot stay live across the S^T / dP^T phase: 255 registers).
//   No wgmma group is in flight across the loop edge (ptxas would serialize every wgmma).
// - wgmma is issued unconditionally (a fully masked key/query pair just yields P = 0).
// Limits: bf16 only (fp32 stays on flash_bwd_f32_d<D>); results as flash_bwd_bf16_d<D> up to
// rounding (P and dS rounded to bf16 for the products, as there).
//
// Launch contract: flash_bwd_sm90_bf16_d<D>(q, k, v, dout, lse, delta, dk, dv, dq_accum, seq,
//   scale, causal): grid = (BH, ceil(seq / 128)) (extra blocks in y return at once; below d 128
//   a block takes its head and key tile by launch order, heads in groups whose Q, dO and dq_accum
//   fill about 32 MiB of L2, low key tiles first in each group: grouped_tile), block = 256,
//   dynamic shared memory:
//     kernel                    BC   BR   threads  smem bytes
//     flash_bwd_sm90_bf16_d16   128  128  256     103424   (*)
//     flash_bwd_sm90_bf16_d32   128  128  256     136192   (*)
//     flash_bwd_sm90_bf16_d64   128  128  256     201728   (*)
//     flash_bwd_sm90_bf16_d128  128  64   256     201728   (*)
//   (*) over 48 KiB: set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it before launching.
//   smem = 2 * D * (2 * BC + 4 * BR) + 4 * BC * BR + 16 * BR + 4 * 256 + 128 / G * (4 * G * QN + 32)
//   + 1024 (Sm90Bwd; QN = D, G = 4 up to d 64; QN = D / 2, G = 2 at d 128: the dQ columns of a
//   warpgroup and the rows of a staged group).
// A whole backward: flash_bwd_preprocess_bf16_d<D> (Delta, dq_accum zeroed); this;
// flash_dq_convert_bf16.

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "flash_attention_bwd_sm90.cu needs --gpu-architecture=sm_90a"
#endif

#include "flash_common.cuh"

namespace flash_bwd_sm90 {

using namespace flash;

constexpr int BC = 128, NT = 256;

// Query rows per tile: 128 up to d 64 (S^T and dP^T as m64n128 products, half the barriers, waits
// and operand re-reads per FLOP of 64 rows), 64 at d 128 (the 255-register limit).
template <int D>
struct Sm90Bwd {
    static constexpr int BR = D <= 64 ? 128 : 64;
    // dQ columns per warpgroup (BR 128: all of them, split by rows; BR 64: half, split by columns),
    // the rows of them a warp stages per bulk reduction (BR 128: 4, whole rows, contiguous in
    // dq_accum; BR 64: 2, one reduction a row), and the bytes of such a group: 32 bytes of padding
    // after each group put the 8 rows g of a warp's st.shared.v2 in 8 / DQ_G bank groups (DQ_G
    // wavefronts for 256 bytes: the least with pairs; groups of 4 take half the reductions)
    static constexpr int QN = BR == 128 ? D : D / 2;
    static constexpr int DQ_G = BR == 128 ? 4 : 2;
    static constexpr int DQ_GROUP = DQ_G * QN * 4 + 32;
    static constexpr int bytes = 2 * D * (2 * BC + 4 * BR) + 4 * BC * BR + 16 * BR + 4 * NT + NT / 2 / DQ_G * DQ_GROUP + 1024;
};

// Byte offset of the 4-byte word at (row r, element col) of a ROWS x W swizzled tile (col even).
template <int W, int ROWS>
__device__ __forceinline__ unsigned elem_off(int r, int col) {
    using L = Lay<W>;
    const int byte = col * 2;
    return swz((unsigned)((byte / L::RB) * ROWS * L::RB + r * L::RB + byte % L::RB), L::SWM);
}

template <int D, bool DEFER_DQ>
__device__ __forceinline__ void bwd_sm90(const bf16_t* __restrict__ q, const bf16_t* __restrict__ k,
                                         const bf16_t* __restrict__ v, const bf16_t* __restrict__ dout,
                                         const float* __restrict__ lse, const float* __restrict__ delta,
                                         bf16_t* __restrict__ dk, bf16_t* __restrict__ dv, float* __restrict__ dq_accum,
                                         int seq, float scale, int causal) {
    constexpr int BR = Sm90Bwd<D>::BR;
    constexpr unsigned KV_BYTES = BC * D * 2, QT_BYTES = BR * D * 2, DS_BYTES = BC * BR * 2;
    constexpr int KD = D / 16, KQ = BR / 16, KK = BC / 16;  // k-steps over D, queries, keys
    // dQ = dS K split between the warpgroups by rows (BR = 128: warpgroup w takes queries
    // [64w, 64w + 64), every column) or by columns (BR = 64: columns [w D/2, (w + 1) D/2))
    constexpr bool DQ_BY_ROWS = BR == 128;
    constexpr int SN = BR / 2, ON = D / 2;                   // S^T / dP^T floats, dK / dV floats
    constexpr int QN = Sm90Bwd<D>::QN, DQ_G = Sm90Bwd<D>::DQ_G, DQ_GROUP = Sm90Bwd<D>::DQ_GROUP;
    constexpr int QF = QN / 2;                               // dQ floats per thread

    // heads in groups whose Q, dO and dq_accum (8 bytes a row element) fill about 32 MiB of L2;
    // d 128 keeps the plain order (its 255 registers have none left for the place)
    const GroupedTile place = D < 128 ? grouped_tile(imax(1, (32 << 20) / (seq * D * 8)))
                                      : GroupedTile{(int)blockIdx.x, (int)blockIdx.y};
    if (place.rank >= (seq + BC - 1) / BC) return;
    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wq = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const int k0 = place.rank * BC;  // causal: low key tiles have the most work and go first
    const i64 head_rows = (i64)place.bh * seq, head = head_rows * D;
    const BwdQuery qin = {q + head, dout + head, lse + head_rows, delta + head_rows};

    const unsigned base = (smem_addr(flash_smem) + 1023u) & ~1023u;
    const unsigned sK = base;
    const unsigned sV = sK + KV_BYTES;
    const unsigned sQ = sV + KV_BYTES;         // 2 buffers
    const unsigned sdO = sQ + 2 * QT_BYTES;    // 2 buffers
    const unsigned sdS = sdO + 2 * QT_BYTES;   // 2 buffers of dS^T [BC][BR]
    const unsigned sL = sdS + 2 * DS_BYTES;    // 2 x BR floats
    const unsigned sDel = sL + 2 * BR * 4;     // 2 x BR floats
    const unsigned sScratch = sDel + 2 * BR * 4;
    const unsigned sdQ = sScratch + 4 * NT;      // 16 dQ staging rows a warp, in groups of DQ_G

    const int n_q = (seq + BR - 1) / BR;
    const int i_start = first_query_tile(k0, BR, causal);

    load_kv_tile<SWIZZLED, D, BC, NT>(sK, sV, k + head, v + head, k0, seq, tid);
    load_query_tile<SWIZZLED, D, BR, NT>(sQ, sdO, sL, sDel, qin, i_start * BR, seq, tid);
    cp_async_commit();

    const int key_lo = k0 + wg * 64 + wq * 16 + g;  // this thread's keys: key_lo, key_lo + 8
    // the dS^T row and first column whose 16 bytes this lane addresses for stmatrix
    const int ds_row = wg * 64 + wq * 16 + ((lane >> 3) & 1) * 8 + (lane & 7), ds_col = (lane >> 4) * 8;
    const float sl2 = scale * LOG2E;
    float dk_acc[ON], dv_acc[ON], dq[QF];
#pragma unroll
    for (int i = 0; i < ON; ++i) dk_acc[i] = dv_acc[i] = 0.0f;
    unsigned pa[KQ][4], da[KQ][4];

    // dQ of query tile i (the accumulators of its retired wgmma group) into dq_accum: each warp
    // stages its 16 rows in shared memory, and lane p < 16 / DQ_G adds rows [DQ_G p, DQ_G p + DQ_G)
    // to dq_accum with bulk reductions (the copy engine's, in L2: one for the group where a
    // warpgroup has whole rows, BR 128; else one a row), where per-thread red.global.add would
    // issue 16 to 32 reductions a thread and hold the accumulator registers until each had read
    // them. The rows are the warp's alone, so warp barriers order them: lane p waits until its
    // previous group has been read before the warp overwrites it.
    const int dq_row0 = DQ_BY_ROWS ? wg * 64 : 0, dq_col0 = DQ_BY_ROWS ? 0 : wg * QN;
    const unsigned sdQw = sdQ + (tid >> 5) * (16 / DQ_G) * DQ_GROUP;
    auto reduce_dq = [&](int i) {
        if (lane < 16 / DQ_G) bulk_wait_read<0>();
        __syncwarp();
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
            for (int nb = 0; nb < QN / 8; ++nb)
                st_shared_f32x2(sdQw + (g / DQ_G + 8 / DQ_G * h) * DQ_GROUP + g % DQ_G * QN * 4 + nb * 32 + 8 * t,
                                dq[4 * nb + 2 * h], dq[4 * nb + 2 * h + 1]);
        fence_proxy_async_smem();
        __syncwarp();
        const int row = i * BR + dq_row0 + wq * 16 + DQ_G * lane, rows = imin(DQ_G, seq - row);
        if (lane < 16 / DQ_G && rows > 0) {
            float* dst = dq_accum + head + (i64)row * D + dq_col0;
            const unsigned src = sdQw + lane * DQ_GROUP;
            if constexpr (DQ_BY_ROWS) {
                bulk_reduce_add_f32(dst, src, rows * QN * 4);
            } else {
                bulk_reduce_add_f32(dst, src, QN * 4);
                if (rows == 2) bulk_reduce_add_f32(dst + D, src + QN * 4, QN * 4);
            }
            bulk_commit();
        }
    };

    // This warpgroup's part of dQ of the tile whose dS^T is in buffer sdSb = dS K over the 128
    // keys: A = dS (M = queries) M-major, B = K N-major
    auto issue_dq = [&](unsigned sdSb) {
#pragma unroll
        for (int kc = 0; kc < KK; ++kc)
            wgmma_ss_bf16_ta_tb<QN>(dq, nmajor_desc<BR, BC>(sdSb, kc, dq_row0), nmajor_desc<D, BC>(sK, kc, dq_col0),
                                    kc > 0);
    };

    // One query tile per iteration. No wgmma group stays in flight across the loop edge (ptxas
    // cannot follow a group through it and serializes every wgmma), and every wgmma is issued
    // unconditionally (same under a branch): with DEFER_DQ, the dQ of tile i - 1 is issued at the
    // top of iteration i, after the barrier that made its dS^T visible, and its reductions run
    // while S^T and dP^T of tile i are on the tensor cores (in the first iteration it multiplies
    // the unused dS^T buffer and is thrown away); without (d 128), dQ of tile i is issued after a
    // second barrier in iteration i and reduced right away.
    for (int i = i_start; i < n_q; ++i) {
        const int b = (i - i_start) & 1;
        const unsigned sQb = sQ + b * QT_BYTES, sdOb = sdO + b * QT_BYTES, sdSb = sdS + b * DS_BYTES;
        // tile i landed and is visible to the async proxy; iteration i - 1 retired in both
        // warpgroups (so the other Q / dO buffer may be refilled) and its dS^T stores are visible
        cp_async_wait<0>();
        fence_proxy_async_smem();
        __syncthreads();

        float s[SN], dp[SN];
        wgmma_fence();
        if constexpr (DEFER_DQ) {
            issue_dq(sdS + (b ^ 1) * DS_BYTES);
            wgmma_commit();
        }
#pragma unroll
        for (int kk = 0; kk < KD; ++kk)
            wgmma_ss_bf16<BR>(s, kmajor_desc<D, BC>(sK, wg * 64, kk), kmajor_desc<D, BR>(sQb, 0, kk), kk > 0);
        wgmma_commit();
        if constexpr (DEFER_DQ) {
            // reduce dQ of tile i - 1 while S^T is on the tensor cores, then issue dP^T (the dQ
            // and dP^T accumulators are never live together: the register limit)
            wgmma_wait<1>();
            wgmma_acc_fence(dq);
            if (i > i_start) reduce_dq(i - 1);
            wgmma_fence();
        }
#pragma unroll
        for (int kk = 0; kk < KD; ++kk)
            wgmma_ss_bf16<BR>(dp, kmajor_desc<D, BC>(sV, wg * 64, kk), kmajor_desc<D, BR>(sdOb, 0, kk), kk > 0);
        wgmma_commit();
        if (i + 1 < n_q) {
            const unsigned nb = (b ^ 1);
            load_query_tile<SWIZZLED, D, BR, NT>(sQ + nb * QT_BYTES, sdO + nb * QT_BYTES, sL + nb * BR * 4,
                                                 sDel + nb * BR * 4, qin, (i + 1) * BR, seq, tid);
        }
        cp_async_commit();
        wgmma_wait<1>();  // S^T
        wgmma_acc_fence(s);

        // P^T = exp2(S^T * scale*log2e - L*log2e), masked; rows = keys, columns = queries
        const int q0 = i * BR;
        const unsigned Lb = sL + b * BR * 4 + 8 * t, Db = sDel + b * BR * 4 + 8 * t;  // this thread's columns
        float psum = 0.0f;
        auto exp_tile = [&](bool masked) {
            // Masked: this thread's element (key row h, column c = 8nb + e of its own) is kept iff
            // lo[h] <= c < hi[h], c a compile-time constant: the key row reaches the column
            // (causal), the column is below seq and the key below seq.
            int lo[2], hi[2];
            if (masked) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int key = key_lo + 8 * h;
                    lo[h] = causal ? key - q0 - 2 * t : 0;
                    hi[h] = key < seq ? seq - q0 - 2 * t : 0;
                }
            }
#pragma unroll
            for (int nb = 0; nb < BR / 8; ++nb) {
                const float2 L2 = ld_shared_f32x2(Lb + nb * 32);
                const float nl[2] = {-L2.x * LOG2E, -L2.y * LOG2E};
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float p = exp2_approx(fmaf(s[4 * nb + e], sl2, nl[e & 1]));
                    if (masked) {
                        const int c = nb * 8 + (e & 1), h = e >> 1;
                        if (c < lo[h] || c >= hi[h]) p = 0.0f;
                    }
                    s[4 * nb + e] = p;
                    psum += p;
                }
            }
        };
        // only tiles that cross the diagonal of a warpgroup's keys or the sequence end are masked
        if (q0 + BR > seq || k0 + BC > seq || (causal && k0 + wg * 64 + 63 > q0))
            exp_tile(true);
        else
            exp_tile(false);
        st_shared_b32(sScratch + tid * 4, __float_as_uint(psum));
        wgmma_wait<0>();  // dP^T
        wgmma_acc_fence(dp);
        // dS^T = scale * P^T * (dP^T - Delta), packed with P^T as A fragments as it is made (S^T
        // and dP^T registers die early: d 128 is at the register limit). Register r of k-step kq
        // holds (key g + 8(r & 1), queries 16kq + 8(r >> 1) + 2t, +1): n-block 2kq + (r >> 1).
#pragma unroll
        for (int kq = 0; kq < KQ; ++kq)
#pragma unroll
            for (int hb = 0; hb < 2; ++hb) {
                const float2 De = ld_shared_f32x2(Db + (2 * kq + hb) * 32);
                const float nd0 = -De.x * scale, nd1 = -De.y * scale;
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = 2 * hb + h, idx = 8 * kq + 2 * r;
                    const float ds0 = s[idx] * fmaf(dp[idx], scale, nd0), ds1 = s[idx + 1] * fmaf(dp[idx + 1], scale, nd1);
                    pa[kq][r] = pack_bf16x2(s[idx], s[idx + 1]);
                    da[kq][r] = pack_bf16x2(ds0, ds1);
                }
            }
        // dS^T rows (keys 64wg + 16wq + g + 8(r & 1)), columns (queries) 16kq + 8(r >> 1) + 2t: per
        // k-step, the four 8x8 matrices r of stmatrix; lane 8r + j addresses row j of matrix r
#pragma unroll
        for (int kq = 0; kq < KQ; ++kq)
            stmatrix_x4(sdSb + elem_off<BR, BC>(ds_row, 16 * kq + ds_col), da[kq]);

        // dV += P^T dO, dK += dS^T Q (A from registers, B N-major)
        wgmma_fence();
#pragma unroll
        for (int kq = 0; kq < KQ; ++kq) wgmma_rs_bf16_tb<D>(dv_acc, pa[kq], nmajor_desc<D, BR>(sdOb, kq, 0), 1);
#pragma unroll
        for (int kq = 0; kq < KQ; ++kq) wgmma_rs_bf16_tb<D>(dk_acc, da[kq], nmajor_desc<D, BR>(sQb, kq, 0), 1);
        wgmma_commit();
        fence_proxy_async_smem();  // this thread's dS^T stores, for the dQ product
        if constexpr (DEFER_DQ) {
            wgmma_wait<0>();  // dV, dK: their registers and the Q / dO buffer are free
            wgmma_acc_fence(dv_acc);
            wgmma_acc_fence(dk_acc);
        } else {
            __syncthreads();  // every key's dS^T visible
            issue_dq(sdSb);
            wgmma_commit();
            wgmma_wait<0>();
            wgmma_acc_fence(dv_acc);
            wgmma_acc_fence(dk_acc);
            wgmma_acc_fence(dq);
            reduce_dq(i);
        }
    }
    if constexpr (DEFER_DQ) {
        // dQ of the last tile
        cp_async_wait<0>();
        __syncthreads();
        wgmma_fence();
        issue_dq(sdS + ((n_q - 1 - i_start) & 1) * DS_BYTES);
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_acc_fence(dq);
        reduce_dq(n_q - 1);
    }
    cp_async_wait<0>();
    bulk_wait<0>();

    // dK (scale already in dS) and dV
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = key_lo + 8 * h;
        if (row < seq) {
#pragma unroll
            for (int nb = 0; nb < D / 8; ++nb) {
                const i64 off = head + (i64)row * D + nb * 8 + 2 * t;
                *reinterpret_cast<unsigned*>(dk + off) = pack_bf16x2(dk_acc[4 * nb + 2 * h], dk_acc[4 * nb + 2 * h + 1]);
                *reinterpret_cast<unsigned*>(dv + off) = pack_bf16x2(dv_acc[4 * nb + 2 * h], dv_acc[4 * nb + 2 * h + 1]);
            }
        }
    }
}

}  // namespace flash_bwd_sm90

#define FLASH_BWD_SM90(D)                                                                                           \
    extern "C" __global__ void __launch_bounds__(flash_bwd_sm90::NT, 1)                                            \
        flash_bwd_sm90_bf16_d##D(const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* dout,           \
                                 const float* lse, const float* delta, bf16_t* dk, bf16_t* dv, float* dq_accum,   \
                                 int seq, float scale, int causal) {                                              \
        flash_bwd_sm90::bwd_sm90<D, (D < 128)>(q, k, v, dout, lse, delta, dk, dv, dq_accum, seq, scale, causal);  \
    }
FLASH_BWD_SM90(16)
FLASH_BWD_SM90(32)
FLASH_BWD_SM90(64)
FLASH_BWD_SM90(128)
