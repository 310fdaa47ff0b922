//! The layer probe on this machine: both depths agree, the thorough one really creates the
//! namespaces, and removals only ever remove.

use cordon_sandbox::probe::{Depth, Layer, Probe, parse_removals};

#[test]
fn quick_and_thorough_probes_agree_on_every_layer() {
    let quick = Probe::host(Depth::Quick);
    let thorough = Probe::host(Depth::Thorough);
    for layer in Layer::ALL {
        assert_eq!(
            quick.is_available(layer),
            thorough.is_available(layer),
            "{layer}: quick {:?} / thorough {:?}",
            quick.layer(layer),
            thorough.layer(layer)
        );
    }
}

#[test]
fn thorough_probe_creates_each_namespace() {
    let probe = Probe::host(Depth::Thorough);
    assert!(
        probe
            .layer(Layer::UserNamespaces)
            .detail
            .starts_with("created one ")
    );
    for layer in [
        Layer::MountNamespaces,
        Layer::PidNamespaces,
        Layer::NetworkNamespaces,
    ] {
        assert_eq!(
            probe.layer(layer).detail,
            "created one inside a new user namespace"
        );
    }
}

#[test]
fn every_required_layer_is_present_and_removals_only_remove() {
    let host = Probe::host(Depth::Quick);
    assert!(host.sandbox_available(), "{:?}", host.missing_required());
    let every: Vec<Layer> = Layer::ALL.to_vec();
    let none = host.clone().without(&every);
    assert!(
        none.layers()
            .iter()
            .all(|s| !s.available && s.remedy.is_some())
    );
    assert_eq!(none.missing_required().len(), 7);
    let some = host
        .clone()
        .without(&parse_removals("seccomp").expect("a valid list"));
    for status in some.layers() {
        let expected = status.layer != Layer::Seccomp && host.is_available(status.layer);
        assert_eq!(status.available, expected, "{status:?}");
    }
}

#[test]
fn quick_probe_reports_the_landlock_abi_the_kernel_gives() {
    let probe = Probe::host(Depth::Quick);
    let detail = &probe.layer(Layer::Landlock).detail;
    let abi: u32 = detail
        .strip_prefix("ABI ")
        .and_then(|v| v.parse().ok())
        .expect(detail);
    assert!(abi >= 1);
    assert_eq!(probe.is_available(Layer::LandlockScopes), abi >= 6);
}
