//! Which sandbox layers this kernel provides, found by trying them (`cordon doctor`, and the
//! fail-closed check before every session).
//!
//! Each layer is detected by asking the kernel, never by a version number alone: seccomp and
//! Landlock are asked for the actions and ABI cordon uses, `mount_setattr` is called, cgroups are
//! checked for writability. Namespaces come in two depths, because creating them in a forked child
//! costs about a millisecond (mostly network-namespace creation and mount-namespace teardown) and
//! the probe runs before every `cordon exec`:
//!
//! * [`Probe::detect`] (and, minus the cgroups layer, the check before every session) reads the
//!   quick facts — the kernel's namespace files, the `max_*_namespaces` limits, Debian's and
//!   Ubuntu's (AppArmor) switches — which catch every common refusal with its remedy. Only when
//!   they cannot decide (AppArmor restricts user namespaces but cordon runs under a profile) does
//!   it fork the real attempt. The session then creates the namespaces itself, so a refusal the
//!   quick facts missed still fails closed.
//! * [`Probe::detect_thorough`] (`cordon doctor`) always forks a child that creates a user, mount,
//!   PID and network namespace, exactly as a session does.
//!
//! Results are computed once per process and cached; the only override, `CORDON_PROBE_REMOVE`
//! (tests only), can remove layers but never add them.

mod cgroups;
mod filters;
mod idmap;
mod kernel;
mod landlock;
mod layer;
mod namespaces;
mod overlay;
mod overrides;

use std::sync::OnceLock;

pub use kernel::KernelVersion;
pub use layer::{Layer, UnknownLayer};
pub use overrides::{OverrideError, REMOVE_VAR, parse_removals};

/// What the probe found for one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayerStatus {
    pub layer: Layer,
    pub available: bool,
    /// What was tried and what came back (versions, ABI, errno), for `cordon doctor`.
    pub detail: String,
    /// How to make a missing layer available; `None` when it is available.
    pub remedy: Option<String>,
}

impl LayerStatus {
    pub(crate) fn available(layer: Layer, detail: String) -> LayerStatus {
        LayerStatus {
            layer,
            available: true,
            detail,
            remedy: None,
        }
    }

    pub(crate) fn missing(layer: Layer, detail: String, remedy: String) -> LayerStatus {
        LayerStatus {
            layer,
            available: false,
            detail,
            remedy: Some(remedy),
        }
    }
}

/// How hard the probe tries namespaces (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// Quick facts; a forked attempt only when they cannot decide.
    Quick,
    /// Always a forked attempt.
    Thorough,
}

/// Whether a probe asks the host's cgroup driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cgroups {
    Probe,
    Skip,
}

/// The status of every layer, in [`Layer::ALL`] order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    layers: Vec<LayerStatus>,
}

impl Probe {
    /// The host's layers with `CORDON_PROBE_REMOVE` applied. An invalid override does not run
    /// the sandbox with a half-understood request: every layer is then reported missing with the
    /// override's error as the detail, so callers refuse (fail closed) and say why. Use
    /// [`Probe::try_detect`] to report the error itself.
    pub fn detect() -> Probe {
        Probe::try_detect().unwrap_or_else(|err| Probe {
            layers: Layer::ALL
                .into_iter()
                .map(|layer| {
                    LayerStatus::missing(
                        layer,
                        err.to_string(),
                        format!("fix or unset {REMOVE_VAR}"),
                    )
                })
                .collect(),
        })
    }

    /// The host's layers with `CORDON_PROBE_REMOVE` applied, or the override's error.
    pub fn try_detect() -> Result<Probe, OverrideError> {
        let removals = overrides::removals_from_env()?;
        Ok(Probe::host(Depth::Quick).without(&removals))
    }

    /// Like [`Probe::try_detect`], but namespaces are always created in a forked child
    /// (`cordon doctor`).
    pub fn detect_thorough() -> Result<Probe, OverrideError> {
        let removals = overrides::removals_from_env()?;
        Ok(Probe::host(Depth::Thorough).without(&removals))
    }

    /// The host's layers without overrides, detected once per process and depth.
    pub fn host(depth: Depth) -> Probe {
        static QUICK: OnceLock<Probe> = OnceLock::new();
        static THOROUGH: OnceLock<Probe> = OnceLock::new();
        let cell = match depth {
            Depth::Quick => &QUICK,
            Depth::Thorough => &THOROUGH,
        };
        cell.get_or_init(|| Probe::detect_uncached(depth, Cgroups::Probe))
            .clone()
    }

