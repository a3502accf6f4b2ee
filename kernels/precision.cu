// The mixed-precision experiments of `collect precision`: numerics, not speed. Each experiment
// runs in one thread (per row and format where there are several), in an order that the CPU
// emulation (collect's `precision` module) repeats step for step, so the two agree bit for bit.
//
// - accumulate_sums: add a value to an accumulator `steps` times, one case per pairing of
//   accumulator format and value format (with or without an explicit cast of the value first).
// - layernorm_in_formats: LayerNorm's statistics of a row computed in fp32, fp16 or bf16 with that
//   format's rounding after every operation: the mean, the variance both as E[x^2] - E[x]^2 and
//   as the two-pass mean of (x - mean)^2, and the normalised row with each variance. Sums are a
//   fixed tree (neighbours first, then pairs of pairs), as a block reduction adds, not a
//   sequential loop.
// - toy_step: the CS336 ToyModel (fc1 -> ReLU -> LayerNorm -> fc2, no biases in the linears),
//   forward, cross-entropy and backward, each tensor in the format collect's autocast policy gives
//   its operation (the host passes the formats). Dot products accumulate in fp32 with FMA, as
//   cuBLAS does, and round once to the product's format.
// - fp_conversion_check: our fp16 and bf16 conversions beside the hardware's cvt instructions.
//
// fp16 is handled as its bit pattern (unsigned short), like bf16 in common.cuh, so no CUDA header
// is needed: f32_to_f16 rounds to nearest even with overflow to infinity, subnormals and a quiet
// NaN, which is what __float2half (cvt.rn.f16.f32) does; f16_to_f32 widens exactly. An operation
// "in" fp16 or bf16 is the fp32 operation rounded to the format: fp32 has more than 2p+2 bits for
// both formats, so that is the correctly rounded result, and it is how PyTorch's kernels compute
// on half-precision tensors (fp32 arithmetic, one rounding of each result). Every fp32 operation
// is an explicit round-to-nearest intrinsic (__fadd_rn, __fmul_rn, ...): NVRTC would otherwise
// fuse a multiply and an add into an FMA that the CPU emulation does not do.
//
// Limits: one thread does all the work of a case, so these kernels are for small inputs (rows of
// a few thousand elements, the toy's 8 x 20). exp and log in the toy's loss are the CUDA
// library's (within 2 ulp), so the toy's loss and gradients agree with the CPU emulation to a few
// ulp rather than bit for bit.

#include "common.cuh"

typedef unsigned short f16_t;

#define FMT_F32 0
#define FMT_F16 1
#define FMT_BF16 2

__device__ __forceinline__ f16_t f32_to_f16(float f) {
    unsigned x = __float_as_uint(f);
    unsigned sign = (x >> 16) & 0x8000u;
    unsigned ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (f16_t)(sign | 0x7e00u);  // quiet NaN
    if (ax >= 0x477ff000u) return (f16_t)(sign | 0x7c00u);  // 65520 and above: infinity
    if (ax < 0x38800000u) {                                 // below 2^-14: subnormal, units of 2^-24
        if (ax < 0x33000000u) return (f16_t)sign;           // below 2^-25: zero
        unsigned e = ax >> 23;
        unsigned m = (ax & 0x7fffffu) | 0x800000u;
        unsigned shift = 126u - e;  // 14..24
        unsigned q = m >> shift;
        unsigned rem = m & ((1u << shift) - 1u);
        unsigned half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (q & 1u))) q += 1u;
        return (f16_t)(sign | q);
    }
    unsigned h = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
    unsigned rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1u;  // a carry into the exponent is right
    return (f16_t)(sign | h);
}

__device__ __forceinline__ float f16_to_f32(f16_t h) {
    unsigned sign = ((unsigned)h & 0x8000u) << 16;
    unsigned e = ((unsigned)h >> 10) & 0x1fu;
    unsigned m = (unsigned)h & 0x3ffu;
    if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));
    if (e == 0u) {
        if (m == 0u) return __uint_as_float(sign);
        unsigned e32 = 113u;
        while ((m & 0x400u) == 0u) {
            m <<= 1;
            e32 -= 1u;
        }
        return __uint_as_float(sign | (e32 << 23) | ((m & 0x3ffu) << 13));
    }
    return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}

