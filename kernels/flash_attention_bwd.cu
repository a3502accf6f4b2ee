// FlashAttention-2 backward (sm_90; the bf16 kernel uses mma.sync / ldmatrix / cp.async /
// red.global.add.v2.f32, see tensor_core.cuh; tiles and loaders shared with the other FlashAttention
// files in flash_common.cuh).
//
// From Q, K, V, O, dO and L (the forward's logsumexp of the scaled scores, natural log):
//   Delta = rowsum(dO * O), dq_accum = 0                    (flash_bwd_preprocess)
//   P = exp(scale * Q K^T - L)  (recomputed; causal and sequence masks as in the forward)
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - Delta),  dK = scale * dS^T Q,  dQ = scale * dS K
// Q, K, V, O, dO, dK, dV: [BH, T, D] row-major, contiguous, 16-byte aligned, all bf16 or all fp32;
// L, Delta: [BH, T] fp32; dq_accum: [BH, T, D] fp32, zeroed by the preprocess, accumulated with
// atomics (for fp32 it is dQ itself; for bf16 flash_dq_convert_bf16 turns it into dQ). D in {16,
// 32, 64, 128}; any T >= 1 (rows past T zero-filled on load, masked, never written).
//
// One block owns BC keys of one head (dK, dV accumulate in registers) and walks the query tiles of
// BR rows (causal: from the first tile that reaches the diagonal; a warp whose keys all lie after
// a tile skips it).
// bf16: tensor cores (mma.sync m16n8k16, fp32 accumulate). Warp w owns keys [16*MK*w, 16*MK*(w+1))
// of the block and computes the transposed products S^T = K Q^T and dP^T = V dO^T, so P^T and dS^T
// come out of the accumulators already in the layout of A fragments for dV += P^T dO and
// dK += dS^T Q (no shared-memory round trip); K and V A fragments stay in registers (d <= 64).
// dS^T also goes to padded shared memory, from which all warps compute dQ_tile += dS K and add it
// to dq_accum with vector reductions (red.global.add.v2.f32), skipping the 16-key slices that a
// causal mask zeroes. Q, dO, L, Delta tiles are double-buffered with cp.async.
// fp32: SIMT FFMA (no TF32), 64 keys x 64 queries per step, 256 threads, P and dS through shared
// memory, dQ by atomicAdd.
//
// Launch contract:
//   flash_bwd_preprocess_<S>_d<D>(o, dout, delta, dq_accum, seq): grid = (ceil(seq / 64), BH),
//       block = 256, no dynamic shared memory; writes Delta and zeroes dq_accum (16-byte aligned).
//   flash_bwd_<S>_d<D>(q, k, v, dout, lse, delta, dk, dv, dq_accum, seq, scale, causal):
//       grid = (BH, ceil(seq / BC)) (extra blocks in y return at once), block = threads, smem bytes:
//     kernel               BC   BR  threads  smem bytes
//     flash_bwd_bf16_d16   128  32  128      23552
//     flash_bwd_bf16_d32   128  32  128      37376
//     flash_bwd_bf16_d64   128  32  128      65024   (*)
//     flash_bwd_bf16_d128  128  32  256     114176   (*)
//     flash_bwd_f32_d16     64  64  256      52736   (*)
//     flash_bwd_f32_d32     64  64  256      69120   (*)
//     flash_bwd_f32_d64     64  64  256     101888   (*)
//     flash_bwd_f32_d128    64  64  256     167424   (*)
//   (*) over 48 KiB: set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it before launching.
//   bf16 smem = 2 * Tile<D>::Bytes<BC> + 4 * Tile<D>::Bytes<BR> + Tile<BR>::Bytes<BC> + 16 * BR;
//   fp32 smem = 4 * (4 * 64 * (D + 1) + 2 * 64 * 68 + 128). Both are F32Smem / Bf16Smem below.
//   flash_dq_convert_bf16(dq_accum, dq, n): fp32 -> bf16 (round to nearest even) of n elements, any
//       grid (e.g. 1024 blocks), block 256, grid-stride loop; 16-byte aligned pointers.
// A whole backward: preprocess; bwd; (bf16) dq_convert.

#include "flash_common.cuh"