    /// Like [`Probe::detect`], for the fail-closed check before a session: the cgroups layer is
    /// not probed (it is reported missing as "not probed"). It is not required, and a requested
    /// cap is checked against the host's cgroups by `cgroup::create_for_session` itself, before
    /// anything is spawned; finding the cgroup driver means reading and parsing the mount table,
    /// which every `cordon exec` would otherwise pay for nothing.
    pub(crate) fn detect_for_session() -> Probe {
        static SESSION: OnceLock<Probe> = OnceLock::new();
        match overrides::removals_from_env() {
            Ok(removals) => SESSION
                .get_or_init(|| Probe::detect_uncached(Depth::Quick, Cgroups::Skip))
                .clone()
                .without(&removals),
            Err(_) => Probe::detect(),
        }
    }

    fn detect_uncached(depth: Depth, cgroups: Cgroups) -> Probe {
        let root = crate::sys::probe::effective_uid() == 0;
        let kernel = KernelVersion::running();
        let mut facts = namespaces::NamespaceFacts::quick(root);
        if depth == Depth::Thorough || facts.undecided() {
            facts = facts.attempt();
        }
        let [user, mount, pid, network] = namespaces::statuses(&facts);
        let filter_facts = filters::FilterFacts::detect();
        let [landlock, scopes] = landlock::statuses(crate::sys::probe::landlock_abi(), kernel);
        let idmapped = idmap::status(crate::sys::probe::mount_setattr_exists(), kernel);
        let overlayfs = match depth {
            Depth::Quick => {
                overlay::quick(&std::fs::read_to_string("/proc/filesystems").unwrap_or_default())
            }
            Depth::Thorough => overlay::attempt(crate::sys::probe::try_overlay()),
        };
        let cgroups = match cgroups {
            Cgroups::Probe => Some(cgroups::status(crate::cgroup::host_driver().as_ref())),
            // Left out: `from_statuses` reports it missing as "not probed".
            Cgroups::Skip => None,
        };
        Probe::from_statuses(
            vec![
                user,
                mount,
                pid,
                network,
                filters::seccomp(&filter_facts),
                filters::no_new_privs(&filter_facts),
                landlock,
                scopes,
                idmapped,
                overlayfs,
            ]
            .into_iter()
            .chain(cgroups)
            .collect(),
        )
    }

    /// A probe from given statuses (tests, and callers replaying a report); layers missing from
    /// `statuses` are reported missing, and the result is in [`Layer::ALL`] order.
    pub fn from_statuses(statuses: Vec<LayerStatus>) -> Probe {
        let layers = Layer::ALL
            .into_iter()
            .map(|layer| {
                statuses
                    .iter()
                    .find(|s| s.layer == layer)
                    .cloned()
                    .unwrap_or_else(|| {
                        LayerStatus::missing(
                            layer,
                            "not probed".to_owned(),
                            "run `cordon doctor` to probe it".to_owned(),
                        )
                    })
            })
            .collect();
        Probe { layers }
    }

    /// This probe with `removals` (and the layers that depend on them) reported missing.
    pub fn without(mut self, removals: &[Layer]) -> Probe {
        for status in &mut self.layers {
            let removed_directly = removals.contains(&status.layer);
            let parent = removals
                .iter()
                .find(|r| r.dependents().contains(&status.layer));
            let detail = match (removed_directly, parent) {
                (true, _) => format!("removed by {REMOVE_VAR} (test override)"),
                (false, Some(parent)) => {
                    format!("removed with {parent} by {REMOVE_VAR} (test override)")
                }
                (false, None) => continue,
            };
            status.available = false;
            status.detail = detail;
            status.remedy = Some(format!("unset {REMOVE_VAR}"));
        }
        self
    }

    /// Every layer, in [`Layer::ALL`] order.
    pub fn layers(&self) -> &[LayerStatus] {
        &self.layers
    }

    /// The status of one layer.
    pub fn layer(&self, layer: Layer) -> &LayerStatus {
        // `layers` always holds every layer in `Layer::ALL` order (see the constructors).
        &self.layers[Layer::ALL.iter().position(|l| *l == layer).unwrap_or(0)]
    }

    pub fn is_available(&self, layer: Layer) -> bool {
        self.layer(layer).available
    }

    /// The required layers that are missing; the sandbox refuses to run unless this is empty.
    pub fn missing_required(&self) -> Vec<&LayerStatus> {
        self.layers
            .iter()
            .filter(|s| s.layer.is_required() && !s.available)
            .collect()
    }

    /// Whether every required layer is present (`"sandbox"` in `doctor --json`).
    pub fn sandbox_available(&self) -> bool {
        self.missing_required().is_empty()
    }

