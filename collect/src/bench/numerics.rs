//! `collect numerics`: one forward and backward of a configuration on fixed weights and tokens,
//! written out for an outside referee (`scripts/reference/torch_numerics.py` loads them into
//! PyTorch). `weights.safetensors` holds every parameter under its PyTorch state-dict name;
//! `outputs.safetensors` the tokens, targets, logits (fp32; bf16 logits widened exactly), the
//! loss, and the gradients of the chosen tensors as `grad.<name>`. Checking them is the
//! referee's: nothing here compares numbers.

use std::path::Path;

use crate::bench::safetensors::{self, f32_bytes, i32_bytes, Entry};
use crate::error::{Error, Result};
use crate::gpu::ops::Runtime;
use crate::transformer::config::{Mode, RunConfig};
use crate::transformer::Model;

/// Which gradients to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grads {
    All,
    /// Embedding, first and last block, final norm and head (enough to see every kind of
    /// tensor without writing a 2.7B model's gradients in full).
    FirstLast,
}

/// What a dump wrote.
pub struct Summary {
    pub loss: f32,
    pub tensors_written: usize,
}

impl Summary {
    /// The line `collect numerics` prints: the configuration, the loss and where the files went.
    pub fn describe(&self, run: &RunConfig, dir: &Path) -> String {
        format!(
            "{} {} ctx {} batch {}{}: loss {:.6}, {} tensors written to {}\n",
            run.model.label(),
            run.precision,
            run.ctx,
            run.batch,
            if run.checkpoint { ", checkpointed" } else { "" },
            self.loss,
            self.tensors_written,
            dir.display()
        )
    }
}

pub fn dump(rt: &Runtime, run: &RunConfig, seed: u64, dir: &Path, grads: Grads) -> Result<Summary> {
    let mut run = run.clone();
    run.mode = Mode::ForwardBackward;
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    let mut model = Model::new(rt, &run, seed)?;
    let fwd = model.forward(true)?;
    let logits = model.download_logits(&fwd)?;
    model.backward(fwd)?;
    let loss = model.loss()?;
    let params = model.download_params()?;
    let (tokens, targets) = model.tokens()?;

    let layout = &model.layout;
    let weight_bytes: Vec<(String, Vec<usize>, Vec<u8>)> = layout
        .tensors
        .iter()
        .map(|t| {
            (
                t.name.clone(),
                t.shape.clone(),
                f32_bytes(&params[t.offset..t.offset + t.len()]),
            )
        })
        .collect();
    drop(params);
    let entries: Vec<Entry<'_>> = weight_bytes
        .iter()
        .map(|(n, s, d)| Entry {
            name: n.clone(),
            dtype: "F32",
            shape: s.clone(),
            data: d,
        })
        .collect();
    safetensors::write(&dir.join("weights.safetensors"), &entries)?;
    drop(entries);
    drop(weight_bytes);

    let g = model.download_grads()?;
    let last = run.model.layers - 1;
    let keep = |name: &str| match grads {
        Grads::All => true,
        Grads::FirstLast => {
            !name.starts_with("layers.")
                || name.starts_with("layers.0.")
                || name.starts_with(&format!("layers.{last}."))
        }
    };
    let grad_bytes: Vec<(String, Vec<usize>, Vec<u8>)> = layout
        .tensors
        .iter()
        .filter(|t| keep(&t.name))
        .map(|t| {
            (
                format!("grad.{}", t.name),
                t.shape.clone(),
                f32_bytes(&g[t.offset..t.offset + t.len()]),
            )
        })
        .collect();
    drop(g);
    let (bt, v) = (run.tokens(), run.model.vocab);
    let tok = i32_bytes(&tokens);
    let tgt = i32_bytes(&targets);
    let lg = f32_bytes(&logits);
    let ls = f32_bytes(&[loss]);
    let mut entries = vec![
        Entry {
            name: "tokens".into(),
            dtype: "I32",
            shape: vec![run.batch, run.ctx],
            data: &tok,
        },
        Entry {
            name: "targets".into(),
            dtype: "I32",
            shape: vec![run.batch, run.ctx],
            data: &tgt,
        },
        Entry {
            name: "logits".into(),
            dtype: "F32",
            shape: vec![bt, v],
            data: &lg,
        },
        Entry {
            name: "loss".into(),
            dtype: "F32",
            shape: vec![1],
            data: &ls,
        },
    ];
    entries.extend(grad_bytes.iter().map(|(n, s, d)| Entry {
        name: n.clone(),
        dtype: "F32",
        shape: s.clone(),
        data: d,
    }));
    safetensors::write(&dir.join("outputs.safetensors"), &entries)?;
    Ok(Summary {
        loss,
        tensors_written: layout.tensors.len() + entries.len(),
    })
}
