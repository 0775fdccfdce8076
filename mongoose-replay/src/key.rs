//! Stream keys: which stream of a recording belongs to which processor build.
//!
//! book: running/record-and-replay.md, Stream keys: the first processor of a
//! name built in a group records under the bare name, later ones under `name#2`,
//! `name#3`, ...; a `#` in a name is doubled first, so keys never alias.

use std::collections::HashMap;
use std::fmt;
use std::fmt::Write as _;

use crate::error::ReplayError;

/// The key of the stream recorded by the `ordinal`-th build of processor `name` in its
/// group: the name with every `#` doubled, then `#ordinal` for builds after the first.
///
/// `stream_key("pricer", 1)` is `pricer`, `stream_key("pricer", 2)` is `pricer#2`, and
/// `stream_key("p#2", 1)` is `p##2`, which never aliases `stream_key("p", 2)`.
///
/// # Panics
///
/// When `ordinal` is 0: build ordinals start at 1.
pub fn stream_key(name: &str, ordinal: u32) -> String {
    assert!(
        ordinal >= 1,
        "build ordinals start at 1, got 0 for {name:?}"
    );
    let mut key = String::with_capacity(name.len() + 4);
    for character in name.chars() {
        if character == '#' {
            key.push_str("##");
        } else {
            key.push(character);
        }
    }
    if ordinal > 1 {
        // writing to a String cannot fail
        let _ = write!(key, "#{ordinal}");
    }
    key
}

/// The inverse of [`stream_key`]: the processor name and build ordinal of a key.
///
/// Refuses ([`ReplayError::InvalidStreamKey`]) every key that [`stream_key`] never
/// produces: a single `#` not followed by a canonical ordinal of 2 or more up to the end
/// (`p#`, `p#1`, `p#02`, `p#2x`, `a#b`). Such a key is an ambiguous legacy key, and a
/// replay stops that processor rather than guess.
pub fn parse_stream_key(key: &str) -> Result<(String, u32), ReplayError> {
    let refuse = |reason| ReplayError::InvalidStreamKey {
        key: key.to_owned(),
        reason,
    };
    let mut name = String::with_capacity(key.len());
    let mut rest = key;
    loop {
        let Some(hash) = rest.find('#') else {
            name.push_str(rest);
            return Ok((name, 1));
        };
        name.push_str(&rest[..hash]);
        let after = &rest[hash + 1..];
        if let Some(escaped_rest) = after.strip_prefix('#') {
            name.push('#');
            rest = escaped_rest;
            continue;
        }
        if after.is_empty() {
            return Err(refuse("it ends with a single #"));
        }
        if !after.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(refuse(
                "a single # is followed by something other than an ordinal",
            ));
        }
        if after.starts_with('0') {
            return Err(refuse("the ordinal after # has a leading zero"));
        }
        let ordinal: u32 = after
            .parse()
            .map_err(|_| refuse("the ordinal after # is too large"))?;
        if ordinal < 2 {
            return Err(refuse(
                "the ordinal after # is 1 (a first build has no suffix)",
            ));
        }
        return Ok((name, ordinal));
    }
}

/// A stream key with the processor name and build ordinal it stands for.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct StreamKey {
    name: String,
    ordinal: u32,
    key: String,
}

impl StreamKey {
    /// The key of the `ordinal`-th build of `name` (see [`stream_key`]).
    ///
    /// # Panics
    ///
    /// When `ordinal` is 0.
    pub fn new(name: &str, ordinal: u32) -> Self {
        StreamKey {
            name: name.to_owned(),
            ordinal,
            key: stream_key(name, ordinal),
        }
    }

    /// Parses a key (see [`parse_stream_key`]).
    pub fn parse(key: &str) -> Result<Self, ReplayError> {
        let (name, ordinal) = parse_stream_key(key)?;
        Ok(StreamKey {
            name,
            ordinal,
            key: key.to_owned(),
        })
    }

    /// The processor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The build ordinal: 1 for the first build of the name in its group.
    pub fn ordinal(&self) -> u32 {
        self.ordinal
    }

    /// The key the stream is recorded under.
    pub fn key(&self) -> &str {
        &self.key
    }
}

impl fmt::Display for StreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key)
    }
}

