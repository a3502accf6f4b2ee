//! What one operator call costs: its floating-point operations and the bytes it moves, from the
//! operator's name, its inputs' shapes and types, and its scalar inputs, as a profiler recorded
//! them (Kineto's `Input Dims`/`Input type`/`Concrete Inputs`, `emit_nvtx`'s `sizes`). Every
//! formula is here:
//!
//! - **matmul** (`mm`, `addmm`, `bmm`, `baddbmm`, `matmul`, `linear`, and `einsum` through the
//!   `bmm` it lowers to): 2·M·N·K FLOPs per product (a multiply and an add per term), times the
//!   batch; bytes are both operands, the bias where there is one, and the output;
//! - **attention** (`scaled_dot_product_attention` and its flash, efficient and cuDNN forms, down
//!   to the operators that launch the kernels, whose flash and efficient forms take
//!   `[B, L, H, E]` where the others take `[B, H, L, E]`): 4·B·H·L·S·E FLOPs forward (QKᵀ and PV,
//!   each 2·L·S·E per head, E the head size), halved when the scalar inputs say causal; the
//!   backward recomputes QKᵀ and forms four more products, 2.5 times the forward; bytes are Q, K,
//!   V and the output (and their gradients backward);
//! - **copies** (`copy_`, `to`, `clone`, `cat`, `fill_`, ...): no FLOPs, the bytes the pointwise
//!   rule below gives; `index` and `embedding` move the rows they gather (read and written) and
//!   the indices; scatters (`scatter_`, `index_put_`, `index_add_`, `nll_loss_backward`) read
//!   their inputs but the destination and write as many elements as their last tensor input
//!   holds;
//! - **reductions** (`sum`, `mean`, `max`, `norm`, ...): one FLOP per input element, the inputs'
//!   bytes (the output, a fraction of the input, is left out);
//! - **`_foreach_*`** (optimizers' list operations): one FLOP per element of the tensors read,
//!   their bytes (the lists written in place are not counted again);
//! - **anything else** (pointwise, activations, norms, softmax, their backwards): one FLOP per
//!   output element, a floor that places them on the memory roof where they belong; bytes are
//!   every tensor input plus the output, whose shape is the inputs' broadcast (the first input
//!   when they do not broadcast).
//!
//! A `flops` value the profiler wrote (`with_flops`) stands for the formula's FLOPs. Without
//! recorded types (`emit_nvtx` labels carry sizes only) every tensor is taken to hold the run's
//! element type, index tensors included.

use serde::Serialize;

use super::Dtype;

/// One input of an operator call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A tensor's dimensions.
    Tensor(Vec<u64>),
    /// A list of tensors (`TensorList`), each tensor's dimensions.
    List(Vec<Vec<u64>>),
    /// A scalar, `None`, or anything else without a shape.
    Other,
}

/// The inputs of a recorded shapes list (`[[4, 768], [], [[768], [768]]]`); `None` when it is
/// not one.
pub fn parse_shapes(text: &str) -> Option<Vec<Input>> {
    let v: serde_json::Value = serde_json::from_str(text).ok()?;
    let items = v.as_array()?;
    Some(items.iter().map(input).collect())
}

fn dims(v: &serde_json::Value) -> Option<Vec<u64>> {
    v.as_array()?.iter().map(|d| d.as_u64()).collect()
}

fn input(v: &serde_json::Value) -> Input {
    match v.as_array() {
        Some(items) if items.is_empty() => Input::Other,
        Some(items) if items.iter().all(|i| i.is_number()) => {
            dims(v).map_or(Input::Other, Input::Tensor)
        }
        Some(items) => Input::List(items.iter().filter_map(dims).collect()),
        None => Input::Other,
    }
}

