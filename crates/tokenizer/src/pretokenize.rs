//! Pre-tokenizers of byte-level BPE vocabularies: split text into words before BPE merges.
//! Named as GGUF's `tokenizer.ggml.pre` names them; each matches its Hugging Face counterpart.

use crate::TokenizerError;
use fancy_regex::Regex;

/// GPT-2's word pattern (Hugging Face `ByteLevel` with `use_regex`).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
/// Llama 3's pattern: case-insensitive contractions, numbers in groups of up to three.
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 2's pattern: like Llama 3 but every digit on its own.
const QWEN2: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Each pattern with the name plumb gives it, to recognize a `tokenizer.json` `Split` pre-tokenizer.
pub(crate) const NAMED_PATTERNS: [(&str, &str); 3] = [("gpt2", GPT2), ("llama3", LLAMA3), ("qwen2", QWEN2)];

/// The `tokenizer.ggml.pre` names plumb supports.
pub const SUPPORTED: &str = "default, gpt2, smollm, llama-bpe, llama3, qwen2";

/// A configured pre-tokenizer.
#[derive(Debug)]
pub struct PreTokenizer {
    /// Isolate each numeric character (Unicode N: `1`, `²`, `Ⅷ`, `①`) before the pattern runs, as
    /// Hugging Face's `Digits(individual_digits=True)` does.
    split_digits: bool,
    pattern: Regex,
}

impl PreTokenizer {
    pub fn new(pre: &str) -> Result<Self, TokenizerError> {
        let (split_digits, pattern) = match pre {
            "" | "default" | "gpt2" | "gpt-2" => (false, GPT2),
            "smollm" => (true, GPT2),
            "llama-bpe" | "llama3" | "llama-v3" => (false, LLAMA3),
            "qwen2" => (false, QWEN2),
            other => {
                return Err(TokenizerError::UnsupportedPreTokenizer(other.into(), SUPPORTED.into()));
            }
        };
        let pattern = Regex::new(pattern).expect("built-in pattern compiles");
        Ok(PreTokenizer { split_digits, pattern })
    }

    /// Calls `f` on each word of `text`, in order; the words concatenate back to `text`.
    pub fn for_each_word<'a>(&self, text: &'a str, mut f: impl FnMut(&'a str)) {
        if !self.split_digits {
            return self.split_pattern(text, &mut f);
        }
        let mut start = 0;
        for (i, c) in text.char_indices() {
            if c.is_numeric() {
                let end = i + c.len_utf8();
                self.split_pattern(&text[start..i], &mut f);
                f(&text[i..end]);
                start = end;
            }
        }
        self.split_pattern(&text[start..], &mut f);
    }

    fn split_pattern<'a>(&self, text: &'a str, f: &mut impl FnMut(&'a str)) {
        let mut last = 0;
        for m in self.pattern.find_iter(text) {
            // The patterns end in `\s+` and classes that cover every character, so matching
            // cannot fail on well-formed UTF-8; a backtracking-limit error falls back to one word.
            let Ok(m) = m else { break };
            if m.start() > last {
                f(&text[last..m.start()]);
            }
            f(m.as_str());
            last = m.end();
        }
        if last < text.len() {
            f(&text[last..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(pre: &str, text: &str) -> Vec<String> {
        let p = PreTokenizer::new(pre).unwrap();
        let mut out = Vec::new();
        p.for_each_word(text, |w| out.push(w.to_string()));
        out
    }

    #[test]
    fn gpt2_keeps_leading_space_on_words_and_splits_trailing_whitespace() {
        assert_eq!(words("gpt2", "Hello  world's 42\n"), ["Hello", " ", " world", "'s", " 42", "\n"]);
    }

    #[test]
    fn smollm_isolates_numeric_characters() {
        assert_eq!(words("smollm", "a 123 ²"), ["a", " ", "1", "2", "3", " ", "²"]);
    }

    #[test]
    fn unknown_pre_tokenizer_is_refused() {
        assert!(matches!(PreTokenizer::new("tekken"), Err(TokenizerError::UnsupportedPreTokenizer(..))));
    }
}
