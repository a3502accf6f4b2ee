//! PyTorch's answers to the experiments, from `fixtures/collect/torch_precision_h200.json`
//! (written by `scripts/reference/torch_precision.py` on an H200 with PyTorch 2.11, embedded at
//! build time): the seven accumulated sums and the ToyModel's dtypes under fp16 and bf16
//! autocast. The tables print them beside collect's; the tests compare with them.

use serde_json::Value;

use crate::autocast::Float;

const FIXTURE: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../fixtures/collect/torch_precision_h200.json"
));

/// The rows of the fixture.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TorchReference {
    /// PyTorch's version (`2.11.0+cu130`).
    pub torch: String,
    pub device: String,
    /// (case, sum) of the accumulation experiment.
    pub sums: Vec<(String, f64)>,
    /// (autocast, tensor, dtype) of the ToyModel: `("fp16", "fc1 output", "float16")`.
    pub toy: Vec<(String, String, String)>,
}

impl TorchReference {
    /// The sum PyTorch reached in the accumulation case named `case`.
    pub fn accumulate(&self, case: &str) -> Option<f64> {
        self.sums.iter().find(|(c, _)| c == case).map(|(_, v)| *v)
    }

    /// The dtype PyTorch reported for the ToyModel's `tensor` under autocast to `low`.
    pub fn toy_dtype(&self, low: Float, tensor: &str) -> Option<&str> {
        self.toy
            .iter()
            .find(|(a, t, _)| a == low.as_str() && t == tensor)
            .map(|(_, _, d)| d.as_str())
    }
}

/// The embedded fixture, read.
pub fn reference() -> TorchReference {
    parse(FIXTURE).expect("the embedded PyTorch fixture is well formed (a unit test reads it)")
}

fn parse(text: &str) -> Option<TorchReference> {
    let doc: Value = serde_json::from_str(text).ok()?;
    let mut r = TorchReference {
        torch: doc.get("torch")?.as_str()?.to_owned(),
        device: doc.get("device")?.as_str()?.to_owned(),
        ..TorchReference::default()
    };
    for row in doc.get("rows")?.as_array()? {
        let field = |k: &str| row.get(k).and_then(Value::as_str);
        match field("experiment")? {
            "accumulate" => r
                .sums
                .push((field("case")?.to_owned(), row.get("value")?.as_f64()?)),
            "toy" => r.toy.push((
                field("autocast")?.to_owned(),
                field("case")?.to_owned(),
                field("value")?.to_owned(),
            )),
            _ => {}
        }
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_reads() {
        let r = reference();
        assert_eq!(r.device, "NVIDIA H200");
        assert_eq!(r.sums.len(), 7);
        assert_eq!(r.toy.len(), 12);
        assert_eq!(r.accumulate("fp16 += fp16"), Some(9.953125));
        assert_eq!(r.toy_dtype(Float::Bf16, "logits"), Some("bfloat16"));
        assert_eq!(
            r.toy_dtype(Float::F16, "layer norm output"),
            Some("float32")
        );
        assert!(parse("{}").is_none());
    }
}
