//! The sandbox layers the probe reports, named as in `cordon doctor --json`.

use std::fmt;
use std::str::FromStr;

/// One kernel feature the sandbox is built from. The order of [`Layer::ALL`] is the order in which
/// `cordon doctor` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Layer {
    UserNamespaces,
    MountNamespaces,
    PidNamespaces,
    NetworkNamespaces,
    Seccomp,
    NoNewPrivs,
    Landlock,
    LandlockScopes,
    IdmappedMounts,
    Overlayfs,
    Cgroups,
}

impl Layer {
    /// Every layer, in report order.
    pub const ALL: [Layer; 11] = [
        Layer::UserNamespaces,
        Layer::MountNamespaces,
        Layer::PidNamespaces,
        Layer::NetworkNamespaces,
        Layer::Seccomp,
        Layer::NoNewPrivs,
        Layer::Landlock,
        Layer::LandlockScopes,
        Layer::IdmappedMounts,
        Layer::Overlayfs,
        Layer::Cgroups,
    ];

    /// The contract name (`doctor --json`, `CORDON_PROBE_REMOVE`).
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::UserNamespaces => "user_namespaces",
            Layer::MountNamespaces => "mount_namespaces",
            Layer::PidNamespaces => "pid_namespaces",
            Layer::NetworkNamespaces => "network_namespaces",
            Layer::Seccomp => "seccomp",
            Layer::NoNewPrivs => "no_new_privs",
            Layer::Landlock => "landlock",
            Layer::LandlockScopes => "landlock_scopes",
            Layer::IdmappedMounts => "idmapped_mounts",
            Layer::Overlayfs => "overlayfs",
            Layer::Cgroups => "cgroups",
        }
    }

    /// Whether cordon refuses to run a sandbox without this layer. The others are used when
    /// present: Landlock scopes and idmapped mounts (needed as root) are reported, and cgroups are
    /// needed only when a cap is requested (the cgroup driver refuses then).
    pub fn is_required(self) -> bool {
        match self {
            Layer::UserNamespaces
            | Layer::MountNamespaces
            | Layer::PidNamespaces
            | Layer::NetworkNamespaces
            | Layer::Seccomp
            | Layer::NoNewPrivs
            | Layer::Landlock => true,
            Layer::LandlockScopes | Layer::IdmappedMounts | Layer::Overlayfs | Layer::Cgroups => {
                false
            }
        }
    }

    /// Layers that cannot work without this one: every namespace is created inside the user
    /// namespace, idmapped mounts need a user namespace to map through, and scopes are part of
    /// Landlock. Removing a layer by override removes these too, as a real absence would.
    pub fn dependents(self) -> &'static [Layer] {
        match self {
            Layer::UserNamespaces => &[
                Layer::MountNamespaces,
                Layer::PidNamespaces,
                Layer::NetworkNamespaces,
                Layer::IdmappedMounts,
                Layer::Overlayfs,
            ],
            Layer::Landlock => &[Layer::LandlockScopes],
            Layer::MountNamespaces
            | Layer::PidNamespaces
            | Layer::NetworkNamespaces
            | Layer::Seccomp
            | Layer::NoNewPrivs
            | Layer::LandlockScopes
            | Layer::IdmappedMounts
            | Layer::Overlayfs
            | Layer::Cgroups => &[],
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A layer name that is not one of [`Layer::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sandbox layer `{name}`; the layers are {}", layer_list())]
pub struct UnknownLayer {
    pub name: String,
}

fn layer_list() -> String {
    Layer::ALL.map(Layer::as_str).join(", ")
}

impl FromStr for Layer {
    type Err = UnknownLayer;

    fn from_str(name: &str) -> Result<Layer, UnknownLayer> {
        Layer::ALL
            .into_iter()
            .find(|layer| layer.as_str() == name)
            .ok_or_else(|| UnknownLayer {
                name: name.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layer_name_parses_back_to_its_layer() {
        for layer in Layer::ALL {
            assert_eq!(layer.as_str().parse::<Layer>(), Ok(layer));
        }
    }

    #[test]
    fn required_layers_are_the_design_list() {
        let required: Vec<&str> = Layer::ALL
            .into_iter()
            .filter(|l| l.is_required())
            .map(Layer::as_str)
            .collect();
        assert_eq!(
            required,
            [
                "user_namespaces",
                "mount_namespaces",
                "pid_namespaces",
                "network_namespaces",
                "seccomp",
                "no_new_privs",
                "landlock"
            ]
        );
    }

    #[test]
    fn unknown_layer_name_lists_the_valid_ones() {
        let err = "landlok".parse::<Layer>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown sandbox layer `landlok`; the layers are user_namespaces, mount_namespaces, \
             pid_namespaces, network_namespaces, seccomp, no_new_privs, landlock, landlock_scopes, \
             idmapped_mounts, overlayfs, cgroups"
        );
    }
}
