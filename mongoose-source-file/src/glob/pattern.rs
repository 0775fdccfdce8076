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
}
