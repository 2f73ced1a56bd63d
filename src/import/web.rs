//! Byte sources for the browser (wasm32 only), read by ranges so that an import never
//! holds a whole file: [`HttpFiles`] (a server answering Range requests, such as the
//! Hugging Face hub) and [`BlobFiles`] (Files the user picked, or any Blobs).
//! Both work in a Window and in a Worker.

use super::files::{ByteSource, FileSet};
use crate::base::error::{Error, Result};
use crate::store::idb::{js_error, Scope};
use js_sys::{Reflect, Uint8Array};
use std::collections::HashMap;
use std::future::Future;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortController, Blob, File, Request, RequestCache, RequestInit, Response};

/// Waits before the retries of a failed HTTP request (network error, 5xx, 408, 429).
#[cfg(not(test))]
const RETRY_DELAYS_MS: [i32; 4] = [1000, 2000, 4000, 8000];
#[cfg(test)]
const RETRY_DELAYS_MS: [i32; 4] = [10, 20, 40, 80];

/// The files of a model on an HTTP server: file `name` is at `{base}/{name}`
/// (for the Hugging Face hub, base = "{hub}/{repo}/resolve/{revision}").
#[derive(Clone, Debug)]
pub struct HttpFiles {
    pub base: String,
}

/// One file of an [`HttpFiles`], its size known since [`FileSet::open`].
#[derive(Clone, Debug)]
pub struct HttpFile {
    url: String,
    size: u64,
}

impl HttpFile {
    /// The file's URL.
    pub fn url(&self) -> &str {
        &self.url
    }
}

/// Why one attempt at a request failed.
enum Fail {
    /// Worth another try: a network error, a 5xx, a body cut short.
    Retry(String),
    /// Final.
    Fatal(Error),
}

