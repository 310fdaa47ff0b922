//! `Attempt`: the run's attempt counter, which starts at 1 and grows with each `retry: true` route.

use std::fmt;
use std::num::NonZeroU32;

/// A run's attempt number (DESIGN §3 "Attempts"): per run, starting at 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Attempt(NonZeroU32);

impl Attempt {
    /// The attempt every run starts with.
    pub const FIRST: Attempt = Attempt(NonZeroU32::MIN);

    /// `None` for 0, which is not an attempt.
    pub fn new(number: u32) -> Option<Attempt> {
        NonZeroU32::new(number).map(Attempt)
    }

    pub fn get(self) -> u32 {
        self.0.get()
    }

    /// The attempt after this one, or `None` when the counter would overflow.
    pub fn next(self) -> Option<Attempt> {
        self.0.checked_add(1).map(Attempt)
    }
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_start_at_one_and_count_up() {
        assert_eq!(Attempt::new(0), None);
        assert_eq!(Attempt::FIRST.get(), 1);
        assert_eq!(Attempt::FIRST.next().map(Attempt::get), Some(2));
        assert_eq!(Attempt::new(u32::MAX).and_then(Attempt::next), None);
        assert_eq!(Attempt::FIRST.to_string(), "1");
    }
}
