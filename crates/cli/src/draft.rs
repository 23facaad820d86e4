//! `--draft`: which proposer drafts tokens for the engine. `ngram` is prompt lookup; its options
//! are `k` (most drafts per step) and `n` (suffix length matched), e.g. `ngram:k=4,n=3`.
//! Drafts never change an answer, only its speed.

use plumb_engine::{NgramConfig, NgramProposer, Proposer};

/// A proposer `--draft` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DraftSpec {
    Ngram(NgramConfig),
}

impl DraftSpec {
    pub fn proposer(&self) -> Box<dyn Proposer> {
        match *self {
            DraftSpec::Ngram(config) => Box::new(NgramProposer::new(config)),
        }
    }
}

impl std::fmt::Display for DraftSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DraftSpec::Ngram(c) => write!(f, "ngram:k={},n={}", c.k, c.n),
        }
    }
}

impl std::str::FromStr for DraftSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, opts) = s.split_once(':').unwrap_or((s, ""));
        if kind != "ngram" {
            return Err(format!("unknown draft proposer `{kind}` (expected ngram[:k=K,n=N])"));
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