/// A list of strings as recorded (`["float", "Scalar"]`); empty when it is not one.
pub fn parse_strings(text: &str) -> Vec<String> {
    serde_json::from_str::<Vec<serde_json::Value>>(text)
        .map(|items| {
            items
                .into_iter()
                .map(|v| match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Which formula gave a call's cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Formula {
    Matmul,
    Attention,
    Copy,
    Reduction,
    Foreach,
    Pointwise,
}

/// What one call costs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    pub flops: u64,
    pub bytes: u64,
    pub formula: Formula,
    /// Whether `flops` is the profiler's own count.
    pub counted: bool,
    /// The element type of its floating-point inputs.
    pub dtype: Dtype,
}

/// What a call records about itself.
#[derive(Clone, Copy, Debug)]
pub struct Recorded<'a> {
    /// The operator (`aten::mm`).
    pub name: &'a str,
    pub shapes: &'a str,
    pub types: Option<&'a str>,
    pub concrete: Option<&'a str>,
    /// FLOPs the profiler counted.
    pub flops: Option<u64>,
}

/// The cost of a call, its tensors taken to hold `default` where no types were recorded; `None`
/// without the shapes of any tensor.
pub fn cost(call: &Recorded<'_>, default: Dtype) -> Option<Cost> {
    let inputs = parse_shapes(call.shapes)?;
    // Shapes of nothing but scalars say nothing (Kineto records a tensor list's as `[]`).
    if inputs.iter().all(|i| matches!(i, Input::Other)) {
        return None;
    }
    let types: Vec<Option<Dtype>> = match call.types {
        Some(t) => parse_strings(t)
            .iter()
            .map(|s| Dtype::of_torch(s))
            .collect(),
        None => Vec::new(),
    };
    let concrete = call.concrete.map(parse_strings).unwrap_or_default();
    // The element type of each input: recorded, else the run's for a tensor.
    let dtype_of = |i: usize| -> Dtype {
        match types.get(i) {
            Some(Some(d)) => *d,
            _ => default,
        }
    };
    let dtype = (0..inputs.len())
        .filter(|&i| !matches!(inputs[i], Input::Other))
        .map(dtype_of)
        .find(|d| d.is_float())
        .unwrap_or(default);
    let size = |i: usize| dtype_of(i).bytes();
    let tensor_bytes = |i: usize, dims: &[u64]| elements(dims).saturating_mul(size(i));
    let input_bytes: u64 = inputs
        .iter()
        .enumerate()
        .map(|(i, input)| match input {
            Input::Tensor(d) => tensor_bytes(i, d),
            Input::List(list) => list.iter().map(|d| tensor_bytes(i, d)).sum(),
            Input::Other => 0,
        })
        .sum();
    let op = call.name.strip_prefix("aten::").unwrap_or(call.name);
    let tensors: Vec<(usize, &[u64])> = inputs
        .iter()
        .enumerate()
        .filter_map(|(i, x)| match x {
            Input::Tensor(d) => Some((i, d.as_slice())),
            _ => None,
        })
        .collect();
    let (flops, bytes, formula) = if let Some((flops, out)) = matmul(op, &inputs) {
        let out_bytes = out.saturating_mul(dtype.bytes());
        (
            flops,
            input_bytes.saturating_add(out_bytes),
            Formula::Matmul,
        )
    } else if let Some(f) = attention(op, &tensors, &concrete) {
        (f.0, f.1.saturating_mul(dtype.bytes()), Formula::Attention)
    } else if matches!(op, "index" | "embedding") {
        // Rows of a table (input 0) gathered by indices (input 1): the rows read and written,
        // and the indices.
        let (Some(Input::Tensor(table)), Some(Input::Tensor(ix))) = (inputs.first(), inputs.get(1))
        else {
            return None;
        };
        let out = elements(ix).saturating_mul(elements(table.get(1..).unwrap_or(&[])));
        let bytes = (2 * out).saturating_mul(size(0)) + elements(ix).saturating_mul(size(1));
        (0, bytes, Formula::Copy)
    } else if let Some(dest) = scatter_destination(op) {
        // Only the elements the last tensor (the source, or the targets) names are written.
        let read: u64 = inputs
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != dest)
            .map(|(i, x)| match x {
                Input::Tensor(d) => tensor_bytes(i, d),
                _ => 0,
            })
            .sum();
        let written = match tensors.last() {
            Some(&(i, d)) if i != dest => elements(d).saturating_mul(size(dest)),
            _ => 0,
        };
        (0, read.saturating_add(written), Formula::Copy)
    } else if op.starts_with("_foreach_") {
        let read: u64 = inputs
            .iter()
            .map(|x| match x {
                Input::Tensor(d) => elements(d),
                Input::List(l) => l.iter().map(|d| elements(d)).sum(),
                Input::Other => 0,
            })
            .sum();
        (read, input_bytes, Formula::Foreach)
    } else if is_reduction(op) {
        let read: u64 = tensors.iter().map(|t| elements(t.1)).sum();
        (read, input_bytes, Formula::Reduction)
    } else {
        let out = output(&tensors);
        let out_bytes = elements(&out).saturating_mul(dtype.bytes());
        let writes_only = matches!(op, "fill_" | "zero_" | "zeros" | "ones" | "full" | "empty");
        let bytes = if writes_only {
            out_bytes
        } else {
            input_bytes.saturating_add(out_bytes)
        };
        if is_copy(op) {
            (0, bytes, Formula::Copy)
        } else {
            (elements(&out), bytes, Formula::Pointwise)
        }
    };
    let (flops, counted) = match call.flops {
        Some(f) => (f, true),
        None => (flops, false),
    };
    Some(Cost {
        flops,
        bytes,
        formula,
        counted,
        dtype,
    })
}

