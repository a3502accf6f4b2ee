// FlashAttention-2 forward (sm_90; the bf16 kernels use mma.sync / ldmatrix / cp.async, see
// tensor_core.cuh; tiles and loaders shared with the other FlashAttention files in flash_common.cuh).
//
// O = softmax(scale * Q K^T [causal mask]) V per (batch x head), and L = logsumexp of the scaled
// scores (natural log) per query row, saved for the backward. Q, K, V, O: [BH, T, D] row-major,
// contiguous, 16-byte aligned bases, all bf16 or all fp32; lse: [BH, T] fp32. D in {16, 32, 64,
// 128}; any T >= 1 (rows past T are zero-filled on load and masked as keys, never written).
// One block owns BR query rows of one head and walks the key/value tiles of BC keys with an online
// softmax: running row max m and sum l, fp32 accumulators, p = 2^(s * scale*log2(e) - m*scale*log2(e)).
// Causal (key j visible to query i iff j <= i): tiles wholly above the diagonal are never loaded;
// only the tiles that cross this warp's diagonal, or the end of the sequence, are masked; a warp
// whose rows all lie above a tile skips its math.
//
// bf16: tensor cores, mma.sync m16n8k16 with fp32 accumulation. Each warp owns 16*MT query rows;
// Q stays in registers as A fragments (d <= 64) or is re-read per k-step with ldmatrix (d 128);
// K/V tiles are double-buffered with cp.async (16-byte copies, zero-fill past T) in padded shared
// memory that has no bank conflicts for ldmatrix or cp.async; S = Q K^T stays in registers and P is
// repacked from the S accumulators into A fragments for P V (V through ldmatrix.trans). The row
// sums l come from the tensor cores too (P times a column of ones, over the same bf16 P that
// multiplies V), O is rescaled only when a row max of the warp moved, exp2 is ex2.approx.ftz.
// fp32: SIMT FFMA (no TF32), 64 query rows x 64 keys per step, 256 threads, P through shared
// memory, exp2f; accurate to ~1e-6 relative.
//
// Launch contract: flash_fwd_<S>_d<D>(q, k, v, o, lse, seq, scale, causal), causal 0 or 1,
//   grid = (BH, ceil(seq / BR)) (extra blocks in y return at once; the last query tile, the one
//   with the most causal work, is scheduled first), block = (threads), dynamic shared memory:
//     kernel               BR  threads  smem bytes
//     flash_fwd_bf16_d16   128  128      13824
//     flash_fwd_bf16_d32   128  128      27648
//     flash_fwd_bf16_d64   128  128      55296   (*)
//     flash_fwd_bf16_d128  128  128      69632   (*)
//     flash_fwd_f32_d16     64  256      30464
//     flash_fwd_f32_d32     64  256      42752
//     flash_fwd_f32_d64     64  256      67328   (*)
//     flash_fwd_f32_d128    64  256     116480   (*)
//   (*) over 48 KiB: set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it before launching.
//   bf16 smem = Tile<D>::Bytes<BR> + 4 * Tile<D>::Bytes<BC> (BC = 64, 32 at d 128); fp32 smem =
//   4 * (3 * 64 * (D + 1) + 64 * 68). Both are F32Smem / Bf16Smem below.

#include "flash_common.cuh"

