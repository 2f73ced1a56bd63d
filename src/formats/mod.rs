//! File formats other than the base checkpoint: PEFT LoRA adapters
//! (adapter_config.json + adapter_model.safetensors, also used for gradient
//! dumps), the batch JSON of `webtune grad`, and GGUF (llama.cpp's format), imported into the
//! Hugging Face layout.

pub mod batch;
pub mod gguf;
pub mod peft;
