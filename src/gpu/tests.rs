use super::*;
use crate::gpu_test;

/// y = 2·x + 1 over `n` f32, one element per invocation (an arbitrary reader of `x`).
fn double_plus_one(gpu: &Gpu, x: &Tensor, y: &Tensor) {
    let p = gpu.pipeline("test_double_plus_one", || {
        "struct P { n: u32 }
             @group(0) @binding(0) var<uniform> p: P;
             @group(0) @binding(1) var<storage, read> x: array<f32>;
             @group(0) @binding(2) var<storage, read_write> y: array<f32>;
             @compute @workgroup_size(64)
             fn main(@builtin(global_invocation_id) g: vec3<u32>) {
                 if (g.x < p.n) { y[g.x] = 2.0 * x[g.x] + 1.0; }
             }"
        .to_string()
    });
    let n = x.numel() as u32;
    gpu.dispatch(&p, bytemuck::bytes_of(&[n, 0, 0, 0]), &[x, y], groups(n.div_ceil(64)));
}

gpu_test!(async fn gpu_upload_split_over_chunks(gpu) {
    // 2.5 chunks of f32 plus a ragged 16-bit tail: several chunk-sized copies and a padded end.
    let n = (STAGING_CHUNK_BYTES as usize * 5 / 2) / 4 + 3;
    let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
    let staging_before = gpu.alloc.stats().live(Category::Staging);
    let t = gpu.upload_f32(&data, &[n], Category::Activations).expect("upload");
    assert_eq!(gpu.read_f32(&t).await.expect("read"), data);
    let bits: Vec<u16> = (0..37 * 29).map(|i| i as u16 ^ 0x5a5a).collect();
    let h = gpu.upload_u16_rows(&bits, &[37, 29], DType::BF16, Category::Activations).expect("upload");
    let back: Vec<u16> = bytemuck::pod_collect_to_vec(&gpu.read_bytes(&h).await.expect("read"));
    for r in 0..37 {
        assert_eq!(&back[r * 30..r * 30 + 29], &bits[r * 29..(r + 1) * 29], "row {r}");
        assert_eq!(back[r * 30 + 29], 0, "row {r} padding");
    }
    let one = gpu.upload_bytes(&[1, 2, 3], &[1], DType::F32, Category::Scratch).expect("upload");
    assert_eq!(&gpu.read_bytes(&one).await.expect("read")[..4], &[1, 2, 3, 0]);
    if STAGED_UPLOADS {
        // The ring is the staging: fixed and accounted from the start.
        assert_eq!(staging_before, STAGING_CHUNKS as u64 * STAGING_CHUNK_BYTES);
        assert_eq!(gpu.alloc.stats().live(Category::Staging), staging_before);
    }
});

gpu_test!(async fn gpu_writes_ordered_with_dispatches(gpu) {
    // Each write lands after the dispatches recorded before it and before those after it,
    // also when the writes are larger than the ring and force submissions in between.
    let n = (STAGING_CHUNK_BYTES as usize * 3) / 4 + 5;
    let x = gpu.zeros(&[n], DType::F32, Category::Activations).expect("x");
    let outs: Vec<Tensor> =
        (0..4).map(|_| gpu.zeros(&[n], DType::F32, Category::Activations).expect("y")).collect();
    for (k, y) in outs.iter().enumerate() {
        gpu.write_f32(&x, &vec![k as f32 + 0.25; n]);
        double_plus_one(gpu, &x, y);
    }
    // A small write between two readers of the same buffer.
    let s = gpu.upload_f32(&[1.0; 5], &[5], Category::Scratch).expect("s");
    let s1 = gpu.zeros(&[5], DType::F32, Category::Scratch).expect("s1");
    let s2 = gpu.zeros(&[5], DType::F32, Category::Scratch).expect("s2");
    double_plus_one(gpu, &s, &s1);
    gpu.write_f32(&s, &[3.0; 5]);
    double_plus_one(gpu, &s, &s2);
    for (k, y) in outs.iter().enumerate() {
        let v = gpu.read_f32(y).await.expect("read");
        let want = 2.0 * (k as f32 + 0.25) + 1.0;
        assert!(v.iter().all(|&e| e == want), "reader {k}: {:?} != {want}", &v[..4]);
    }
    assert_eq!(gpu.read_f32(&s1).await.expect("read"), vec![3.0; 5]);
    assert_eq!(gpu.read_f32(&s2).await.expect("read"), vec![7.0; 5]);
});

