//! Hugging Face `config.json` → [`ModelConfig`], the resolved configuration the
//! engine plans from. Supports Qwen2ForCausalLM and LlamaForCausalLM.
//!
//! (Parsing is filled in by `ModelConfig::from_json`.)

/// Which family a checkpoint belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Qwen2,
    Llama,
}

/// config.json resolved: every field the engine needs, defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    /// C: hidden_size
    pub hidden: usize,
    /// L: num_hidden_layers
    pub layers: usize,
    /// Hq: num_attention_heads
    pub heads: usize,
    /// Hkv: num_key_value_heads (GQA; = heads when absent)
    pub kv_heads: usize,
    /// D: head_dim (explicit, or hidden / heads)
    pub head_dim: usize,
    /// F: intermediate_size
    pub intermediate: usize,
    /// V: vocab_size
    pub vocab: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub tie_word_embeddings: bool,
    /// q, k, v projections have a bias (Qwen2 always; Llama when attention_bias).
    pub qkv_bias: bool,
    /// o projection has a bias (Llama with attention_bias).
    pub o_bias: bool,
    /// gate, up, down have a bias (Llama's mlp_bias).
    pub mlp_bias: bool,
    pub max_position_embeddings: usize,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// torch_dtype / dtype as written in config.json, if any (informational).
    pub dtype: Option<String>,
}
