//! Value parsers for count options (`-n`, `--threads`, `--ctx`, …): a negative or malformed
//! number gets a message saying what the option takes, instead of clap's "unexpected argument".
//! Options using them set `allow_negative_numbers`, so `-1` reaches the parser.

fn parse(s: &str, min: u64, what: &str) -> Result<u64, String> {
    match s.trim().parse::<i128>() {
        Ok(v) if v >= min as i128 && v <= u64::MAX as i128 => Ok(v as u64),
        Ok(_) if min == 0 => Err(format!("must be {what} (0 or more), got {s}")),
        Ok(_) => Err(format!("must be {what} (1 or more), got {s}")),
        Err(_) => Err(format!("must be {what}, got `{s}`")),
    }
}

/// 1 or more.
pub fn positive(s: &str) -> Result<usize, String> {
    parse(s, 1, "a positive integer").and_then(|v| usize::try_from(v).map_err(|e| e.to_string()))
}

/// 0 or more.
pub fn non_negative(s: &str) -> Result<usize, String> {
    parse(s, 0, "a non-negative integer").and_then(|v| usize::try_from(v).map_err(|e| e.to_string()))
}

/// 0 or more, 64 bits (seeds).
pub fn non_negative_u64(s: &str) -> Result<u64, String> {
    parse(s, 0, "a non-negative integer")
}

/// `"1 thread"`, `"2 threads"`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_say_what_they_take() {
        assert_eq!(positive("3"), Ok(3));
        assert_eq!(positive("-1").unwrap_err(), "must be a positive integer (1 or more), got -1");
        assert_eq!(positive("0").unwrap_err(), "must be a positive integer (1 or more), got 0");
        assert_eq!(non_negative("0"), Ok(0));
        assert_eq!(non_negative("-2").unwrap_err(), "must be a non-negative integer (0 or more), got -2");
        assert_eq!(non_negative("x").unwrap_err(), "must be a non-negative integer, got `x`");
        assert_eq!(non_negative_u64("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(plural(1, "thread", "threads"), "1 thread");
        assert_eq!(plural(2, "thread", "threads"), "2 threads");
    }
}