/// Run `attempt` until it succeeds, fails for good, or has failed
/// `RETRY_DELAYS_MS.len() + 1` times (then an error naming `url`).
async fn with_retries<T, F, Fut>(scope: &Scope, url: &str, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = std::result::Result<T, Fail>>,
{
    let mut delays = RETRY_DELAYS_MS.iter();
    loop {
        match attempt().await {
            Ok(v) => return Ok(v),
            Err(Fail::Fatal(e)) => return Err(e),
            Err(Fail::Retry(why)) => match delays.next() {
                Some(&ms) => scope.sleep(ms).await,
                None => {
                    return Err(Error::msg(format!(
                        "{url}: {why} (gave up after {} attempts)",
                        RETRY_DELAYS_MS.len() + 1
                    )))
                }
            },
        }
    }
}

/// Whether an HTTP status is worth retrying.
fn retryable(status: u16) -> bool {
    status >= 500 || status == 408 || status == 429
}

/// `fetch(url)` with `method`, an optional `Range: bytes=a-b` header and an abort
/// signal; a network error (a rejected fetch) is [`Fail::Retry`].
async fn fetch(
    scope: &Scope,
    url: &str,
    method: &str,
    range: Option<(u64, u64)>,
    abort: Option<&AbortController>,
) -> std::result::Result<Response, Fail> {
    let fatal = |e: JsValue| Fail::Fatal(Error::msg(format!("{url}: cannot make the request: {}", js_error(&e))));
    let init = RequestInit::new();
    init.set_method(method);
    init.set_cache(RequestCache::NoStore);
    if let Some(a) = abort {
        init.set_signal(Some(&a.signal()));
    }
    let request = Request::new_with_str_and_init(url, &init).map_err(fatal)?;
    if let Some((first, last)) = range {
        request.headers().set("Range", &format!("bytes={first}-{last}")).map_err(fatal)?;
    }
    let response = JsFuture::from(scope.fetch(&request))
        .await
        .map_err(|e| Fail::Retry(format!("network error: {}", js_error(&e))))?;
    response.dyn_into::<Response>().map_err(|v| Fail::Fatal(Error::msg(format!("{url}: fetch answered {v:?}"))))
}

/// A response header, None when absent or hidden (a cross-origin response shows only
/// the headers the server exposes).
fn header(response: &Response, name: &str) -> Option<String> {
    response.headers().get(name).ok().flatten()
}

/// The total size in a Content-Range header: "bytes 0-0/1234" or "bytes */1234".
fn content_range_total(value: &str) -> Option<u64> {
    value.trim().strip_prefix("bytes")?.rsplit_once('/')?.1.trim().parse().ok()
}

/// The first byte in a Content-Range header: "bytes 10-19/1234" → 10.
fn content_range_start(value: &str) -> Option<u64> {
    value.trim().strip_prefix("bytes")?.trim().split_once('-')?.0.trim().parse().ok()
}

/// The error for an HTTP status that is neither success nor worth a retry.
fn status_error(url: &str, response: &Response) -> Error {
    let status = response.status();
    let text = response.status_text();
    let text = if text.is_empty() { String::new() } else { format!(" {text}") };
    let hint = match status {
        401 | 403 => " (a private or gated repository needs an access token)",
        _ => "",
    };
    Error::msg(format!("{url}: HTTP {status}{text}{hint}"))
}

impl HttpFiles {
    /// Files at `{base}/{name}`.
    pub fn new(base: impl Into<String>) -> HttpFiles {
        HttpFiles { base: base.into() }
    }

    /// The URL of file `name` (its path encoded as by `encodeURI`).
    pub fn url(&self, name: &str) -> String {
        let name: String = js_sys::encode_uri(name).into();
        format!("{}/{name}", self.base.trim_end_matches('/'))
    }
}

/// One try at the size of `url`: None for a 404 or 410. Asks for the first byte
/// (`Range: bytes=0-0`) and reads Content-Range's total; falls back to the
/// Content-Length of a 200 answer, then of a HEAD request.
async fn probe_size(scope: &Scope, url: &str) -> std::result::Result<Option<u64>, Fail> {
    let abort = AbortController::new().ok();
    let response = fetch(scope, url, "GET", Some((0, 0)), abort.as_ref()).await?;
    let status = response.status();
    let range_total = header(&response, "Content-Range").and_then(|v| content_range_total(&v));
    let length = header(&response, "Content-Length").and_then(|v| v.trim().parse::<u64>().ok());
    // Only the headers were needed: do not download a whole file a server sent.
    if let Some(a) = &abort {
        a.abort();
    }
    match status {
        404 | 410 => return Ok(None),
        206 | 416 if range_total.is_some() => return Ok(range_total),
        200 if length.is_some() => return Ok(length),
        200 | 206 | 416 => {}
        s if retryable(s) => return Err(Fail::Retry(format!("HTTP {s} {}", response.status_text()))),
        _ => return Err(Fail::Fatal(status_error(url, &response))),
    }
    // The total is hidden (a cross-origin server that does not expose Content-Range):
    // ask for the length.
    let head = fetch(scope, url, "HEAD", None, None).await?;
    match head.status() {
        404 | 410 => Ok(None),
        200..=299 => match header(&head, "Content-Length").and_then(|v| v.trim().parse::<u64>().ok()) {
            Some(n) => Ok(Some(n)),
            None => Err(Fail::Fatal(Error::msg(format!(
                "{url}: cannot tell its size: the server shows neither Content-Range nor Content-Length"
            )))),
        },
        s if retryable(s) => Err(Fail::Retry(format!("HTTP {s} {} (HEAD)", head.status_text()))),
        _ => Err(Fail::Fatal(status_error(url, &head))),
    }
}

impl FileSet for HttpFiles {
    type Source = HttpFile;

    /// The file `name` with its size, or None when the server answers 404 (or 410).
    async fn open(&self, name: &str) -> Result<Option<HttpFile>> {
        let url = self.url(name);
        let scope = Scope::current()?;
        let size = with_retries(&scope, &url, || probe_size(&scope, &url)).await?;
        Ok(size.map(|size| HttpFile { url, size }))
    }
}

impl HttpFile {
    /// One try at bytes `start .. start + len` (len > 0, within the file).
    async fn read_once(&self, scope: &Scope, start: u64, len: usize) -> std::result::Result<Vec<u8>, Fail> {
        let url = &self.url;
        let last = start + len as u64 - 1;
        let abort = AbortController::new().ok();
        let response = fetch(scope, url, "GET", Some((start, last)), abort.as_ref()).await?;
        match response.status() {
            206 => {
                let begins = header(&response, "Content-Range").and_then(|v| content_range_start(&v));
                if let Some(b) = begins.filter(|&b| b != start) {
                    if let Some(a) = &abort {
                        a.abort();
                    }
                    return Err(Fail::Fatal(Error::msg(format!(
                        "{url}: asked for bytes {start}-{last}, the server sent bytes from {b}"
                    ))));
                }
            }
            200 if start == 0 && len as u64 == self.size => {}
            200 => {
                if let Some(a) = &abort {
                    a.abort();
                }
                return Err(Fail::Fatal(Error::msg(format!(
                    "{url}: the server ignores Range requests (it answered bytes {start}-{last} with the whole file)"
                ))));
            }
            s if retryable(s) => return Err(Fail::Retry(format!("HTTP {s} {}", response.status_text()))),
            _ => return Err(Fail::Fatal(status_error(url, &response))),
        }
        let body = response
            .array_buffer()
            .map_err(|e| Fail::Fatal(Error::msg(format!("{url}: cannot read the answer: {}", js_error(&e)))))?;
        let body = JsFuture::from(body)
            .await
            .map_err(|e| Fail::Retry(format!("bytes {start}-{last}: reading the answer failed: {}", js_error(&e))))?;
        let bytes = Uint8Array::new(&body).to_vec();
        if bytes.len() != len {
            return Err(Fail::Retry(format!("bytes {start}-{last}: got {} bytes instead of {len}", bytes.len())));
        }
        Ok(bytes)
    }
}

impl ByteSource for HttpFile {
    fn describe(&self) -> String {
        self.url.clone()
    }

    async fn size(&self) -> Result<u64> {
        Ok(self.size)
    }

    /// `GET` with `Range: bytes=start-(start+len-1)`; network errors, 5xx and
    /// short bodies are retried after 1, 2, 4 and 8 s.
    async fn read(&self, start: u64, len: usize) -> Result<Vec<u8>> {
        let end = start.checked_add(len as u64).filter(|&e| e <= self.size).ok_or_else(|| {
            Error::msg(format!(
                "{}: bytes {start}..{} lie beyond its end ({} bytes)",
                self.url,
                start.saturating_add(len as u64),
                self.size
            ))
        })?;
        if len == 0 {
            return Ok(Vec::new());
        }
        debug_assert!(end > start);
        let scope = Scope::current()?;
        with_retries(&scope, &self.url, || self.read_once(&scope, start, len)).await
    }
}

/// Files the user picked (an `<input type=file>`, a dropped folder) or other Blobs,
/// by file name.
#[derive(Clone, Debug, Default)]
pub struct BlobFiles {
    files: HashMap<String, Entry>,
}

/// A name's Blob, or the paths that claim it at the same depth.
#[derive(Clone, Debug)]
struct Entry {
    blob: Option<Blob>,
    /// Path segments of the file that holds the name (1 for a plain file).
    depth: usize,
    /// The paths that claim the name at that depth (more than one: ambiguous).
    paths: Vec<String>,
}

impl BlobFiles {
    /// No files.
    pub fn new() -> BlobFiles {
        BlobFiles::default()
    }

    /// Files from a JavaScript array of `File` (a `FileList` turned into an array).
    /// A file is known by its name; from a picked folder (`webkitRelativePath`
    /// "model/sub/config.json") by the last segment, and when two files share a name
    /// the one nearer the top wins ("model/config.json" over "model/onnx/config.json";
    /// two at the same depth make [`FileSet::open`] of that name fail).
    pub fn from_files(files: &js_sys::Array) -> Result<BlobFiles> {
        let mut set = BlobFiles::new();
        for (i, item) in files.iter().enumerate() {
            let file: File =
                item.dyn_into().map_err(|v| Error::msg(format!("file {i} of the list is not a File: {v:?}")))?;
            let relative = Reflect::get(&file, &JsValue::from_str("webkitRelativePath"))
                .ok()
                .and_then(|v| v.as_string())
                .filter(|p| !p.is_empty());
            let path = relative.unwrap_or_else(|| file.name());
            let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
            let name = match segments.last() {
                Some(n) => n.to_string(),
                None => return Err(Error::msg(format!("file {i} of the list has no name"))),
            };
            set.add(&name, segments.len(), &path, file.into());
        }
        Ok(set)
    }

    /// Add (or replace) one Blob under `name`.
    pub fn insert(&mut self, name: &str, blob: Blob) {
        self.files.insert(name.to_string(), Entry { blob: Some(blob), depth: 1, paths: vec![name.to_string()] });
    }

    fn add(&mut self, name: &str, depth: usize, path: &str, blob: Blob) {
        match self.files.get_mut(name) {
            Some(e) if e.depth < depth => {}
            Some(e) if e.depth == depth => {
                e.blob = None;
                e.paths.push(path.to_string());
            }
            _ => {
                let entry = Entry { blob: Some(blob), depth, paths: vec![path.to_string()] };
                self.files.insert(name.to_string(), entry);
            }
        }
    }

    /// Every file name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.files.keys().cloned().collect();
        names.sort();
        names
    }
}

