//! Model files in and out: `webtune import` (GGUF to a Hugging Face directory), `make-gguf` (a
//! random GGUF of a preset's shape) and `dequantize` (the f32 weights a --weights format computes with).

use crate::{input_err, Fail};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ImportArgs {
    /// The .gguf file
    #[arg(long)]
    gguf: PathBuf,
    /// Output directory (created; refused if it already holds any of the files)
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
pub struct MakeGgufArgs {
    #[arg(long)]
    shape: String,
    /// The .gguf file to write (written as FILE.part, then renamed)
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

#[derive(clap::Args)]
pub struct DequantizeArgs {
    /// Hugging Face model directory
    #[arg(long)]
    model: PathBuf,
    /// bf16, q8 or q4
    #[arg(long)]
    weights: String,
    /// Output directory (config.json and model.safetensors)
    #[arg(long)]
    out: PathBuf,
}

pub fn import(a: ImportArgs) -> Result<(), Fail> {
    let ImportArgs { gguf, out } = a;
    let summary = webtune::formats::gguf::import_gguf_to_dir(&gguf, &out).map_err(input_err)?;
    eprintln!("{summary}; written to {}", out.display());
    Ok(())
}

pub fn make_gguf(a: MakeGgufArgs) -> Result<(), Fail> {
    let MakeGgufArgs { shape, out, seed } = a;
    let cfg = webtune::base::config::ModelConfig::preset(&shape).map_err(|e| Fail(2, format!("--shape: {e}")))?;
    let part = PathBuf::from(format!("{}.part", out.display()));
    let io = |p: &PathBuf, e: std::io::Error| Fail(1, format!("{}: {e}", p.display()));
    let mut w = std::io::BufWriter::new(std::fs::File::create(&part).map_err(|e| io(&part, e))?);
    let n = webtune::formats::gguf::write_random_model(&cfg, seed, &mut w).map_err(|e| io(&part, e))?;
    w.into_inner().map_err(|e| io(&part, e.into_error()))?.sync_all().map_err(|e| io(&part, e))?;
    std::fs::rename(&part, &out).map_err(|e| io(&out, e))?;
    eprintln!("{shape}: {n} bytes of random weights written to {}", out.display());
    Ok(())
}

pub fn dequantize(a: DequantizeArgs) -> Result<(), Fail> {
    let DequantizeArgs { model, weights, out } = a;
    let format =
        webtune::model::weights::WeightFormat::parse(&weights).map_err(|e| Fail(2, format!("--weights: {e}")))?;
    let ckpt = webtune::formats::checkpoint::Checkpoint::open_dir(&model).map_err(input_err)?;
    webtune::formats::checkpoint::validate(&ckpt).map_err(input_err)?;
    let tensors = webtune::model::weights::quantized_checkpoint_f32(&ckpt, format).map_err(input_err)?;
    let refs: Vec<(&str, &webtune::base::host::HostTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
    let io = |p: PathBuf, e: std::io::Error| Fail(1, format!("{}: {e}", p.display()));
    std::fs::create_dir_all(&out).map_err(|e| io(out.clone(), e))?;
    let p = out.join("model.safetensors");
    std::fs::write(&p, webtune::formats::safetensors::encode_safetensors(&refs)).map_err(|e| io(p.clone(), e))?;
    let src = model.join("config.json");
    let p = out.join("config.json");
    std::fs::copy(&src, &p).map_err(|e| io(src.clone(), e))?;
    eprintln!("{} tensors ({}) written to {}", refs.len(), format.name(), out.display());
    Ok(())
}