namespace flash_fwd {

using namespace flash;

// Whether query `query` must not see key `key`: past the sequence, or after the query (causal).
// (The backward files keep their longer conditions inline: through a function, the compiler turns
// them into branches.)
__device__ __forceinline__ bool key_masked(int query, int key, int seq, int causal) {
    return key >= seq || (causal && key > query);
}

// ---------------------------------------------------------------------------------------------
// bf16, tensor cores

// Tile configuration per head dim: NW warps, each with MT 16-row m-tiles (BR = NW*16*MT query
// rows per block), BC keys per step, Q fragments kept in registers or not.
template <int D> struct Bf16Cfg;
template <> struct Bf16Cfg<16> { static constexpr int NW = 4, MT = 2, BC = 64; static constexpr bool QREG = true; };
template <> struct Bf16Cfg<32> { static constexpr int NW = 4, MT = 2, BC = 64; static constexpr bool QREG = true; };
template <> struct Bf16Cfg<64> { static constexpr int NW = 4, MT = 2, BC = 64; static constexpr bool QREG = true; };
template <> struct Bf16Cfg<128> { static constexpr int NW = 4, MT = 2, BC = 32; static constexpr bool QREG = false; };

// Dynamic shared memory of the bf16 kernel.
template <int D, int NW, int MT, int BC>
struct Bf16Smem {
    static constexpr int bytes = Tile<D>::template Bytes<NW * 16 * MT>::value + 4 * Tile<D>::template Bytes<BC>::value;
};

template <int D, int NW, int MT, int BC, bool QREG>
__device__ __forceinline__ void fwd_bf16(const bf16_t* __restrict__ q, const bf16_t* __restrict__ k,
                                         const bf16_t* __restrict__ v, bf16_t* __restrict__ o,
                                         float* __restrict__ lse, int seq, float scale, int causal) {
    constexpr int NT = NW * 32, BR = NW * 16 * MT;
    constexpr int KD = D / 16, ND = D / 8, NC = BC / 8, KC = BC / 16;
    constexpr unsigned Q_BYTES = Tile<D>::template Bytes<BR>::value, KV_BYTES = Tile<D>::template Bytes<BC>::value;
    static_assert(BC % 16 == 0 && D % 16 == 0, "tile shapes");

    const int qt = query_tile(seq, BR);
    if (qt < 0) return;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int q0 = qt * BR;
    const i64 head = head_row(seq) * D;
    const bf16_t* kh = k + head;
    const bf16_t* vh = v + head;

    const unsigned sQ = smem_addr(flash_smem);
    const unsigned sK = sQ + Q_BYTES;       // 2 buffers
    const unsigned sV = sK + 2 * KV_BYTES;  // 2 buffers

    const int n_kv = kv_tile_count(seq, q0, BR, BC, causal);

    load_tile<PADDED, D, BR, NT>(sQ, q + head, q0, seq, tid);
    cp_async_commit();
    load_kv_tile<PADDED, D, BC, NT>(sK, sV, kh, vh, 0, seq, tid);
    cp_async_commit();

    const int wrow = warp * 16 * MT;  // first row of this warp in the tile
    // per-lane parts of the ldmatrix row addresses: A-fragment / .trans pattern (matrices ordered
    // rows 0-7, rows 8-15, then the next chunk) and B-fragment pattern (chunk 0, chunk 1, then rows 8-15)
    const unsigned a_lane = toff<D>(lane & 15, lane >> 4);
    const unsigned b_lane = toff<D>((lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
    const int wr0 = q0 + wrow, wr_last = wr0 + 16 * MT - 1;

    unsigned qf[QREG ? MT : 1][QREG ? KD : 1][4];
    if constexpr (QREG) {
        cp_async_wait<1>();
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int kk = 0; kk < KD; ++kk)
                ldmatrix_x4(qf[mt][kk], sQ + a_lane + toff<D>(wrow + mt * 16, kk * 2));
    }

    float acc[MT][ND][4];
    float m_run[MT][2];
    float l_acc[MT][4];  // row sums in accumulator layout: [0], [1] row g; [2], [3] row g + 8
    constexpr unsigned ONES = 0x3f803f80u;  // bf16x2 (1, 1): B fragment of a column of ones
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int nd = 0; nd < ND; ++nd)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nd][e] = 0.0f;
        m_run[mt][0] = m_run[mt][1] = NEG_INF;
#pragma unroll
        for (int e = 0; e < 4; ++e) l_acc[mt][e] = 0.0f;
    }
    const float sl2 = scale * LOG2E;

    for (int j = 0; j < n_kv; ++j) {
        const unsigned buf = j & 1;
        if (j + 1 < n_kv) {
            const unsigned nb = buf ^ 1;
            load_kv_tile<PADDED, D, BC, NT>(sK + nb * KV_BYTES, sV + nb * KV_BYTES, kh, vh, (j + 1) * BC, seq, tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const int k0 = j * BC;
        const unsigned sKb = sK + buf * KV_BYTES, sVb = sV + buf * KV_BYTES;
        const bool active = wr0 < seq && !(causal && k0 > wr_last);
        if (active) {
            // S = Q K^T (raw scores)
            float s[MT][NC][4];
            zero_frags(s);
            // k-steps over D: unrolled when Q is in registers (constant fragment indices), a loop
            // otherwise
            k_steps<KD, QREG>([&](int kk) {
                unsigned qa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    if constexpr (QREG) {
#pragma unroll
                        for (int e = 0; e < 4; ++e) qa[mt][e] = qf[mt][kk][e];
                    } else {
                        ldmatrix_x4(qa[mt], sQ + a_lane + toff<D>(wrow + mt * 16, kk * 2));
                    }
                }
#pragma unroll
                for (int np = 0; np < NC / 2; ++np)
                    mma_bf16_16816_x2_m_ld<false>(s, np, qa, sKb + b_lane + toff<D>(np * 16, kk * 2));
            });
            // masking: only tiles that reach past the sequence or cross this warp's diagonal
            if (k0 + BC > seq || (causal && k0 + BC - 1 > wr0)) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int nc = 0; nc < NC; ++nc)
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            int row = wr0 + mt * 16 + g + ((e >> 1) << 3);
                            int col = k0 + nc * 8 + 2 * t + (e & 1);
                            if (key_masked(row, col, seq, causal)) s[mt][nc][e] = NEG_INF;
                        }
            }
            // online softmax; each row is spread over the 4 lanes of a quad
            bool changed = false;
            float alpha[MT][2];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    float mx = m_run[mt][h];
