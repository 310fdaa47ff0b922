//! What changed between two flat trees, as a list (`status`) and as a patch in git's format
//! (unified, three lines of context), built in process: old contents come from the object store,
//! new ones from the work tree through the view, so no diff driver, text conversion or filter the
//! work tree names ever runs. Paths are quoted as git quotes them, so a name holding a newline
//! cannot forge a line of the patch. The patch is bounded: a file larger than
//! [`PatchLimits::file`] is named, not diffed, and past [`PatchLimits::total`] the remaining
//! files are counted, not shown.

use std::fmt::Write as _;

use cordon_workspace::{View, WsPath};
use gix_imara_diff::{Algorithm, Diff, InternedInput, UnifiedDiffConfig, UnifiedDiffPrinter};
use gix_object::FindExt;

use crate::GitError;
use crate::repo::Repo;
use crate::tree::{Entry, Flat, Mode};

/// One path's change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Added(Entry),
    Deleted(Entry),
    Modified { old: Entry, new: Entry },
}

impl Change {
    /// `A`, `D` or `M`, as `git status --short` prints them.
    pub fn letter(&self) -> char {
        match self {
            Change::Added(_) => 'A',
            Change::Deleted(_) => 'D',
            Change::Modified { .. } => 'M',
        }
    }
}

/// Every path whose entry differs between `old` and `new`, in path order.
pub fn changes(old: &Flat, new: &Flat) -> Vec<(Vec<u8>, Change)> {
    let mut out = Vec::new();
    let mut old_iter = old.iter().peekable();
    let mut new_iter = new.iter().peekable();
    loop {
        match (old_iter.peek(), new_iter.peek()) {
            (None, None) => break,
            (Some((path, entry)), None) => {
                out.push(((*path).clone(), Change::Deleted(**entry)));
                old_iter.next();
            }
            (None, Some((path, entry))) => {
                out.push(((*path).clone(), Change::Added(**entry)));
                new_iter.next();
            }
            (Some((old_path, old_entry)), Some((new_path, new_entry))) => {
                match old_path.cmp(new_path) {
                    std::cmp::Ordering::Less => {
                        out.push(((*old_path).clone(), Change::Deleted(**old_entry)));
                        old_iter.next();
                    }
                    std::cmp::Ordering::Greater => {
                        out.push(((*new_path).clone(), Change::Added(**new_entry)));
                        new_iter.next();
                    }
                    std::cmp::Ordering::Equal => {
                        if old_entry != new_entry {
                            out.push((
                                (*old_path).clone(),
                                Change::Modified {
                                    old: **old_entry,
                                    new: **new_entry,
                                },
                            ));
                        }
                        old_iter.next();
                        new_iter.next();
                    }
                }
            }
        }
    }
    out
}

/// `changes` as `git status --short` lines (` M path`), paths quoted as git quotes them.
pub fn status(changes: &[(Vec<u8>, Change)]) -> String {
    changes
        .iter()
        .map(|(path, change)| format!(" {} {}\n", change.letter(), quote(b"", path)))
        .collect()
}

/// Bounds of a patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatchLimits {
    /// The patch's size past which further files are only counted.
    pub total: usize,
    /// The largest file (either side) whose content is diffed.
    pub file: usize,
}

impl Default for PatchLimits {
    fn default() -> PatchLimits {
        PatchLimits {
            total: 16 << 20,
            file: 4 << 20,
        }
    }
}

/// What git prints for a path, quoted (`"a/na\tme"`) when it holds a byte git would escape.
pub fn quote(prefix: &[u8], path: &[u8]) -> String {
    let needs = path
        .iter()
        .any(|&b| b < 0x20 || b == 0x7f || b >= 0x80 || b == b'"' || b == b'\\');
    let mut out = String::with_capacity(prefix.len() + path.len() + 2);
    if !needs {
        out.push_str(&String::from_utf8_lossy(prefix));
        out.push_str(&String::from_utf8_lossy(path));
        return out;
    }
    out.push('"');
    for &b in prefix.iter().chain(path) {
        match b {
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            b'\t' => out.push_str("\\t"),
            b'\n' => out.push_str("\\n"),
            0x0b => out.push_str("\\v"),
            0x0c => out.push_str("\\f"),
            b'\r' => out.push_str("\\r"),
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b if !(0x20..0x7f).contains(&b) => {
                let _ = write!(out, "\\{b:03o}");
            }
            b => out.push(char::from(b)),
        }
    }
    out.push('"');
    out
}