/// The number of elements of a tensor of `dims` (1 for a scalar tensor).
fn elements(dims: &[u64]) -> u64 {
    dims.iter().fold(1u64, |a, &d| a.saturating_mul(d))
}

/// FLOPs and output elements of a matrix product, from its operands' shapes.
fn matmul(op: &str, inputs: &[Input]) -> Option<(u64, u64)> {
    let t = |i: usize| match inputs.get(i) {
        Some(Input::Tensor(d)) => Some(d.as_slice()),
        _ => None,
    };
    let (a, b) = match op {
        "mm" | "bmm" | "matmul" => (t(0)?, t(1)?),
        "addmm" | "baddbmm" | "addbmm" => (t(1)?, t(2)?),
        "linear" => {
            // input [..., K] times weight [N, K] transposed.
            let (x, w) = (t(0)?, t(1)?);
            let (&k, batch) = x.split_last()?;
            let [n, wk] = w else { return None };
            if *wk != k {
                return None;
            }
            let m = elements(batch);
            return Some((2 * m * n * k, m * n));
        }
        _ => return None,
    };
    // [..., M, K] x [..., K, N], leading dimensions broadcast; a vector is a 1-row or
    // 1-column matrix.
    let (a_batch, m, k) = match a {
        [k] => (&[][..], 1, *k),
        [batch @ .., m, k] => (batch, *m, *k),
        [] => return None,
    };
    let (b_batch, kb, n) = match b {
        [k] => (&[][..], *k, 1),
        [batch @ .., k, n] => (batch, *k, *n),
        [] => return None,
    };
    if k != kb {
        return None;
    }
    let batch = elements(&broadcast(a_batch, b_batch)?);
    let flops = 2u64
        .saturating_mul(batch)
        .saturating_mul(m)
        .saturating_mul(n)
        .saturating_mul(k);
    Some((flops, batch.saturating_mul(m).saturating_mul(n)))
}

/// How an attention operator lays out its query, key and value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `[batch, heads, length, head size]`, as `scaled_dot_product_attention` takes them.
    Bhle,
    /// `[batch, length, heads, head size]`, as the flash and memory-efficient kernels' own
    /// operators take them.
    Blhe,
}

