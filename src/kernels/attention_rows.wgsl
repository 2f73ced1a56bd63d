// The query rows of one invocation of attention_fwd.wgsl and attention_bwd_dq.wgsl (the
// launcher puts this where they say ROWS): batch b, head h (kv head kvh) and block blk of R rows
// from i0; the tiled kernels' workgroup takes WG consecutive blocks of one (batch, head), its
// block wb. Last rows first: they see the most keys, and lavapipe's threads take workgroups in
// order.
//#untiled
    let idx = (wid.x + wid.y * nwg.x) * WG + li;      // (b, h, block), block fastest
    if (idx >= p.B * p.H * p.nblk) { return; }
    let blk = p.nblk - 1u - idx % p.nblk;
    let h = (idx / p.nblk) % p.H;
    let b = idx / (p.nblk * p.H);
//#tiled
    let nw = (p.nblk + WG - 1u) / WG;                 // workgroups per (batch, head)
    let widx = wid.x + wid.y * nwg.x;                 // (b, h, workgroup block), block fastest
    if (widx >= p.B * p.H * nw) { return; }           // the whole workgroup: uniform
    let wb = nw - 1u - widx % nw;
    let h = (widx / nw) % p.H;
    let b = widx / (nw * p.H);
    let blk = wb * WG + li;
//#end
    let kvh = h / p.G;
    let i0 = blk * R;