namespace flash_bwd {

using namespace flash;

// ---------------------------------------------------------------------------------------------
// Delta = rowsum(dO * O) for 64 rows per block of 256 threads: 16-byte loads, a row spread over
// C = D / (16 / sizeof(T)) lanes (2 to 32), reduced with shuffles.
constexpr int PRE_ROWS = 64;

__device__ __forceinline__ float dot16(const uint4& a, const uint4& b, float) {
    return __uint_as_float(a.x) * __uint_as_float(b.x) + __uint_as_float(a.y) * __uint_as_float(b.y) +
           __uint_as_float(a.z) * __uint_as_float(b.z) + __uint_as_float(a.w) * __uint_as_float(b.w);
}
__device__ __forceinline__ float dot16(const uint4& a, const uint4& b, bf16_t) {
    const unsigned x[4] = {a.x, a.y, a.z, a.w}, y[4] = {b.x, b.y, b.z, b.w};
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i)
        acc += __uint_as_float(x[i] << 16) * __uint_as_float(y[i] << 16) +
               __uint_as_float(x[i] & 0xffff0000u) * __uint_as_float(y[i] & 0xffff0000u);
    return acc;
}

template <typename T, int D>
__device__ __forceinline__ void preprocess(const T* __restrict__ o, const T* __restrict__ dout, float* __restrict__ delta,
                                           float* __restrict__ dq_accum, int seq) {
    constexpr int C = D * (int)sizeof(T) / 16;               // lanes per row
    constexpr int SLOTS = 256 / C, PASSES = (PRE_ROWS + SLOTS - 1) / SLOTS;  // rows per pass, passes
    static_assert(C >= 2 && C <= 32, "row of 2 to 32 16-byte chunks");
    const int slot = threadIdx.x / C, c = threadIdx.x % C;
    const i64 head = (i64)blockIdx.y * seq;
#pragma unroll
    for (int pass = 0; pass < PASSES; ++pass) {
        const int r = pass * SLOTS + slot, row = blockIdx.x * PRE_ROWS + r;
        const bool ok = r < PRE_ROWS && row < seq;
        float acc = 0.0f;
        if (ok) {
            const i64 off = (head + row) * D * (i64)sizeof(T) / 16 + c;
            acc = dot16(reinterpret_cast<const uint4*>(o)[off], reinterpret_cast<const uint4*>(dout)[off], T());
        }
#pragma unroll
        for (int m = 1; m < C; m <<= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
        if (ok && c == 0) delta[head + row] = acc;
    }
    // The block's rows of dq_accum zeroed, for the backward to accumulate into (no memset).
    const int r0 = blockIdx.x * PRE_ROWS, n4 = min(PRE_ROWS, seq - r0) * (D / 4);
    float4* dq = reinterpret_cast<float4*>(dq_accum + (head + r0) * D);
    for (int i = threadIdx.x; i < n4; i += blockDim.x) dq[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// ---------------------------------------------------------------------------------------------
// bf16, tensor cores

// NW warps of MK 16-key m-tiles -> BC = 16*NW*MK keys per block; BR queries per step; K/V
// A fragments kept in registers (KVREG) or re-read per k-step.
template <int D> struct Bf16Cfg;
// d <= 64: 4 warps x 32 keys, BR 32 (measured on the H200 at d 64, leaderboard shape: 5.36 ms against
// 5.95 ms for 8 warps x 16 keys, BR 64: each Q / dO fragment feeds two m-tiles, half the ldmatrix
// traffic per mma); K/V fragments in registers only where they are small (d <= 32). d 128 keeps
// 8 warps x 16 keys (32 keys per warp would need 256 accumulator registers per thread).
template <> struct Bf16Cfg<16> { static constexpr int NW = 4, MK = 2, BR = 32; static constexpr bool KVREG = true; };
template <> struct Bf16Cfg<32> { static constexpr int NW = 4, MK = 2, BR = 32; static constexpr bool KVREG = true; };
template <> struct Bf16Cfg<64> { static constexpr int NW = 4, MK = 2, BR = 32; static constexpr bool KVREG = false; };
template <> struct Bf16Cfg<128> { static constexpr int NW = 8, MK = 1, BR = 32; static constexpr bool KVREG = false; };

// Dynamic shared memory of the bf16 kernel.
template <int D, int BC, int BR>
struct Bf16Smem {
    static constexpr int bytes = 2 * Tile<D>::template Bytes<BC>::value + 4 * Tile<D>::template Bytes<BR>::value +
                                 Tile<BR>::template Bytes<BC>::value + 4 * BR * 4;
};

template <int D, int NW, int MK, int BR, bool KVREG>
__device__ __forceinline__ void bwd_bf16(const bf16_t* __restrict__ q, const bf16_t* __restrict__ k,
                                         const bf16_t* __restrict__ v, const bf16_t* __restrict__ dout,
                                         const float* __restrict__ lse, const float* __restrict__ delta,
                                         bf16_t* __restrict__ dk, bf16_t* __restrict__ dv, float* __restrict__ dq_accum,
                                         int seq, float scale, int causal) {
    constexpr int NT = NW * 32, WK = 16 * MK, BC = NW * WK;  // keys per warp, per block
    constexpr int KD = D / 16, ND = D / 8, NQ8 = BR / 8, KQ = BR / 16;
    constexpr int MQ = BR / 16, WPM = NW / MQ, NQ = ND / WPM;  // dQ: warps per m-tile, n-tiles per warp
    static_assert(NW % MQ == 0 && ND % WPM == 0 && (NQ == 1 || NQ % 2 == 0), "dQ warp layout");
    static_assert(2 * BR <= NT, "L/Delta loader");
    constexpr unsigned KV_BYTES = Tile<D>::template Bytes<BC>::value, QT_BYTES = Tile<D>::template Bytes<BR>::value,
                       DS_BYTES = Tile<BR>::template Bytes<BC>::value;

    if (past_last_key_tile(seq, BC)) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int k0 = (int)blockIdx.y * BC;  // causal: low tiles have the most work and go first
    const i64 head = head_row(seq) * D;
    const BwdQuery qin = {q + head, dout + head, lse + head_row(seq), delta + head_row(seq)};

    const unsigned sK = smem_addr(flash_smem);
    const unsigned sV = sK + KV_BYTES;
    const unsigned sQ = sV + KV_BYTES;         // 2 buffers
    const unsigned sdO = sQ + 2 * QT_BYTES;    // 2 buffers
    const unsigned sdS = sdO + 2 * QT_BYTES;   // [BC, BR] dS^T
    const unsigned sL = sdS + DS_BYTES;        // 2 x BR floats
    const unsigned sDel = sL + 2 * BR * 4;     // 2 x BR floats
    const float* Lf = reinterpret_cast<const float*>(flash_smem + (sL - sK));
    const float* Delf = reinterpret_cast<const float*>(flash_smem + (sDel - sK));

    const int n_q = (seq + BR - 1) / BR;
    const int i_start = first_query_tile(k0, BR, causal);

    load_kv_tile<PADDED, D, BC, NT>(sK, sV, k + head, v + head, k0, seq, tid);
    load_query_tile<PADDED, D, BR, NT>(sQ, sdO, sL, sDel, qin, i_start * BR, seq, tid);
    cp_async_commit();

    const int wrow = warp * WK, wk0 = k0 + wrow;  // this warp's first key (in the tile, absolute)
    // per-lane parts of the ldmatrix row addresses (A / .trans pattern, B pattern); see the forward
    const unsigned a_lane = toff<D>(lane & 15, lane >> 4);
    const unsigned b_lane = toff<D>((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    const unsigned ds_lane = toff<BR>((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    const float sl2 = scale * LOG2E;
    float dk_acc[MK][ND][4], dv_acc[MK][ND][4];
    zero_frags(dk_acc);
    zero_frags(dv_acc);
    unsigned kf[KVREG ? MK : 1][KVREG ? KD : 1][4], vf[KVREG ? MK : 1][KVREG ? KD : 1][4];

    for (int i = i_start; i < n_q; ++i) {
        const unsigned buf = (i - i_start) & 1;
        if (i + 1 < n_q) {
            const unsigned nb = buf ^ 1;
            load_query_tile<PADDED, D, BR, NT>(sQ + nb * QT_BYTES, sdO + nb * QT_BYTES, sL + nb * BR * 4,
                                               sDel + nb * BR * 4, qin, (i + 1) * BR, seq, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if constexpr (KVREG) {
            if (i == i_start) {
#pragma unroll
                for (int mk = 0; mk < MK; ++mk)
#pragma unroll
                    for (int kk = 0; kk < KD; ++kk) {
                        ldmatrix_x4(kf[mk][kk], sK + a_lane + toff<D>(wrow + mk * 16, kk * 2));
                        ldmatrix_x4(vf[mk][kk], sV + a_lane + toff<D>(wrow + mk * 16, kk * 2));
                    }
            }
        }
        const int q0 = i * BR;
        const unsigned sQb = sQ + buf * QT_BYTES, sdOb = sdO + buf * QT_BYTES;
        const float* Lb = Lf + buf * BR;
        const float* Db = Delf + buf * BR;
        const bool active = wk0 < seq && !(causal && wk0 > q0 + BR - 1);
        if (active) {
            // S^T = K_w Q^T and dP^T = V_w dO^T: [WK keys, BR queries]
            float s[MK][NQ8][4], dp[MK][NQ8][4];
            zero_frags(s);
            zero_frags(dp);
            // k-steps over D: unrolled with K/V fragments in registers, a loop otherwise
            k_steps<KD, KVREG>([&](int kk) {
                unsigned ka[MK][4], va[MK][4];
#pragma unroll
                for (int mk = 0; mk < MK; ++mk) {
                    if constexpr (KVREG) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            ka[mk][e] = kf[mk][kk][e];
                            va[mk][e] = vf[mk][kk][e];
                        }
                    } else {
                        ldmatrix_x4(ka[mk], sK + a_lane + toff<D>(wrow + mk * 16, kk * 2));
                        ldmatrix_x4(va[mk], sV + a_lane + toff<D>(wrow + mk * 16, kk * 2));
                    }
                }
#pragma unroll
                for (int np = 0; np < NQ8 / 2; ++np) {
                    const unsigned off = b_lane + toff<D>(np * 16, kk * 2);
                    mma_bf16_16816_x2_m_ld<false>(s, np, ka, sQb + off);
                    mma_bf16_16816_x2_m_ld<false>(dp, np, va, sdOb + off);
                }
            });
            // P^T = exp2(S^T * scale*log2e - L*log2e); dS^T = scale * P^T * (dP^T - Delta)
            const bool need_mask = q0 + BR > seq || wk0 + WK > seq || (causal && wk0 + WK - 1 > q0);
#pragma unroll
            for (int n = 0; n < NQ8; ++n) {
                const int cl = n * 8 + 2 * t;  // column (query) within the tile
                const float2 L2 = *reinterpret_cast<const float2*>(Lb + cl);
                const float2 De = *reinterpret_cast<const float2*>(Db + cl);
                const float nl[2] = {-L2.x * LOG2E, -L2.y * LOG2E}, nd[2] = {-De.x * scale, -De.y * scale};
#pragma unroll
                for (int mk = 0; mk < MK; ++mk)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float p = exp2_approx(fmaf(s[mk][n][e], sl2, nl[e & 1]));
                        if (need_mask) {
                            const int row = wk0 + mk * 16 + g + ((e >> 1) << 3), col = q0 + cl + (e & 1);
                            if (col >= seq || row >= seq || (causal && row > col)) p = 0.0f;
                        }
                        s[mk][n][e] = p;
                        dp[mk][n][e] = p * fmaf(dp[mk][n][e], scale, nd[e & 1]);  // scale * P * (dP - Delta)
                    }
            }
            // dV += P^T dO and dK += dS^T Q (A fragments straight from the accumulators); dS^T to smem
#pragma unroll
            for (int kq = 0; kq < KQ; ++kq) {
                unsigned pa[MK][4], da[MK][4];
#pragma unroll
                for (int mk = 0; mk < MK; ++mk) {
                    pack_a_frag(pa[mk], s[mk][2 * kq], s[mk][2 * kq + 1]);
                    pack_a_frag(da[mk], dp[mk][2 * kq], dp[mk][2 * kq + 1]);
                    const int r = wrow + mk * 16 + g;
                    unsigned char* base = flash_smem + (sdS - sK);
                    *reinterpret_cast<unsigned*>(base + toff<BR>(r, 2 * kq) + 4 * t) = da[mk][0];
                    *reinterpret_cast<unsigned*>(base + toff<BR>(r + 8, 2 * kq) + 4 * t) = da[mk][1];
                    *reinterpret_cast<unsigned*>(base + toff<BR>(r, 2 * kq + 1) + 4 * t) = da[mk][2];
                    *reinterpret_cast<unsigned*>(base + toff<BR>(r + 8, 2 * kq + 1) + 4 * t) = da[mk][3];
                }
#pragma unroll
                for (int np = 0; np < ND / 2; ++np) {
                    const unsigned off = a_lane + toff<D>(kq * 16, np * 2);
                    mma_bf16_16816_x2_m_ld<true>(dv_acc, np, pa, sdOb + off);
                    mma_bf16_16816_x2_m_ld<true>(dk_acc, np, da, sQb + off);
                }
            }
        }
        __syncthreads();  // dS^T complete; Q/dO buffer `buf` no longer read

        // dQ[q0 + 16*mq ..][cols of this warp] += dS K over the 16-key slices that can be non-zero
        {
            const int mq = warp % MQ, ng = warp / MQ;
            const int qr0 = q0 + mq * 16;
            int kk_end = imin(BC / 16, (seq - k0 + 15) / 16);
            if (causal) kk_end = imin(kk_end, qr0 + 15 >= k0 ? (qr0 + 15 - k0) / 16 + 1 : 0);
            if (qr0 < seq && kk_end > 0) {
                float dq[NQ][4];
#pragma unroll
                for (int n = 0; n < NQ; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) dq[n][e] = 0.0f;
#pragma unroll 1
                for (int kk = 0; kk < kk_end; ++kk) {
                    unsigned a[4];
                    ldmatrix_x4_trans(a, sdS + ds_lane + toff<BR>(kk * 16, mq * 2));
                    if constexpr (NQ == 1) {
                        unsigned b[2];
                        ldmatrix_x2_trans(b, sK + a_lane + toff<D>(kk * 16, ng));
                        mma_bf16_16816(dq[0], a, b[0], b[1]);
                    } else {
#pragma unroll
                        for (int np = 0; np < NQ / 2; ++np) {
                            unsigned b[4];
                            ldmatrix_x4_trans(b, sK + a_lane + toff<D>(kk * 16, ng * NQ + np * 2));
                            mma_bf16_16816_x2(dq[2 * np], dq[2 * np + 1], a, b);
                        }
                    }
                }
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = qr0 + g + 8 * h;
                    if (row < seq) {
                        float* dst = dq_accum + head + (i64)row * D + ng * NQ * 8 + 2 * t;
#pragma unroll
                        for (int n = 0; n < NQ; ++n) red_add_f32x2(dst + n * 8, dq[n][2 * h], dq[n][2 * h + 1]);
                    }
                }
            }
        }
    }

    // dK (scale already in dS) and dV
#pragma unroll
    for (int mk = 0; mk < MK; ++mk)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = wk0 + mk * 16 + g + 8 * h;
            if (row < seq) {
#pragma unroll
                for (int nd = 0; nd < ND; ++nd) {
                    const i64 off = head + (i64)row * D + nd * 8 + 2 * t;
                    *reinterpret_cast<unsigned*>(dk + off) = pack_bf16x2(dk_acc[mk][nd][2 * h], dk_acc[mk][nd][2 * h + 1]);
                    *reinterpret_cast<unsigned*>(dv + off) = pack_bf16x2(dv_acc[mk][nd][2 * h], dv_acc[mk][nd][2 * h + 1]);
                }
            }
        }
}

// ---------------------------------------------------------------------------------------------
// fp32, SIMT

constexpr int F32_B = 64, F32_PLD = F32_B + 4;

template <int D>
struct F32Smem { static constexpr int bytes = 4 * (4 * 64 * (D + 1) + 2 * 64 * F32_PLD + 2 * 64); };

// Thread (ty, tx) of a 16 x 16 grid: for S, dP it owns query rows ty*4+i and keys tx+16*j; for
// dK, dV keys ty*4+i and columns tx+16*kk; for dQ query rows ty*4+i and columns tx+16*kk.
template <int D>
__device__ __forceinline__ void bwd_f32(const float* __restrict__ q, const float* __restrict__ k,
                                        const float* __restrict__ v, const float* __restrict__ dout,
                                        const float* __restrict__ lse, const float* __restrict__ delta,
                                        float* __restrict__ dk, float* __restrict__ dv, float* __restrict__ dq_accum,
                                        int seq, float scale, int causal) {
    constexpr int B = F32_B, LD = D + 1, PLD = F32_PLD, DK = D / 16;
    float* Ks = reinterpret_cast<float*>(flash_smem);
    float* Vs = Ks + B * LD;
    float* Qs = Vs + B * LD;
    float* dOs = Qs + B * LD;
    float* Ps = dOs + B * LD;
    float* dSs = Ps + B * PLD;
    float* Ls = dSs + B * PLD;
    float* Ds = Ls + B;

    if (past_last_key_tile(seq, B)) return;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int k0 = (int)blockIdx.y * B;
    const i64 head = head_row(seq) * D;
    const float sl2 = scale * LOG2E;
    const int n_q = (seq + B - 1) / B;
    const int i_start = first_query_tile(k0, B, causal);

    load_tile_f32<D>(Ks, k + head, k0, seq, tid);
    load_tile_f32<D>(Vs, v + head, k0, seq, tid);
    float dk_acc[4][DK], dv_acc[4][DK];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int kk = 0; kk < DK; ++kk) dk_acc[i][kk] = dv_acc[i][kk] = 0.0f;

    for (int it = i_start; it < n_q; ++it) {
        const int q0 = it * B;
        __syncthreads();  // previous tile fully consumed
        load_tile_f32<D>(Qs, q + head, q0, seq, tid);
        load_tile_f32<D>(dOs, dout + head, q0, seq, tid);
        if (tid < B) {
            const int r = q0 + tid;
            Ls[tid] = r < seq ? lse[head_row(seq) + r] : 0.0f;
            Ds[tid] = r < seq ? delta[head_row(seq) + r] : 0.0f;
        }
        __syncthreads();
        float s[4][4], dp[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) s[i][j] = dp[i][j] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < D; ++d) {
            float qv[4], ov[4], kv[4], vv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                qv[i] = Qs[(ty * 4 + i) * LD + d];
                ov[i] = dOs[(ty * 4 + i) * LD + d];
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                kv[j] = Ks[(tx + 16 * j) * LD + d];
                vv[j] = Vs[(tx + 16 * j) * LD + d];
            }
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) {
                    s[i][j] = fmaf(qv[i], kv[j], s[i][j]);
                    dp[i][j] = fmaf(ov[i], vv[j], dp[i][j]);
                }
        }
        const bool need_mask = q0 + B > seq || k0 + B > seq || (causal && k0 + B - 1 > q0);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int r = ty * 4 + i;
            const float nl = -Ls[r] * LOG2E, de = Ds[r];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = tx + 16 * j;
                float p = exp2f(fmaf(s[i][j], sl2, nl));
                if (need_mask && (q0 + r >= seq || k0 + c >= seq || (causal && k0 + c > q0 + r))) p = 0.0f;
                Ps[r * PLD + c] = p;
                dSs[r * PLD + c] = p * (dp[i][j] - de) * scale;
            }
        }
        __syncthreads();
        // dV[key][col] += sum_r P[r][key] dO[r][col];  dK[key][col] += sum_r dS[r][key] Q[r][col]
        const int r_end = imin(B, seq - q0);
        for (int r = 0; r < r_end; ++r) {
            const float4 p4 = *reinterpret_cast<const float4*>(Ps + r * PLD + ty * 4);
            const float4 d4 = *reinterpret_cast<const float4*>(dSs + r * PLD + ty * 4);
            const float pv[4] = {p4.x, p4.y, p4.z, p4.w}, dsv[4] = {d4.x, d4.y, d4.z, d4.w};
#pragma unroll
            for (int kk = 0; kk < DK; ++kk) {
                const float o_ = dOs[r * LD + tx + 16 * kk], q_ = Qs[r * LD + tx + 16 * kk];
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    dv_acc[i][kk] = fmaf(pv[i], o_, dv_acc[i][kk]);
                    dk_acc[i][kk] = fmaf(dsv[i], q_, dk_acc[i][kk]);
                }
            }
        }
        // dQ[r][col] += sum_key dS[r][key] K[key][col]
        {
            float dq[4][DK];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int kk = 0; kk < DK; ++kk) dq[i][kk] = 0.0f;
            f32_tile_product<D, PLD>(dq, dSs, Ks, imin(B, seq - k0), tx, ty);
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = q0 + ty * 4 + i;
                if (row < seq) {
#pragma unroll
                    for (int kk = 0; kk < DK; ++kk) atomicAdd(dq_accum + head + (i64)row * D + tx + 16 * kk, dq[i][kk]);
                }
            }
        }
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int row = k0 + ty * 4 + i;
        if (row < seq) {
#pragma unroll
            for (int kk = 0; kk < DK; ++kk) {
                dk[head + (i64)row * D + tx + 16 * kk] = dk_acc[i][kk];
                dv[head + (i64)row * D + tx + 16 * kk] = dv_acc[i][kk];
            }
        }
    }
}

}  // namespace flash_bwd

