//! Stop strings over streamed text: generation ends where any stop string begins, and the stop
//! string itself is never emitted, even when it arrives split across tokens. Text that could be the
//! start of a stop string is held back until the next piece settles it.
//! Invariant: the concatenation of everything emitted is the full text cut before the first stop
//! string (or the full text when none occurs).

/// What [`StopMatcher::push`] lets through.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopStep {
    /// No stop string yet: emit this text (possibly empty; a possible stop prefix is held back).
    Continue(String),
    /// A stop string began: emit this text, then stop. `stop_idx` names the stop string.
    Stopped { text: String, stop_idx: usize },
}

/// Matches stop strings against text arriving in pieces.
#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings never match.
    pub fn new<S: Into<String>>(stops: impl IntoIterator<Item = S>) -> Self {
        StopMatcher { stops: stops.into_iter().map(Into::into).collect(), held: String::new() }
    }

    /// The stop strings, in the order given.
    pub fn stops(&self) -> &[String] {
        &self.stops
    }

    /// Adds the next piece of text; returns what may be emitted now.
    pub fn push(&mut self, piece: &str) -> StopStep {
        self.held.push_str(piece);
        let first = self
            .stops
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.is_empty())
            .filter_map(|(i, s)| self.held.find(s.as_str()).map(|pos| (pos, i)))
            .min();
        if let Some((pos, stop_idx)) = first {
            let text = self.held[..pos].to_string();
            self.held.clear();
            return StopStep::Stopped { text, stop_idx };
        }
        let keep = self.held_back_len();
        let text = self.held[..self.held.len() - keep].to_string();
        self.held.drain(..self.held.len() - keep);
        StopStep::Continue(text)
    }

    /// Ends the stream: the held-back text was not a stop string after all.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length of the longest suffix of the held text that is a proper prefix of a stop string.
    fn held_back_len(&self) -> usize {
        let held = &self.held;
        held.char_indices()
            .map(|(i, _)| &held[i..])
            .find(|tail| self.stops.iter().any(|s| s.len() > tail.len() && s.starts_with(tail)))
            .map_or(0, str::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` and returns (emitted text, index of the stop string hit).
    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<usize>) {
        let mut m = StopMatcher::new(stops.iter().copied());
        let mut out = String::new();
        for p in pieces {
            match m.push(p) {
                StopStep::Continue(t) => out.push_str(&t),
                StopStep::Stopped { text, stop_idx } => {
                    out.push_str(&text);
                    return (out, Some(stop_idx));
                }
            }
        }
        out.push_str(&m.finish());
        (out, None)
    }

    #[test]
    fn no_stops_passes_everything_through_at_once() {
        let mut m = StopMatcher::new(Vec::<String>::new());
        assert_eq!(m.push("hello"), StopStep::Continue("hello".into()));
        assert_eq!(m.finish(), "");
    }

    #[test]
    fn stop_inside_one_piece_cuts_before_it() {
        assert_eq!(run(&["END"], &["abc END def"]), ("abc ".into(), Some(0)));
    }

    #[test]
    fn stop_split_across_pieces_is_never_emitted() {
        let mut m = StopMatcher::new(["\n\nUser:"]);
        assert_eq!(m.push("Hi.\n"), StopStep::Continue("Hi.".into()));
        assert_eq!(m.push("\nUs"), StopStep::Continue(String::new()));
        assert_eq!(m.push("er: next"), StopStep::Stopped { text: String::new(), stop_idx: 0 });
    }

    #[test]
    fn a_false_start_is_released_when_it_stops_matching() {
        let mut m = StopMatcher::new(["STOP"]);
        assert_eq!(m.push("ST"), StopStep::Continue(String::new()));
        assert_eq!(m.push("ART"), StopStep::Continue("START".into()));
        assert_eq!(run(&["STOP"], &["a S", "T", "O"]), ("a STO".into(), None));
    }

    #[test]
    fn earliest_stop_wins_across_several() {
        assert_eq!(run(&["world", "lo"], &["hello world"]), ("hel".into(), Some(1)));
        // "abc" starts before "b" does, though "b" is complete in the same piece.
        assert_eq!(run(&["b", "abc"], &["xa", "bc"]), ("x".into(), Some(1)));
    }

    #[test]
    fn overlapping_prefixes_hold_back_the_longest_candidate() {
        // "aab" contains "ab" only after "a" was held: the held "a" must not be emitted early.
        assert_eq!(run(&["ab"], &["a", "a", "b"]), ("a".into(), Some(0)));
        assert_eq!(run(&["aab"], &["a", "a", "a", "b"]), ("a".into(), Some(0)));
    }

    #[test]
    fn multibyte_text_is_cut_on_character_boundaries() {
        assert_eq!(run(&["né"], &["café n", "é!"]), ("café ".into(), Some(0)));
        assert_eq!(run(&["日本"], &["こんにちは日", "曜"]), ("こんにちは日曜".into(), None));
    }

    #[test]
    fn empty_stop_strings_never_match() {
        assert_eq!(run(&[""], &["abc"]), ("abc".into(), None));
    }

    #[test]
    fn any_split_of_the_text_gives_the_same_output() {
        let text = "one two <|end|> three";
        let whole = run(&["<|end|>"], &[text]);
        assert_eq!(whole, ("one two ".into(), Some(0)));
        for cut in 1..text.len() {
            let pieces = [&text[..cut], &text[cut..]];
            assert_eq!(run(&["<|end|>"], &pieces), whole, "split at {cut}");
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let pieces: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(&["<|end|>"], &pieces), whole);
    }
}