/// One side's content for the patch.
enum Content {
    Bytes(Vec<u8>),
    TooLarge(u64),
    Unreadable(String),
}

impl Repo {
    /// The patch of `changes`, where `Added`/`Modified` new sides are read from `workspace`.
    pub fn patch(
        &self,
        workspace: &View,
        changes: &[(Vec<u8>, Change)],
        limits: PatchLimits,
    ) -> Result<Vec<u8>, GitError> {
        self.check_pinned()?;
        let mut out = String::new();
        for (index, (path, change)) in changes.iter().enumerate() {
            if out.len() > limits.total {
                let _ = writeln!(
                    out,
                    "# cordon: {} more changed files not shown; the patch is capped at {} bytes",
                    changes.len() - index,
                    limits.total
                );
                break;
            }
            match change {
                Change::Modified { old, new } if kind_changes(old.mode, new.mode) => {
                    self.section(&mut out, workspace, path, Some(old), None, limits);
                    self.section(&mut out, workspace, path, None, Some(new), limits);
                }
                Change::Modified { old, new } => {
                    self.section(&mut out, workspace, path, Some(old), Some(new), limits);
                }
                Change::Added(new) => {
                    self.section(&mut out, workspace, path, None, Some(new), limits);
                }
                Change::Deleted(old) => {
                    self.section(&mut out, workspace, path, Some(old), None, limits);
                }
            }
        }
        Ok(out.into_bytes())
    }

    fn old_content(&self, entry: &Entry, limit: usize) -> Content {
        if entry.mode == Mode::Gitlink {
            return Content::Bytes(format!("Subproject commit {}\n", entry.id).into_bytes());
        }
        use gix_object::FindHeader as _;
        match self.objects.try_header(&entry.id) {
            Ok(Some(header)) if header.size > limit as u64 => {
                return Content::TooLarge(header.size);
            }
            Ok(Some(_)) => {}
            Ok(None) => return Content::Unreadable(format!("object {} is missing", entry.id)),
            Err(err) => return Content::Unreadable(err.to_string()),
        }
        let mut buffer = Vec::new();
        match self.objects.find_blob(&entry.id, &mut buffer) {
            Ok(blob) => Content::Bytes(blob.data.to_vec()),
            Err(err) => Content::Unreadable(err.to_string()),
        }
    }

    fn new_content(&self, workspace: &View, path: &[u8], entry: &Entry, limit: usize) -> Content {
        if entry.mode == Mode::Gitlink {
            return Content::Bytes(format!("Subproject commit {}\n", entry.id).into_bytes());
        }
        let Ok(path) = WsPath::from_bytes(path) else {
            // Kept from HEAD: the object store has it.
            return self.old_content(entry, limit);
        };
        let read = match entry.mode {
            Mode::Link => workspace.read_link(&path).map(|t| t.map(Content::Bytes)),
            _ => workspace.read(&path, limit + 1).map(|r| {
                r.map(|r| {
                    if r.size > limit as u64 || r.bytes.len() > limit {
                        Content::TooLarge(r.size)
                    } else {
                        Content::Bytes(r.bytes)
                    }
                })
            }),
        };
        match read {
            Ok(Some(content)) => content,
            // Kept from HEAD or gone: the object store may have it.
            Ok(None) => self.old_content(entry, limit),
            Err(err) => Content::Unreadable(err.to_string()),
        }
    }