// v rounded to the format `fmt` (held in fp32, which holds every fp16 and bf16 value).
__device__ __forceinline__ float fmt_round(int fmt, float v) {
    if (fmt == FMT_F16) return f16_to_f32(f32_to_f16(v));
    if (fmt == FMT_BF16) return bf16_to_f32(f32_to_bf16(v));
    return v;
}

__device__ __forceinline__ float fmt_add(int fmt, float a, float b) { return fmt_round(fmt, __fadd_rn(a, b)); }
__device__ __forceinline__ float fmt_sub(int fmt, float a, float b) { return fmt_round(fmt, __fsub_rn(a, b)); }
__device__ __forceinline__ float fmt_mul(int fmt, float a, float b) { return fmt_round(fmt, __fmul_rn(a, b)); }
__device__ __forceinline__ float fmt_div(int fmt, float a, float b) { return fmt_round(fmt, __fdiv_rn(a, b)); }
__device__ __forceinline__ float fmt_sqrt(int fmt, float a) { return fmt_round(fmt, __fsqrt_rn(a)); }

// ---- accumulation --------------------------------------------------------------------------

// Case c (of `cases`): formats[3c] is the accumulator's format, formats[3c+1] the value's,
// formats[3c+2] the format the value is cast to before the adds (-1: no cast, the add promotes).
// The accumulator starts at 0 and gets `value` (rounded to its format) added `steps` times, each
// sum computed in fp32 and rounded to the accumulator's format, as PyTorch's `acc += x` does.
// out[c] is the final accumulator. One thread.
extern "C" __global__ void accumulate_sums(float value, int steps, const int* formats, int cases, float* out) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    for (int c = 0; c < cases; ++c) {
        int acc_fmt = formats[3 * c], val_fmt = formats[3 * c + 1], cast_fmt = formats[3 * c + 2];
        float x = fmt_round(val_fmt, value);
        if (cast_fmt >= 0) x = fmt_round(cast_fmt, x);
        float acc = 0.0f;
        for (int i = 0; i < steps; ++i) acc = fmt_add(acc_fmt, acc, x);
        out[c] = acc;
    }
}

// ---- LayerNorm statistics --------------------------------------------------------------------

// buf[0..n) summed as a tree in `fmt`: neighbours (0+1, 2+3, ...), then pairs of those, each sum
// rounded. Overwrites buf; returns the sum.
__device__ float fmt_tree_sum(int fmt, float* buf, int n) {
    for (int w = 1; w < n; w *= 2)
        for (int i = 0; i + w < n; i += 2 * w) buf[i] = fmt_add(fmt, buf[i], buf[i + w]);
    return n > 0 ? buf[0] : 0.0f;
}

// One block of one thread per (row, format): block b is row b / nf in format formats[b % nf].
// x is [rows, n] fp32; the row is first cast to the format. scratch is [rows * nf, n].
// stats[4b..4b+4) = mean, mean of squares, variance E[x^2] - E[x]^2, two-pass variance.
// y_naive and y_two_pass ([rows * nf, n]) are (x - mean) / sqrt(var + eps) with each variance.
extern "C" __global__ void layernorm_in_formats(const float* x, int n, const int* formats, int nf, float eps,
                                                float* scratch, float* stats, float* y_naive, float* y_two_pass) {
    if (threadIdx.x != 0) return;
    i64 b = blockIdx.x;
    int fmt = formats[b % nf];
    const float* xr = x + (b / nf) * (i64)n;
    float* s = scratch + b * (i64)n;
    float count = fmt_round(fmt, (float)n);
    float e = fmt_round(fmt, eps);

    for (int j = 0; j < n; ++j) s[j] = fmt_round(fmt, xr[j]);
    float mean = fmt_div(fmt, fmt_tree_sum(fmt, s, n), count);

    for (int j = 0; j < n; ++j) {
        float v = fmt_round(fmt, xr[j]);
        s[j] = fmt_mul(fmt, v, v);
    }
    float mean_sq = fmt_div(fmt, fmt_tree_sum(fmt, s, n), count);
    float var_naive = fmt_sub(fmt, mean_sq, fmt_mul(fmt, mean, mean));

    for (int j = 0; j < n; ++j) {
        float d = fmt_sub(fmt, fmt_round(fmt, xr[j]), mean);
        s[j] = fmt_mul(fmt, d, d);
    }
    float var_two_pass = fmt_div(fmt, fmt_tree_sum(fmt, s, n), count);

    float rstd_naive = fmt_div(fmt, 1.0f, fmt_sqrt(fmt, fmt_add(fmt, var_naive, e)));
    float rstd_two_pass = fmt_div(fmt, 1.0f, fmt_sqrt(fmt, fmt_add(fmt, var_two_pass, e)));
    for (int j = 0; j < n; ++j) {
        float d = fmt_sub(fmt, fmt_round(fmt, xr[j]), mean);
        y_naive[b * n + j] = fmt_mul(fmt, d, rstd_naive);
        y_two_pass[b * n + j] = fmt_mul(fmt, d, rstd_two_pass);
    }
    stats[4 * b] = mean;
    stats[4 * b + 1] = mean_sq;
    stats[4 * b + 2] = var_naive;
    stats[4 * b + 3] = var_two_pass;
}