#pragma unroll
                    for (int nc = 0; nc < NC; ++nc) mx = fmaxf(mx, fmaxf(s[mt][nc][2 * h], s[mt][nc][2 * h + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                    const float ms = mx == NEG_INF ? 0.0f : mx * sl2;
                    changed |= mx != m_run[mt][h];
                    alpha[mt][h] = exp2_approx(m_run[mt][h] * sl2 - ms);  // exactly 1 when the max holds
                    m_run[mt][h] = mx;
#pragma unroll
                    for (int nc = 0; nc < NC; ++nc) {
                        s[mt][nc][2 * h] = exp2_approx(fmaf(s[mt][nc][2 * h], sl2, -ms));
                        s[mt][nc][2 * h + 1] = exp2_approx(fmaf(s[mt][nc][2 * h + 1], sl2, -ms));
                    }
                }
            // rescale O and the row sums only when some row max of this warp moved (rare after the
            // first tiles)
            if (__any_sync(0xffffffffu, changed)) {
#pragma unroll
                for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const float a = alpha[mt][e >> 1];
                        l_acc[mt][e] *= a;
#pragma unroll
                        for (int nd = 0; nd < ND; ++nd) acc[mt][nd][e] *= a;
                    }
            }
            // O += P V and l += P 1: P from the S accumulators, repacked as A fragments (the row sums
            // come from the tensor cores too, over the same bf16 P that multiplies V)
#pragma unroll
            for (int kc = 0; kc < KC; ++kc) {
                unsigned pa[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    pack_a_frag(pa[mt], s[mt][2 * kc], s[mt][2 * kc + 1]);
                    mma_bf16_16816(l_acc[mt], pa[mt], ONES, ONES);
                }
#pragma unroll
                for (int dp = 0; dp < ND / 2; ++dp)
                    mma_bf16_16816_x2_m_ld<true>(acc, dp, pa, sVb + a_lane + toff<D>(kc * 16, dp * 2));
            }
        }
        __syncthreads();  // the buffer just read is refilled by the next iteration's prefetch
    }

    // epilogue: O /= l, L = m * scale + ln(l)
    bf16_t* oh = o + head;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float l = l_acc[mt][2 * h];
            const int row = wr0 + mt * 16 + g + 8 * h;
            if (row < seq) {
                const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
                for (int nd = 0; nd < ND; ++nd)
                    *reinterpret_cast<unsigned*>(oh + (i64)row * D + nd * 8 + 2 * t) =
                        pack_bf16x2(acc[mt][nd][2 * h] * inv, acc[mt][nd][2 * h + 1] * inv);
                if (t == 0) lse[head_row(seq) + row] = l > 0.0f ? (m_run[mt][h] * sl2 + log2f(l)) * LN2 : NEG_INF;
            }
        }
}

// ---------------------------------------------------------------------------------------------
// fp32, SIMT

constexpr int F32_BM = 64, F32_BN = 64, F32_PLD = F32_BN + 4;

template <int D>
struct F32Smem { static constexpr int bytes = 4 * (3 * 64 * (D + 1) + 64 * F32_PLD); };

