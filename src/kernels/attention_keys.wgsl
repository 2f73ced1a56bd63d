// The walk over one invocation's keys in attention_fwd.wgsl and attention_bwd_dq.wgsl (the
// launcher puts this where they say KEYS): opens the loops over the passes (untiled: one, from
// storage; tiled: tiles of TK keys loaded into workgroup memory by the whole workgroup) and over
// the keys j of a pass, whose rows start at kb in KS and VS. The kernel closes both loops (and
// waits on the workgroup before the next tile is loaded).
    // This invocation's keys are 0..jend; the workgroup's 0..wend, in passes of `step` keys.
//#untiled
    let jend = min(i0 + R, p.T);
    let wend = jend;
    let step = max(jend, 1u);
//#tiled
    let jend = select(0u, min(i0 + R, p.T), blk < p.nblk);    // none for a block past the end
    let wend = min((wb * WG + WG) * R, p.T);
    let step = TK;
//#end
    for (var t0 = 0u; t0 < wend; t0 += step) {
//#tiled
        for (var e = li; e < TK * N; e += WG) {
            let kb = ((b * p.T + min(t0 + e / N, p.T - 1u)) * p.HKV + kvh) * N + e % N;
            kt[e] = k[kb];
            vt[e] = v[kb];
        }
        workgroupBarrier();
//#end
        let tend = min(t0 + step, jend);
        for (var j = t0; j < tend; j++) {
            if (p.has_mask != 0u && mask[b * p.T + j] == 0u) { continue; }
//#untiled
            let kb = ((b * p.T + j) * p.HKV + kvh) * N;
//#tiled
            let kb = (j - t0) * N;
//#end