/// Numbers the builds of each processor name in one group, so each build records under
/// its own key.
///
/// Only builds that happened take a number: an add that was refused, cancelled or never
/// built calls nothing here (it may look at [`StreamKeys::next_key`]), so keys do not
/// depend on reproducing refusals, and the names are numbered independently.
#[derive(Clone, Default, Debug)]
pub struct StreamKeys {
    builds: HashMap<String, u32>,
}

impl StreamKeys {
    /// An allocator with no builds.
    pub fn new() -> Self {
        StreamKeys::default()
    }

    /// The key the next build of `name` would record under. Takes no number.
    pub fn next_key(&self, name: &str) -> StreamKey {
        StreamKey::new(name, self.builds(name) + 1)
    }

    /// Records that a processor named `name` was built, and returns the key its stream
    /// records under.
    pub fn built(&mut self, name: &str) -> StreamKey {
        let count = self.builds.entry(name.to_owned()).or_insert(0);
        *count += 1;
        StreamKey::new(name, *count)
    }

    /// How many processors named `name` were built.
    pub fn builds(&self, name: &str) -> u32 {
        self.builds.get(name).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    // book: running/record-and-replay.md, Stream keys: p#2's first build is p##2
    #[test]
    fn the_first_build_of_p_hash_2_never_aliases_the_second_build_of_p() {
        assert_eq!(stream_key("p#2", 1), "p##2");
        assert_eq!(stream_key("p", 2), "p#2");
        assert_eq!(parse_stream_key("p##2").unwrap(), ("p#2".to_owned(), 1));
        assert_eq!(parse_stream_key("p#2").unwrap(), ("p".to_owned(), 2));
        assert_eq!(stream_key("p#", 2), "p###2");
        assert_eq!(parse_stream_key("p###2").unwrap(), ("p#".to_owned(), 2));
    }

    // book: running/record-and-replay.md, Stream keys
    #[test]
    fn the_first_build_records_under_the_bare_name_and_later_ones_under_a_suffix() {
        assert_eq!(stream_key("pricer", 1), "pricer");
        assert_eq!(stream_key("pricer", 2), "pricer#2");
        assert_eq!(stream_key("pricer", 13), "pricer#13");
        assert_eq!(
            parse_stream_key("pricer").unwrap(),
            ("pricer".to_owned(), 1)
        );
    }

    // book: running/record-and-replay.md, Replay failures from keys: a legacy
    // key that is ambiguous because of an unescaped # stops the replay
    #[test]
    fn a_key_that_no_build_produces_is_refused_as_an_ambiguous_legacy_key() {
        for key in [
            "p#",
            "p#1",
            "p#0",
            "p#02",
            "p#2x",
            "a#b",
            "#",
            "p#99999999999",
        ] {
            let error = parse_stream_key(key).expect_err(key);
            assert!(
                error.to_string().starts_with("ambiguous legacy stream key"),
                "{key}: {error}"
            );
        }
    }

    // book: running/record-and-replay.md, Stream keys: an add that was refused,
    // cancelled or never built uses no number; names are numbered independently
    #[test]
    fn a_refused_add_takes_no_number_and_other_names_do_not_shift_the_count() {
        let mut keys = StreamKeys::new();
        // an add of "p" is planned, looked at, then refused: it takes no number
        assert_eq!(keys.next_key("p").key(), "p");
        assert_eq!(keys.next_key("p").key(), "p");
        assert_eq!(keys.built("p").key(), "p");
        assert_eq!(keys.built("q").key(), "q");
        let second = keys.built("p");
        assert_eq!(
            (second.key(), second.name(), second.ordinal()),
            ("p#2", "p", 2)
        );
        assert_eq!(keys.built("p#2").key(), "p##2");
        assert_eq!(keys.builds("p"), 2);
        assert_eq!(keys.next_key("p").key(), "p#3");
    }

    proptest! {
        // book: running/record-and-replay.md, Stream keys: keys never alias
        #[test]
        fn every_key_parses_back_to_its_name_and_ordinal(
            name in "[a-z#0-9]{0,8}",
            ordinal in 1u32..=u32::MAX,
        ) {
            let key = stream_key(&name, ordinal);
            prop_assert_eq!(parse_stream_key(&key).unwrap(), (name, ordinal));
        }

        #[test]
        fn two_different_builds_never_share_a_key(
            first in ("[a#2]{0,5}", 1u32..5),
            second in ("[a#2]{0,5}", 1u32..5),
        ) {
            prop_assume!(first != second);
            prop_assert_ne!(stream_key(&first.0, first.1), stream_key(&second.0, second.1));
        }
    }
}
