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
/// The most matching work of one snapshot, in [`Rules::cost`]'s units. Within the byte and rule
/// budgets, 10,000 rules of many `*` against a work tree of long names would still cost the host
/// hours; this keeps the worst case to about ten seconds (measured: at most ~10 ns per rule and
/// byte of the text a wildcard rule is matched against, which [`WILDCARD`] units cover) while a
/// million-file tree under a few hundred ordinary rules stays well inside it.
pub const MAX_MATCHING: u64 = 1 << 36;
/// The units of one wildcard rule per byte of text it is matched against (a literal rule, or
/// `*.ext`, which gitoxide compares without wildmatch, is one).
const WILDCARD: u64 = 64;
/// The units of one rule file's list per path (gitoxide compares its base with every path;
/// measured ~3 ns, so 80,000 empty `.gitignore` files no longer cost minutes for free).
const LIST: u64 = 24;
/// The units per byte of finding a path's directories with rules (a comparison or a hash).
const LOOKUP: u64 = 8;

/// An ordered set of ignore rules, within [`MAX_RULE_BYTES`] and [`MAX_PATTERNS`].
#[derive(Default)]
pub struct Rules {
    search: gix_ignore::Search,
    bytes: usize,
    patterns: usize,
    /// Rule files added (each one a list gitoxide looks at for every path).
    lists: u64,
    /// The matching weight of the rules of each directory (`""`: the top and `info/exclude`).
    weights: std::collections::HashMap<Vec<u8>, Weight>,
}

/// What the rules of one directory weigh per byte of the text they are matched against: rules
/// without a `/` are matched against a path's last component, the others against the path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Weight {
    name: u64,
    path: u64,
}

/// The rules of one file would take the set past its budget; nothing of the file was added.
#[derive(Debug, PartialEq, Eq)]
pub struct OverBudget;

impl Rules {
    /// Counts the rules of `bytes`, which apply below `dir`, against the budget.
    fn spend(&mut self, dir: &[u8], bytes: &[u8]) -> Result<(), OverBudget> {
        let mut patterns = 0;
        let mut weight = Weight::default();
        for line in bytes.split(|&b| b == b'\n') {
            let line = line.trim_ascii();
            if line.is_empty() || line.starts_with(b"#") {
                continue;
            }
            patterns += 1;
            let rule = line.strip_suffix(b"/").unwrap_or(line);
            if rule.contains(&b'/') {
                weight.path += rule_weight(line);
            } else {
                weight.name += rule_weight(line);
            }
        }
        if bytes.len() > MAX_RULES
            || self.bytes + bytes.len() > MAX_RULE_BYTES
            || self.patterns + patterns > MAX_PATTERNS
        {
            return Err(OverBudget);
        }
        self.bytes += bytes.len();
        self.patterns += patterns;
        self.lists += 1;
        let total = self.weights.entry(dir.to_vec()).or_default();
        total.name += weight.name;
        total.path += weight.path;
        Ok(())
    }

    /// What asking whether `path` is ignored may cost, in [`MAX_MATCHING`]'s units: the rules
    /// of the top and of each directory above `path`, by the length of the text each is matched
    /// against (gitoxide skips the rules of other directories by their base).
    pub fn cost(&self, path: &[u8]) -> u64 {
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        let depth = path.iter().filter(|&&b| b == b'/').count() + 1;
        let len = path.len() as u64 + 1;
        // gitoxide looks at every rule file's list for every path (by its base), empty ones too.
        let mut cost = self.lists.saturating_mul(LIST);
        let mut charge = |dir: &[u8], weight: &Weight| {
            let below = (path.len() - dir.len()) as u64 + 1;
            cost = cost
                .saturating_add(weight.name.saturating_mul(name.len() as u64 + 1))
                .saturating_add(weight.path.saturating_mul(below));
        };
        // Finding the directories above `path` that have rules: by their list when it is the
        // shorter, else by looking each ancestor up. Either costs up to that many comparisons or
        // hashes of the path, which is charged too.
        let looked = self.weights.len().min(depth) as u64;
        if self.weights.len() <= depth {
            for (dir, weight) in &self.weights {
                let above = dir.is_empty()
                    || (path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/');
                if above {
                    charge(dir, weight);
                }
            }
        } else {
            let dirs = std::iter::once(&b""[..]).chain(
                path.iter()
                    .enumerate()
                    .filter(|&(_, &b)| b == b'/')
                    .map(|(at, _)| &path[..at]),
            );
            for dir in dirs {
                if let Some(weight) = self.weights.get(dir) {
                    charge(dir, weight);
                }
            }
        }
        cost.saturating_add(looked.saturating_mul(len).saturating_mul(LOOKUP))
    }

    /// Adds the rules of the `.gitignore` in `dir` (the top for an empty `dir`): they apply
    /// below `dir` and win over every file added before.
    pub fn add(&mut self, dir: &[u8], bytes: &[u8]) -> Result<(), OverBudget> {
        self.spend(dir, bytes)?;
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
        self.spend(b"", bytes)?;
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

/// One rule's units per byte of text: [`WILDCARD`] when gitoxide matches it with wildmatch, 1
/// when it compares (no wildcard, or one leading `*` before a literal suffix).
fn rule_weight(line: &[u8]) -> u64 {
    let body = line.strip_prefix(b"!").unwrap_or(line);
    let body = body.strip_prefix(b"*").unwrap_or(body);
    if body.iter().any(|b| matches!(b, b'*' | b'?' | b'[' | b'\\')) {
        WILDCARD
    } else {
        1
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
    fn rules_that_wildmatch_cost_more_and_only_below_their_directory() {
        for (rule, weight) in [
            (&b"target/"[..], 1),
            (b"/build", 1),
            (b"*.log", 1),
            (b"!*.log", 1),
            (b"*a*a*a*b", WILDCARD),
            (b"**/node_modules", WILDCARD),
            (b"file?.txt", WILDCARD),
            (b"[ab].c", WILDCARD),
            (b"\\#literal", WILDCARD),
        ] {
            assert_eq!(
                rule_weight(rule),
                weight,
                "{}",
                String::from_utf8_lossy(rule)
            );
        }
        let mut rules = Rules::default();
        // Name rules: matched against the last component; path rules: against the path below
        // their directory.
        rules.add(b"", b"# comment\n*.o\n*a*b\n").unwrap();
        rules.add(b"sub", b"/x/y\n").unwrap();
        let name_weight = 1 + WILDCARD;
        // Two lists, each looked at for every path; then the rules of the directories above it,
        // by the length of what they are matched against; then finding those directories.
        let lists = 2 * LIST;
        assert_eq!(rules.cost(b"abc"), lists + name_weight * 4 + 4 * LOOKUP);
        assert_eq!(
            rules.cost(b"dir/abc"),
            lists + name_weight * 4 + 2 * 8 * LOOKUP
        );
        assert_eq!(
            rules.cost(b"sub/x/y"),
            lists + name_weight * 2 + 5 + 2 * 8 * LOOKUP
        );
        assert_eq!(
            rules.cost(b"subway/y"),
            lists + name_weight * 2 + 2 * 9 * LOOKUP,
            "not below `sub`"
        );
        // Empty rule files are lists too.
        let mut empty = Rules::default();
        for dir in 0..100 {
            empty.add(format!("d{dir}").as_bytes(), b"").unwrap();
        }
        assert!(empty.cost(b"x") >= 100 * LIST);
        assert_eq!(Rules::default().cost(b"anything"), 0);
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