    fn section(
        &self,
        out: &mut String,
        workspace: &View,
        path: &[u8],
        old: Option<&Entry>,
        new: Option<&Entry>,
        limits: PatchLimits,
    ) {
        let a = quote(b"a/", path);
        let b = quote(b"b/", path);
        let _ = writeln!(out, "diff --git {a} {b}");
        let short = |e: Option<&Entry>| {
            e.map_or_else(
                || "0000000".to_owned(),
                |e| e.id.to_hex_with_len(7).to_string(),
            )
        };
        match (old, new) {
            (None, Some(new)) => {
                let _ = writeln!(out, "new file mode {}", new.mode.octal());
                let _ = writeln!(out, "index 0000000..{}", short(Some(new)));
            }
            (Some(old), None) => {
                let _ = writeln!(out, "deleted file mode {}", old.mode.octal());
                let _ = writeln!(out, "index {}..0000000", short(Some(old)));
            }
            (Some(old), Some(new)) if old.mode != new.mode => {
                let _ = writeln!(out, "old mode {}", old.mode.octal());
                let _ = writeln!(out, "new mode {}", new.mode.octal());
                if old.id != new.id {
                    let _ = writeln!(out, "index {}..{}", short(Some(old)), short(Some(new)));
                }
            }
            (Some(old), Some(new)) => {
                let _ = writeln!(
                    out,
                    "index {}..{} {}",
                    short(Some(old)),
                    short(Some(new)),
                    new.mode.octal()
                );
            }
            (None, None) => return,
        }
        if old.zip(new).is_some_and(|(o, n)| o.id == n.id) {
            return;
        }
        let before = old.map(|e| self.old_content(e, limits.file));
        let after = new.map(|e| self.new_content(workspace, path, e, limits.file));
        let bytes = |c: &Option<Content>| match c {
            None => Some(Vec::new()),
            Some(Content::Bytes(b)) => Some(b.clone()),
            Some(_) => None,
        };
        let (Some(before_bytes), Some(after_bytes)) = (bytes(&before), bytes(&after)) else {
            for content in [&before, &after].into_iter().flatten() {
                match content {
                    Content::TooLarge(size) => {
                        let _ = writeln!(
                            out,
                            "Large files {a} and {b} differ ({size} bytes; cordon diffs files up to {} bytes)",
                            limits.file
                        );
                        return;
                    }
                    Content::Unreadable(reason) => {
                        let _ = writeln!(
                            out,
                            "# cordon: {} cannot be shown: {}",
                            quote(b"", path),
                            reason.replace('\n', " ")
                        );
                        return;
                    }
                    Content::Bytes(_) => {}
                }
            }
            return;
        };
        if is_binary(&before_bytes) || is_binary(&after_bytes) {
            let a = if old.is_some() {
                a
            } else {
                "/dev/null".to_owned()
            };
            let b = if new.is_some() {
                b
            } else {
                "/dev/null".to_owned()
            };
            let _ = writeln!(out, "Binary files {a} and {b} differ");
            return;
        }
        let _ = writeln!(
            out,
            "--- {}",
            if old.is_some() {
                a
            } else {
                "/dev/null".to_owned()
            }
        );
        let _ = writeln!(
            out,
            "+++ {}",
            if new.is_some() {
                b
            } else {
                "/dev/null".to_owned()
            }
        );
        unified(out, &before_bytes, &after_bytes);
    }
}

/// A file turning into a link (or a submodule) is a deletion and an addition, as git shows it.
fn kind_changes(old: Mode, new: Mode) -> bool {
    let class = |m: Mode| match m {
        Mode::File | Mode::Executable => 0,
        Mode::Link => 1,
        Mode::Gitlink => 2,
    };
    class(old) != class(new)
}

/// git's rule: a NUL in the first 8000 bytes makes a file binary.
fn is_binary(bytes: &[u8]) -> bool {
    bytes[..bytes.len().min(8000)].contains(&0)
}

/// The hunks of `before` → `after` (text; invalid UTF-8 shown as U+FFFD).
fn unified(out: &mut String, before: &[u8], after: &[u8]) {
    let before = String::from_utf8_lossy(before);
    let after = String::from_utf8_lossy(after);
    let input = InternedInput::new(
        gix_imara_diff::sources::lines(&before),
        gix_imara_diff::sources::lines(&after),
    );
    let mut diff = Diff::compute(Algorithm::Histogram, &input);
    diff.postprocess_lines(&input);
    let printer = Printer(&input.interner);
    let _ = write!(
        out,
        "{}",
        diff.unified_diff(&printer, UnifiedDiffConfig::default(), &input)
    );
}