// Thread (ty, tx) of a 16 x 16 grid owns query rows ty*4 + i and key columns tx + 16*j
// (i, j < 4), and output columns tx + 16*kk. A row's 16 threads are one half-warp.
template <int D>
__device__ __forceinline__ void fwd_f32(const float* __restrict__ q, const float* __restrict__ k,
                                        const float* __restrict__ v, float* __restrict__ o,
                                        float* __restrict__ lse, int seq, float scale, int causal) {
    constexpr int BM = F32_BM, BN = F32_BN, LD = D + 1, PLD = F32_PLD, DK = D / 16;
    float* Qs = reinterpret_cast<float*>(flash_smem);
    float* Ks = Qs + BM * LD;
    float* Vs = Ks + BN * LD;
    float* Ps = Vs + BN * LD;

    const int qt = query_tile(seq, BM);
    if (qt < 0) return;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int q0 = qt * BM;
    const i64 head = head_row(seq) * D;
    const int n_kv = kv_tile_count(seq, q0, BM, BN, causal);
    const float sl2 = scale * LOG2E;

    load_tile_f32<D>(Qs, q + head, q0, seq, tid);
    float acc[4][DK], m_run[4], l_run[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        m_run[i] = NEG_INF;
        l_run[i] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DK; ++kk) acc[i][kk] = 0.0f;
    }

    for (int j = 0; j < n_kv; ++j) {
        const int k0 = j * BN;
        __syncthreads();  // previous tile fully consumed
        load_tile_f32<D>(Ks, k + head, k0, seq, tid);
        load_tile_f32<D>(Vs, v + head, k0, seq, tid);
        __syncthreads();
        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) s[i][jj] = 0.0f;
#pragma unroll 8
        for (int d = 0; d < D; ++d) {
            float qv[4], kv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) qv[i] = Qs[(ty * 4 + i) * LD + d];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) kv[jj] = Ks[(tx + 16 * jj) * LD + d];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int jj = 0; jj < 4; ++jj) s[i][jj] = fmaf(qv[i], kv[jj], s[i][jj]);
        }
        if (k0 + BN > seq || (causal && k0 + BN - 1 > q0)) {
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int jj = 0; jj < 4; ++jj) {
                    int row = q0 + ty * 4 + i, col = k0 + tx + 16 * jj;
                    if (key_masked(row, col, seq, causal)) s[i][jj] = NEG_INF;
                }
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float mx = m_run[i];
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) mx = fmaxf(mx, s[i][jj]);
#pragma unroll
            for (int off = 1; off < 16; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float ms = mx == NEG_INF ? 0.0f : mx * sl2;
            const float alpha = exp2f(m_run[i] * sl2 - ms);
            m_run[i] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int jj = 0; jj < 4; ++jj) {
                float p = exp2f(fmaf(s[i][jj], sl2, -ms));
                sum += p;
                Ps[(ty * 4 + i) * PLD + tx + 16 * jj] = p;
            }
            l_run[i] = l_run[i] * alpha + sum;
#pragma unroll
            for (int kk = 0; kk < DK; ++kk) acc[i][kk] *= alpha;
        }
        __syncthreads();
        f32_tile_product<D, PLD>(acc, Ps, Vs, imin(BN, seq - k0), tx, ty);  // O += P V
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float l = l_run[i];
#pragma unroll
        for (int off = 1; off < 16; off <<= 1) l += __shfl_xor_sync(0xffffffffu, l, off);
        const int row = q0 + ty * 4 + i;
        if (row < seq) {
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
            for (int kk = 0; kk < DK; ++kk) o[head + (i64)row * D + tx + 16 * kk] = acc[i][kk] * inv;
            if (tx == 0) lse[head_row(seq) + row] = l > 0.0f ? (m_run[i] * sl2 + log2f(l)) * LN2 : NEG_INF;
        }
    }
}

}  // namespace flash_fwd

#define FLASH_FWD_BF16(D)                                                                                        \
    extern "C" __global__ void __launch_bounds__(flash_fwd::Bf16Cfg<D>::NW * 32)                                 \
        flash_fwd_bf16_d##D(const bf16_t* q, const bf16_t* k, const bf16_t* v, bf16_t* o, float* lse, int seq,  \
                            float scale, int causal) {                                                           \
        using C = flash_fwd::Bf16Cfg<D>;                                                                         \
        flash_fwd::fwd_bf16<D, C::NW, C::MT, C::BC, C::QREG>(q, k, v, o, lse, seq, scale, causal);              \
    }
FLASH_FWD_BF16(16)
FLASH_FWD_BF16(32)
FLASH_FWD_BF16(64)
FLASH_FWD_BF16(128)

#define FLASH_FWD_F32(D)                                                                                         \
    extern "C" __global__ void __launch_bounds__(flash::F32_NT)                                              \
        flash_fwd_f32_d##D(const float* q, const float* k, const float* v, float* o, float* lse, int seq,        \
                           float scale, int causal) {                                                            \
        flash_fwd::fwd_f32<D>(q, k, v, o, lse, seq, scale, causal);                                              \
    }
FLASH_FWD_F32(16)
FLASH_FWD_F32(32)
FLASH_FWD_F32(64)
FLASH_FWD_F32(128)