/// One file of a [`BlobFiles`].
#[derive(Clone, Debug)]
pub struct BlobFile {
    name: String,
    blob: Blob,
}

impl BlobFile {
    /// A Blob read under `name` (the name only shows in messages).
    pub fn new(name: &str, blob: Blob) -> BlobFile {
        BlobFile { name: name.to_string(), blob }
    }
}

impl FileSet for BlobFiles {
    type Source = BlobFile;

    /// The file `name`, None when there is none; an error when several files of the
    /// same depth are called that.
    async fn open(&self, name: &str) -> Result<Option<BlobFile>> {
        match self.files.get(name) {
            None => Ok(None),
            Some(Entry { blob: Some(blob), .. }) => Ok(Some(BlobFile::new(name, blob.clone()))),
            Some(Entry { paths, .. }) => {
                Err(Error::msg(format!("{name}: several of the chosen files have that name: {}", paths.join(", "))))
            }
        }
    }
}

impl ByteSource for BlobFile {
    fn describe(&self) -> String {
        self.name.clone()
    }

    async fn size(&self) -> Result<u64> {
        Ok(self.blob.size() as u64)
    }

    /// Reads only the slice asked for (`blob.slice(start, end).arrayBuffer()`).
    async fn read(&self, start: u64, len: usize) -> Result<Vec<u8>> {
        let size = self.blob.size() as u64;
        let end = start.checked_add(len as u64).filter(|&e| e <= size).ok_or_else(|| {
            Error::msg(format!(
                "{}: bytes {start}..{} lie beyond its end ({size} bytes)",
                self.name,
                start.saturating_add(len as u64)
            ))
        })?;
        if len == 0 {
            return Ok(Vec::new());
        }
        let fail = |e: &JsValue| {
            Error::msg(format!(
                "{}: cannot read bytes {start}..{end}: {} (was the file changed or moved after it was chosen?)",
                self.name,
                js_error(e)
            ))
        };
        let slice = self.blob.slice_with_f64_and_f64(start as f64, end as f64).map_err(|e| fail(&e))?;
        let buffer = JsFuture::from(slice.array_buffer()).await.map_err(|e| fail(&e))?;
        let bytes = Uint8Array::new(&buffer).to_vec();
        if bytes.len() != len {
            return Err(Error::msg(format!(
                "{}: bytes {start}..{end}: read {} bytes instead of {len} (was the file changed after it was chosen?)",
                self.name,
                bytes.len()
            )));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::files::read_all;
    use js_sys::Array;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    fn file(name: &str, bytes: &[u8]) -> File {
        let parts = Array::of1(&Uint8Array::from(bytes));
        File::new_with_u8_array_sequence(&parts, name).expect("File")
    }

    /// A File that claims a folder path, as from `<input webkitdirectory>`.
    fn file_in_folder(path: &str, bytes: &[u8]) -> File {
        let name = path.rsplit('/').next().unwrap_or(path);
        let f = file(name, bytes);
        let descriptor = js_sys::Object::new();
        Reflect::set(&descriptor, &"value".into(), &path.into()).expect("descriptor");
        js_sys::Object::define_property(&f, &"webkitRelativePath".into(), &descriptor);
        f
    }

    /// The origin of the test page (served by wasm-bindgen-test-runner from the crate root).
    fn origin() -> String {
        let location = Reflect::get(&js_sys::global(), &"location".into()).expect("location");
        Reflect::get(&location, &"origin".into()).expect("origin").as_string().expect("origin string")
    }

    #[wasm_bindgen_test]
    async fn blob_files_read_ranges() {
        let weights = pattern(100_003);
        let files = Array::of2(&file("model.safetensors", &weights), &file("config.json", b"{\"a\":1}"));
        let set = BlobFiles::from_files(&files).expect("from_files");
        assert_eq!(set.names(), ["config.json", "model.safetensors"]);
        let f = set.open("model.safetensors").await.expect("open").expect("present");
        assert_eq!(f.describe(), "model.safetensors");
        assert_eq!(f.size().await.expect("size"), 100_003);
        assert_eq!(f.read(0, 10).await.expect("read"), weights[..10]);
        assert_eq!(f.read(99_000, 1003).await.expect("read"), weights[99_000..]);
        assert_eq!(f.read(12_345, 0).await.expect("read"), Vec::<u8>::new());
        assert_eq!(f.read(100_003, 0).await.expect("empty read at the end"), Vec::<u8>::new());
        let cfg = set.open("config.json").await.expect("open").expect("present");
        assert_eq!(read_all(&cfg).await.expect("read_all"), b"{\"a\":1}");
        assert!(set.open("tokenizer.json").await.expect("open").is_none());
    }

    #[wasm_bindgen_test]
    async fn blob_files_read_past_end_errors() {
        let set = BlobFiles::from_files(&Array::of1(&file("w.bin", &pattern(1000)))).expect("from_files");
        let f = set.open("w.bin").await.expect("open").expect("present");
        let err = f.read(990, 11).await.expect_err("past the end");
        let msg = err.to_string();
        assert!(msg.contains("w.bin") && msg.contains("beyond its end") && msg.contains("1000 bytes"), "{msg}");
        assert!(f.read(u64::MAX, 2).await.is_err());
    }

    #[wasm_bindgen_test]
    async fn blob_files_from_a_folder() {
        let files = Array::new();
        files.push(&file_in_folder("Qwen/onnx/config.json", b"deep"));
        files.push(&file_in_folder("Qwen/config.json", b"top"));
        files.push(&file_in_folder("Qwen/a/tokenizer.json", b"a"));
        files.push(&file_in_folder("Qwen/b/tokenizer.json", b"b"));
        let set = BlobFiles::from_files(&files).expect("from_files");
        let cfg = set.open("config.json").await.expect("open").expect("present");
        assert_eq!(read_all(&cfg).await.expect("read"), b"top");
        let err = set.open("tokenizer.json").await.expect_err("ambiguous");
        assert!(err.to_string().contains("Qwen/a/tokenizer.json"), "{err}");
        let not_a_file = Array::of1(&JsValue::from_str("config.json"));
        assert!(BlobFiles::from_files(&not_a_file).is_err());
        let mut set = BlobFiles::new();
        let blob = Blob::new_with_u8_array_sequence(&Array::of1(&Uint8Array::from(&b"xyz"[..]))).expect("Blob");
        set.insert("x.bin", blob);
        let x = set.open("x.bin").await.expect("open").expect("present");
        assert_eq!(x.read(1, 2).await.expect("read"), b"yz");
    }

    #[wasm_bindgen_test]
    fn content_range_parsing() {
        assert_eq!(content_range_total("bytes 0-0/1234"), Some(1234));
        assert_eq!(content_range_total("bytes */0"), Some(0));
        assert_eq!(content_range_total("bytes 0-0/*"), None);
        assert_eq!(content_range_start("bytes 10-19/1234"), Some(10));
        assert_eq!(content_range_start("bytes */1234"), None);
        let files = HttpFiles::new("https://hf.co/org/m/resolve/main/");
        assert_eq!(files.url("a b/model.safetensors"), "https://hf.co/org/m/resolve/main/a%20b/model.safetensors");
    }

    /// wasm-bindgen-test-runner serves the crate root; its server answers a Range
    /// request with the whole file (200), which [`HttpFile`] accepts only for a read of
    /// the whole file. Should it one day honour Range, the ranged read must then be right.
    #[wasm_bindgen_test]
    async fn http_files_against_the_test_server() {
        let files = HttpFiles::new(origin());
        assert!(files.open("no-such-file.safetensors").await.expect("open").is_none());
        let f = files.open("Cargo.toml").await.expect("open").expect("Cargo.toml is served");
        assert!(f.describe().ends_with("/Cargo.toml"), "{}", f.describe());
        let size = f.size().await.expect("size");
        assert!(size > 100, "size {size}");
        let whole = read_all(&f).await.expect("whole file");
        assert_eq!(whole.len() as u64, size);
        assert!(whole.starts_with(b"[package]"), "{:?}", &whole[..20]);
        match f.read(1, 7).await {
            Ok(part) => assert_eq!(part, whole[1..8]),
            Err(e) => assert!(e.to_string().contains("ignores Range"), "{e}"),
        }
        let err = f.read(size - 2, 3).await.expect_err("past the end");
        assert!(err.to_string().contains("beyond its end"), "{err}");
    }

    /// A `blob:` URL answers Range requests in Chromium (206 with Content-Range):
    /// the ranged path end to end, without a server.
    #[wasm_bindgen_test]
    async fn http_files_ranges_over_a_blob_url() {
        let bytes = pattern(70_001);
        let blob = Blob::new_with_u8_array_sequence(&Array::of1(&Uint8Array::from(&bytes[..]))).expect("Blob");
        let url_class = Reflect::get(&js_sys::global(), &"URL".into()).expect("URL");
        let create: js_sys::Function =
            Reflect::get(&url_class, &"createObjectURL".into()).expect("fn").unchecked_into();
        let url = create.call1(&url_class, &blob).expect("object URL").as_string().expect("URL string");
        let (base, name) = url.rsplit_once('/').expect("blob URL has a '/'");
        let files = HttpFiles::new(base);
        let f = files.open(name).await.expect("open").expect("present");
        assert_eq!(f.size().await.expect("size"), 70_001);
        assert_eq!(f.read(0, 1).await.expect("read"), bytes[..1]);
        assert_eq!(f.read(65_000, 5001).await.expect("read"), bytes[65_000..]);
        assert_eq!(f.read(123, 4567).await.expect("read"), bytes[123..123 + 4567]);
        assert_eq!(read_all(&f).await.expect("read_all"), bytes);
        let revoke: js_sys::Function =
            Reflect::get(&url_class, &"revokeObjectURL".into()).expect("fn").unchecked_into();
        revoke.call1(&url_class, &url.as_str().into()).expect("revoke");
    }

    #[wasm_bindgen_test]
    async fn http_network_errors_are_retried_then_name_the_url() {
        // Chromium refuses port 1 at once: a network error each try.
        let files = HttpFiles::new("http://127.0.0.1:1/m");
        let err = files.open("config.json").await.expect_err("unreachable");
        let msg = err.to_string();
        assert!(msg.contains("http://127.0.0.1:1/m/config.json"), "{msg}");
        assert!(msg.contains("gave up after 5 attempts"), "{msg}");
    }
}
