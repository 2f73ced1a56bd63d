//! The crate's error type: every failure a user can cause or meet, with a
//! message that names the file, tensor, field or line.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Gpu(#[from] crate::gpu::GpuError),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Peft(#[from] crate::formats::peft::PeftError),
    #[error(transparent)]
    Batch(#[from] crate::formats::batch::BatchError),
    #[error(transparent)]
    Gguf(#[from] crate::formats::gguf::GgufError),
    #[error("{0}")]
    Msg(String),
}

impl Error {
    pub fn msg(s: impl Into<String>) -> Error {
        Error::Msg(s.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
