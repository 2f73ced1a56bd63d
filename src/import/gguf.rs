//! A GGUF file seen as the Hugging Face checkpoint it converts to, for the importer: a
//! [`FileSet`] whose config.json and tokenizer files are made from the GGUF's metadata and whose
//! model.safetensors is virtual, made range by range as the importer reads it ([`HfView`]).
//!
//! Nothing holds the whole GGUF or the whole converted checkpoint: the header, metadata and
//! tensor infos are read from a prefix of the file (grown until they fit), the metadata is
//! dropped once the plan is made, and a read of model.safetensors converts only the units
//! (a few MiB of rows) it overlaps, each from its own byte range of the GGUF, keeping the last
//! unit for the next read. So the memory an import of a GGUF needs does not grow with the
//! model: one chunk being read, one unit being converted, the tokenizer files.

use super::files::{ByteSource, FileSet, MemoryFile};
use crate::base::error::{Error, Result};
use crate::base::names::SINGLE_FILE;
use crate::formats::gguf::{Gguf, HfView, Unit, UNIT_BYTES};
use std::cell::RefCell;
use std::rc::Rc;

/// The first read of a GGUF's start; doubled until the header, metadata and tensor infos fit.
const FIRST_READ: usize = 1 << 20;
/// A GGUF whose header, metadata and tensor infos take more than this is refused: read whole
/// before parsing, they bound the import's memory (a 150k-token vocabulary with its merges takes
/// about 5 MB, Llama 3's about 10).
pub const MAX_GGUF_HEADER: usize = 64 << 20;

/// One GGUF as a model's files.
pub struct GgufFiles<S> {
    inner: Rc<GgufWeights<S>>,
}

/// model.safetensors of a [`GgufFiles`] (shared by every opening of it).
pub struct GgufWeights<S> {
    view: HfView,
    src: S,
    /// The last unit converted.
    last: RefCell<Option<(Unit, Rc<Vec<u8>>)>>,
}

/// One file of a [`GgufFiles`].
pub enum GgufFile<S> {
    /// config.json, the tokenizer files, generation_config.json.
    Json(MemoryFile),
    /// model.safetensors.
    Weights(Rc<GgufWeights<S>>),
}

impl<S: ByteSource> GgufFiles<S> {
    /// Read `src`'s header, metadata and tensor infos and plan the conversion (everything is
    /// checked here: a GGUF the importer cannot convert is refused before anything is stored).
    pub async fn open(src: S) -> Result<GgufFiles<S>> {
        GgufFiles::open_with(src, FIRST_READ, UNIT_BYTES).await
    }

    /// [`GgufFiles::open`] with the first read's size and the conversion unit chosen (tests).
    pub async fn open_with(src: S, first_read: usize, unit_bytes: usize) -> Result<GgufFiles<S>> {
        let name = src.describe();
        let len = src.size().await?;
        let mut n = (first_read.max(64) as u64).min(len) as usize;
        let g = loop {
            let prefix = src.read(0, n).await?;
            match Gguf::parse_prefix(&prefix, len).map_err(|e| Error::msg(format!("{name}: {e}")))? {
                Some(g) => break g,
                None if (n as u64) < len && n < MAX_GGUF_HEADER => {
                    n = (n * 2).min(MAX_GGUF_HEADER).min(len as usize);
                }
                None => {
                    return Err(Error::msg(format!(
                        "{name}: its header, metadata and tensor infos take more than {} MiB",
                        MAX_GGUF_HEADER >> 20
                    )))
                }
            }
        };
        let view = HfView::new(g, unit_bytes).map_err(|e| Error::msg(format!("{name}: {e}")))?;
        Ok(GgufFiles { inner: Rc::new(GgufWeights { view, src, last: RefCell::new(None) }) })
    }

    /// What the conversion will make.
    pub fn view(&self) -> &HfView {
        &self.inner.view
    }
}

impl<S: ByteSource> FileSet for GgufFiles<S> {
    type Source = GgufFile<S>;
    async fn open(&self, name: &str) -> Result<Option<GgufFile<S>>> {
        if name == SINGLE_FILE {
            return Ok(Some(GgufFile::Weights(self.inner.clone())));
        }
        let json = self.inner.view.json_files().iter().find(|(n, _)| *n == name);
        Ok(json.map(|(n, bytes)| {
            GgufFile::Json(MemoryFile { name: n.to_string(), bytes: std::sync::Arc::new(bytes.clone()) })
        }))
    }
}

