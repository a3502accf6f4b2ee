// Shared by the four FlashAttention files (flash_attention_fwd.cu, flash_attention_bwd.cu and their
// Hopper versions flash_attention_{fwd,bwd}_sm90.cu), each of which includes it: the dynamic
// shared-memory buffer, the constants of the base-2 softmax, a block's place in its grid (its tile
// of rows, its head, the tiles it visits), and the shared-memory tiles with their loaders and
// fragment helpers:
// - padded tiles for the mma.sync kernels (ldmatrix reads, cp.async writes, no bank conflicts);
// - swizzled tiles in the canonical wgmma layout, with their matrix descriptors (sm_90a kernels);
// - one cp.async loader for both layouts, with the K / V and the backward's Q / dO / L / Delta
//   tiles loaded together;
// - fp32 tiles with one float of padding per row for the SIMT kernels, and their P V product.
// Limits: bf16 tiles of 16, 32, 64 or 128 columns; 16-byte aligned global rows; rows past the
// sequence are zero-filled on load. The kernel files keep their own tile shapes and algorithms.

#ifndef FLASH_COMMON_CUH
#define FLASH_COMMON_CUH

#include "common.cuh"
#include "tensor_core.cuh"

// Dynamic shared memory of every FlashAttention kernel (declared once, at file scope).
extern __shared__ __align__(16) unsigned char flash_smem[];

