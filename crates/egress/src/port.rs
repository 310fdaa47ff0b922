//! `Port` (1–65535) and `Ports`, the set of ports a pattern admits.

use std::fmt;
use std::num::NonZeroU16;

use crate::TargetError;

/// A TCP port from 1 to 65535.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Port(NonZeroU16);

impl Port {
    /// Port 80, the default of `http://` URIs and, with 443, of patterns without a port.
    pub const HTTP: Port = Port(NonZeroU16::new(80).expect("80 is not zero"));
    /// Port 443.
    pub const HTTPS: Port = Port(NonZeroU16::new(443).expect("443 is not zero"));

    /// Parses a port written as 1 to 5 ASCII decimal digits, without sign and without a leading
    /// zero. `str::parse::<u16>` is not used because it accepts `+443`; a leading zero is refused
    /// because some tools read `0443` as octal, and there must be exactly one spelling.
    pub fn parse(text: &str) -> Result<Port, TargetError> {
        let bad = || TargetError::BadPort {
            port: text.escape_default().to_string(),
        };
        if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if text.starts_with('0') && text.len() > 1 {
            return Err(TargetError::PortLeadingZero {
                port: text.to_owned(),
            });
        }
        let value = text.bytes().fold(0u32, |v, b| v * 10 + u32::from(b - b'0'));
        u16::try_from(value)
            .ok()
            .and_then(NonZeroU16::new)
            .map(Port)
            .ok_or_else(bad)
    }

    /// A port from its number; `None` for 0.
    pub fn new(value: u16) -> Option<Port> {
        NonZeroU16::new(value).map(Port)
    }

    /// The number.
    pub fn get(self) -> u16 {
        self.0.get()
    }
}

impl fmt::Display for Port {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// The ports a pattern admits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ports {
    /// No port written in an allow list: 80 and 443.
    Web,
    /// `:*`, or no port written in a deny list: every port.
    Any,
    /// `:PORT`.
    One(Port),
}

impl Ports {
    /// Whether `port` is in the set.
    pub fn admits(self, port: Port) -> bool {
        match self {
            Ports::Web => port == Port::HTTP || port == Port::HTTPS,
            Ports::Any => true,
            Ports::One(p) => p == port,
        }
    }

    /// Whether every port of `other` is in `self`.
    pub fn contains(self, other: Ports) -> bool {
        match (self, other) {
            (Ports::Any, _) => true,
            (_, Ports::Any) => false,
            (s, Ports::Web) => s.admits(Port::HTTP) && s.admits(Port::HTTPS),
            (s, Ports::One(p)) => s.admits(p),
        }
    }

    /// Whether some port is in both sets.
    pub fn intersects(self, other: Ports) -> bool {
        match (self, other) {
            (Ports::Any, _) | (_, Ports::Any) => true,
            (Ports::Web, Ports::Web) => true,
            (s, Ports::One(p)) | (Ports::One(p), s) => s.admits(p),
        }
    }
}
