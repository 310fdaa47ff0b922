//! `CORDON_PROBE_REMOVE`: the test-only override that makes the probe report layers as missing.
//!
//! It can only remove layers, never add them, so it cannot make cordon run where the kernel would
//! not protect the workload. Names are the `doctor --json` names separated by commas; an unknown
//! name is an error rather than ignored, so a typo cannot silently test nothing.

use super::layer::{Layer, UnknownLayer};

/// The environment variable holding the layers to remove.
pub const REMOVE_VAR: &str = "CORDON_PROBE_REMOVE";

/// A `CORDON_PROBE_REMOVE` value that names something other than a layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{REMOVE_VAR}: {source}; fix the value or unset {REMOVE_VAR}")]
pub struct OverrideError {
    #[source]
    pub source: UnknownLayer,
}

/// Parses a `CORDON_PROBE_REMOVE` value (`"landlock,seccomp"`); blanks around names and empty
/// items (`"a,,b"`, a trailing comma) are allowed.
pub fn parse_removals(value: &str) -> Result<Vec<Layer>, OverrideError> {
    value
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| {
            name.parse::<Layer>()
                .map_err(|source| OverrideError { source })
        })
        .collect()
}

/// The removals the environment asks for (none when the variable is unset).
pub fn removals_from_env() -> Result<Vec<Layer>, OverrideError> {
    match std::env::var(REMOVE_VAR) {
        Ok(value) => parse_removals(&value),
        Err(std::env::VarError::NotPresent) => Ok(Vec::new()),
        Err(std::env::VarError::NotUnicode(raw)) => Err(OverrideError {
            source: UnknownLayer {
                name: raw.to_string_lossy().into_owned(),
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(value: &str, expected: Result<&[Layer], &str>) {
        let actual = parse_removals(value);
        match expected {
            Ok(layers) => assert_eq!(actual, Ok(layers.to_vec()), "value {value:?}"),
            Err(name) => assert_eq!(
                actual.map_err(|e| e.source.name),
                Err(name.to_owned()),
                "value {value:?}"
            ),
        }
    }

    #[test]
    fn removal_lists_parse_names_and_reject_unknown_ones() {
        check("", Ok(&[]));
        check("landlock", Ok(&[Layer::Landlock]));
        check(
            " landlock , seccomp,",
            Ok(&[Layer::Landlock, Layer::Seccomp]),
        );
        check(
            "cgroups,,idmapped_mounts",
            Ok(&[Layer::Cgroups, Layer::IdmappedMounts]),
        );
        check("landlock,Seccomp", Err("Seccomp"));
        check("all", Err("all"));
        check("user-namespaces", Err("user-namespaces"));
    }

    #[test]
    fn override_error_names_the_variable_and_the_fix() {
        let err = parse_removals("nope").unwrap_err();
        assert!(err.to_string().starts_with(
            "CORDON_PROBE_REMOVE: unknown sandbox layer `nope`; the layers are user_namespaces"
        ));
        assert!(
            err.to_string()
                .ends_with("; fix the value or unset CORDON_PROBE_REMOVE")
        );
    }
}