namespace flash {

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

// ---------------------------------------------------------------------------------------------
// A block's place in its grid (BH, tiles in y)

// The query tile (of `rows` rows) of this block of a forward grid (BH, ceil(seq / rows)): the last
// tile, the one with the most causal work, first; negative for the extra blocks in y.
__device__ __forceinline__ int query_tile(int seq, int rows) {
    const int n_qt = (seq + rows - 1) / rows;
    return n_qt - 1 - (int)blockIdx.y;
}

// Whether this block of a backward grid (BH, ceil(seq / cols)) is one of the extra blocks in y,
// past the last key tile of `cols` keys. The others take key tile blockIdx.y: low tiles, the ones
// with the most causal work, first.
__device__ __forceinline__ bool past_last_key_tile(int seq, int cols) {
    const int n_kt = (seq + cols - 1) / cols;
    return (int)blockIdx.y >= n_kt;
}

// How many key tiles of `cols` keys query rows [q0, q0 + rows) visit: all of them, or (causal)
// those up to the last row's diagonal.
__device__ __forceinline__ int kv_tile_count(int seq, int q0, int rows, int cols, int causal) {
    const int n_kv_all = (seq + cols - 1) / cols;
    return causal ? imin(n_kv_all, (q0 + rows - 1) / cols + 1) : n_kv_all;
}

// The first query tile (of `rows` rows) that keys from k0 on meet: 0, or (causal) the tile of
// query k0 (the queries before it see none of these keys).
__device__ __forceinline__ int first_query_tile(int k0, int rows, int causal) { return causal ? k0 / rows : 0; }

// This block's head and tile rank in a grid (BH, n_tiles) read as one line of blocks in launch
// order, heads taken `group` at a time: a group's blocks are rank-major (rank 0, the most causal
// work, of each of its heads first), so the blocks in flight work on a few heads and share their
// rows in L2 instead of streaming every head's at once. Ranks past the tiles of `seq` come out
// >= n_tiles of the grid only for the grid's extra blocks.
struct GroupedTile {
    int bh, rank;
};
__device__ __forceinline__ GroupedTile grouped_tile(int group) {
    const int n_bh = (int)gridDim.x, n_t = (int)gridDim.y;
    const int line = (int)blockIdx.y * n_bh + (int)blockIdx.x;
    const int first = line / (group * n_t) * group;
    const int heads = imin(group, n_bh - first);
    const int r = line - first * n_t;
    return {first + r % heads, r / heads};
}

// The first row of this block's head, bh = blockIdx.x, in the [BH * T] rows of a [BH, T] or
// [BH, T, D] tensor: bh * seq (times D for the element offset).
__device__ __forceinline__ i64 head_row(int seq) {
    const int bh = blockIdx.x;
    return (i64)bh * seq;
}

// ---------------------------------------------------------------------------------------------
// Padded bf16 tiles (mma.sync kernels)

// Byte offset of 16-byte chunk `c` of row `r` in a [rows, W] bf16 tile in shared memory, padded by
// one 16-byte chunk after every 128 bytes of data (every row for W >= 64; every 2 rows for W = 32,
// every 4 for W = 16): the 8 rows one ldmatrix matrix reads (8 consecutive rows, one chunk column)
// and the 8 chunks 8 consecutive lanes write with cp.async fall in 8 distinct 16-byte bank groups,
// and (unlike an XOR swizzle) every fragment address is a per-lane base plus a compile-time constant.
template <int W>
struct Tile {
    static_assert(W == 16 || W == 32 || W == 64 || W == 128, "rows of 16, 32, 64 or 128 bf16");
    static constexpr int R = W >= 64 ? 1 : 64 / W;  // rows per padding chunk
    template <int ROWS>
    struct Bytes { static constexpr int value = ROWS * W * 2 + ROWS / R * 16; };
};
template <int W>
__device__ __forceinline__ unsigned toff(int r, int c) {
    return (unsigned)(r * (W * 2) + r / Tile<W>::R * 16 + c * 16);
}

// d0 += a * (b[0], b[1]) and d1 += a * (b[2], b[3]): one A fragment times the two 16x8 B fragments
// (two n-tiles side by side) that one ldmatrix_x4 reads.
__device__ __forceinline__ void mma_bf16_16816_x2(float (&d0)[4], float (&d1)[4], const unsigned (&a)[4],
                                                  const unsigned (&b)[4]) {
    mma_bf16_16816(d0, a, b[0], b[1]);
    mma_bf16_16816(d1, a, b[2], b[3]);
}

// The same for every m-tile m: acc[m][2np] and acc[m][2np + 1] += a[m] * b, one B load feeding
// the M A fragments of a warp.
template <int M, int N>
__device__ __forceinline__ void mma_bf16_16816_x2_m(float (&acc)[M][N][4], int np, const unsigned (&a)[M][4],
                                                    const unsigned (&b)[4]) {
#pragma unroll
    for (int m = 0; m < M; ++m) mma_bf16_16816_x2(acc[m][2 * np], acc[m][2 * np + 1], a[m], b);
}

// The same with b read by one ldmatrix_x4 (TRANS: ldmatrix_x4_trans) at shared address b_addr.
template <bool TRANS, int M, int N>
__device__ __forceinline__ void mma_bf16_16816_x2_m_ld(float (&acc)[M][N][4], int np, const unsigned (&a)[M][4],
                                                       unsigned b_addr) {
    unsigned b[4];
    if constexpr (TRANS)
        ldmatrix_x4_trans(b, b_addr);
    else
        ldmatrix_x4(b, b_addr);
    mma_bf16_16816_x2_m(acc, np, a, b);
}

// Every accumulator of M x N fragments to 0.
template <int M, int N>
__device__ __forceinline__ void zero_frags(float (&acc)[M][N][4]) {
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
        for (int n = 0; n < N; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][n][e] = 0.0f;
}

// step(kk) for the k-steps kk = 0 .. KD - 1 of a product: unrolled (UNROLL, for constant indices
// into fragments held in registers) or a loop (keeps ptxas from hoisting every step's ldmatrix
// loads: no spills at d 128).
template <int KD, bool UNROLL, typename F>
__device__ __forceinline__ void k_steps(const F& step) {
    if constexpr (UNROLL) {
#pragma unroll
        for (int kk = 0; kk < KD; ++kk) step(kk);
    } else {
#pragma unroll 1
        for (int kk = 0; kk < KD; ++kk) step(kk);
    }
}

// The fp32 accumulators of two adjacent 16x8 n-tiles (columns 16k..16k+15) as the bf16 A fragment
// of k-step k: the accumulator and A-fragment layouts coincide (see tensor_core.cuh).
__device__ __forceinline__ void pack_a_frag(unsigned (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
    a[0] = pack_bf16x2(c0[0], c0[1]);
    a[1] = pack_bf16x2(c0[2], c0[3]);
    a[2] = pack_bf16x2(c1[0], c1[1]);
    a[3] = pack_bf16x2(c1[2], c1[3]);
}

// ---------------------------------------------------------------------------------------------
// Swizzled bf16 tiles in the canonical wgmma layout (sm_90a kernels)

// A ROWS x W bf16 tile: column blocks of RB = min(2W, 128) bytes (W = 128 has two), each
// [ROWS][RB] row-major, 16-byte chunks swizzled by XOR with the row's position in its 8-row atom
// (Swizzle<3,4,3> / <2,4,3> / <1,4,3> on byte offsets: bits 4.. ^= bits 7.., as many bits as RB
// has 16-byte chunks, log2(RB / 16)).
template <int W>
struct Lay {
    static constexpr int RB = W * 2 < 128 ? W * 2 : 128;  // bytes per row of a column block
    static constexpr int CPR = RB / 16;                     // 16-byte chunks per block row
    static constexpr unsigned SWM = CPR - 1;                // swizzle mask
    // descriptor swizzle mode: 1 = 128B, 2 = 64B, 3 = 32B
    static constexpr unsigned long long MODE = RB == 128 ? 1ull : RB == 64 ? 2ull : 3ull;
    static_assert(W == 16 || W == 32 || W == 64 || W == 128, "rows of 16, 32, 64 or 128 bf16");
};

__device__ __forceinline__ unsigned swz(unsigned off, unsigned mask) { return off ^ (((off >> 7) & mask) << 4); }

// Byte offset of 16-byte chunk c (of W / 8) of row r in a ROWS x W tile.
template <int W, int ROWS>
__device__ __forceinline__ unsigned tile_off(int r, int c) {
    using L = Lay<W>;
    const unsigned lin = (unsigned)((c / L::CPR) * ROWS * L::RB + r * L::RB + (c % L::CPR) * 16);
    return swz(lin, L::SWM);
}

// wgmma matrix descriptor (PTX ISA, "Matrix Descriptor"): bits 0-13 start address >> 4, 16-29
// leading-dimension byte offset >> 4, 32-45 stride-dimension byte offset >> 4, 49-51 base offset
// (0: every swizzle atom here is aligned to its 1024 / 512 / 256 bytes), 62-63 swizzle mode.
__device__ __forceinline__ unsigned long long make_desc(unsigned addr, unsigned lbo, unsigned sbo, unsigned long long mode) {
    return (unsigned long long)((addr & 0x3FFFFu) >> 4) | ((unsigned long long)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((unsigned long long)((sbo & 0x3FFFFu) >> 4) << 32) | (mode << 62);
}

// K-major operand: rows [row0, row0 + 8n) of a ROWS x W tile, k-step kk (columns 16kk..16kk+15).
// Swizzled K-major: the 16 columns lie inside one row (32 bytes at byte 32kk of the row, within
// column block 32kk / RB); SBO = 8 rows (the atom); LBO unused (1 by convention).
template <int W, int ROWS>
__device__ __forceinline__ unsigned long long kmajor_desc(unsigned tile, int row0, int kk) {
    using L = Lay<W>;
    const unsigned addr = tile + (unsigned)((kk * 32 / L::RB) * ROWS * L::RB + row0 * L::RB + (kk * 32) % L::RB);
    return make_desc(addr, 16, 8 * L::RB, L::MODE);
}

// N-major (or M-major) operand with the transpose bit: rows [16kc, 16kc + 16) of a ROWS x W tile
// (the k dimension), columns from c0 (the N or M dimension; c0 is a multiple of 8 and the
// instruction's N does not cross a column block). Swizzled MN-major: an atom is 8 rows x RB bytes;
// SBO = the next 8 rows; LBO = the next column block (ROWS rows further).
template <int W, int ROWS>
__device__ __forceinline__ unsigned long long nmajor_desc(unsigned tile, int kc, int c0) {
    using L = Lay<W>;
    const unsigned addr = tile + (unsigned)((c0 * 2 / L::RB) * ROWS * L::RB + (c0 * 2) % L::RB + kc * 16 * L::RB);
    return make_desc(addr, ROWS * L::RB, 8 * L::RB, L::MODE);
}

// ---------------------------------------------------------------------------------------------
// Loading bf16 tiles of either layout

enum Layout { PADDED, SWIZZLED };

// Byte offset of 16-byte chunk c of row r in a ROWS x W tile of layout L.
template <Layout L, int W, int ROWS>
__device__ __forceinline__ unsigned chunk_off(int r, int c) {
    if constexpr (L == PADDED)
        return toff<W>(r, c);
    else
        return tile_off<W, ROWS>(r, c);
}

// cp.async of rows [row0, row0 + ROWS) of a [seq, D] bf16 matrix into a tile of layout L by NT
// threads; rows >= seq are zero-filled. Consecutive threads take consecutive 16-byte chunks of a
// row (coalesced; 8 lanes of a phase write 8 distinct bank groups thanks to the padding or the
// swizzle).
template <Layout L, int D, int ROWS, int NT>
__device__ __forceinline__ void load_tile(unsigned s_tile, const bf16_t* g, int row0, int seq, int tid) {
    constexpr int C = D / 8, TOTAL = ROWS * C;
#pragma unroll
    for (int i = 0; i < (TOTAL + NT - 1) / NT; ++i) {
        const int idx = tid + i * NT;
        if (TOTAL % NT == 0 || idx < TOTAL) {
            const int r = idx / C, c = idx % C;
            const int gr = row0 + r;
            const bool ok = gr < seq;
            cp_async_16(s_tile + chunk_off<L, D, ROWS>(r, c), g + (i64)(ok ? gr : 0) * D + c * 8, ok ? 16 : 0);
        }
    }
}

// Keys [row0, row0 + BC) of K and V ([seq, D] each) into the tiles at sK and sV.
template <Layout L, int D, int BC, int NT>
__device__ __forceinline__ void load_kv_tile(unsigned sK, unsigned sV, const bf16_t* k, const bf16_t* v, int row0,
                                             int seq, int tid) {
    load_tile<L, D, BC, NT>(sK, k, row0, seq, tid);
    load_tile<L, D, BC, NT>(sV, v, row0, seq, tid);
}

// What a backward block reads per query tile, at its head: Q and dO ([seq, D] bf16), L and Delta
// ([seq] fp32).
struct BwdQuery {
    const bf16_t* q;
    const bf16_t* dout;
    const float* lse;
    const float* delta;
};

// cp.async of L and Delta of query rows [row0, row0 + BR) by NT threads (zeros past seq; those
// columns are masked anyway).
template <int BR, int NT>
__device__ __forceinline__ void load_rows(unsigned sL, unsigned sDel, const float* lse, const float* delta, int row0,
                                          int seq, int tid) {
#pragma unroll
    for (int i = 0; i < (2 * BR + NT - 1) / NT; ++i) {
        int idx = tid + i * NT;
        if (idx < 2 * BR) {
            int r = idx % BR;
            int gr = row0 + r;
            bool ok = gr < seq;
            const float* src = (idx < BR ? lse : delta) + (ok ? gr : 0);
            cp_async_4((idx < BR ? sL : sDel) + r * 4, src, ok ? 4 : 0);
        }
    }
}

// Query rows [row0, row0 + BR) of the backward: Q and dO into the tiles at sQ and sdO, L and Delta
// into sL and sDel.
template <Layout L, int D, int BR, int NT>
__device__ __forceinline__ void load_query_tile(unsigned sQ, unsigned sdO, unsigned sL, unsigned sDel,
                                                const BwdQuery& in, int row0, int seq, int tid) {
    load_tile<L, D, BR, NT>(sQ, in.q, row0, seq, tid);
    load_tile<L, D, BR, NT>(sdO, in.dout, row0, seq, tid);
    load_rows<BR, NT>(sL, sDel, in.lse, in.delta, row0, seq, tid);
}

// ---------------------------------------------------------------------------------------------
// fp32 tiles (SIMT kernels, 256 threads)

constexpr int F32_NT = 256;

// Rows [row0, row0 + 64) of a [seq, D] fp32 matrix into a [64, D+1] tile (zeros past seq).
template <int D>
__device__ __forceinline__ void load_tile_f32(float* s, const float* g, int row0, int seq, int tid) {
    constexpr int C4 = D / 4, TOTAL = 64 * C4;
#pragma unroll
    for (int i = 0; i < TOTAL / F32_NT + (TOTAL % F32_NT ? 1 : 0); ++i) {
        int idx = tid + i * F32_NT;
        if (TOTAL % F32_NT == 0 || idx < TOTAL) {
            int r = idx / C4, c = (idx % C4) * 4;
            float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (row0 + r < seq) x = *reinterpret_cast<const float4*>(g + (i64)(row0 + r) * D + c);
            float* d = s + r * (D + 1) + c;
            d[0] = x.x;
            d[1] = x.y;
            d[2] = x.z;
            d[3] = x.w;
        }
    }
}

// acc[i][kk] += sum over c < n of P[(ty*4 + i) * PLD + c] * X[c * (D+1) + tx + 16kk]: thread (ty,
// tx) of a 16 x 16 grid, its rows ty*4 + i of P (fp32, rows of PLD floats) times columns tx + 16kk
// of the first n rows of a [64, D+1] tile.
template <int D, int PLD>
__device__ __forceinline__ void f32_tile_product(float (&acc)[4][D / 16], const float* P, const float* X, int n,
                                                 int tx, int ty) {
    constexpr int LD = D + 1, DK = D / 16;
    for (int c = 0; c < n; ++c) {
        float x[DK];
#pragma unroll
        for (int kk = 0; kk < DK; ++kk) x[kk] = X[c * LD + tx + 16 * kk];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float p = P[(ty * 4 + i) * PLD + c];
#pragma unroll
            for (int kk = 0; kk < DK; ++kk) acc[i][kk] = fmaf(p, x[kk], acc[i][kk]);
        }
    }
}

}  // namespace flash

#endif  // FLASH_COMMON_CUH
