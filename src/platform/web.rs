//! The browser side of [`crate::platform`]: the event loop drives futures and map callbacks,
//! WebGPU is the backend, the clock is JavaScript's, and there is no file system (the weight
//! store is IndexedDB).

/// A buffer mapping completes only when the browser's event loop runs its callback: nothing
/// synchronous may wait for it.
pub const SYNC_MAP: bool = false;

/// A browser tab (SwiftShader in the tests, where each pipeline compiles slowly).
pub const BROWSER: bool = true;

/// In the browser the event loop drives map callbacks.
pub fn poll_wait(_device: &wgpu::Device) {}

/// Nothing to do in the browser: the event loop delivers the device's callbacks.
pub fn poll_now(_device: &wgpu::Device) {}

/// Nothing to do in the browser (see [`poll_wait`]).
pub fn poll_wait_for(_device: &wgpu::Device, _index: Option<wgpu::SubmissionIndex>) {}

/// WebGPU.
pub fn backends() -> wgpu::Backends {
    wgpu::Backends::BROWSER_WEBGPU
}

/// The `enable` directives a WGSL source needs here: browsers (Tint) want subgroup builtins
/// declared with `enable subgroups;`, which naga (native) does not know yet.
pub fn wgsl_enables(src: &str) -> &'static str {
    let uses = ["subgroupAdd", "subgroupBroadcast", "subgroupShuffle", "subgroup_invocation_id", "subgroup_size"];
    if uses.iter().any(|b| src.contains(b)) && !src.contains("enable subgroups;") {
        "enable subgroups;\n"
    } else {
        ""
    }
}

/// Milliseconds (`Date.now()`; benchmarks, progress, step times).
pub fn now_ms() -> f64 {
    js_sys::Date::now()
}

/// Wall-clock milliseconds since the Unix epoch (timestamps that are saved).
pub fn wall_ms() -> f64 {
    js_sys::Date::now()
}

/// No process memory gauge in the browser.
pub fn peak_rss() -> Option<u64> {
    None
}

/// No process memory gauge in the browser.
pub fn rss() -> Option<u64> {
    None
}

/// Nothing to reset in the browser.
pub fn reset_peak_rss() {}

/// The JavaScript heap in use (`performance.memory.usedJSHeapSize`, Chromium only).
pub fn js_heap_bytes() -> Option<u64> {
    use wasm_bindgen::JsValue;
    let global = js_sys::global();
    let perf = js_sys::Reflect::get(&global, &JsValue::from_str("performance")).ok()?;
    let mem = js_sys::Reflect::get(&perf, &JsValue::from_str("memory")).ok()?;
    let used = js_sys::Reflect::get(&mem, &JsValue::from_str("usedJSHeapSize")).ok()?.as_f64()?;
    Some(used as u64)
}

/// Bytes of the wasm linear memory (it only grows; the browser's analogue of a peak RSS).
pub fn wasm_memory_bytes() -> Option<u64> {
    Some(core::arch::wasm32::memory_size(0) as u64 * 65536)
}

/// No Vulkan loader in the browser.
pub fn quiet_vulkan_loader() {}

/// There is no file system in the browser (the weight store is IndexedDB).
pub fn write_atomic(path: &std::path::Path, _bytes: &[u8]) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!("{}: there is no file system in the browser", path.display()),
    ))
}

/// No cache directory in the browser (the kernel choices are kept in the weight store).
pub fn cache_dir() -> Option<std::path::PathBuf> {
    None
}
