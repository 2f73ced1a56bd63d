//! The transformer: weight layout on the GPU, LoRA adapters, the block forward
//! and its MeSP backward, and the whole-model loss and gradients.