impl<S: ByteSource> GgufWeights<S> {
    /// `unit` in bf16: the last one again, or read and converted.
    async fn unit(&self, unit: Unit) -> Result<Rc<Vec<u8>>> {
        if let Some((u, bytes)) = self.last.borrow().as_ref() {
            if *u == unit {
                return Ok(bytes.clone());
            }
        }
        // Free the last unit before making the next (it is not needed again: reads go forward).
        self.last.borrow_mut().take();
        let (offset, len) = self.view.source_range(unit);
        let raw = self.src.read(offset, len).await?;
        let bytes =
            Rc::new(self.view.convert(unit, &raw).map_err(|e| Error::msg(format!("{}: {e}", self.src.describe())))?);
        *self.last.borrow_mut() = Some((unit, bytes.clone()));
        Ok(bytes)
    }
}

impl<S: ByteSource> ByteSource for GgufFile<S> {
    fn describe(&self) -> String {
        match self {
            GgufFile::Json(f) => f.describe(),
            GgufFile::Weights(inner) => format!("{} (as {SINGLE_FILE})", inner.src.describe()),
        }
    }

    async fn size(&self) -> Result<u64> {
        match self {
            GgufFile::Json(f) => f.size().await,
            GgufFile::Weights(inner) => Ok(inner.view.safetensors_len()),
        }
    }