// ---- the ToyModel ----------------------------------------------------------------------------

// The formats of the toy's operations, in this order in `formats` (the host's ToyFormats).
#define TOY_FC1 0     // fc1's product: its operands are cast to it, its output is in it
#define TOY_RELU 1    // ReLU's output
#define TOY_NORM 2    // LayerNorm: statistics, output, and its backward
#define TOY_FC2 3     // fc2's product (the logits)
#define TOY_LOSS 4    // cross-entropy and the gradient it starts
#define TOY_GRAD 5    // parameter gradients
#define TOY_PARAM 6   // parameters (the masters)
#define TOY_FORMATS 7

#define TOY_MAX 32  // the largest batch, width and output the kernel's local arrays hold

// sum_k a[k*sa] * b[k*sb] over k terms with fp32 FMA accumulation, rounded once to fmt.
__device__ float fmt_dot(int fmt, const float* a, int sa, const float* b, int sb, int k) {
    float acc = 0.0f;
    for (int i = 0; i < k; ++i) acc = __fmaf_rn(a[i * sa], b[i * sb], acc);
    return fmt_round(fmt, acc);
}

// in  = x [B, IN] | w1 [H, IN] | ln_w [H] | ln_b [H] | w2 [OUT, H]      (fp32 masters and input)
// out = fc1_out [B, H] (after ReLU) | ln_out [B, H] | logits [B, OUT] | loss [1]
//     | dw1 [H, IN] | dln_w [H] | dln_b [H] | dw2 [OUT, H]
// scratch = x_cast [B, IN] | w1_cast [H, IN] | w2_cast [OUT, H] | ln_cast [B, H] | xhat [B, H]
//         | rstd [B] | dlogits [B, OUT] | dh [B, H]
// LayerNorm's eps is 1e-5 (nn.LayerNorm's default). One thread; B, H, OUT at most TOY_MAX.
extern "C" __global__ void toy_step(const float* in, const int* targets, const int* formats, float* out, float* scratch,
                                    int B, int IN, int H, int OUT) {
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    if (B > TOY_MAX || H > TOY_MAX || OUT > TOY_MAX) return;
    const int f_fc1 = formats[TOY_FC1], f_relu = formats[TOY_RELU], f_norm = formats[TOY_NORM],
              f_fc2 = formats[TOY_FC2], f_loss = formats[TOY_LOSS], f_grad = formats[TOY_GRAD],
              f_param = formats[TOY_PARAM];
    const float* x = in;
    const float* w1 = x + B * IN;
    const float* ln_w = w1 + H * IN;
    const float* ln_b = ln_w + H;
    const float* w2 = ln_b + H;
    float* fc1_out = out;
    float* ln_out = fc1_out + B * H;
    float* logits = ln_out + B * H;
    float* loss = logits + B * OUT;
    float* dw1 = loss + 1;
    float* dln_w = dw1 + H * IN;
    float* dln_b = dln_w + H;
    float* dw2 = dln_b + H;
    float* x_c = scratch;
    float* w1_c = x_c + B * IN;
    float* w2_c = w1_c + H * IN;
    float* ln_c = w2_c + OUT * H;
    float* xhat = ln_c + B * H;
    float* rstd = xhat + B * H;
    float* dlogits = rstd + B;
    float* dh = dlogits + B * OUT;

    // fc1 and ReLU: operands cast to fc1's format.
    for (int i = 0; i < B * IN; ++i) x_c[i] = fmt_round(f_fc1, x[i]);
    for (int i = 0; i < H * IN; ++i) w1_c[i] = fmt_round(f_fc1, fmt_round(f_param, w1[i]));
    for (int b = 0; b < B; ++b)
        for (int j = 0; j < H; ++j) {
            float h = fmt_dot(f_fc1, x_c + b * IN, 1, w1_c + j * IN, 1, IN);
            fc1_out[b * H + j] = fmt_round(f_relu, h > 0.0f ? h : 0.0f);
        }

    // LayerNorm over each row of H, in its format.
    const float eps = fmt_round(f_norm, 1e-5f);
    const float count = fmt_round(f_norm, (float)H);
    for (int b = 0; b < B; ++b) {
        float s = 0.0f;
        for (int j = 0; j < H; ++j) s = fmt_add(f_norm, s, fmt_round(f_norm, fc1_out[b * H + j]));
        float mean = fmt_div(f_norm, s, count);
        float v = 0.0f;
        for (int j = 0; j < H; ++j) {
            float d = fmt_sub(f_norm, fmt_round(f_norm, fc1_out[b * H + j]), mean);
            v = fmt_add(f_norm, v, fmt_mul(f_norm, d, d));
        }
        float r = fmt_div(f_norm, 1.0f, fmt_sqrt(f_norm, fmt_add(f_norm, fmt_div(f_norm, v, count), eps)));
        rstd[b] = r;
        for (int j = 0; j < H; ++j) {
            float xh = fmt_mul(f_norm, fmt_sub(f_norm, fmt_round(f_norm, fc1_out[b * H + j]), mean), r);
            xhat[b * H + j] = xh;
            ln_out[b * H + j] = fmt_add(f_norm, fmt_mul(f_norm, xh, fmt_round(f_param, ln_w[j])), fmt_round(f_param, ln_b[j]));
        }
    }

    // fc2: operands cast to its format.
    for (int i = 0; i < B * H; ++i) ln_c[i] = fmt_round(f_fc2, ln_out[i]);
    for (int i = 0; i < OUT * H; ++i) w2_c[i] = fmt_round(f_fc2, fmt_round(f_param, w2[i]));
    for (int b = 0; b < B; ++b)
        for (int o = 0; o < OUT; ++o) logits[b * OUT + o] = fmt_dot(f_fc2, ln_c + b * H, 1, w2_c + o * H, 1, H);

    // Cross-entropy, mean over the batch, in the loss's format; its gradient comes back to the
    // logits in their own format (the backward of autocast's cast to the loss's format).
    const float inv_b = fmt_div(f_loss, 1.0f, fmt_round(f_loss, (float)B));
    float total = 0.0f;
    for (int b = 0; b < B; ++b) {
        const float* z = logits + b * OUT;
        float m = fmt_round(f_loss, z[0]);
        for (int o = 1; o < OUT; ++o) m = fmaxf(m, fmt_round(f_loss, z[o]));
        float s = 0.0f;
        for (int o = 0; o < OUT; ++o) s = fmt_add(f_loss, s, fmt_round(f_loss, expf(fmt_sub(f_loss, fmt_round(f_loss, z[o]), m))));
        float lse = fmt_add(f_loss, m, fmt_round(f_loss, logf(s)));
        total = fmt_add(f_loss, total, fmt_sub(f_loss, lse, fmt_round(f_loss, z[targets[b]])));
        for (int o = 0; o < OUT; ++o) {
            float p = fmt_round(f_loss, expf(fmt_sub(f_loss, fmt_round(f_loss, z[o]), lse)));
            float g = fmt_mul(f_loss, fmt_sub(f_loss, p, o == targets[b] ? 1.0f : 0.0f), inv_b);
            dlogits[b * OUT + o] = fmt_round(f_fc2, g);
        }
    }
    loss[0] = fmt_mul(f_loss, total, inv_b);

    // fc2's backward: dw2 = dlogits^T ln_c into the gradients' format; d(ln_c) = dlogits w2_c in
    // fc2's format, widened to LayerNorm's (the backward of the cast).
    for (int o = 0; o < OUT; ++o)
        for (int j = 0; j < H; ++j) dw2[o * H + j] = fmt_round(f_grad, fmt_dot(FMT_F32, dlogits + o, OUT, ln_c + j, H, B));
    // LayerNorm's backward: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
    for (int j = 0; j < H; ++j) {
        dln_w[j] = 0.0f;
        dln_b[j] = 0.0f;
    }
    for (int b = 0; b < B; ++b) {
        float g[TOY_MAX];
        float sg = 0.0f, sgx = 0.0f;
        for (int j = 0; j < H; ++j) {
            float dy = fmt_round(f_norm, fmt_dot(f_fc2, dlogits + b * OUT, 1, w2_c + j, H, OUT));
            float xh = xhat[b * H + j];
            dln_w[j] = fmt_add(f_grad, dln_w[j], fmt_round(f_grad, fmt_mul(f_norm, dy, xh)));
            dln_b[j] = fmt_add(f_grad, dln_b[j], fmt_round(f_grad, dy));
            g[j] = fmt_mul(f_norm, dy, fmt_round(f_param, ln_w[j]));
            sg = fmt_add(f_norm, sg, g[j]);
            sgx = fmt_add(f_norm, sgx, fmt_mul(f_norm, g[j], xh));
        }
        float mg = fmt_div(f_norm, sg, count), mgx = fmt_div(f_norm, sgx, count);
        for (int j = 0; j < H; ++j) {
            float t = fmt_sub(f_norm, fmt_sub(f_norm, g[j], mg), fmt_mul(f_norm, xhat[b * H + j], mgx));
            float dx = fmt_mul(f_norm, rstd[b], t);
            // Back through the cast to LayerNorm's format, then ReLU, in ReLU's format.
            float d = fmt_round(f_relu, dx);
            dh[b * H + j] = fc1_out[b * H + j] > 0.0f ? fmt_round(f_fc1, d) : 0.0f;
        }
    }
    // fc1's backward: dw1 = dh^T x_c into the gradients' format.
    for (int j = 0; j < H; ++j)
        for (int k = 0; k < IN; ++k) dw1[j * IN + k] = fmt_round(f_grad, fmt_dot(FMT_F32, dh + j, H, x_c + k, IN, B));
}

