//! The native side of [`crate::platform`]: pollster drives futures, the device is polled while a
//! readback waits, Vulkan is the backend, memory is read from /proc/self/status.

/// A buffer mapping (`map_async`) can be waited for by polling the device.
pub const SYNC_MAP: bool = true;

/// Not a browser: native Vulkan (lavapipe here), where pipelines compile quickly.
pub const BROWSER: bool = false;

/// Run a future to completion (native only; the browser awaits instead).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    pollster::block_on(f)
}

/// Let the device make progress on pending map callbacks.
pub fn poll_wait(device: &wgpu::Device) {
    // An error here means the device was lost; the map callback reports it.
    let _ = device.poll(wgpu::PollType::wait_indefinitely());
}

/// Let the device report the work that has finished (its callbacks), without waiting.
pub fn poll_now(device: &wgpu::Device) {
    let _ = device.poll(wgpu::PollType::Poll);
}

/// Block until the submission `index` has run (later submissions may still be running); the
/// most recent one when None.
pub fn poll_wait_for(device: &wgpu::Device, index: Option<wgpu::SubmissionIndex>) {
    let _ = device.poll(wgpu::PollType::Wait { submission_index: index, timeout: None });
}

/// The `enable` directives a WGSL source needs here: none (naga takes subgroup builtins without
/// `enable subgroups;`, which it does not know yet; browsers want it, see the web side).
pub fn wgsl_enables(_src: &str) -> &'static str {
    ""
}

/// Which backends to ask for: Vulkan (lavapipe without a GPU), or `WGPU_BACKEND`'s list.
pub fn backends() -> wgpu::Backends {
    match std::env::var("WGPU_BACKEND") {
        Ok(s) if !s.is_empty() => wgpu::Backends::from_comma_list(&s),
        _ => wgpu::Backends::VULKAN,
    }
}

/// Milliseconds from a monotonic clock (benchmarks, progress, step times).
pub fn now_ms() -> f64 {
    use std::sync::OnceLock;
    use std::time::Instant;
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1000.0
}

/// Wall-clock milliseconds since the Unix epoch (timestamps that are saved).
pub fn wall_ms() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1000.0)
}

/// The process's peak resident set size in bytes (Linux: VmHWM), None elsewhere.
pub fn peak_rss() -> Option<u64> {
    proc_status_bytes("VmHWM:")
}

/// The process's resident set size now, in bytes (Linux: VmRSS), None elsewhere.
pub fn rss() -> Option<u64> {
    proc_status_bytes("VmRSS:")
}

/// A "<key> N kB" line of /proc/self/status, in bytes.
fn proc_status_bytes(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Start measuring [`peak_rss`] from the current RSS (Linux: writes 5 to /proc/self/clear_refs).
pub fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5"); // best effort: the peak then counts from the start
}

/// The JavaScript heap in use: None natively.
pub fn js_heap_bytes() -> Option<u64> {
    None
}

/// Bytes of the wasm linear memory: None natively.
pub fn wasm_memory_bytes() -> Option<u64> {
    None
}

/// Keep the Vulkan loader's complaint about an unset `XDG_RUNTIME_DIR` ("error:
/// XDG_RUNTIME_DIR is invalid or not set in the environment.", which reads as webtune's own
/// error) out of a user's sight: point it at the system's temporary directory when it is unset.
/// Call before the first device is made, while the process has one thread.
pub fn quiet_vulkan_loader() {
    if std::env::var_os("XDG_RUNTIME_DIR").is_none_or(|v| v.is_empty()) {
        // Safe to set here: called at the start of main, before any other thread exists.
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
}

/// Write `bytes` to `path` atomically: a temporary file in the same directory,
/// flushed to disk, then renamed over the target. A crash leaves the old file or the new one.
pub fn write_atomic(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    // A fixed name: a write killed half-way is overwritten by the next one, never left behind.
    let tmp = dir.join(format!(".{name}.tmp"));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all(); // directory fsync is best effort (not supported everywhere)
    }
    Ok(())
}

/// Where webtune keeps what it measured about this machine (the kernel choices):
/// `$XDG_CACHE_HOME/webtune`, else `~/.cache/webtune`.
pub fn cache_dir() -> Option<std::path::PathBuf> {
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(std::env::var_os("HOME").filter(|v| !v.is_empty())?).join(".cache"),
    };
    Some(base.join("webtune"))
}
