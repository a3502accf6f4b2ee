// FlashAttention forward for Hopper (sm_90a: warpgroup MMA, wgmma.mma_async). Needs NVRTC option
// --gpu-architecture=sm_90a (the wgmma wrappers of tensor_core.cuh exist only there); runs on
// compute capability 9.0 only. Tiles, descriptors and loaders are those of flash_common.cuh.
//
// Same contract and results as flash_fwd_bf16_d<D> of flash_attention_fwd.cu: O = softmax(scale *
// Q K^T [causal mask]) V per (batch x head), L = logsumexp of the scaled scores (natural log) per
// query row. Q, K, V, O: [BH, T, D] bf16 row-major, contiguous, 16-byte aligned; lse: [BH, T] fp32;
// D in {16, 32, 64, 128}; any T >= 1 (rows past T are zero-filled on load and masked as keys,
// never written); causal: key j visible to query i iff j <= i.
//
// Algorithm (FA2's online softmax on FA3's Hopper structure):
// - One block owns BR = 64 * NWG query rows of one head, one consumer warpgroup (128 threads) per
//   64 rows; there is no producer warpgroup: every thread issues cp.async for a share of each tile.
// - Q, K and V tiles live in shared memory in the canonical wgmma layout: rows of min(2D, 128)
//   bytes with the matching XOR swizzle (128, 64 or 32 bytes: the 16-byte chunk index within a
//   row XOR the row's position in its 8-row atom, on the absolute address bits 4-6 ^ 7-9), d 128 as
//   two 64-column blocks; every tile 1024-byte aligned (the dynamic buffer is aligned by hand).
// - S = Q K^T: wgmma m64nBCk16, A = Q and B = K from shared memory (both K-major), D/16 k-steps.
//   O += P V: wgmma m64nDk16, A = P from registers (the S accumulators repacked to bf16: the
//   accumulator and A-fragment layouts coincide), B = V from shared memory with the transpose bit
//   (V is [keys, D] row-major, i.e. N-major for this product), BC/16 k-steps.
// - Intra-warpgroup pipelining (FA3): iteration j issues S_j = Q K_j^T and then O += P_{j-1}
//   V_{j-1}, waits only for S_j (wgmma.wait_group 1), does the softmax of S_j while the P V
//   product runs on the tensor cores, then waits for it and rescales O. Several warpgroups (and
//   blocks) per SM interleave their softmax and MMA phases on their own.
// - K/V tiles: a ring of KS = PF + 1 K buffers and VS = PF + 2 V buffers, tile j + PF is
//   prefetched with cp.async (16-byte copies, zero-fill past T) at iteration j, after the block
//   barrier that retires iteration j - 1 (so K_{j-1} and V_{j-2}, whose buffers it reuses, are
//   no longer read by any wgmma) and after iteration j's wgmma are issued. cp.async writes go
//   through the generic proxy: each thread waits for its copies, runs fence.proxy.async.shared::cta,
//   then the barrier, then wgmma reads.
// - Online softmax in fp32 (row max over the 4 lanes of a quad, exp2 of fma(s, scale*log2e,
//   -m*scale*log2e) with ex2.approx.ftz, running sums per thread, reduced over the quad at the
//   end); causal: tiles wholly above the block's diagonal are never loaded, only tiles that cross
//   a warp's diagonal or the sequence end are masked. Every wgmma is issued unconditionally (see
//   below); with BR = BC no warpgroup ever has a tile without a visible key.
// Limits: bf16 only (fp32 stays on flash_fwd_f32_d<D>); O, L as flash_fwd_bf16_d<D> up to bf16
// rounding of P (P is rounded to bf16 for P V, the row sums are fp32: ~1e-3 relative).
//
// Launch contract: flash_fwd_sm90_bf16_d<D>(q, k, v, o, lse, seq, scale, causal), causal 0 or 1,
//   grid = (BH, ceil(seq / BR)) (extra blocks in y return at once; the last query tile, the one
//   with the most causal work, is scheduled first), block = (threads), dynamic shared memory:
//     kernel                    BR  BC  threads  smem bytes
//     flash_fwd_sm90_bf16_d16   128 128  256      34816
//     flash_fwd_sm90_bf16_d32   128 128  256      67584   (*)
//     flash_fwd_sm90_bf16_d64   128  64  256      75776   (*)
//     flash_fwd_sm90_bf16_d128  128 128  256     198656   (*)
//   (*) over 48 KiB: set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it before launching.
//   smem = 2 * D * (BR + (KS + VS) * BC) + 4 * threads (a scratch word per thread) + 1024
//   (alignment slack): Sm90Smem below; one block per SM at d 64 and d 128.

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "flash_attention_fwd_sm90.cu needs --gpu-architecture=sm_90a"
#endif

