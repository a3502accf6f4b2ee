//! Where each parameter lives in the one flat buffer that holds them all (and, in the same
//! layout, their gradients and AdamW moments), its PyTorch name and its initialisation.
//!
//! Within a layer the query, key and value projections are stacked (`[Wq; Wk; Wv]` is one
//! `[3d, d]` matrix) and so are `W1` and `W3`, so that each pair of GEMMs runs as one. Each tensor
//! starts on a 64-element boundary, so every tensor is 256-byte aligned in fp32 and in its bf16
//! copy. Pure arithmetic; no GPU here.

use std::ops::Range;

use crate::transformer::config::ModelConfig;

/// Tensor starts are rounded up to this many elements.
pub const ALIGN: usize = 64;

/// How a tensor is initialised.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// Normal with this standard deviation, truncated at ±3 standard deviations.
    TruncNormal { std: f32 },
    /// Every element this value (RMSNorm gains start at 1).
    Constant(f32),
}

/// One named tensor of the flat buffer.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamTensor {
    /// PyTorch's state-dict name in the reference model (`layers.0.q.weight`).
    pub name: String,
    /// First element in the flat buffer.
    pub offset: usize,
    /// Row-major shape (`[out, in]` for a linear layer, as `nn.Linear` stores it).
    pub shape: Vec<usize>,
    pub init: Init,
}

impl ParamTensor {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Offsets of one layer's tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerOffsets {
    /// `[Wq; Wk; Wv]`, `[3d, d]`.
    pub wqkv: usize,
    /// `Wo`, `[d, d]`.
    pub wo: usize,
    /// `[W1; W3]`, `[2 d_ff, d]`.
    pub w13: usize,
    /// `W2`, `[d, d_ff]`.
    pub w2: usize,
    pub ln1: usize,
    pub ln2: usize,
}

/// The whole layout.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamLayout {
    pub tensors: Vec<ParamTensor>,
    pub layers: Vec<LayerOffsets>,
    /// Token embedding `[vocab, d]`.
    pub embedding: usize,
    /// Final RMSNorm gain `[d]`.
    pub ln_final: usize,
    /// LM head `[vocab, d]`.
    pub head: usize,
    /// Elements of the flat buffer, padding included.
    pub total: usize,
}

fn linear_std(d_in: usize, d_out: usize) -> f32 {
    (2.0 / (d_in + d_out) as f64).sqrt() as f32
}

impl ParamLayout {
    pub fn new(c: &ModelConfig) -> ParamLayout {
        let (d, f, v) = (c.d_model, c.d_ff, c.vocab);
        let mut tensors = Vec::new();
        let mut next = 0usize;
        // `align_end: false` keeps the next tensor right behind this one (the stacked pairs).
        let mut push_with = |name: String, shape: Vec<usize>, init: Init, align_end: bool| {
            let offset = next;
            let len: usize = shape.iter().product();
            next = if align_end {
                (offset + len).div_ceil(ALIGN) * ALIGN
            } else {
                offset + len
            };
            tensors.push(ParamTensor {
                name,
                offset,
                shape,
                init,
            });
            offset
        };
        let embedding = push_with(
            "emb".into(),
            vec![v, d],
            Init::TruncNormal { std: 1.0 },
            true,
        );
        let mut layers = Vec::with_capacity(c.layers);
        for i in 0..c.layers {
            let sq = Init::TruncNormal {
                std: linear_std(d, d),
            };
            let up = Init::TruncNormal {
                std: linear_std(d, f),
            };
            let p = |s: &str| format!("layers.{i}.{s}");
            let wqkv = push_with(p("q.weight"), vec![d, d], sq, false);
            push_with(p("k.weight"), vec![d, d], sq, false);
            push_with(p("v.weight"), vec![d, d], sq, true);
            let wo = push_with(p("o.weight"), vec![d, d], sq, true);
            let w13 = push_with(p("w1.weight"), vec![f, d], up, false);
            push_with(p("w3.weight"), vec![f, d], up, true);
            let w2 = push_with(p("w2.weight"), vec![d, f], up, true);
            let ln1 = push_with(p("ln1.weight"), vec![d], Init::Constant(1.0), true);
            let ln2 = push_with(p("ln2.weight"), vec![d], Init::Constant(1.0), true);
            layers.push(LayerOffsets {
                wqkv,
                wo,
                w13,
                w2,
                ln1,
                ln2,
            });
        }
        let ln_final = push_with("ln.weight".into(), vec![d], Init::Constant(1.0), true);
        let head = push_with(
            "head.weight".into(),
            vec![v, d],
            Init::TruncNormal {
                std: linear_std(d, v),
            },
            true,
        );
        ParamLayout {
            tensors,
            layers,
            embedding,
            ln_final,
            head,
            total: next,
        }
    }

