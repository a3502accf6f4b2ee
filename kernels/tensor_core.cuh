// Inline-PTX wrappers for the tensor-core kernels (FlashAttention, through flash_common.cuh):
// every `asm` of those kernels lives here, so the kernel files hold none. sm_80 or newer
// (mma.sync bf16, ldmatrix, cp.async); `red_add_f32x2`, `stmatrix_x4` and the bulk reductions
// need sm_90 (PTX ISA 8.1); the warpgroup-MMA part at the end (wgmma, fence.proxy.async) needs
// sm_90a and is only defined when compiling for it (--gpu-architecture=sm_90a), so the rest still
// compiles for plain sm_90.
//
// Shared-memory operands are 32-bit shared-window addresses (`smem_addr`), as ldmatrix and cp.async
// take them. Fragment layouts are those of the PTX ISA for mma.m16n8k16 with .bf16 inputs
// (g = lane / 4, t = lane % 4; the lower-indexed element in the low 16 bits):
//   A (16x16, row-major): a[0] = (g, 2t..2t+1), a[1] = (g+8, 2t..), a[2] = (g, 2t+8..), a[3] = (g+8, 2t+8..)
//   B (16x8, k x n):      b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//   C/D (16x8, fp32):     c[0] = (g, 2t), c[1] = (g, 2t+1), c[2] = (g+8, 2t), c[3] = (g+8, 2t+1)
// ldmatrix: lane 8i+r gives the address of row r of 8x8 matrix i (16 bytes, 16-byte aligned); each
// lane gets, per matrix, row g, columns 2t..2t+1 (with .trans: rows 2t..2t+1 of column g).

#ifndef TENSOR_CORE_CUH
#define TENSOR_CORE_CUH

// Generic pointer into shared memory -> shared-window address.
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    unsigned a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// 16 bytes global -> shared, bypassing L1; bytes past `src_bytes` (0 or 16) are zero-filled, so a
// guarded-out row costs no global read.
__device__ __forceinline__ void cp_async_16(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// 4 bytes global -> shared; zero-filled when `src_bytes` is 0.
__device__ __forceinline__ void cp_async_4(unsigned dst, const void* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Wait until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// ldmatrix_x<N>[_trans](r, addr): N 8x8 matrices into r[0 .. N-1] (addr is operand %N).
#define LDMATRIX(NAME, N, TRANS, REGS, OUTS)                                                             \
    __device__ __forceinline__ void NAME(unsigned (&r)[N], unsigned addr) {                                \
        asm volatile("ldmatrix.sync.aligned.m8n8.x" #N TRANS ".shared.b16 {" REGS "}, [%" #N "];\n"          \
                     : OUTS                                                                                \
                     : "r"(addr));                                                                         \
    }
#define LDMATRIX_OUT1 "=r"(r[0])
#define LDMATRIX_OUT2 LDMATRIX_OUT1, "=r"(r[1])
#define LDMATRIX_OUT4 LDMATRIX_OUT2, "=r"(r[2]), "=r"(r[3])
LDMATRIX(ldmatrix_x1, 1, "", "%0", LDMATRIX_OUT1)
LDMATRIX(ldmatrix_x2, 2, "", "%0, %1", LDMATRIX_OUT2)
LDMATRIX(ldmatrix_x4, 4, "", "%0, %1, %2, %3", LDMATRIX_OUT4)
LDMATRIX(ldmatrix_x1_trans, 1, ".trans", "%0", LDMATRIX_OUT1)
LDMATRIX(ldmatrix_x2_trans, 2, ".trans", "%0, %1", LDMATRIX_OUT2)
LDMATRIX(ldmatrix_x4_trans, 4, ".trans", "%0, %1, %2, %3", LDMATRIX_OUT4)

// d += a * b, fp32 accumulation (m16n8k16, bf16 inputs).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats -> bf16x2 (round to nearest even), `lo` in the low half.
__device__ __forceinline__ unsigned pack_bf16x2(float lo, float hi) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// 2^x, one MUFU.EX2 (ex2.approx.ftz: ~2 ulp, subnormal results flushed to zero; exp2f without
// fast-math adds range fix-ups around it).
__device__ __forceinline__ float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// addr[0] += a, addr[1] += b in global memory, one vector reduction (no return value); addr 8-byte
// aligned. sm_90.
__device__ __forceinline__ void red_add_f32x2(float* addr, float a, float b) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(addr), "f"(a), "f"(b) : "memory");
}

// Bulk reductions through the copy engine (sm_90, PTX ISA 8.0): `bytes` (a multiple of 16) of fp32
// at shared address src (16-byte aligned) added element-wise into global memory at dst (16-byte
// aligned), read from shared memory through the async proxy (the writing threads fence it with
// fence_proxy_async_smem and synchronize with the issuing one first). A thread's reductions form
// groups (bulk_commit); bulk_wait_read<N> returns once at most N of its groups may still read their
// shared memory (it may be overwritten), bulk_wait<N> once at most N are still writing.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, unsigned src, unsigned bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst), "r"(src),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bulk_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
template <int N>
__device__ __forceinline__ void bulk_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}