#include "flash_common.cuh"

namespace flash_fwd_sm90 {

using namespace flash;

// Tile configuration per head dim: NWG consumer warpgroups (BR = 64 * NWG rows), BC keys per
// step, PF tiles of prefetch (K ring PF + 1, V ring PF + 2).
template <int D> struct Sm90Cfg;
template <> struct Sm90Cfg<16> { static constexpr int NWG = 2, BC = 128, PF = 2; };
template <> struct Sm90Cfg<32> { static constexpr int NWG = 2, BC = 128, PF = 2; };
template <> struct Sm90Cfg<64> { static constexpr int NWG = 2, BC = 64, PF = 2; };
template <> struct Sm90Cfg<128> { static constexpr int NWG = 2, BC = 128, PF = 1; };

template <int D, int NWG, int BC, int PF>
struct Sm90Smem {
    static constexpr int bytes = 2 * D * (64 * NWG + (2 * PF + 3) * BC) + 512 * NWG + 1024;
};

template <int D, int NWG, int BC, int PF>
__device__ __forceinline__ void fwd_sm90(const bf16_t* __restrict__ q, const bf16_t* __restrict__ k,
                                         const bf16_t* __restrict__ v, bf16_t* __restrict__ o,
                                         float* __restrict__ lse, int seq, float scale, int causal) {
    constexpr int NT = 128 * NWG, BR = 64 * NWG, KS = PF + 1, VS = PF + 2;
    constexpr unsigned Q_BYTES = BR * D * 2, KV_BYTES = BC * D * 2;
    constexpr int SN = BC / 2, ON = D / 2;   // accumulator floats per thread: S, O
    constexpr int KD = D / 16, KC = BC / 16; // k-steps: S over D, P V over the keys
    static_assert(BC % 16 == 0 && BC <= 256 && PF >= 1, "tile shapes");

    const int qt = query_tile(seq, BR);
    if (qt < 0) return;
    const int tid = threadIdx.x, lane = tid & 31;
    const int wg = tid >> 7, wq = (tid >> 5) & 3;  // warpgroup, warp within it
    const int g = lane >> 2, t = lane & 3;
    const int q0 = qt * BR;
    const i64 head = head_row(seq) * D;
    const bf16_t* kh = k + head;
    const bf16_t* vh = v + head;

    const unsigned base = (smem_addr(flash_smem) + 1023u) & ~1023u;
    const unsigned sQ = base;
    const unsigned sK = sQ + Q_BYTES;        // KS buffers
    const unsigned sV = sK + KS * KV_BYTES;  // VS buffers
    const unsigned sScratch = sV + VS * KV_BYTES;  // one word per thread (see the wait below)

    const int n_kv = kv_tile_count(seq, q0, BR, BC, causal);

    // prologue: Q with tile 0, then tiles 1 .. PF-1: PF groups
    load_tile<SWIZZLED, D, BR, NT>(sQ, q + head, q0, seq, tid);
#pragma unroll
    for (int j = 0; j < PF; ++j) {
        if (j < n_kv)
            load_kv_tile<SWIZZLED, D, BC, NT>(sK + (j % KS) * KV_BYTES, sV + (j % VS) * KV_BYTES, kh, vh, j * BC,
                                              seq, tid);
        cp_async_commit();
    }

    const int wr0 = q0 + wg * 64;       // first row of this warpgroup
    const int r_lo = wr0 + wq * 16 + g;  // this thread's rows: r_lo, r_lo + 8
    const float sl2 = scale * LOG2E;

    float acc[ON];
    float s[SN];
    unsigned pa[KC][4];  // P of the previous tile as A fragments (bf16x2)
    float m_run[2] = {NEG_INF, NEG_INF}, l_run[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < ON; ++i) acc[i] = 0.0f;

    // Every wgmma below is issued unconditionally (a wgmma under a branch that ptxas cannot prove
    // warpgroup-uniform makes it serialize all of them): a warpgroup whose rows see no key of a
    // tile just computes a fully masked S (p = 0, alpha = 1), and one past the sequence end
    // computes rows that are never stored.
    auto issue_s = [&](int j) {
        const unsigned sKb = sK + (j % KS) * KV_BYTES;
#pragma unroll
        for (int kk = 0; kk < KD; ++kk)
            wgmma_ss_bf16<BC>(s, kmajor_desc<D, BR>(sQ, wg * 64, kk), kmajor_desc<D, BC>(sKb, 0, kk), kk > 0);
    };
    auto issue_pv = [&](int j) {  // O += P_j V_j
        const unsigned sVb = sV + (j % VS) * KV_BYTES;
#pragma unroll
        for (int kc = 0; kc < KC; ++kc) wgmma_rs_bf16_tb<D>(acc, pa[kc], nmajor_desc<D, BC>(sVb, kc, 0), 1);
    };
    // S_j -> P_j in place (fp32), new running max; alpha = rescale factor of the old O and l
    auto softmax = [&](int j, float (&alpha)[2], float (&rsum)[2]) {
        const int k0 = j * BC;
        if (k0 + BC > seq || (causal && k0 + BC - 1 > wr0 + wq * 16)) {
#pragma unroll
            for (int i = 0; i < SN; ++i) {
                const int row = r_lo + ((i >> 1) & 1) * 8;
                const int col = k0 + (i >> 2) * 8 + 2 * t + (i & 1);
                if (col >= seq || (causal && col > row)) s[i] = NEG_INF;
            }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = m_run[h];
#pragma unroll
            for (int nb = 0; nb < BC / 8; ++nb) mx = fmaxf(mx, fmaxf(s[4 * nb + 2 * h], s[4 * nb + 2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float ms = mx == NEG_INF ? 0.0f : mx * sl2;
            alpha[h] = exp2_approx(m_run[h] * sl2 - ms);  // 1 when the max holds, 0 from -inf
            m_run[h] = mx;
            float sum = 0.0f;
#pragma unroll
            for (int nb = 0; nb < BC / 8; ++nb) {
                const float p0 = exp2_approx(fmaf(s[4 * nb + 2 * h], sl2, -ms));
                const float p1 = exp2_approx(fmaf(s[4 * nb + 2 * h + 1], sl2, -ms));
                s[4 * nb + 2 * h] = p0;
                s[4 * nb + 2 * h + 1] = p1;
                sum += p0 + p1;
            }
            rsum[h] = sum;
        }
    };
    // after the previous P V retired: O *= alpha, l = l * alpha + rowsum, P_j -> A fragments
    auto rescale_pack = [&](const float (&alpha)[2], const float (&rsum)[2]) {
#pragma unroll
        for (int i = 0; i < ON; ++i) acc[i] *= alpha[(i >> 1) & 1];
#pragma unroll
        for (int h = 0; h < 2; ++h) l_run[h] = fmaf(l_run[h], alpha[h], rsum[h]);
#pragma unroll
        for (int kc = 0; kc < KC; ++kc) {
            pa[kc][0] = pack_bf16x2(s[8 * kc + 0], s[8 * kc + 1]);
            pa[kc][1] = pack_bf16x2(s[8 * kc + 2], s[8 * kc + 3]);
            pa[kc][2] = pack_bf16x2(s[8 * kc + 4], s[8 * kc + 5]);
            pa[kc][3] = pack_bf16x2(s[8 * kc + 6], s[8 * kc + 7]);
        }
    };
    // top of iteration j: tile j resident and visible to wgmma in every thread's view, and
    // iteration j - 1 retired in every warpgroup
    auto arrive = [&]() {
        cp_async_wait<PF - 1>();   // tile j (and Q) landed for this thread's copies
        fence_proxy_async_smem();  // ... and visible to the async proxy
        __syncthreads();           // for every thread's copies; iteration j - 1 retired everywhere
    };
    // tile j + PF into the buffers of K_{j-1} and V_{j-2} (no wgmma reads them any more), issued
    // after this iteration's wgmma so that the address arithmetic overlaps the tensor cores
    auto prefetch = [&](int j) {
        if (j + PF < n_kv) {
            const int jn = j + PF;
            load_kv_tile<SWIZZLED, D, BC, NT>(sK + (jn % KS) * KV_BYTES, sV + (jn % VS) * KV_BYTES, kh, vh, jn * BC,
                                              seq, tid);
        }
        cp_async_commit();
    };

    // tile 0: S_0 and its softmax, nothing to overlap with
    {
        arrive();
        wgmma_fence();
        issue_s(0);
        wgmma_commit();
        prefetch(0);
        wgmma_wait<0>();
        wgmma_acc_fence(s);
        float alpha[2], rsum[2];
        softmax(0, alpha, rsum);
        rescale_pack(alpha, rsum);
    }
    for (int j = 1; j < n_kv; ++j) {
        arrive();
        wgmma_fence();
        issue_s(j);
        wgmma_commit();
        issue_pv(j - 1);
        wgmma_commit();
        prefetch(j);
        wgmma_wait<1>();  // S_j done; P_{j-1} V_{j-1} may still run
        wgmma_acc_fence(s);
        float alpha[2], rsum[2];
        softmax(j, alpha, rsum);
        // Keep the softmax before the wait: ptxas schedules a wgmma.wait_group as early as it can
        // (it has no operands), which would put the wait before the exp2 and serialize softmax and
        // P V. It does not move the wait above a shared-memory store, so store a value that needs
        // every exp2 of the tile (a per-thread scratch word, never read).
        st_shared_b32(sScratch + tid * 4, __float_as_uint(rsum[0] + rsum[1] + alpha[0] + alpha[1]));
        wgmma_wait<0>();  // P_{j-1} V_{j-1} done: O and the P registers are free
        wgmma_acc_fence(acc);
        rescale_pack(alpha, rsum);
    }
    // the last tile's P V (its V buffer is not refilled: no loads after the loop)
    wgmma_fence();
    issue_pv(n_kv - 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_acc_fence(acc);
    cp_async_wait<0>();  // (only empty groups can be left)

    // epilogue: O /= l, L = m * scale + ln(l)
    bf16_t* oh = o + head;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const int row = r_lo + 8 * h;
        if (row < seq) {
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
            for (int nb = 0; nb < D / 8; ++nb)
                *reinterpret_cast<unsigned*>(oh + (i64)row * D + nb * 8 + 2 * t) =
                    pack_bf16x2(acc[4 * nb + 2 * h] * inv, acc[4 * nb + 2 * h + 1] * inv);
            if (t == 0) lse[head_row(seq) + row] = l > 0.0f ? (m_run[h] * sl2 + log2f(l)) * LN2 : NEG_INF;
        }
    }
}

}  // namespace flash_fwd_sm90

#define FLASH_FWD_SM90(D)                                                                                        \
    extern "C" __global__ void __launch_bounds__(flash_fwd_sm90::Sm90Cfg<D>::NWG * 128, 1)                       \
        flash_fwd_sm90_bf16_d##D(const bf16_t* q, const bf16_t* k, const bf16_t* v, bf16_t* o, float* lse,     \
                                 int seq, float scale, int causal) {                                            \
        using C = flash_fwd_sm90::Sm90Cfg<D>;                                                                    \
        flash_fwd_sm90::fwd_sm90<D, C::NWG, C::BC, C::PF>(q, k, v, o, lse, seq, scale, causal);                  \
    }
FLASH_FWD_SM90(16)
FLASH_FWD_SM90(32)
FLASH_FWD_SM90(64)
FLASH_FWD_SM90(128)
