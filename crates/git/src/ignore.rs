//! `.gitignore` rules, matched by gitoxide: `info/exclude` first, then each directory's
//! `.gitignore` (deeper files win, as in git). The rule files come from wherever the caller reads
//! them — the work tree through the view, or HEAD's blobs — never from a path cordon follows.

use std::path::PathBuf;

use gix_glob::pattern::Case;
use gix_ignore::search::Ignore;
use gix_object::bstr::BStr;

/// The most bytes of one rule file cordon reads.
pub const MAX_RULES: usize = 256 << 10;
/// The most rule bytes, and rules, of all files together: every path of the work tree is matched
/// against the rules that apply to it, so a step that wrote a `.gitignore` into each of many
/// directories must not buy the host hours of matching.
pub const MAX_RULE_BYTES: usize = 1 << 20;
pub const MAX_PATTERNS: usize = 10_000;

/// An ordered set of ignore rules, within [`MAX_RULE_BYTES`] and [`MAX_PATTERNS`].
#[derive(Default)]
pub struct Rules {
    search: gix_ignore::Search,
    bytes: usize,
    patterns: usize,
}

/// The rules of one file would take the set past its budget; nothing of the file was added.
#[derive(Debug, PartialEq, Eq)]
pub struct OverBudget;

impl Rules {
    /// Counts the rules of `bytes` against the budget.
    fn spend(&mut self, bytes: &[u8]) -> Result<(), OverBudget> {
        let patterns = bytes
            .split(|&b| b == b'\n')
            .filter(|line| {
                let line = line.trim_ascii();
                !line.is_empty() && !line.starts_with(b"#")
            })
            .count();
        if bytes.len() > MAX_RULES
            || self.bytes + bytes.len() > MAX_RULE_BYTES
            || self.patterns + patterns > MAX_PATTERNS
        {
            return Err(OverBudget);
        }
        self.bytes += bytes.len();
        self.patterns += patterns;
        Ok(())
    }

    /// Adds the rules of the `.gitignore` in `dir` (the top for an empty `dir`): they apply
    /// below `dir` and win over every file added before.
    pub fn add(&mut self, dir: &[u8], bytes: &[u8]) -> Result<(), OverBudget> {
        self.spend(bytes)?;
        let mut source = Vec::with_capacity(dir.len() + 11);
        if !dir.is_empty() {
            source.extend_from_slice(dir);
            source.push(b'/');
        }
        source.extend_from_slice(b".gitignore");
        let source = PathBuf::from(String::from_utf8_lossy(&source).into_owned());
        // Only a rule file without a parent fails here, and `source` always has one.
        let _ = self.search.add_patterns_buffer(
            bytes,
            source,
            Some(std::path::Path::new("")),
            Ignore::default(),
        );
        Ok(())
    }

    /// Adds rules that apply to the whole tree (`info/exclude`).
    pub fn add_global(&mut self, bytes: &[u8]) -> Result<(), OverBudget> {
        self.spend(bytes)?;
        let _ = self.search.add_patterns_buffer(
            bytes,
            PathBuf::from("info/exclude"),
            None,
            Ignore::default(),
        );
        Ok(())
    }

    /// Whether `path` itself is ignored (its parents are the walk's to check).
    pub fn ignored(&self, path: &[u8], is_dir: bool) -> bool {
        self.search
            .pattern_matching_relative_path(BStr::new(path), Some(is_dir), Case::Sensitive)
            .is_some_and(|m| !m.pattern.is_negative())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_follow_gits_precedence() {
        let mut rules = Rules::default();
        rules.add_global(b"*.log\n").unwrap();
        rules
            .add(b"", b"target/\n/build\n*.tmp\n!keep.tmp\n")
            .unwrap();
        rules.add(b"sub", b"local.txt\n!important.log\n").unwrap();
        for (path, is_dir, expected) in [
            (&b"x.log"[..], false, true),
            (b"sub/important.log", false, false),
            (b"other/important.log", false, true),
            (b"target", true, true),
            (b"target", false, false),
            (b"src/target", true, true),
            (b"build", true, true),
            (b"src/build", true, false),
            (b"a.tmp", false, true),
            (b"keep.tmp", false, false),
            (b"sub/local.txt", false, true),
            (b"local.txt", false, false),
            (b"src/main.rs", false, false),
        ] {
            assert_eq!(
                rules.ignored(path, is_dir),
                expected,
                "{}",
                String::from_utf8_lossy(path)
            );
        }
    }

    #[test]
    fn the_rules_of_all_files_together_are_bounded() {
        let mut rules = Rules::default();
        let file = b"*.a\n".repeat(MAX_PATTERNS / 4);
        for dir in [&b"a"[..], b"b", b"c", b"d"] {
            rules.add(dir, &file).unwrap();
        }
        // Comments and blank lines are no rules.
        rules.add(b"e", b"# a comment\n\n").unwrap();
        assert_eq!(rules.add(b"f", b"one.more\n"), Err(OverBudget));
        assert!(
            rules.ignored(b"d/x.a", false),
            "rules within the budget apply"
        );
        assert!(
            !rules.ignored(b"f/one.more", false),
            "an over-budget file adds nothing"
        );
        let mut bytes = Rules::default();
        assert_eq!(bytes.add(b"", &vec![b'#'; MAX_RULES + 1]), Err(OverBudget));
    }
}
