//! Diagnostics: `file:line:col: message` lines, errors and warnings, collected all at once.

use std::fmt;

/// A place in a source file: 1-based line and 1-based column (in characters).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    pub line: usize,
    pub column: usize,
}

impl Position {
    /// The start of a file, used for problems that concern the whole file.
    pub const START: Position = Position { line: 1, column: 1 };

    pub fn new(line: usize, column: usize) -> Position {
        Position { line, column }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
}

/// One problem in one file. `position` is `None` when the file could not be read at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    pub position: Option<Position>,
    pub severity: Severity,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.file)?;
        if let Some(p) = self.position {
            write!(f, ":{}:{}", p.line, p.column)?;
        }
        match self.severity {
            Severity::Error => write!(f, ": {}", self.message),
            Severity::Warning => write!(f, ": warning: {}", self.message),
        }
    }
}

/// Every diagnostic of one check, in a deterministic order: by file (in the order the files were
/// read), then line, then column, then message.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Diagnostics(Vec<Diagnostic>);

impl Diagnostics {
    pub fn iter(&self) -> std::slice::Iter<'_, Diagnostic> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|d| d.severity == Severity::Error)
    }

    pub fn errors(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.severity == Severity::Error)
    }

    pub fn warnings(&self) -> impl Iterator<Item = &Diagnostic> {
        self.0.iter().filter(|d| d.severity == Severity::Warning)
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            d.fmt(f)?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl<'a> IntoIterator for &'a Diagnostics {
    type Item = &'a Diagnostic;
    type IntoIter = std::slice::Iter<'a, Diagnostic>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// Collects diagnostics across files while a check runs; `finish` sorts them.
#[derive(Debug, Default)]
pub(crate) struct Sink {
    files: Vec<String>,
    items: Vec<(usize, Diagnostic)>,
}

/// A handle for reporting problems in one file.
pub(crate) struct FileSink<'a> {
    sink: &'a mut Sink,
    index: usize,
}

impl Sink {
    /// Starts reporting for `file`; files are ordered by their first `file` call.
    pub(crate) fn file(&mut self, file: &str) -> FileSink<'_> {
        let index = match self.files.iter().position(|f| f == file) {
            Some(i) => i,
            None => {
                self.files.push(file.to_owned());
                self.files.len() - 1
            }
        };
        FileSink { sink: self, index }
    }

    pub(crate) fn has_errors(&self) -> bool {
        self.items
            .iter()
            .any(|(_, d)| d.severity == Severity::Error)
    }

    pub(crate) fn finish(mut self) -> Diagnostics {
        self.items.sort_by(|(fa, a), (fb, b)| {
            (fa, a.position, &a.message).cmp(&(fb, b.position, &b.message))
        });
        self.items.dedup_by(|(_, a), (_, b)| a == b);
        Diagnostics(self.items.into_iter().map(|(_, d)| d).collect())
    }
}

impl FileSink<'_> {
    pub(crate) fn error(&mut self, at: Position, message: impl Into<String>) {
        self.push(Some(at), Severity::Error, message.into());
    }

    pub(crate) fn warning(&mut self, at: Position, message: impl Into<String>) {
        self.push(Some(at), Severity::Warning, message.into());
    }

    /// A problem with the file as a whole (it could not be read).
    pub(crate) fn file_error(&mut self, message: impl Into<String>) {
        self.push(None, Severity::Error, message.into());
    }

    /// Switches to another file of the same check.
    pub(crate) fn other(&mut self, file: &str) -> FileSink<'_> {
        self.sink.file(file)
    }

    fn push(&mut self, position: Option<Position>, severity: Severity, message: String) {
        let file = self.sink.files[self.index].clone();
        self.sink.items.push((
            self.index,
            Diagnostic {
                file,
                position,
                severity,
                message,
            },
        ));
    }
}