    async fn read(&self, start: u64, len: usize) -> Result<Vec<u8>> {
        let inner = match self {
            GgufFile::Json(f) => return f.read(start, len).await,
            GgufFile::Weights(inner) => inner,
        };
        let view = &inner.view;
        let end = start.checked_add(len as u64).filter(|&e| e <= view.safetensors_len()).ok_or_else(|| {
            Error::msg(format!(
                "{}: bytes {start}..+{len} lie beyond its end ({} bytes)",
                self.describe(),
                view.safetensors_len()
            ))
        })?;
        let mut out = Vec::with_capacity(len);
        let head = view.head();
        if start < head.len() as u64 {
            out.extend_from_slice(&head[start as usize..end.min(head.len() as u64) as usize]);
        }
        for unit in view.units(start, end) {
            let bytes = inner.unit(unit).await?;
            let (u0, u1) = view.unit_range(unit);
            let (a, b) = (start.max(u0), end.min(u1));
            out.extend_from_slice(&bytes[(a - u0) as usize..(b - u0) as usize]);
        }
        debug_assert_eq!(out.len(), len);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    //! A GGUF seen as HF files: streamed conversion equals the whole file's, imports give the
    //! same manifest, and the tokenizer rebuilt from the metadata loads.
    use super::*;
    use crate::base::error::Result;
    use crate::data::Tokenizer;
    use crate::formats::checkpoint::{validate, Checkpoint};
    use crate::formats::gguf::tests::tiny_model;
    use crate::formats::gguf::{gguf_to_hf_files, write_random_model};
    use crate::import::files::MemoryFiles;
    use crate::import::{import_files, ImportOptions};
    use crate::platform::test;
    use crate::store::MemoryStore;

    #[test]
    fn converted_tokenizer_and_template_load() {
        for (arch, tied) in [("llama", true), ("llama", false), ("qwen2", true)] {
            let (bytes, _) = tiny_model(arch, tied);
            let files = gguf_to_hf_files(&mut std::io::Cursor::new(&bytes[..])).expect("converts");
            let ckpt = Checkpoint::from_files(files).expect("opens as a checkpoint");
            let tok = Tokenizer::from_checkpoint(&ckpt).expect("tokenizer loads");
            let id = |t: &str| tok.token_id(t).expect("in vocab");
            assert_eq!(tok.encode(" the", false).expect("enc"), vec![id("Ġthe")]);
            assert_eq!(tok.encode("the 12", false).expect("enc"), vec![id("t"), id("he"), id("Ġ"), id("1"), id("2")]);
            assert_eq!(tok.encode("<|im_start|>the", false).expect("enc"), vec![1, id("t"), id("he")]);
            assert_eq!(tok.decode(&tok.encode("naïve 42!", false).expect("enc"), false).expect("dec"), "naïve 42!");
            assert_eq!((tok.eos_ids(), tok.pad_id(), tok.added_prefix()), (&[2u32][..], Some(2), &[][..]));
            let chat = tok.apply_chat_template(&[crate::data::Message::new("user", "hi")], false).expect("template");
            assert_eq!(chat, "<|im_start|>hi<|im_end|>");
        }
    }

    /// Drive a future over memory files and a memory store: ready when first polled.
    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        use std::task::{Context, Poll, Waker};
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("a memory future was not ready at once"),
        }
    }

    /// A GGUF in memory that logs the length of every read.
    struct LoggedGguf {
        file: crate::import::files::MemoryFile,
        reads: std::rc::Rc<std::cell::RefCell<Vec<usize>>>,
    }

    impl crate::import::files::ByteSource for LoggedGguf {
        fn describe(&self) -> String {
            "tiny.gguf".into()
        }
        async fn size(&self) -> Result<u64> {
            self.file.size().await
        }
        async fn read(&self, start: u64, len: usize) -> Result<Vec<u8>> {
            self.reads.borrow_mut().push(len);
            self.file.read(start, len).await
        }
    }

    #[test]
    fn streamed_conversion_equals_the_whole_file_conversion() {
        for (arch, tied) in [("llama", true), ("llama", false), ("qwen2", true)] {
            let (bytes, _) = tiny_model(arch, tied);
            let whole = gguf_to_hf_files(&mut std::io::Cursor::new(&bytes[..])).expect("converts");
            for (first_read, unit_bytes) in [(64, 64), (1000, 256), (1 << 20, UNIT_BYTES)] {
                let reads = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
                let src = LoggedGguf {
                    file: MemoryFile { name: "tiny.gguf".into(), bytes: std::sync::Arc::new(bytes.clone()) },
                    reads: reads.clone(),
                };
                let files = run(GgufFiles::open_with(src, first_read, unit_bytes)).expect("opens");
                let header_reads = reads.borrow().len();
                assert!(first_read >= bytes.len() || header_reads > 1, "the prefix grew from {first_read} bytes");
                for (name, want) in &whole {
                    let f = run(files.open(name)).expect("opens").unwrap_or_else(|| panic!("{name} is served"));
                    assert_eq!(run(f.size()).expect("size"), want.len() as u64, "{name}");
                    // Whole, then in odd pieces that cut rows and units anywhere.
                    assert_eq!(&run(f.read(0, want.len())).expect("reads"), want, "{arch} {name}");
                    let mut at = 0;
                    for step in [1usize, 7, 100, 3, 513].iter().cycle() {
                        if at >= want.len() {
                            break;
                        }
                        let n = (*step).min(want.len() - at);
                        assert_eq!(run(f.read(at as u64, n)).expect("reads"), &want[at..at + n], "{name} at {at}");
                        at += n;
                    }
                    let e = run(f.read(want.len() as u64 - 1, 2)).expect_err("past the end").to_string();
                    assert!(e.contains("beyond its end"), "{e}");
                }
                // Source reads after the header: one unit's bytes each (8 rows of a permuted Q at most).
                let most = reads.borrow()[header_reads..].iter().copied().max().unwrap_or(0);
                assert!(unit_bytes >= 1 << 20 || most <= unit_bytes.max(8 * 64), "{most} bytes read at once");

                // The importer stores the same chunks from either.
                let (a, b) = (MemoryStore::new(), MemoryStore::new());
                let opts = ImportOptions { max_chunk: 1000, free_bytes: None };
                let ma = run(import_files(&a, "m", &files, &opts, &mut |_| {})).expect("streamed import");
                let mb = run(import_files(&b, "m", &MemoryFiles::new(whole.clone()), &opts, &mut |_| {}))
                    .expect("whole import");
                assert_eq!(ma, mb, "{arch}: same manifest");
            }
        }
        // A file that cannot be converted is refused at open, naming it.
        let (mut bad, _) = tiny_model("llama", true);
        bad.truncate(bad.len() - 10);
        let src = MemoryFile { name: "cut.gguf".into(), bytes: std::sync::Arc::new(bad) };
        let e = run(GgufFiles::open_with(src, 64, 64)).err().expect("refused").to_string();
        assert!(e.starts_with("cut.gguf: ") && e.contains("runs past the end of the file"), "{e}");
    }

    #[test]
    fn random_models_convert_at_preset_shapes() {
        for preset in ["smollm2-135m", "qwen2.5-0.5b"] {
            let mut cfg = crate::base::config::ModelConfig::preset(preset).expect("preset");
            (cfg.layers, cfg.vocab) = (1, 300);
            let mut bytes = Vec::new();
            let n = write_random_model(&cfg, 3, &mut bytes).expect("writes");
            assert_eq!(n, bytes.len() as u64);
            let files = gguf_to_hf_files(&mut std::io::Cursor::new(&bytes[..])).expect("converts");
            let ckpt = Checkpoint::from_files(files).expect("opens");
            validate(&ckpt).expect("every tensor with its shape");
            let got = ckpt.config();
            assert_eq!(
                (got.arch, got.hidden, got.heads, got.kv_heads, got.head_dim),
                (cfg.arch, cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim)
            );
            assert_eq!(
                (got.intermediate, got.vocab, got.qkv_bias, got.tie_word_embeddings),
                (cfg.intermediate, 300, cfg.qkv_bias, cfg.tie_word_embeddings)
            );
            let w = ckpt.tensor("model.layers.0.mlp.down_proj.weight").expect("present").to_f32();
            assert!(
                w.iter().all(|x| x.abs() <= 0.0501) && w.iter().any(|&x| x != 0.0),
                "{preset}: small random weights"
            );
            let tok = Tokenizer::from_checkpoint(&ckpt).expect("tokenizer loads");
            assert_eq!(tok.decode(&tok.encode("héllo 42", false).expect("enc"), false).expect("dec"), "héllo 42");
        }
    }
}