/// How an attention operator says that it is causal.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Causal {
    /// A flag `is_causal`.
    Flag,
    /// A mask type (`custom_mask_type`), causal when not 0.
    MaskType,
}

/// PyTorch's attention operators, by the name of the forward: each is also met with `_forward`
/// or `_backward` appended where PyTorch has those operators (the innermost, which launch the
/// kernels, are `_flash_attention_forward`, `_efficient_attention_forward`,
/// `_cudnn_attention_forward` and their backwards).
const ATTENTION: [(&str, Layout, Causal); 7] = [
    ("scaled_dot_product_attention", Layout::Bhle, Causal::Flag),
    (
        "_scaled_dot_product_flash_attention",
        Layout::Bhle,
        Causal::Flag,
    ),
    (
        "_scaled_dot_product_efficient_attention",
        Layout::Bhle,
        Causal::Flag,
    ),
    (
        "_scaled_dot_product_cudnn_attention",
        Layout::Bhle,
        Causal::Flag,
    ),
    ("_cudnn_attention", Layout::Bhle, Causal::Flag),
    ("_flash_attention", Layout::Blhe, Causal::Flag),
    ("_efficient_attention", Layout::Blhe, Causal::MaskType),
];

/// FLOPs and elements moved of an attention operator, forward or backward; `None` for any other
/// operator or shapes that are not attention's.
fn attention(op: &str, tensors: &[(usize, &[u64])], concrete: &[String]) -> Option<(u64, u64)> {
    let (base, backward) = match op.strip_suffix("_backward") {
        Some(base) => (base, true),
        None => (op.strip_suffix("_forward").unwrap_or(op), false),
    };
    let &(_, layout, causal) = ATTENTION.iter().find(|(name, ..)| *name == base)?;
    // The backward's first tensor is the output's gradient; q, k, v follow.
    let qkv = if backward {
        &tensors[1.min(tensors.len())..]
    } else {
        tensors
    };
    let [(_, q), (_, k), (_, v), ..] = qkv else {
        return None;
    };
    let (&[b, q1, q2, e], &[kb, k1, k2, ek], &[vb, v1, v2, ev]) = (*q, *k, *v) else {
        return None;
    };
    // (query heads, query length, key length, value length) in either layout.
    let (h, l, s, sv) = match layout {
        Layout::Bhle => (q1, q2, k2, v2),
        Layout::Blhe => (q2, q1, k1, v1),
    };
    if e != ek || s != sv || kb != b || vb != b {
        return None;
    }
    let per_head = 2 * l * s * e + 2 * l * s * ev;
    let mut flops = b.saturating_mul(h).saturating_mul(per_head);
    if is_causal(concrete, causal) {
        flops /= 2;
    }
    let q_el = elements(q);
    let kv_el = elements(k) + elements(v);
    let out_el = b * h * l * ev;
    let moved = q_el + kv_el + out_el;
    if backward {
        // Q, K, V, O and dO read; dQ, dK, dV written.
        let moved = moved + out_el + q_el + kv_el;
        return Some((flops.saturating_mul(5) / 2, moved));
    }
    Some((flops, moved))
}

/// Whether an attention call was causal, from its scalar inputs' values as the profiler recorded
/// them (none recorded: not causal). In every attention operator's signature the causal flag, or
/// the mask type, is the first boolean, or integer, after the dropout probability, which is the
/// first scalar written with a decimal point (`0.`): flags before it (`compute_log_sumexp`) and
/// sizes (`max_q`) are not taken for it.
fn is_causal(concrete: &[String], how: Causal) -> bool {
    let Some(dropout) = concrete
        .iter()
        .position(|c| c.contains('.') && c.parse::<f64>().is_ok())
    else {
        return false;
    };
    let after = &concrete[dropout + 1..];
    match how {
        Causal::Flag => after
            .iter()
            .find(|c| *c == "True" || *c == "False")
            .is_some_and(|c| c == "True"),
        Causal::MaskType => after
            .iter()
            .find_map(|c| c.parse::<u64>().ok())
            .is_some_and(|t| t != 0),
    }
}

