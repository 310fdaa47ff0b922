//! `.gitignore` rules, matched by gitoxide: `info/exclude` first, then each directory's
//! `.gitignore` (deeper files win, as in git). The rule files come from wherever the caller reads
//! them — the work tree through the view, or HEAD's blobs — never from a path cordon follows.

use std::path::PathBuf;

use gix_glob::pattern::Case;
use gix_ignore::search::Ignore;
use gix_object::bstr::BStr;

/// The most bytes of one rule file cordon reads.
pub const MAX_RULES: usize = 1 << 20;

/// An ordered set of ignore rules.
#[derive(Default)]
pub struct Rules {
    search: gix_ignore::Search,
}

impl Rules {
    /// Adds the rules of the `.gitignore` in `dir` (the top for an empty `dir`): they apply
    /// below `dir` and win over every file added before.
    pub fn add(&mut self, dir: &[u8], bytes: &[u8]) {
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
    }

    /// Adds rules that apply to the whole tree (`info/exclude`).
    pub fn add_global(&mut self, bytes: &[u8]) {
        let _ = self.search.add_patterns_buffer(
            bytes,
            PathBuf::from("info/exclude"),
            None,
            Ignore::default(),
        );
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
        rules.add_global(b"*.log\n");
        rules.add(b"", b"target/\n/build\n*.tmp\n!keep.tmp\n");
        rules.add(b"sub", b"local.txt\n!important.log\n");
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
}
