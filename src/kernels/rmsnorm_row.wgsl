// The body of rmsnorm_fwd.wgsl for the row at x[base..]: each invocation strides over the row,
// a workgroup tree reduction forms the sum of squares, r = rstd, and y[base..] = w · (x · r).
// rmsnorm_lora_h.wgsl norms decoding's row with the same lines, so its y is rmsnorm_fwd's.
    var s = 0.0;
    for (var i = lid.x; i < p.l; i += WG) {
        let v = x[base + i];
        s += hsum(v * v);
    }
    sh[lid.x] = s;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (lid.x < k) { sh[lid.x] += sh[lid.x + k]; }
        workgroupBarrier();
    }
    let r = 1.0 / sqrt(sh[0] / f32(p.c) + p.eps);
    for (var i = lid.x; i < p.l; i += WG) {
        y[base + i] = w[i] * (x[base + i] * r);
    }