// ---- the conversions against the hardware ----------------------------------------------------

__device__ __forceinline__ f16_t cvt_rn_f16(float f) {
    f16_t h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float cvt_f32_f16(f16_t h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

// cvt.rn.bf16.f32 needs sm_80; before that the check compares our conversion with itself.
__device__ __forceinline__ bf16_t cvt_rn_bf16(float f) {
#if __CUDA_ARCH__ >= 800
    bf16_t b;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(b) : "f"(f));
    return b;
#else
    return f32_to_bf16(f);
#endif
}

// For each of the n inputs: our fp16 and bf16 narrowing beside cvt.rn's. For the first 65536
// indices, also the fp16 with that bit pattern widened by us and by cvt.f32.f16.
extern "C" __global__ void fp_conversion_check(const float* in, i64 n, f16_t* f16_ours, f16_t* f16_hw,
                                               bf16_t* bf16_ours, bf16_t* bf16_hw, float* widen_ours, float* widen_hw) {
    for (i64 i = blockIdx.x * (i64)blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        float f = in[i];
        f16_ours[i] = f32_to_f16(f);
        f16_hw[i] = cvt_rn_f16(f);
        bf16_ours[i] = f32_to_bf16(f);
        bf16_hw[i] = cvt_rn_bf16(f);
        if (i < 65536) {
            widen_ours[i] = f16_to_f32((f16_t)i);
            widen_hw[i] = cvt_f32_f16((f16_t)i);
        }
    }
}
