//! Serde for the id newtypes: each is its canonical text (or number), and parsing validates.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Attempt, RunId, StepName};

impl Serialize for RunId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RunId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RunId, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        RunId::parse(&text).map_err(D::Error::custom)
    }
}

impl Serialize for StepName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StepName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<StepName, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        StepName::parse(&text).map_err(D::Error::custom)
    }
}

impl Serialize for Attempt {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u32(self.get())
    }
}

impl<'de> Deserialize<'de> for Attempt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Attempt, D::Error> {
        let number = u32::deserialize(d)?;
        Attempt::new(number)
            .ok_or_else(|| D::Error::custom("attempt 0 does not exist; attempts start at 1"))
    }
}