/// The broadcast of two shapes, `None` when they do not broadcast.
fn broadcast(a: &[u64], b: &[u64]) -> Option<Vec<u64>> {
    let n = a.len().max(b.len());
    let at = |s: &[u64], i: usize| {
        let pad = n - s.len();
        if i < pad {
            1
        } else {
            s[i - pad]
        }
    };
    (0..n)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x),
            (1, y) => Some(y),
            (x, 1) => Some(x),
            _ => None,
        })
        .collect()
}

/// The output of a pointwise call: its tensor inputs' broadcast, or the first input's shape
/// when they do not broadcast.
fn output(tensors: &[(usize, &[u64])]) -> Vec<u64> {
    let Some((_, first)) = tensors.first() else {
        return Vec::new();
    };
    tensors
        .iter()
        .skip(1)
        .try_fold(first.to_vec(), |acc, (_, t)| broadcast(&acc, t))
        .unwrap_or_else(|| first.to_vec())
}

/// The input a scatter writes into, for operators that write only the elements their last tensor
/// input names (`scatter_(self, dim, index, src)`, `index_put_(self, indices, values)`,
/// `nll_loss_backward(grad_output, self, target, ...)`).
fn scatter_destination(op: &str) -> Option<usize> {
    match op {
        "scatter" | "scatter_" | "scatter_add" | "scatter_add_" | "scatter_reduce_"
        | "index_put" | "index_put_" | "_index_put_impl_" | "index_add_" | "index_copy_" => Some(0),
        "nll_loss_backward" | "nll_loss2d_backward" => Some(1),
        _ => None,
    }
}

fn is_reduction(op: &str) -> bool {
    matches!(
        op,
        "sum"
            | "mean"
            | "max"
            | "min"
            | "amax"
            | "amin"
            | "argmax"
            | "argmin"
            | "norm"
            | "linalg_vector_norm"
            | "var"
            | "std"
            | "var_mean"
            | "std_mean"
            | "prod"
            | "logsumexp"
            | "all"
            | "any"
            | "nll_loss_forward"
            | "nll_loss2d_forward"
    )
}

