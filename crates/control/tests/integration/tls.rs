//! Mutual TLS between the controller and an agent, on loopback: an agent serving the VNFM
//! calls with a certificate of the controller's CA answers; an agent whose certificate
//! comes from another CA is refused by the controller; a client without a certificate of
//! the agent's CA is refused by the agent; the token is still required inside TLS.

use crate::common::{tmp, INFRA, TOKEN};
use nfx_control::tls::{self, AgentSubject, Pki};
use nfx_control::vnfm::remote::{AgentLink, RemoteVnfm};
use nfx_control::vnfm::sim::{SimConfig, SimVnfm};
use nfx_control::vnfm::{InstanceSpec, Vnfm, VnfmError};
use nfx_model::Infrastructure;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use zeroize::Zeroizing;

/// Serves the agent routes of a simulated VNFM over TLS with `pki`'s agent material.
fn serve(pki: &Pki) -> SocketAddr {
    let cfg = tls::server_config(&pki.agents["h1"]).unwrap();
    let infra = Infrastructure::from_yaml("infra.yaml", INFRA).unwrap();
    let vnfm: Arc<dyn Vnfm> = Arc::new(
        SimVnfm::new(
            &infra,
            SimConfig {
                deploy_delay: Duration::ZERO,
                state_file: None,
            },
        )
        .unwrap(),
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(tcp.local_addr().unwrap()).unwrap();
            let app: axum::Router = nfx_control::api::protect(
                nfx_control::agent::router(vnfm),
                nfx_control::api::Tokens::admin(Zeroizing::new(TOKEN.to_string())),
            );
            let l = tls::TlsListener::new(tcp, cfg).unwrap();
            axum::serve(l, app).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

fn client(addr: SocketAddr, files: &tls::TlsFiles, token: Option<&str>) -> RemoteVnfm {
    RemoteVnfm::with_link(AgentLink {
        base: format!("https://{addr}"),
        token: token.map(|t| Zeroizing::new(t.to_string())),
        tls: Some(tls::client_config(files).unwrap()),
        exec: None,
        timeout: Duration::from_secs(5),
    })
}

fn spec() -> InstanceSpec {
    serde_json::from_value(serde_json::json!(
        {"id": "i1", "function": "firewall", "device": "sw-edge", "throughput_gbps": 1, "capacity": 1}
    ))
    .unwrap()
}

#[test]
fn mutual_tls_refuses_other_cas_and_every_route_needs_the_token() {
    let dir = tmp("tls");
    let subject = [AgentSubject {
        name: "h1".into(),
        ips: vec!["127.0.0.1".parse().unwrap()],
    }];
    let ours = tls::generate(&dir.join("ours"), &subject).unwrap();
    let theirs = tls::generate(&dir.join("theirs"), &subject).unwrap();
    let good = serve(&ours);
    let foreign = serve(&theirs);

    let c = client(good, &ours.controller, Some(TOKEN));
    assert!(c.list_instances().unwrap().is_empty());
    c.deploy_instance(&spec()).unwrap();
    assert_eq!(c.list_instances().unwrap(), ["i1"]);

    // The agent presents a certificate of another CA: the controller refuses it.
    let e = client(foreign, &ours.controller, Some(TOKEN))
        .list_instances()
        .unwrap_err();
    assert!(
        matches!(&e, VnfmError::Unavailable(m) if m.contains("certificate") || m.contains("UnknownIssuer")),
        "{e}"
    );

    // A client whose certificate the agent's CA did not sign: the agent refuses it.
    let mixed = tls::TlsFiles {
        ca: ours.controller.ca.clone(),
        cert: theirs.controller.cert.clone(),
        key: theirs.controller.key.clone(),
    };
    assert!(client(good, &mixed, Some(TOKEN)).list_instances().is_err());

    // Inside TLS the token is still required, for reads as for changes.
    for token in [None, Some("wrong-token")] {
        let anon = client(good, &ours.controller, token);
        for e in [
            anon.list_instances().unwrap_err(),
            anon.get_instance_state("i1").unwrap_err(),
        ] {
            assert!(
                matches!(&e, VnfmError::Invalid(m) if m.contains("bearer token")),
                "{e}"
            );
        }
    }
    let e = client(good, &ours.controller, None)
        .destruct_instance("i1")
        .unwrap_err();
    assert!(
        matches!(&e, VnfmError::Invalid(m) if m.contains("bearer token")),
        "{e}"
    );
    let e = client(good, &ours.controller, Some("wrong-token"))
        .destruct_instance("i1")
        .unwrap_err();
    assert!(matches!(e, VnfmError::Invalid(_)), "{e}");

    // Plain HTTP to the TLS port gets nothing.
    let plain = RemoteVnfm::new(&format!("http://{good}"), Some(TOKEN.into()));
    assert!(plain.list_instances().is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every request body the remote VNFM serializes (an instance spec, a configuration,
/// a migration, a flow state) reaches the agent's VNFM decoded: each answer is the
/// simulated VNFM's own, never the agent's refusal of a body.
#[test]
fn typed_bodies_reach_the_agents_vnfm() {
    let dir = tmp("tls-bodies");
    let subject = [AgentSubject {
        name: "h1".into(),
        ips: vec!["127.0.0.1".parse().unwrap()],
    }];
    let pki = tls::generate(&dir.join("pki"), &subject).unwrap();
    let c = client(serve(&pki), &pki.controller, Some(TOKEN));
    c.deploy_instance(&spec()).unwrap();
    let mut nat = spec();
    nat.id = "i2".into();
    c.deploy_instance(&nat).unwrap();
    let st = c
        .configure_instance("i1", &serde_json::json!({"default": "allow"}))
        .unwrap();
    assert_eq!(st.config_version, 2);
    c.migrate_instance("i1", "i2", &["f1".into()]).unwrap();
    let state = nfx_control::vnfm::FlowState {
        instance: "i1".into(),
        function: "firewall".into(),
        bytes: 3,
        data_b64: "AAAA".into(),
    };
    let e = c.import_state("i2", &state).unwrap_err();
    assert!(
        matches!(&e, VnfmError::Invalid(m) if m.contains("imports no flow state")),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
