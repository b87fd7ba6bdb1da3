//! Text from elsewhere (a server, a tenant's object) made fit for a condition, an Event or a
//! log line.

/// `text` cut to at most `max` bytes on a character boundary, `...` marking a cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(3);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_on_a_character_boundary() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("abcdefghij", 10), "abcdefghij");
        assert_eq!(cut("abcdefghijk", 10), "abcdefg...");
        // "é" is two bytes: a cut inside it moves before it.
        assert_eq!(cut("abcdeéfghij", 9), "abcde...");
        assert!(cut(&"€".repeat(1000), 100).len() <= 100);
    }
}
