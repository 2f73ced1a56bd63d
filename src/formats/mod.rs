//! File formats other than the base checkpoint: PEFT LoRA adapters
//! (adapter_config.json + adapter_model.safetensors, also used for gradient
//! dumps) and the batch JSON of `webtune grad`.

pub mod batch;
pub mod peft;
