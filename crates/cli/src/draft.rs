//! Which proposer drafts tokens for the engine. `--draft ngram[:k=4,n=3]` is prompt lookup (`k`:
//! most drafts per step, `n`: suffix length matched); `--draft-model PATH [--draft-k K]` drafts
//! with a smaller model that shares the target's tokenizer. Drafts never change an answer, only
//! its speed.

use crate::session::{ModelArgs, OpenBackend};
use anyhow::{Context, Result};
use plumb_checkpoint::Checkpoint;
use plumb_engine::{DraftModelConfig, Engine, ModelProposer, NgramConfig, NgramProposer, Proposer, load};
use plumb_tokenizer::Tokenizer;

/// Most drafts per step of a draft model unless `--draft-k` says otherwise.
pub const DEFAULT_DRAFT_K: usize = 4;

/// A proposer the command line names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DraftSpec {
    Ngram(NgramConfig),
    /// A draft model (a path or a known model name) and its drafts per step.
    Model {
        model: String,
        k: usize,
    },
}

impl DraftSpec {
    /// What `--draft`, `--draft-model` and `--draft-k` ask for (None: no drafts).
    pub fn from_args(args: &ModelArgs) -> Result<Option<DraftSpec>> {
        match (&args.draft, &args.draft_model) {
            (Some(_), Some(_)) => anyhow::bail!("--draft and --draft-model are two proposers: pick one"),
            (Some(spec), None) => {
                if args.draft_k.is_some() {
                    anyhow::bail!("--draft-k goes with --draft-model (an n-gram proposer takes ngram:k=K)");
                }
                Ok(Some(spec.clone()))
            }
            (None, Some(model)) => {
                let k = args.draft_k.unwrap_or(DEFAULT_DRAFT_K);
                if !(1..=16).contains(&k) {
                    anyhow::bail!("--draft-k {k} is outside 1..=16");
                }
                Ok(Some(DraftSpec::Model { model: model.clone(), k }))
            }
            (None, None) if args.draft_k.is_some() => anyhow::bail!("--draft-k needs --draft-model"),
            (None, None) => Ok(None),
        }
    }

    /// The proposer for `engine`, whose model's tokenizer is `tokenizer`. A draft model is loaded
    /// onto the engine's backend; it must share the tokenizer, token for token.
    pub fn proposer<B: OpenBackend>(&self, engine: &Engine<B>, tokenizer: &Tokenizer) -> Result<Box<dyn Proposer<B>>> {
        let (model, k) = match self {
            DraftSpec::Ngram(config) => return Ok(Box::new(NgramProposer::new(*config))),
            DraftSpec::Model { model, k } => (model, *k),
        };
        let path = crate::resolve_model(Some(model))?;
        let context = || format!("loading the draft model {}", path.display());
        let file = Checkpoint::open(&path).with_context(context)?;
        crate::session::check_architecture(file.as_ref()).with_context(context)?;
        let draft_tokenizer = load::checkpoint_tokenizer(file.as_ref()).with_context(context)?;
        same_tokenizer(tokenizer, &draft_tokenizer).with_context(context)?;
        let draft = plumb_models::load_model(&file, engine.backend()).with_context(context)?;
        let target = engine.scheduler_config();
        // Room for every lane's whole context plus its drafts.
        let per_lane_extra = k.div_ceil(target.block_size) + 1;
        let config = DraftModelConfig {
            k,
            block_size: target.block_size,
            num_blocks: target.num_blocks + target.max_lanes * per_lane_extra,
            max_batch_tokens: target.max_batch_tokens,
        };
        let vocab = engine.model().config().vocab_size;
        Ok(Box::new(ModelProposer::new(engine.backend(), draft, vocab, config).with_context(context)?))
    }
}

/// Drafts are token ids: they mean the same to both models only if both tokenizers agree on
/// every token.
fn same_tokenizer(target: &Tokenizer, draft: &Tokenizer) -> Result<()> {
    if target.vocab_size() != draft.vocab_size() {
        anyhow::bail!(
            "its tokenizer has {} tokens and the target's {}: a draft model must share the target's tokenizer",
            draft.vocab_size(),
            target.vocab_size()
        );
    }
    for id in 0..target.vocab_size() as u32 {
        let (a, b) = (target.token_bytes(id).ok(), draft.token_bytes(id).ok());
        if a != b || target.is_special(id) != draft.is_special(id) {
            anyhow::bail!(
                "its tokenizer differs from the target's at token {id}: a draft model must share the tokenizer"
            );
        }
    }
    Ok(())
}

impl std::fmt::Display for DraftSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DraftSpec::Ngram(c) => write!(f, "ngram:k={},n={}", c.k, c.n),
            DraftSpec::Model { model, k } => write!(f, "model:{model}:k={k}"),
        }
    }
}

impl std::str::FromStr for DraftSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, opts) = s.split_once(':').unwrap_or((s, ""));
        if kind != "ngram" {
            return Err(format!(
                "unknown draft proposer `{kind}` (expected ngram[:k=K,n=N]; a draft model is --draft-model PATH)"
            ));
        }
        let mut config = NgramConfig::default();
        for opt in opts.split(',').filter(|o| !o.is_empty()) {
            let (key, value) = opt.split_once('=').ok_or_else(|| format!("draft option `{opt}` is not key=value"))?;
            let value: usize = value.parse().map_err(|_| format!("draft option {key}={value} is not a count"))?;
            match key {
                "k" if (1..=16).contains(&value) => config.k = value,
                "n" if (1..=16).contains(&value) => config.n = value,
                "k" | "n" => return Err(format!("draft option {key}={value} is outside 1..=16")),
                _ => return Err(format!("unknown draft option `{key}` (expected k or n)")),
            }
        }
        Ok(DraftSpec::Ngram(config))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_with_defaults_and_refuse_nonsense() {
        assert_eq!("ngram".parse(), Ok(DraftSpec::Ngram(NgramConfig { k: 4, n: 3 })));
        assert_eq!("ngram:k=8".parse(), Ok(DraftSpec::Ngram(NgramConfig { k: 8, n: 3 })));
        assert_eq!("ngram:n=2,k=1".parse::<DraftSpec>().unwrap().to_string(), "ngram:k=1,n=2");
        for bad in ["model", "ngram:k=0", "ngram:k", "ngram:x=1", "ngram:k=a"] {
            assert!(bad.parse::<DraftSpec>().is_err(), "{bad}");
        }
    }
}
