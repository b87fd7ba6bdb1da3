//! Short strings kept per watched object, packed by their form: the watches' entries of a
//! fleet number tens of thousands (about twenty a `Clair`), and as `String`s each entry was
//! half a dozen allocations. A UID the apiserver issues is a UUID (16 bytes), a
//! resourceVersion a decimal integer, the operator's applied hash 16 hex digits (8 bytes
//! each); anything else (a hand-edited annotation, an aggregated API's version, a test's
//! name) is kept as its text. Packing is exact: [`Packed::to_string`] gives the text back,
//! and two texts pack equal only when they are equal.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Packed {
    /// A lower-case, hyphenated UUID.
    Uuid([u8; 16]),
    /// A positive decimal integer without leading zeros (a resourceVersion).
    Integer(u64),
    /// Exactly 16 lower-case hex digits (the applied hash).
    Hex([u8; 8]),
    Text(Box<str>),
}

impl Packed {
    pub fn of(text: &str) -> Packed {
        uuid(text)
            .map(Packed::Uuid)
            .or_else(|| integer(text).map(Packed::Integer))
            .or_else(|| hex::<8>(text).map(Packed::Hex))
            .unwrap_or_else(|| Packed::Text(text.into()))
    }

    /// Whether this is `text`, packed.
    pub fn is(&self, text: &str) -> bool {
        *self == Packed::of(text)
    }

    /// `versions::at_least` for packed resourceVersions: integers compare, anything else
    /// (an integer past 64 bits included) is only equal to itself.
    pub fn at_least(&self, than: &Packed) -> bool {
        match (self, than) {
            (Packed::Integer(version), Packed::Integer(than)) => version >= than,
            _ => self == than,
        }
    }

    /// Whether this resourceVersion is known to be older than `than`: both integers, this
    /// one the smaller. Versions that do not compare are never known to be older.
    pub fn older_than(&self, than: &Packed) -> bool {
        matches!((self, than), (Packed::Integer(version), Packed::Integer(than)) if version < than)
    }
}

impl fmt::Display for Packed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Packed::Uuid(bytes) => {
                for (i, b) in bytes.iter().enumerate() {
                    if matches!(i, 4 | 6 | 8 | 10) {
                        f.write_str("-")?;
                    }
                    write!(f, "{b:02x}")?;
                }
                Ok(())
            }
            Packed::Integer(n) => write!(f, "{n}"),
            Packed::Hex(bytes) => bytes.iter().try_for_each(|b| write!(f, "{b:02x}")),
            Packed::Text(text) => f.write_str(text),
        }
    }
}

fn uuid(text: &str) -> Option<[u8; 16]> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 || [8, 13, 18, 23].iter().any(|&i| bytes[i] != b'-') {
        return None;
    }
    let digits: String = text.split('-').collect();
    hex::<16>(&digits)
}

fn integer(text: &str) -> Option<u64> {
    super::versions::is_integer(text)
        .then(|| text.parse().ok())
        .flatten()
}

/// `N` bytes from exactly `2N` lower-case hex digits.
fn hex<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (i, pair) in bytes.chunks(2).enumerate() {
        out[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::Packed;

    #[test]
    fn each_form_packs_and_gives_its_text_back() {
        for (text, small) in [
            ("6f1c2b9e-8d4a-4c3b-9a7e-1f2e3d4c5b6a", true),
            ("123456789", true),
            ("0123456789abcdef", true),
            // Not its form exactly: kept as text, still equal only to itself.
            ("6F1C2B9E-8D4A-4C3B-9A7E-1F2E3D4C5B6A", false),
            ("0123", false),
            ("18446744073709551616", false),
            ("0123456789abcde", false),
            ("object-uid", false),
            ("", false),
        ] {
            let packed = Packed::of(text);
            assert_eq!(packed.to_string(), text, "{packed:?}");
            assert_eq!(!matches!(packed, Packed::Text(_)), small, "{text}");
            assert!(packed.is(text));
        }
        assert!(!Packed::of("10").is("010"));
        assert!(Packed::of("10").at_least(&Packed::of("9")));
        assert!(!Packed::of("9").at_least(&Packed::of("10")));
        assert!(Packed::of("a").at_least(&Packed::of("a")));
        assert!(!Packed::of("b").at_least(&Packed::of("a")));
        assert!(!Packed::of("0123456789abcdef").is("0123456789abcdee"));
    }

    #[test]
    fn an_entry_of_packed_strings_is_small() {
        assert!(std::mem::size_of::<Packed>() <= 24);
        assert_eq!(
            std::mem::size_of::<Option<Packed>>(),
            std::mem::size_of::<Packed>()
        );
    }
}
