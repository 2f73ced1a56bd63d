//! The native/wasm seam. Natively futures are driven by `pollster` and the device
//! is polled while waiting for a readback; in the browser the event loop drives
//! both. Nothing else in the crate needs `cfg(target_arch)`.

/// Run a future to completion (native only; the browser awaits instead).
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

/// Let the device make progress on pending map callbacks.
#[cfg(not(target_arch = "wasm32"))]
pub fn poll_wait(device: &wgpu::Device) {
    // An error here means the device was lost; the map callback reports it.
    let _ = device.poll(wgpu::PollType::wait_indefinitely());
}

/// In the browser the event loop drives map callbacks.
#[cfg(target_arch = "wasm32")]
pub fn poll_wait(_device: &wgpu::Device) {}

/// Which backends to ask for: Vulkan natively (lavapipe here), WebGPU in the browser.
#[cfg(not(target_arch = "wasm32"))]
pub fn backends() -> wgpu::Backends {
    match std::env::var("WGPU_BACKEND") {
        Ok(s) if !s.is_empty() => wgpu::Backends::from_comma_list(&s),
        _ => wgpu::Backends::VULKAN,
    }
}

#[cfg(target_arch = "wasm32")]
pub fn backends() -> wgpu::Backends {
    wgpu::Backends::BROWSER_WEBGPU
}

/// Milliseconds from a monotonic clock (benchmarks and progress only).
#[cfg(not(target_arch = "wasm32"))]
pub fn now_ms() -> f64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1000.0
}

#[cfg(target_arch = "wasm32")]
pub fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// The process's peak resident set size in bytes (Linux: VmHWM), None elsewhere.
#[cfg(not(target_arch = "wasm32"))]
pub fn peak_rss() -> Option<u64> {
    proc_status_bytes("VmHWM:")
}

/// A "<key> N kB" line of /proc/self/status, in bytes.
#[cfg(not(target_arch = "wasm32"))]
fn proc_status_bytes(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

#[cfg(target_arch = "wasm32")]
pub fn peak_rss() -> Option<u64> {
    None
}

/// The process's resident set size now, in bytes (Linux: VmRSS), None elsewhere.
#[cfg(not(target_arch = "wasm32"))]
pub fn rss() -> Option<u64> {
    proc_status_bytes("VmRSS:")
}

#[cfg(target_arch = "wasm32")]
pub fn rss() -> Option<u64> {
    None
}

/// The JavaScript heap in use (`performance.memory.usedJSHeapSize`, Chromium only), None
/// elsewhere and natively.
pub fn js_heap_bytes() -> Option<u64> {
    #[cfg(target_arch = "wasm32")]
    {
        use wasm_bindgen::JsValue;
        let global = js_sys::global();
        let perf = js_sys::Reflect::get(&global, &JsValue::from_str("performance")).ok()?;
        let mem = js_sys::Reflect::get(&perf, &JsValue::from_str("memory")).ok()?;
        let used = js_sys::Reflect::get(&mem, &JsValue::from_str("usedJSHeapSize")).ok()?.as_f64()?;
        Some(used as u64)
    }
    #[cfg(not(target_arch = "wasm32"))]
    None
}

/// Start measuring [`peak_rss`] from the current RSS (Linux: writes 5 to /proc/self/clear_refs).
pub fn reset_peak_rss() {
    #[cfg(not(target_arch = "wasm32"))]
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// Bytes of the wasm linear memory (it only grows; the browser's analogue of a peak RSS),
/// None natively.
#[cfg(target_arch = "wasm32")]
pub fn wasm_memory_bytes() -> Option<u64> {
    Some(core::arch::wasm32::memory_size(0) as u64 * 65536)
}

#[cfg(not(target_arch = "wasm32"))]
pub fn wasm_memory_bytes() -> Option<u64> {
    None
}
