//! `webtune tiny-model` (hidden): write the tests' tiny random Llama as a Hugging Face model directory.

use crate::Fail;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct TinyModelArgs {
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

pub fn tiny_model(a: TinyModelArgs) -> Result<(), Fail> {
    let TinyModelArgs { out, seed } = a;
    let io = |p: PathBuf, e: std::io::Error| Fail(1, format!("{}: {e}", p.display()));
    std::fs::create_dir_all(&out).map_err(|e| io(out.clone(), e))?;
    for (name, bytes) in crate::common::tiny_model_files(seed) {
        let p = out.join(name);
        std::fs::write(&p, bytes).map_err(|e| io(p.clone(), e))?;
    }
    eprintln!("the tiny model (seed {seed}) written to {}", out.display());
    Ok(())
}