// 8-byte store of two floats to shared memory (address 8-byte aligned).
__device__ __forceinline__ void st_shared_f32x2(unsigned addr, float a, float b) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(a), "f"(b) : "memory");
}

// 4-byte generic-proxy store to shared memory (address 4-byte aligned). Also an ordering anchor for
// ptxas: it does not hoist a later wgmma.wait_group above a shared-memory store, so storing a value
// that depends on some computation keeps that computation before the wait.
__device__ __forceinline__ void st_shared_b32(unsigned addr, unsigned v) {
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// Two floats from shared memory (address 8-byte aligned): a base address kept in a register and a
// constant offset fold into one LDS.64, where a float pointer indexed by the thread and the
// buffer is re-derived for every load.
__device__ __forceinline__ float2 ld_shared_f32x2(unsigned addr) {
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
    return v;
}

// Four 8x8 b16 matrices to shared memory (sm_90): r[i] is this lane's part of matrix i in the
// ldmatrix layout (row g, columns 2t..2t+1), and lane 8i + j gives the address of row j of matrix
// i (16 bytes, 16-byte aligned). One instruction where four st.shared.b32 would each compute a
// swizzled address.
__device__ __forceinline__ void stmatrix_x4(unsigned addr, const unsigned (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r[0]),
                 "r"(r[1]), "r"(r[2]), "r"(r[3])
                 : "memory");
}

