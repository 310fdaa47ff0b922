//! `Timestamp`: milliseconds since the Unix epoch, shown as `2026-01-31T12:00:00.123Z`.

use std::fmt;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A UTC instant with millisecond precision. The text form is RFC 3339 with exactly three
/// fractional digits and `Z`, so timestamps sort as text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

const MILLIS_PER_DAY: u64 = 86_400_000;

impl Timestamp {
    pub fn unix_millis(self) -> u64 {
        self.0
    }

    /// Parses exactly the form [`fmt::Display`] writes.
    pub fn parse(text: &str) -> Option<Timestamp> {
        let b = text.as_bytes();
        if b.len() != 24
            || b[4] != b'-'
            || b[7] != b'-'
            || b[10] != b'T'
            || b[13] != b':'
            || b[16] != b':'
            || b[19] != b'.'
            || b[23] != b'Z'
        {
            return None;
        }
        let num = |range: std::ops::Range<usize>| -> Option<u64> {
            let part = text.get(range)?;
            part.bytes()
                .all(|c| c.is_ascii_digit())
                .then(|| part.parse().ok())?
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second, millis) =
            (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
        if !(1..=12).contains(&month)
            || !(1..=31).contains(&day)
            || hour > 23
            || minute > 59
            || second > 59
            || year < 1970
        {
            return None;
        }
        let days = days_from_civil(year, month, day);
        Some(Timestamp(
            days * MILLIS_PER_DAY + ((hour * 60 + minute) * 60 + second) * 1000 + millis,
        ))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.0 / MILLIS_PER_DAY;
        let in_day = self.0 % MILLIS_PER_DAY;
        let (year, month, day) = civil_from_days(days);
        let (secs, millis) = (in_day / 1000, in_day % 1000);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

/// Howard Hinnant's `civil_from_days`, for days since 1970-01-01 (never negative here).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// The inverse of [`civil_from_days`], for years from 1970.
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let yoe = year - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Timestamp, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Timestamp::parse(&text).ok_or_else(|| {
            D::Error::custom(format!(
                "`{text}` is not a timestamp like 2026-01-31T12:00:00.123Z"
            ))
        })
    }
}