/// Hunks as git prints them: `@@ -l,n +l,n @@` (`,1` left out; an empty side as `-0,0`) and
/// `\ No newline at end of file` after a last line without one.
struct Printer<'a>(&'a gix_imara_diff::Interner<&'a str>);

impl Printer<'_> {
    fn line(
        &self,
        mut f: impl std::fmt::Write,
        sign: char,
        token: gix_imara_diff::Token,
    ) -> std::fmt::Result {
        let text = self.0[token];
        write!(f, "{sign}{text}")?;
        if !text.ends_with('\n') {
            write!(f, "\n\\ No newline at end of file\n")?;
        }
        Ok(())
    }
}

impl UnifiedDiffPrinter for Printer<'_> {
    fn display_header(
        &self,
        mut f: impl std::fmt::Write,
        start_before: u32,
        start_after: u32,
        len_before: u32,
        len_after: u32,
    ) -> std::fmt::Result {
        let range = |start: u32, len: u32| match len {
            0 => format!("{start},0"),
            1 => format!("{}", start + 1),
            n => format!("{},{n}", start + 1),
        };
        writeln!(
            f,
            "@@ -{} +{} @@",
            range(start_before, len_before),
            range(start_after, len_after)
        )
    }

    fn display_context_token(
        &self,
        f: impl std::fmt::Write,
        token: gix_imara_diff::Token,
    ) -> std::fmt::Result {
        self.line(f, ' ', token)
    }

    fn display_hunk(
        &self,
        mut f: impl std::fmt::Write,
        before: &[gix_imara_diff::Token],
        after: &[gix_imara_diff::Token],
    ) -> std::fmt::Result {
        for &token in before {
            self.line(&mut f, '-', token)?;
        }
        for &token in after {
            self.line(&mut f, '+', token)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_quoted_as_git_quotes_them() {
        for (path, expected) in [
            (&b"src/main.rs"[..], "a/src/main.rs"),
            (b"new\nline", "\"a/new\\nline\""),
            (b"tab\there", "\"a/tab\\there\""),
            (b"quote\"s", "\"a/quote\\\"s\""),
            (b"back\\slash", "\"a/back\\\\slash\""),
            (b"esc\x1b[2K", "\"a/esc\\033[2K\""),
            ("caf\u{e9}".as_bytes(), "\"a/caf\\303\\251\""),
        ] {
            assert_eq!(quote(b"a/", path), expected);
        }
    }

    fn hunks(before: &str, after: &str) -> String {
        let mut out = String::new();
        unified(&mut out, before.as_bytes(), after.as_bytes());
        out
    }

    #[test]
    fn hunks_read_like_gits() {
        assert_eq!(
            hunks("one\ntwo\nthree\n", "one\nTWO\nthree\n"),
            "@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n"
        );
        assert_eq!(hunks("", "new\n"), "@@ -0,0 +1 @@\n+new\n");
        assert_eq!(
            hunks("a\n", "a"),
            "@@ -1 +1 @@\n-a\n+a\n\\ No newline at end of file\n"
        );
    }

    #[test]
    fn changes_merge_both_trees_in_path_order() {
        let id = |n: u8| gix_hash::ObjectId::from_bytes_or_panic(&[n; 20]);
        let entry = |n| Entry {
            mode: Mode::File,
            id: id(n),
        };
        let old: Flat = [(b"a".to_vec(), entry(1)), (b"b".to_vec(), entry(2))].into();
        let new: Flat = [(b"b".to_vec(), entry(3)), (b"c".to_vec(), entry(4))].into();
        let found = changes(&old, &new);
        let letters: String = found.iter().map(|(_, c)| c.letter()).collect();
        assert_eq!(letters, "DMA");
        assert_eq!(status(&found), " D a\n M b\n A c\n");
    }
}
