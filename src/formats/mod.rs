//! File formats, bytes in and bytes out, no GPU: a Hugging Face checkpoint ([`checkpoint`]:
//! config.json with safetensors weights, single or sharded), safetensors itself, PEFT LoRA
//! adapters (adapter_config.json + adapter_model.safetensors, also used for gradient dumps),
//! the batch JSON of `webtune grad`, and GGUF (llama.cpp's format) converted to the Hugging
//! Face layout.

pub mod batch;
pub mod checkpoint;
pub mod gguf;
pub mod peft;
pub mod safetensors;
#[cfg(test)]
pub(crate) mod testdata;