fn is_copy(op: &str) -> bool {
    matches!(
        op,
        "copy_"
            | "to"
            | "_to_copy"
            | "clone"
            | "contiguous"
            | "cat"
            | "stack"
            | "index_select"
            | "gather"
            | "slice_backward"
            | "select_backward"
            | "embedding_dense_backward"
            | "fill_"
            | "zero_"
            | "zeros"
            | "ones"
            | "full"
            | "empty"
            | "arange"
            | "tril"
            | "triu"
            | "where"
            | "masked_fill"
            | "masked_fill_"
            | "repeat"
            | "expand_as"
            | "roll"
            | "flip"
            | "constant_pad_nd"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(name: &str, shapes: &str) -> Cost {
        cost(
            &Recorded {
                name,
                shapes,
                types: None,
                concrete: None,
                flops: None,
            },
            Dtype::F32,
        )
        .unwrap()
    }

    #[test]
    fn matrix_products_count_two_flops_per_term() {
        // [4·128, 768] x [768, 768]: 2·512·768·768 FLOPs.
        let mm = of("aten::mm", "[[512, 768], [768, 768]]");
        assert_eq!(mm.flops, 2 * 512 * 768 * 768);
        assert_eq!(mm.bytes, (512 * 768 + 768 * 768 + 512 * 768) * 4);
        assert_eq!(mm.formula, Formula::Matmul);
        let bmm = of("aten::bmm", "[[48, 128, 64], [48, 64, 128]]");
        assert_eq!(bmm.flops, 2 * 48 * 128 * 128 * 64);
        let addmm = of("aten::addmm", "[[768], [512, 3072], [3072, 768]]");
        assert_eq!(addmm.flops, 2 * 512 * 768 * 3072);
        assert_eq!(addmm.bytes, (768 + 512 * 3072 + 3072 * 768 + 512 * 768) * 4);
        let linear = of("aten::linear", "[[4, 128, 768], [3072, 768], [3072]]");
        assert_eq!(linear.flops, 2 * 512 * 3072 * 768);
        let matmul = of("aten::matmul", "[[4, 12, 128, 64], [4, 12, 64, 128]]");
        assert_eq!(matmul.flops, 2 * 48 * 128 * 128 * 64);
        let broadcast = of("aten::matmul", "[[4, 128, 768], [768, 10000]]");
        assert_eq!(broadcast.flops, 2 * 4 * 128 * 10000 * 768);
        assert_eq!(
            of("aten::mm", "[[2, 3], [4, 5]]").formula,
            Formula::Pointwise
        );
    }

    #[test]
    fn attention_counts_both_products_and_halves_causal() {
        let q = "[[4, 12, 128, 64], [4, 12, 128, 64], [4, 12, 128, 64], [], []]";
        let full = of("aten::_scaled_dot_product_flash_attention", q);
        assert_eq!(full.flops, 4 * 4 * 12 * 128 * 128 * 64);
        assert_eq!(full.formula, Formula::Attention);
        let causal = cost(
            &Recorded {
                name: "aten::_scaled_dot_product_flash_attention",
                shapes: q,
                types: None,
                concrete: Some(r#"["", "", "", "0.", "True"]"#),
                flops: None,
            },
            Dtype::Bf16,
        )
        .unwrap();
        assert_eq!(causal.flops, full.flops / 2);
        assert_eq!(causal.bytes, full.bytes / 2, "two bytes an element");
        let bwd = of(
            "aten::_scaled_dot_product_flash_attention_backward",
            "[[4, 12, 128, 64], [4, 12, 128, 64], [4, 12, 128, 64], [4, 12, 128, 64]]",
        );
        assert_eq!(bwd.flops, full.flops * 5 / 2);
    }

    /// The kernels' own operators: flash and efficient take `[B, L, H, E]`; a flag before the
    /// dropout probability (`compute_log_sumexp`) is not the causal one; the efficient kernels say
    /// causal by their mask type.
    #[test]
    fn attention_reads_each_operators_layout_and_causal_input() {
        let at = |name: &str, shapes: &str, concrete: &str| {
            let call = Recorded {
                name,
                shapes,
                types: None,
                concrete: Some(concrete),
                flops: None,
            };
            cost(&call, Dtype::Bf16).unwrap().flops
        };
        let bhle = "[[4, 12, 128, 64], [4, 12, 128, 64], [4, 12, 128, 64], []]";
        let blhe = "[[4, 128, 12, 64], [4, 128, 12, 64], [4, 128, 12, 64], []]";
        let full = 4 * 4 * 12 * 128 * 128 * 64;
        let flash = r#"["", "", "", "", "", "128", "128", "0.", "True", "False", "0.125"]"#;
        assert_eq!(at("aten::_flash_attention_forward", blhe, flash), full / 2);
        let cudnn = |causal: &str| {
            format!(
                r#"["", "", "", "", "", "", "128", "128", "True", "0.", "{causal}", "False", ""]"#
            )
        };
        let (causal, not) = (cudnn("True"), cudnn("False"));
        assert_eq!(
            at("aten::_cudnn_attention_forward", bhle, &causal),
            full / 2
        );
        assert_eq!(at("aten::_cudnn_attention_forward", bhle, &not), full);
        let efficient = r#"["", "", "", "", "", "", "", "", "0.", "1", "True", "", "", ""]"#;
        assert_eq!(
            at("aten::_efficient_attention_forward", blhe, efficient),
            full / 2
        );
        let bwd = "[[4, 128, 12, 64], [4, 128, 12, 64], [4, 128, 12, 64], [4, 128, 12, 64]]";
        let none =
            r#"["", "", "", "", "", "", "", "", "12", "12", "", "0.", "", "", "0", "False"]"#;
        assert_eq!(
            at("aten::_efficient_attention_backward", bwd, none),
            full * 5 / 2
        );
    }

    #[test]
    fn pointwise_ops_move_their_inputs_and_the_broadcast_output() {
        let mul = of("aten::mul", "[[4, 128, 768], [4, 128, 1]]");
        assert_eq!(mul.flops, 4 * 128 * 768);
        assert_eq!(mul.bytes, (2 * 4 * 128 * 768 + 4 * 128) * 4);
        let copy = of("aten::copy_", "[[4, 128, 768], [4, 128, 768], []]");
        assert_eq!((copy.flops, copy.formula), (0, Formula::Copy));
        assert_eq!(copy.bytes, 3 * 4 * 128 * 768 * 4);
        let sum = of("aten::sum", "[[4, 128, 768], [], [], []]");
        assert_eq!((sum.flops, sum.bytes), (4 * 128 * 768, 4 * 128 * 768 * 4));
        let fill = of("aten::fill_", "[[10000, 768], []]");
        assert_eq!(fill.bytes, 10000 * 768 * 4);
        let foreach = of("aten::_foreach_mul_", "[[768, 768], [768]]");
        assert_eq!(foreach.bytes, (768 * 768 + 768) * 4);
        assert_eq!(foreach.formula, Formula::Foreach);
        // Embedding backward: the indices and the gradient rows read, the rows written.
        let put = of(
            "aten::_index_put_impl_",
            "[[10000, 768], [4, 128], [4, 128, 768], [], []]",
        );
        assert_eq!(put.bytes, (512 + 2 * 512 * 768) * 4);
        let nll = of(
            "aten::nll_loss_backward",
            "[[], [512, 10000], [512], [], [], [], []]",
        );
        assert_eq!(
            nll.bytes,
            2 * 512 * 4,
            "the targets read, one element per row written"
        );
    }

    #[test]
    fn recorded_types_and_counts_win() {
        let c = cost(
            &Recorded {
                name: "aten::mm",
                shapes: "[[512, 768], [768, 768]]",
                types: Some(r#"["c10::BFloat16", "c10::BFloat16"]"#),
                concrete: None,
                flops: Some(7),
            },
            Dtype::F32,
        )
        .unwrap();
        assert_eq!(c.dtype, Dtype::Bf16);
        assert_eq!(c.bytes, (512 * 768 + 768 * 768 + 512 * 768) * 2);
        assert_eq!((c.flops, c.counted), (7, true));
        let index = cost(
            &Recorded {
                name: "aten::index",
                shapes: "[[10000, 768], [4, 128]]",
                types: Some(r#"["float", "long int"]"#),
                concrete: None,
                flops: None,
            },
            Dtype::F32,
        )
        .unwrap();
        assert_eq!(
            index.bytes,
            2 * 512 * 768 * 4 + 512 * 8,
            "the rows, not the table"
        );
        assert!(parse_shapes("not a list").is_none());
        let lists = Recorded {
            name: "aten::_foreach_mul_",
            shapes: "[[], []]",
            types: Some(r#"["TensorList", "Scalar"]"#),
            concrete: None,
            flops: None,
        };
        assert_eq!(cost(&lists, Dtype::F32), None, "no tensor's shape recorded");
        assert_eq!(
            parse_shapes("[[2, 3], [], [[4], [5, 6]]]").unwrap(),
            vec![
                Input::Tensor(vec![2, 3]),
                Input::Other,
                Input::List(vec![vec![4], vec![5, 6]])
            ]
        );
    }
}
