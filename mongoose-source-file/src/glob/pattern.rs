//! File-name globs: `*`, `?` and `[...]` classes, as a shell matches them.

use std::path::Path;

/// Whether `path` is a glob: its file name holds `*`, `?` or `[`.
pub fn is_glob(path: &Path) -> bool {
    path.file_name()
        .map(|name| name.to_string_lossy().contains(['*', '?', '[']))
        .unwrap_or(false)
}

/// Whether `name` matches the file-name glob `pattern`: `*` any run, `?` one
/// character, `[abc]`, `[a-z]`, `[!a-z]` (or `[^a-z]`) one character of (or not of)
/// the set.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let name: Vec<char> = name.chars().collect();
    let (mut p, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        let step = match pattern.get(p) {
            Some('*') => {
                star = Some((p, n));
                p += 1;
                continue;
            }
            Some('?') => Some(p + 1),
            Some('[') => match_class(&pattern, p, name[n]),
            Some(literal) if *literal == name[n] => Some(p + 1),
            _ => None,
        };
        match step {
            Some(next) => {
                p = next;
                n += 1;
            }
            None => match star {
                Some((star_p, star_n)) => {
                    p = star_p + 1;
                    n = star_n + 1;
                    star = Some((star_p, star_n + 1));
                }
                None => return false,
            },
        }
    }
    while pattern.get(p) == Some(&'*') {
        p += 1;
    }
    p == pattern.len()
}

/// Matches `c` against the class starting at `pattern[open] == '['`: the index after
/// the class when it matches. An unclosed `[` is a literal.
fn match_class(pattern: &[char], open: usize, c: char) -> Option<usize> {
    let mut i = open + 1;
    let negated = matches!(pattern.get(i), Some('!') | Some('^'));
    if negated {
        i += 1;
    }
    let first = i;
    let mut matched = false;
    while i < pattern.len() && (pattern[i] != ']' || i == first) {
        if i + 2 < pattern.len() && pattern[i + 1] == '-' && pattern[i + 2] != ']' {
            if pattern[i] <= c && c <= pattern[i + 2] {
                matched = true;
            }
            i += 3;
        } else {
            if pattern[i] == c {
                matched = true;
            }
            i += 1;
        }
    }
    if i >= pattern.len() {
        // no closing bracket: a literal '['
        return (c == '[').then_some(open + 1);
    }
    (matched != negated).then_some(i + 1)
}

/// One element of a file-name glob.
#[derive(Clone, Debug)]
enum Token {
    /// `*`: any run of characters.
    Star,
    /// `?`: one character.
    Any,
    /// A character that must be there.
    Literal(char),
    /// `[...]`: one character of (or, negated, not of) the ranges.
    Class {
        ranges: Vec<(char, char)>,
        negated: bool,
    },
}

impl Token {
    fn accepts(&self, c: char) -> bool {
        match self {
            Token::Star | Token::Any => true,
            Token::Literal(literal) => *literal == c,
            Token::Class { ranges, negated } => {
                ranges.iter().any(|(low, high)| *low <= c && c <= *high) != *negated
            }
        }
    }
}

/// The tokens of `pattern`, read as [`glob_matches`] reads it.
fn tokens(pattern: &str) -> Vec<Token> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut tokens = Vec::new();
    let mut p = 0;
    while p < chars.len() {
        match chars[p] {
            '*' => {
                tokens.push(Token::Star);
                p += 1;
            }
            '?' => {
                tokens.push(Token::Any);
                p += 1;
            }
            '[' => {
                let mut i = p + 1;
                let negated = matches!(chars.get(i), Some('!') | Some('^'));
                if negated {
                    i += 1;
                }
                let first = i;
                let mut ranges = Vec::new();
                while i < chars.len() && (chars[i] != ']' || i == first) {
                    if i + 2 < chars.len() && chars[i + 1] == '-' && chars[i + 2] != ']' {
                        ranges.push((chars[i], chars[i + 2]));
                        i += 3;
                    } else {
                        ranges.push((chars[i], chars[i]));
                        i += 1;
                    }
                }
                if i >= chars.len() {
                    // no closing bracket: a literal '['
                    tokens.push(Token::Literal('['));
                    p += 1;
                } else {
                    tokens.push(Token::Class { ranges, negated });
                    p = i + 1;
                }
            }
            literal => {
                tokens.push(Token::Literal(literal));
                p += 1;
            }
        }
    }
    tokens
}