    /// Parameters, padding excluded.
    pub fn parameters(&self) -> usize {
        self.tensors.iter().map(ParamTensor::len).sum()
    }

    /// The embedding's elements of the flat buffer (padding after it included).
    pub fn embedding_span(&self) -> Range<usize> {
        self.embedding..self.block_start(0)
    }

    /// Block `li`'s elements: from its first tensor to the next block's (or the final norm's).
    pub fn block_span(&self, li: usize) -> Range<usize> {
        self.block_start(li)..self.block_start(li + 1)
    }

    /// The final norm's gain and the LM head, the last tensors, to the end of the buffer.
    pub fn tail_span(&self) -> Range<usize> {
        self.ln_final..self.total
    }

    /// Where block `li` starts; the final norm's gain for `li` = layers.
    fn block_start(&self, li: usize) -> usize {
        self.layers.get(li).map_or(self.ln_final, |l| l.wqkv)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transformer::config::PRESETS;

    #[test]
    fn layout_counts_every_parameter_once() {
        for p in PRESETS {
            let c = ModelConfig::preset(p.0).unwrap();
            let l = ParamLayout::new(&c);
            assert_eq!(l.parameters() as u64, c.parameters(), "{}", p.0);
            assert!(l.total >= l.parameters());
        }
    }

    /// The optimizer's groups (embedding, each block, the tail) cover the buffer once, in order,
    /// each aligned so its float4 updates are, and hold every tensor of their own.
    #[test]
    fn update_groups_partition_the_buffer() {
        for p in PRESETS {
            let c = ModelConfig::preset(p.0).unwrap();
            let l = ParamLayout::new(&c);
            let mut spans = vec![l.embedding_span()];
            spans.extend((0..c.layers).map(|i| l.block_span(i)));
            spans.push(l.tail_span());
            assert_eq!(spans[0].start, 0);
            assert_eq!(spans.last().unwrap().end, l.total);
            for w in spans.windows(2) {
                assert_eq!(w[0].end, w[1].start);
            }
            for s in &spans {
                assert!(
                    s.start % ALIGN == 0 && s.len() % 4 == 0 && !s.is_empty(),
                    "{s:?}"
                );
            }
            for t in &l.tensors {
                let owner = if t.name == "emb" {
                    0
                } else if let Some(rest) = t.name.strip_prefix("layers.") {
                    1 + rest.split('.').next().unwrap().parse::<usize>().unwrap()
                } else {
                    c.layers + 1
                };
                assert!(
                    spans[owner].contains(&t.offset) && t.offset + t.len() <= spans[owner].end,
                    "{}",
                    t.name
                );
            }
        }
    }

    #[test]
    fn stacked_projections_follow_each_other() {
        let c = ModelConfig::preset("small").unwrap();
        let l = ParamLayout::new(&c);
        let d = c.d_model;
        let k = l
            .tensors
            .iter()
            .find(|t| t.name == "layers.3.k.weight")
            .unwrap();
        assert_eq!(k.offset, l.layers[3].wqkv + d * d);
        let w3 = l
            .tensors
            .iter()
            .find(|t| t.name == "layers.3.w3.weight")
            .unwrap();
        assert_eq!(w3.offset, l.layers[3].w13 + c.d_ff * d);
        assert!(l.tensors.iter().all(|t| t.offset % ALIGN == 0));
        // Odd widths keep the stacks contiguous; only the stack's start is aligned.
        let odd = ModelConfig::custom(36, 100, 1, 3).unwrap();
        let l = ParamLayout::new(&odd);
        assert_eq!(l.tensors[2].offset, l.layers[0].wqkv + 36 * 36);
        assert_eq!(l.layers[0].wo % ALIGN, 0);
    }
}
