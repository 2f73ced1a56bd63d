//! `webtune generate`: text from a model, with or without a LoRA adapter, streamed to stdout.

use crate::{gpu, input_err, lib_err, Fail};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct GenerateArgs {
    #[arg(long)]
    model: PathBuf,
    /// PEFT adapter directory (applied unmerged unless --merge)
    #[arg(long)]
    adapter: Option<PathBuf>,
    #[arg(long)]
    prompt: String,
    /// Wrap the prompt in the model's chat template with a generation prompt
    #[arg(long)]
    chat: bool,
    /// System message (with --chat)
    #[arg(long)]
    system: Option<String>,
    #[arg(long, default_value_t = 256)]
    max_new_tokens: usize,
    /// 0 = greedy
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// 0 = off
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Merge the adapter into a copy of the weights (faster per token)
    #[arg(long)]
    merge: bool,
}

pub async fn generate(a: GenerateArgs) -> Result<(), Fail> {
    use std::io::Write;
    let ckpt = webtune::formats::checkpoint::Checkpoint::open_dir(&a.model).map_err(input_err)?;
    webtune::formats::checkpoint::validate(&ckpt).map_err(input_err)?;
    let tok = webtune::data::tokenizer::Tokenizer::from_checkpoint(&ckpt).map_err(input_err)?;
    let prompt = if a.chat {
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(webtune::data::tokenizer::Message { role: "system".into(), content: s.clone() });
        }
        msgs.push(webtune::data::tokenizer::Message { role: "user".into(), content: a.prompt.clone() });
        tok.apply_chat_template(&msgs, true).map_err(input_err)?
    } else {
        a.prompt.clone()
    };
    let ids = tok.encode(&prompt, !a.chat).map_err(input_err)?;
    let gpu = gpu().await?;
    let model = webtune::model::Model::load(&gpu, &ckpt).map_err(lib_err)?;
    // The prompt's prefill runs the chosen matmul variant (decoding runs matrix-vector kernels);
    // tuned at 256 tokens, so the choice is shared with `train` and `grad` in the cache.
    if let Some(layer) = model.weights.layers.first() {
        crate::tune(&gpu, &model.cfg, 256, layer.proj[0].w.dtype).await;
    }
    let lora = match &a.adapter {
        Some(dir) => {
            let ad = webtune::formats::peft::Adapter::open_dir(dir).map_err(input_err)?;
            Some(webtune::model::lora::Lora::from_adapter(&gpu, &model.cfg, &ad).map_err(lib_err)?)
        }
        None => None,
    };
    let opts = webtune::generate::GenerateOptions {
        max_new_tokens: a.max_new_tokens,
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        seed: a.seed,
        eos_ids: tok.eos_ids().to_vec(),
        merge: a.merge,
    };
    let mut dec = tok.stream_decoder(true);
    let mut stdout = std::io::stdout();
    let t0 = webtune::platform::now_ms();
    let mut failed = None;
    let mut first_ms = None; // when the first new token came: the prompt's prefill
    let out = webtune::generate::generate(&gpu, &model, lora.as_ref(), &ids, &opts, &mut |id| {
        first_ms.get_or_insert_with(|| webtune::platform::now_ms() - t0);
        match dec.push(id) {
            Ok(text) => {
                if !text.is_empty() {
                    let _ = write!(stdout, "{text}");
                    let _ = stdout.flush();
                }
            }
            Err(e) => failed = Some(e.to_string()),
        }
        true
    })
    .await
    .map_err(lib_err)?;
    println!();
    if let Some(e) = failed {
        return Err(Fail(1, format!("decoding: {e}")));
    }
    let ms = webtune::platform::now_ms() - t0;
    let first = first_ms.unwrap_or(ms);
    // After the first token, each one is a decode step alone (the first also holds the prefill).
    let per_token = match out.len() {
        n if n > 1 => format!(", then {:.1} ms per token", (ms - first) / (n - 1) as f64),
        _ => String::new(),
    };
    eprintln!(
        "{} prompt tokens, {} new tokens in {:.2}s ({:.2} tok/s); the first after {:.2}s{per_token}",
        ids.len(),
        out.len(),
        ms / 1000.0,
        out.len() as f64 * 1000.0 / ms.max(1e-6),
        first / 1000.0
    );
    Ok(())
}