#define FLASH_BWD_PRE(S, T, D)                                                                                    \
    extern "C" __global__ void flash_bwd_preprocess_##S##_d##D(const T* o, const T* dout, float* delta,          \
                                                               float* dq_accum, int seq) {                       \
        flash_bwd::preprocess<T, D>(o, dout, delta, dq_accum, seq);                                                \
    }
FLASH_BWD_PRE(bf16, bf16_t, 16)
FLASH_BWD_PRE(bf16, bf16_t, 32)
FLASH_BWD_PRE(bf16, bf16_t, 64)
FLASH_BWD_PRE(bf16, bf16_t, 128)
FLASH_BWD_PRE(f32, float, 16)
FLASH_BWD_PRE(f32, float, 32)
FLASH_BWD_PRE(f32, float, 64)
FLASH_BWD_PRE(f32, float, 128)

#define FLASH_BWD_BF16(D)                                                                                          \
    extern "C" __global__ void __launch_bounds__(flash_bwd::Bf16Cfg<D>::NW * 32)                                   \
        flash_bwd_bf16_d##D(const bf16_t* q, const bf16_t* k, const bf16_t* v, const bf16_t* dout,                \
                            const float* lse, const float* delta, bf16_t* dk, bf16_t* dv, float* dq_accum, int seq, \
                            float scale, int causal) {                                                             \
        using C = flash_bwd::Bf16Cfg<D>;                                                                           \
        flash_bwd::bwd_bf16<D, C::NW, C::MK, C::BR, C::KVREG>(q, k, v, dout, lse, delta, dk, dv, dq_accum, seq,    \
                                                               scale, causal);                                     \
    }