// Host work is counted by kind while profiling, and only then; the table lists it.
gpu_test!(async fn gpu_profile_counts_host_work(gpu) {
    assert_eq!(gpu.host_work("not profiled", || 3), 3);
    gpu.profile_start();
    for _ in 0..2 {
        gpu.host_work("weights: convert", || std::hint::black_box((0..10_000u64).sum::<u64>()));
    }
    let fetched = gpu.host_work_async("weights: fetch", async { 7 }).await;
    assert_eq!(fetched, 7);
    let p = gpu.profile_take().await.unwrap().expect("profiling was on");
    let mut host: Vec<(&str, u64)> = p.host.iter().map(|h| (h.name.as_str(), h.calls)).collect();
    host.sort();
    assert_eq!(host, [("weights: convert", 2), ("weights: fetch", 1)]);
    assert!(p.host.iter().all(|h| h.ms >= 0.0));
    assert!(p.table(1.0).contains("weights: convert"), "{}", p.table(1.0));
    assert!(!gpu.profiling());
});

// Slices of one buffer (and a tensor of its own) read back together, in one readback or in
// spans of a few tensors, equal their reads one by one; a slice bound to a kernel writes only
// its own range.
gpu_test!(async fn slices_read_back_together_and_bind_as_their_range(gpu) {
    let align = gpu.storage_alignment().max(256);
    let n = (4 * align / 4) as usize; // four aligned pieces of `align` bytes
    let host: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
    let whole = gpu.upload_f32(&host, &[n], Category::Scratch).unwrap();
    let piece = (align / 4) as usize;
    let slices: Vec<Tensor> =
        (0..4).map(|k| whole.slice(k as u64 * align, 4 * (piece - k) as u64, &[piece - k], DType::F32)).collect();
    let alone = gpu.upload_f32(&[7.0, 8.0, 9.0], &[3], Category::Scratch).unwrap();
    let mut ts: Vec<&Tensor> = slices.iter().rev().collect();
    ts.insert(2, &alone);
    let mut one_by_one = Vec::new();
    for t in &ts {
        one_by_one.push(gpu.read_f32(t).await.unwrap());
    }
    assert_eq!(one_by_one[2], vec![7.0, 8.0, 9.0]);
    assert_eq!(one_by_one[0], host[3 * piece..3 * piece + piece - 3].to_vec());
    for span in [u64::MAX, 2 * align, 4] {
        assert_eq!(gpu.read_f32_many_within(&ts, span).await.unwrap(), one_by_one, "span {span}");
    }
    // y = 2·x + 1 into slice 2 from a buffer of its own (WebGPU forbids one buffer as both
    // read-only and read-write storage in one dispatch, whatever the ranges): only slice 2's
    // range changes.
    let x: Vec<f32> = (0..piece - 2).map(|i| i as f32).collect();
    let tx = gpu.upload_f32(&x, &[piece - 2], Category::Scratch).unwrap();
    double_plus_one(gpu, &tx, &slices[2]);
    let after = gpu.read_f32(&whole).await.unwrap();
    for (i, (a, h)) in after.iter().zip(&host).enumerate() {
        let want = if (2 * piece..3 * piece - 2).contains(&i) { 2.0 * x[i - 2 * piece] + 1.0 } else { *h };
        assert_eq!(*a, want, "element {i}");
    }
});