/// The positions reachable from `states` without reading a character (past `*`s).
fn closure(tokens: &[Token], states: &mut Vec<usize>) {
    let mut i = 0;
    while i < states.len() {
        let state = states[i];
        if matches!(tokens.get(state), Some(Token::Star)) && !states.contains(&(state + 1)) {
            states.push(state + 1);
        }
        i += 1;
    }
    states.sort_unstable();
}

/// The positions after reading `c` from `states`.
fn step(tokens: &[Token], states: &[usize], c: char) -> Vec<usize> {
    let mut next = Vec::new();
    for &state in states {
        match tokens.get(state) {
            Some(Token::Star) => next.push(state),
            Some(token) if token.accepts(c) => next.push(state + 1),
            _ => {}
        }
    }
    next.dedup();
    closure(tokens, &mut next);
    next.dedup();
    next
}

/// Whether every file name `inner` matches is also matched by `outer` (a feed's
/// `rotated` glob that covers the feed's own glob would take every file for a
/// rotation: nothing would ever be read). Exact: both globs as automata, explored
/// over one character of each class of characters they tell apart.
pub fn glob_covers(outer: &str, inner: &str) -> bool {
    let (outer, inner) = (tokens(outer), tokens(inner));
    // the characters at which some token's answer can change, and one below them all
    let mut alphabet = vec!['\0'];
    for token in outer.iter().chain(inner.iter()) {
        let bounds: Vec<char> = match token {
            Token::Literal(c) => vec![*c],
            Token::Class { ranges, .. } => ranges
                .iter()
                .flat_map(|(low, high)| [*low, *high])
                .collect(),
            Token::Star | Token::Any => Vec::new(),
        };
        for bound in bounds {
            alphabet.push(bound);
            if let Some(after) = char::from_u32(bound as u32 + 1) {
                alphabet.push(after);
            }
        }
    }
    alphabet.sort_unstable();
    alphabet.dedup();
    let mut start_inner = vec![0];
    closure(&inner, &mut start_inner);
    let mut start_outer = vec![0];
    closure(&outer, &mut start_outer);
    let mut seen = std::collections::BTreeSet::new();
    let mut todo = vec![(start_inner, start_outer)];
    while let Some((states_inner, states_outer)) = todo.pop() {
        if !seen.insert((states_inner.clone(), states_outer.clone())) {
            continue;
        }
        let inner_accepts = states_inner.contains(&inner.len());
        let outer_accepts = states_outer.contains(&outer.len());
        if inner_accepts && !outer_accepts {
            return false;
        }
        for &c in &alphabet {
            let next_inner = step(&inner, &states_inner, c);
            if next_inner.is_empty() {
                continue;
            }
            todo.push((next_inner, step(&outer, &states_outer, c)));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_like_a_shell() {
        assert!(glob_matches("*.log", "a.log"));
        assert!(!glob_matches("*.log", "a.log.1"));
        assert!(glob_matches("app-?.log", "app-1.log"));
        assert!(glob_matches("app-[0-9].log", "app-7.log"));
        assert!(!glob_matches("app-[0-9].log", "app-x.log"));
        assert!(glob_matches("app-[!0-9].log", "app-x.log"));
        assert!(glob_matches("[ab]*", "b.txt"));
        assert!(!glob_matches("[ab]*", "c.txt"));
        assert!(glob_matches("a[", "a["));
        assert!(is_glob(Path::new("logs/*.log")));
        assert!(is_glob(Path::new("logs/app-[12].log")));
        assert!(!is_glob(Path::new("logs/app.log")));
    }

    #[test]
    fn a_glob_covers_another_when_it_matches_every_name_of_it() {
        assert!(glob_covers("*.log", "*.log"));
        assert!(glob_covers("*", "*.log"));
        assert!(glob_covers("*.log", "app-*.log"));
        assert!(glob_covers("*.lo?", "*.log"));
        assert!(glob_covers("app*", "app-[0-9].log"));
        assert!(glob_covers("[a-z]*", "app*"));
        assert!(glob_covers("[!0-9]*", "app*"));
        assert!(glob_covers("*.log", "[ab].log"));
        assert!(!glob_covers("app-*.log", "*.log"));
        assert!(!glob_covers("?.log", "*.log"));
        assert!(!glob_covers("*.log.*", "*.log"));
        assert!(!glob_covers("a*", "[ab]*"));
        assert!(!glob_covers("*.log", "*.lo?"));
        assert!(!glob_covers("[!a]*", "*"));
        // the rotations of a file are not the file
        assert!(!glob_covers("app.log.*", "app.log"));
        assert!(!glob_covers("app.log-*", "*.log"));
    }
}