FLASH_BWD_BF16(16)
FLASH_BWD_BF16(32)
FLASH_BWD_BF16(64)
FLASH_BWD_BF16(128)

#define FLASH_BWD_F32(D)                                                                                           \
    extern "C" __global__ void __launch_bounds__(flash::F32_NT)                                                \
        flash_bwd_f32_d##D(const float* q, const float* k, const float* v, const float* dout, const float* lse,    \
                           const float* delta, float* dk, float* dv, float* dq_accum, int seq, float scale,        \
                           int causal) {                                                                           \
        flash_bwd::bwd_f32<D>(q, k, v, dout, lse, delta, dk, dv, dq_accum, seq, scale, causal);                    \
    }
FLASH_BWD_F32(16)
FLASH_BWD_F32(32)
FLASH_BWD_F32(64)
FLASH_BWD_F32(128)

// dQ accumulator (fp32) -> bf16, round to nearest even. Pointers 16-byte aligned.
extern "C" __global__ void flash_dq_convert_bf16(const float* dq_accum, bf16_t* dq, long long n) {
    const i64 stride = (i64)gridDim.x * blockDim.x;
    const i64 n4 = n / 4;
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n4; i += stride) {
        const float4 x = reinterpret_cast<const float4*>(dq_accum)[i];
        uint2 y;
        y.x = pack_bf16x2(x.x, x.y);
        y.y = pack_bf16x2(x.z, x.w);
        reinterpret_cast<uint2*>(dq)[i] = y;
    }
    for (i64 i = n4 * 4 + blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += stride) dq[i] = f32_to_bf16(dq_accum[i]);
}