// ---------------------------------------------------------------------------------------------
// Hopper warpgroup MMA (wgmma, PTX ISA 8.0, sm_90a only: compile with --gpu-architecture=sm_90a).
// Defined only for sm_90a device code (or host passes), so the sm_80-style kernels above still
// compile for plain sm_90. A warpgroup is 4 consecutive warps (threads 128*w .. 128*w + 127);
// every wrapper below is .sync.aligned over the warpgroup: all 128 threads execute it together.
//   wgmma_fence()        wgmma.fence: before the first wgmma, and after registers that a wgmma
//                        reads or writes (accumulators, A fragments) were touched by other code
//   wgmma_ss_bf16<N>     D(64xN, fp32) (+)= A(64x16, smem, K-major) * B(16xN, smem, K-major)
//   wgmma_rs_bf16_tb<N>  D(64xN, fp32) (+)= A(64x16, registers) * B(16xN, smem, N-major: the
//                        transpose bit, legal for 16-bit types)
//   wgmma_ss_bf16_ta_tb<N>  D(64xN) (+)= A(64x16, smem, M-major) * B(16xN, smem, N-major): both
//                        transpose bits
//                        scale_d = 0: D = A*B (the old D is not read)
//   wgmma_commit()       closes the group of the wgmma issued since the last commit
//   wgmma_wait<N>()      waits until at most N groups of this warpgroup are in flight; before
//                        that, accumulators of in-flight wgmma must not be read or written, nor
//                        their A-fragment registers written, nor their shared memory overwritten
//   wgmma_acc_fence(d)   compiler-level only: keeps the compiler from moving accesses of d across
//                        the asm statements around it (use after wgmma_wait, before reading d)
//   fence_proxy_async_smem()  fence.proxy.async.shared::cta: makes this thread's generic-proxy
//                        writes to shared memory (st.shared, completed cp.async) visible to the
//                        async proxy that wgmma reads operands through; then a barrier
// Register layouts (PTX ISA, wgmma .m64nNk16): warp w of the warpgroup owns rows 16w..16w+15;
// g = lane / 4, t = lane % 4.
//   D (fp32, N/2 per thread): d[4i + 2h + e] = (row 16w + g + 8h, col 8i + 2t + e)
//   A (bf16x2, 4 per thread): a[0] = (16w+g, 2t..2t+1), a[1] = (16w+g+8, 2t..), a[2] = (16w+g,
//     2t+8..), a[3] = (16w+g+8, 2t+8..)  (the m16n8k16 A layout per warp; lower k in the low half)
// Shared-memory operands are matrix descriptors (64-bit; see the kernel files for the encoding).
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
template <int R>
__device__ __forceinline__ void wgmma_acc_fence(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
template <int R>
__device__ __forceinline__ void wgmma_reg_fence(unsigned (&a)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

template <int N>
__device__ void wgmma_ss_bf16(float (&d)[N / 2], unsigned long long a_desc, unsigned long long b_desc, int scale_d);
template <int N>
__device__ void wgmma_rs_bf16_tb(float (&d)[N / 2], const unsigned (&a)[4], unsigned long long b_desc, int scale_d);
template <int N>
__device__ void wgmma_ss_bf16_ta_tb(float (&d)[N / 2], unsigned long long a_desc, unsigned long long b_desc, int scale_d);

// The specializations, one line a shape: WGMMA_D<R> lists the R accumulator operands d[0] ..
// d[R - 1] ("+f", operands %0 .. %R-1) and WGMMA_R<R> their "%0, %1, ..." text; the operands after
// them are numbered from R on (the descriptors or A registers, then scale_d).
#define WGMMA_D4(o) "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3])
#define WGMMA_D8(o) WGMMA_D4(o), WGMMA_D4(o + 4)
#define WGMMA_D16(o) WGMMA_D8(o), WGMMA_D8(o + 8)
#define WGMMA_D32(o) WGMMA_D16(o), WGMMA_D16(o + 16)
#define WGMMA_D64(o) WGMMA_D32(o), WGMMA_D32(o + 32)
#define WGMMA_R4 "%0, %1, %2, %3"
#define WGMMA_R8 WGMMA_R4 ", %4, %5, %6, %7"
#define WGMMA_R16 WGMMA_R8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define WGMMA_R32 WGMMA_R16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WGMMA_R64 WGMMA_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"

// D(64xN) (+)= A(smem) * B(smem) as NAME<N>; operands a_desc %A0, b_desc %A1, scale_d %A2. TRANS:
// the transpose bits of A and B ("0, 0": both K-major; "1, 1": A M-major, B N-major).
#define WGMMA_SS(NAME, TRANS, N, D, R, A0, A1, A2)                                                         \
    template <>                                                                                            \
    __device__ __forceinline__ void NAME<N>(float (&d)[N / 2], unsigned long long a_desc,                  \
                                            unsigned long long b_desc, int scale_d) {                      \
        asm volatile(                                                                                      \
            "{\n.reg .pred p;\nsetp.ne.b32 p, %" #A2 ", 0;\n"                                               \
            "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 "                                     \
            "{" R "}, %" #A0 ", %" #A1 ", p, 1, 1, " TRANS ";\n}\n"                                          \
            : D(0)                                                                                         \
            : "l"(a_desc), "l"(b_desc), "r"(scale_d));                                                     \
    }
// D(64xN) (+)= A(registers) * B(smem, N-major); operands a %A0 .. %A0+3, b_desc %A4, scale_d %A5.
#define WGMMA_RS_TB(N, D, R, A0, A1, A2, A3, A4, A5)                                                       \
    template <>                                                                                            \
    __device__ __forceinline__ void wgmma_rs_bf16_tb<N>(float (&d)[N / 2], const unsigned (&a)[4],         \
                                                        unsigned long long b_desc, int scale_d) {          \
        asm volatile(                                                                                      \
            "{\n.reg .pred p;\nsetp.ne.b32 p, %" #A5 ", 0;\n"                                               \
            "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 "                                     \
            "{" R "}, {%" #A0 ", %" #A1 ", %" #A2 ", %" #A3 "}, %" #A4 ", p, 1, 1, 1;\n}\n"                  \
            : D(0)                                                                                         \
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(scale_d));                       \
    }

WGMMA_SS(wgmma_ss_bf16, "0, 0", 16, WGMMA_D8, WGMMA_R8, 8, 9, 10)
WGMMA_SS(wgmma_ss_bf16, "0, 0", 32, WGMMA_D16, WGMMA_R16, 16, 17, 18)
WGMMA_SS(wgmma_ss_bf16, "0, 0", 64, WGMMA_D32, WGMMA_R32, 32, 33, 34)
WGMMA_SS(wgmma_ss_bf16, "0, 0", 128, WGMMA_D64, WGMMA_R64, 64, 65, 66)
WGMMA_RS_TB(16, WGMMA_D8, WGMMA_R8, 8, 9, 10, 11, 12, 13)
WGMMA_RS_TB(32, WGMMA_D16, WGMMA_R16, 16, 17, 18, 19, 20, 21)
WGMMA_RS_TB(64, WGMMA_D32, WGMMA_R32, 32, 33, 34, 35, 36, 37)
WGMMA_RS_TB(128, WGMMA_D64, WGMMA_R64, 64, 65, 66, 67, 68, 69)
WGMMA_SS(wgmma_ss_bf16_ta_tb, "1, 1", 8, WGMMA_D4, WGMMA_R4, 4, 5, 6)
WGMMA_SS(wgmma_ss_bf16_ta_tb, "1, 1", 16, WGMMA_D8, WGMMA_R8, 8, 9, 10)
WGMMA_SS(wgmma_ss_bf16_ta_tb, "1, 1", 32, WGMMA_D16, WGMMA_R16, 16, 17, 18)
WGMMA_SS(wgmma_ss_bf16_ta_tb, "1, 1", 64, WGMMA_D32, WGMMA_R32, 32, 33, 34)
#endif  // sm_90a

#endif  // TENSOR_CORE_CUH
