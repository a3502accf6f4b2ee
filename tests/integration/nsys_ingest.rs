//! Loading Nsight Systems exports into the model.

use crate::common;

use analyze::formats;
use analyze::model::trace::RangeStyle;

#[test]
fn torch_small_ctx128_train_fp32_loads_every_table() {
    let path = common::fixture("nsys/torch_small_ctx128_train_fp32.sqlite.gz");
    let t = formats::load_trace(&path).unwrap();
    assert_eq!(t.kernels.len(), 9047);
    assert_eq!(t.api_calls.len(), 18173);
    assert_eq!(t.mem_ops.len(), 235 + 144);
    assert_eq!(t.ranges.len(), 163);
    assert!(t.ranges.iter().all(|r| r.style == RangeStyle::PushPop));
    assert_eq!(t.source.schema_version.as_deref(), Some("3.20.3"));
    assert_eq!(t.gpus[0].name, "NVIDIA H200");
    let names: std::collections::HashSet<&str> = t.ranges.iter().map(|r| t.name(r.name)).collect();
    for n in [
        "forward",
        "backward",
        "optimizer",
        "step_0",
        "step_1",
        "attention_softmax",
    ] {
        assert!(names.contains(n), "{n} missing");
    }
    assert!(t
        .kernels
        .windows(2)
        .all(|w| w[0].span.start <= w[1].span.start));
}
