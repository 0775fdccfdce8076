//! The byte-level line splitter.
//!
//! Lines end at the bytes `\n` or `\r`, and `\r\n` is one terminator. Neither byte
//! occurs inside a multi-byte UTF-8 sequence (nor in any ASCII-compatible encoding), so
//! splitting on bytes before decoding is exact, and a position is a count of bytes on
//! disk, never of decoded chars (book: guarantees/epochs-and-identity.md).

use std::borrow::Cow;

/// One line found by [`next_line`]: the length of its text and the bytes it consumed
/// (text plus terminator).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct LineSpan {
    /// Bytes of the line's text, before its terminator.
    pub text_len: usize,
    /// Bytes consumed: the text and its terminator (1 or 2 bytes).
    pub consumed: usize,
}

/// Finds the first complete line at the start of `bytes`.
///
/// `end_of_input` says no byte will ever follow `bytes` (the end of a once read). A
/// `\r` as the last byte is then the terminator of its line; otherwise the splitter
/// waits for the next byte, which may be the `\n` of a `\r\n`.
/// Returns `None` when `bytes` holds no complete line: the caller reads more, or, at
/// the end of a once read, counts the rest as unterminated.
#[inline]
pub fn next_line(bytes: &[u8], end_of_input: bool) -> Option<LineSpan> {
    let at = memchr::memchr2(b'\n', b'\r', bytes)?;
    if bytes[at] == b'\n' {
        return Some(LineSpan {
            text_len: at,
            consumed: at + 1,
        });
    }
    // a '\r': look at the byte after it
    match bytes.get(at + 1) {
        Some(b'\n') => Some(LineSpan {
            text_len: at,
            consumed: at + 2,
        }),
        Some(_) => Some(LineSpan {
            text_len: at,
            consumed: at + 1,
        }),
        None if end_of_input => Some(LineSpan {
            text_len: at,
            consumed: at + 1,
        }),
        None => None,
    }
}

/// Decodes a line's bytes as UTF-8, with U+FFFD for bytes that are not UTF-8.
#[inline]
pub fn decode_line(text: &[u8]) -> String {
    // the validating fast path first (much faster than the lossy decoder's chunking)
    match std::str::from_utf8(text) {
        Ok(valid) => valid.to_owned(),
        Err(_) => match String::from_utf8_lossy(text) {
            Cow::Borrowed(valid) => valid.to_owned(),
            Cow::Owned(replaced) => replaced,
        },
    }
}

/// Every line of `bytes` with the offset just after it, and the number of bytes left
/// after the last terminator.
///
/// The same splitting as the file source's (which splits across read buffers); used by
/// the fuzz targets and property tests, and handy for tools that read a whole file.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
pub struct SplitLines {
    /// `(text start, text end, offset after the terminator)` for each line.
    pub lines: Vec<(usize, usize, usize)>,
    /// Bytes after the last terminator (a partial line).
    pub rest: usize,
}

/// Splits a whole input (see [`SplitLines`]); `end_of_input` as for [`next_line`].
pub fn split_lines(bytes: &[u8], end_of_input: bool) -> SplitLines {
    let mut split = SplitLines::default();
    let mut start = 0;
    while let Some(span) = next_line(&bytes[start..], end_of_input) {
        split
            .lines
            .push((start, start + span.text_len, start + span.consumed));
        start += span.consumed;
    }
    split.rest = bytes.len() - start;
    split
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_terminator_ends_a_line_and_crlf_is_one() {
        let split = split_lines(b"a\nb\r\nc\rd", false);
        assert_eq!(split.lines, vec![(0, 1, 2), (2, 3, 5), (5, 6, 7)]);
        assert_eq!(split.rest, 1);
    }

    #[test]
    fn a_trailing_cr_waits_for_the_next_byte_unless_the_input_ended() {
        assert_eq!(next_line(b"abc\r", false), None);
        assert_eq!(
            next_line(b"abc\r", true),
            Some(LineSpan {
                text_len: 3,
                consumed: 4
            })
        );
    }

    #[test]
    fn invalid_utf8_decodes_to_replacement_characters() {
        assert_eq!(decode_line(b"caf\xe9"), "caf\u{fffd}");
        assert_eq!(decode_line("café".as_bytes()), "café");
    }
}
