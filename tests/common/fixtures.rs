//! The committed PyTorch + PEFT fixtures of tests/fixtures (scripts/make-fixtures.py): each
//! model's files, its LoRA adapter, a batch, and the float64 reference loss and gradients,
//! embedded at compile time so the same tests run natively and in the browser.

use std::collections::HashMap;
use webtune::formats::checkpoint::Checkpoint;
use webtune::formats::peft::Adapter;

pub struct Fixture {
    /// The directory under tests/fixtures.
    pub name: &'static str,
    /// config.json and the weights (one safetensors file, or shards with their index).
    pub model_files: Vec<(&'static str, &'static [u8])>,
    /// adapter/adapter_config.json
    pub adapter_config: &'static [u8],
    /// adapter/adapter_model.safetensors
    pub adapter_model: &'static [u8],
    /// batch.json: input_ids and labels.
    pub batch: &'static str,
    /// expected.safetensors: the float64 loss and LoRA gradients.
    pub expected: &'static [u8],
    /// expected-q4.safetensors (scripts/make-q4-fixture.py), where the fixture has one: the same
    /// reference on the weights `webtune dequantize --weights q4` writes.
    pub expected_q4: Option<&'static [u8]>,
}

macro_rules! fixture {
    ($name:literal, [$($file:literal),+]) => {
        Fixture {
            name: $name,
            model_files: vec![$(($file, include_bytes!(concat!("../fixtures/", $name, "/", $file)) as &[u8])),+],
            adapter_config: include_bytes!(concat!("../fixtures/", $name, "/adapter/adapter_config.json")),
            adapter_model: include_bytes!(concat!("../fixtures/", $name, "/adapter/adapter_model.safetensors")),
            batch: include_str!(concat!("../fixtures/", $name, "/batch.json")),
            expected: include_bytes!(concat!("../fixtures/", $name, "/expected.safetensors")),
            expected_q4: None,
        }
    };
}

/// Qwen2, untied, bf16; with a q4 reference.
pub fn qwen2_tiny() -> Fixture {
    Fixture {
        expected_q4: Some(include_bytes!("../fixtures/qwen2-tiny/expected-q4.safetensors")),
        ..fixture!("qwen2-tiny", ["config.json", "model.safetensors"])
    }
}

/// Llama, tied embeddings, f16, sharded in three files.
pub fn llama_tiny() -> Fixture {
    fixture!(
        "llama-tiny",
        [
            "config.json",
            "model.safetensors.index.json",
            "model-00001-of-00003.safetensors",
            "model-00002-of-00003.safetensors",
            "model-00003-of-00003.safetensors"
        ]
    )
}

/// Llama with biases, untied, f32: vocab 67, hidden 44, 3 layers, LoRA r = 5 on all seven
/// projections; with a q4 reference.
pub fn llama_bias() -> Fixture {
    Fixture {
        expected_q4: Some(include_bytes!("../fixtures/llama-bias/expected-q4.safetensors")),
        ..fixture!("llama-bias", ["config.json", "model.safetensors"])
    }
}

impl Fixture {
    /// The model's files by name, as `Checkpoint::from_files` takes them.
    pub fn files(&self) -> HashMap<String, Vec<u8>> {
        self.model_files.iter().map(|(n, b)| (n.to_string(), b.to_vec())).collect()
    }

    /// The model, opened (panics naming the fixture if it does not open).
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint::from_files(self.files()).unwrap_or_else(|e| panic!("{}: {e}", self.name))
    }

    /// The LoRA adapter (panics naming the fixture if it does not open).
    pub fn adapter(&self) -> Adapter {
        Adapter::from_files(self.adapter_config, self.adapter_model).unwrap_or_else(|e| panic!("{}: {e}", self.name))
    }
}
