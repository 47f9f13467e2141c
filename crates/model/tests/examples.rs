//! The example descriptors in configs/examples load and validate.

use nfx_model::{Infrastructure, ServiceSet, Tier};
use std::path::PathBuf;

fn example(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../configs/examples")
        .join(name)
}

#[test]
fn example_infrastructure_and_services_load() {
    let infra = Infrastructure::load(&example("infrastructure.yaml")).unwrap();
    assert_eq!(infra.hosts.len(), 4);
    assert!(infra.devices.iter().any(|d| d.tier == Tier::Accelerator));
    assert!(infra.devices.iter().any(|d| d.tier == Tier::Table));
    let t = infra.transfer_latency_us();
    assert_eq!(t[0][3], 90.0);
    let svc = ServiceSet::load(&example("services.yaml"), &infra).unwrap();
    assert_eq!(svc.services.len(), 2);
    assert_eq!(svc.services[0].chain[0].tier, Some(Tier::Table));
    let t = svc.services[1]
        .tunnel
        .as_ref()
        .expect("the VPN service has a tunnel");
    assert_eq!((t.from.as_str(), t.to.as_str()), ("edge", "cloud"));
}

#[test]
fn errors_name_the_real_file() {
    let infra = Infrastructure::load(&example("infrastructure.yaml")).unwrap();
    let e = ServiceSet::load(&example("infrastructure.yaml"), &infra).unwrap_err();
    assert!(
        e.file.ends_with("configs/examples/infrastructure.yaml"),
        "{e}"
    );
    assert_eq!(e.field, "hosts");
}