    /// The `cordon doctor --json` document (DESIGN Appendix A):
    /// `{"sandbox":bool,"layers":[{"name","available","detail","remedy"}]}`.
    pub fn to_json(&self) -> String {
        #[derive(serde::Serialize)]
        struct Report<'a> {
            sandbox: bool,
            layers: Vec<Entry<'a>>,
        }
        #[derive(serde::Serialize)]
        struct Entry<'a> {
            name: &'a str,
            available: bool,
            detail: &'a str,
            remedy: Option<&'a str>,
        }
        let report = Report {
            sandbox: self.sandbox_available(),
            layers: self
                .layers
                .iter()
                .map(|s| Entry {
                    name: s.layer.as_str(),
                    available: s.available,
                    detail: &s.detail,
                    remedy: s.remedy.as_deref(),
                })
                .collect(),
        };
        // Serialising plain strings and bools into a String cannot fail.
        serde_json::to_string(&report).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_available() -> Probe {
        Probe::from_statuses(
            Layer::ALL
                .into_iter()
                .map(|l| LayerStatus::available(l, "ok".to_owned()))
                .collect(),
        )
    }

    fn check(removals: &[Layer], missing: &[Layer], missing_required: &[Layer]) {
        let probe = all_available().without(removals);
        let actual: Vec<Layer> = probe
            .layers()
            .iter()
            .filter(|s| !s.available)
            .map(|s| s.layer)
            .collect();
        assert_eq!(actual, missing, "removing {removals:?}");
        let required: Vec<Layer> = probe.missing_required().iter().map(|s| s.layer).collect();
        assert_eq!(required, missing_required, "removing {removals:?}");
        assert_eq!(probe.sandbox_available(), missing_required.is_empty());
    }

    #[test]
    fn removals_take_their_dependents_with_them() {
        use Layer::*;
        check(&[], &[], &[]);
        check(&[Cgroups], &[Cgroups], &[]);
        check(&[Overlayfs], &[Overlayfs], &[]);
        check(
            &[LandlockScopes, IdmappedMounts],
            &[LandlockScopes, IdmappedMounts],
            &[],
        );
        check(&[Landlock], &[Landlock, LandlockScopes], &[Landlock]);
        check(
            &[Seccomp, NoNewPrivs],
            &[Seccomp, NoNewPrivs],
            &[Seccomp, NoNewPrivs],
        );
        check(
            &[UserNamespaces],
            &[
                UserNamespaces,
                MountNamespaces,
                PidNamespaces,
                NetworkNamespaces,
                IdmappedMounts,
                Overlayfs,
            ],
            &[
                UserNamespaces,
                MountNamespaces,
                PidNamespaces,
                NetworkNamespaces,
            ],
        );
        check(
            &[NetworkNamespaces],
            &[NetworkNamespaces],
            &[NetworkNamespaces],
        );
    }

    #[test]
    fn removed_layers_say_so_and_how_to_undo_it() {
        let probe = all_available().without(&[Layer::Landlock]);
        let landlock = probe.layer(Layer::Landlock);
        assert_eq!(
            landlock.detail,
            "removed by CORDON_PROBE_REMOVE (test override)"
        );
        assert_eq!(
            landlock.remedy.as_deref(),
            Some("unset CORDON_PROBE_REMOVE")
        );
        let scopes = probe.layer(Layer::LandlockScopes);
        assert_eq!(
            scopes.detail,
            "removed with landlock by CORDON_PROBE_REMOVE (test override)"
        );
    }

    #[test]
    fn statuses_are_kept_in_report_order_and_gaps_are_missing() {
        let probe = Probe::from_statuses(vec![LayerStatus::available(Layer::Cgroups, "x".into())]);
        let names: Vec<&str> = probe.layers().iter().map(|s| s.layer.as_str()).collect();
        assert_eq!(names, Layer::ALL.map(Layer::as_str));
        assert!(probe.is_available(Layer::Cgroups));
        assert!(!probe.is_available(Layer::Seccomp));
        assert_eq!(probe.layer(Layer::Seccomp).detail, "not probed");
    }

    #[test]
    fn json_report_has_the_contract_shape() {
        let probe = Probe::from_statuses(vec![LayerStatus::available(
            Layer::UserNamespaces,
            "say \"hi\"".to_owned(),
        )]);
        let json = probe.to_json();
        assert!(json.starts_with(
            r#"{"sandbox":false,"layers":[{"name":"user_namespaces","available":true,"detail":"say \"hi\"","remedy":null},{"name":"mount_namespaces","available":false,"detail":"not probed","remedy":"run `cordon doctor` to probe it"}"#
        ), "{json}");
    }

    #[test]
    fn this_host_provides_every_required_layer() {
        // The machine this suite runs on has them (DESIGN: a test needing a missing kernel
        // feature fails unless CI declares it missing).
        for depth in [Depth::Quick, Depth::Thorough] {
            let probe = Probe::host(depth);
            let missing: Vec<String> = probe
                .missing_required()
                .iter()
                .map(|s| format!("{}: {}", s.layer, s.detail))
                .collect();
            assert!(
                missing.is_empty(),
                "missing required layers ({depth:?}): {missing:?}"
            );
        }
    }
}
