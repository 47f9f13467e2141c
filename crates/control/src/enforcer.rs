//! The forwarding enforcer: the hop-by-hop steering of every service (which instance, on
//! which device and host, each hop goes to) and the ordered log of what it was told,
//! which the mediator's callers can read to check "steer away before destroy".
//!
//! With a [`Programmer`] (the host agents, [`crate::agents`]) every change is carried
//! out on the hosts before it is recorded; without one (simulated infrastructure) the
//! enforcer only records.

use nfx_model::Selector;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// One hop of a service path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Hop {
    /// Function served at this hop.
    pub function: String,
    /// Instance id.
    pub instance: String,
    /// Device of the instance.
    pub device: String,
    /// Host of the device.
    pub host: String,
}

/// What hosts need besides the hops to forward a service: where its traffic enters and
/// leaves, and which packets are its.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServiceEnds {
    /// Host where the traffic enters.
    pub ingress: String,
    /// Host where it leaves.
    pub egress: String,
    /// The service's packets (forward direction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<Selector>,
    /// The selector as the frames carry it inside the chain's NAT, when its source
    /// names a port forward (by the public endpoint: the forward's target there; by
    /// the target: the selector itself). Computed when the service is planned
    /// (`mediator::forwards`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside: Option<Selector>,
    /// The ESP tunnel the traffic crosses between two neighbouring hosts of the path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tunnel: Option<TunnelEnds>,
}

/// A placed ESP tunnel: its two endpoint instances, each on a queue pair of its host's
/// accelerator-tier device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TunnelEnds {
    /// Host where the forward traffic enters the tunnel.
    pub from: String,
    /// Host where it leaves the tunnel.
    pub to: String,
    /// The endpoint instance on `from`.
    pub from_instance: String,
    /// The endpoint instance on `to`.
    pub to_instance: String,
}

/// A service's programmed path.
#[derive(Debug, Clone, PartialEq)]
pub struct Steered {
    /// Ends and selector.
    pub ends: Option<ServiceEnds>,
    /// Hops in order.
    pub hops: Vec<Hop>,
    /// The hosts the path was programmed on, in order (empty: not programmed by this
    /// controller process).
    pub hosts: Vec<String>,
}

/// Carries steering out on real hosts.
pub trait Programmer: Send + Sync {
    /// Opens `service`'s path `now`, replacing `before` (if any) without a gap: the new
    /// path is in place on every host before the old one is removed. Returns the hosts
    /// the path crosses, in order.
    fn install(
        &self,
        service: &str,
        now: &Steered,
        before: Option<&Steered>,
    ) -> Result<Vec<String>, String>;
    /// Closes `service`'s path (`None`: not known, close it wherever it may be).
    fn withdraw(&self, service: &str, path: Option<&Steered>) -> Result<(), String>;
    /// Whether `now` could be installed as it is (checked when a deploy is planned, so
    /// that a path the hosts would refuse is refused before anything starts).
    fn check(&self, _now: &Steered) -> Result<(), String> {
        Ok(())
    }
}

/// Service id → path.
type Steering = BTreeMap<String, Steered>;

/// Steering state and its change log.
#[derive(Default)]
pub struct Enforcer {
    inner: Mutex<(Steering, Vec<String>)>,
    programmer: Option<Arc<dyn Programmer>>,
}

/// How many log lines are kept.
const LOG_CAP: usize = 10_000;

impl Enforcer {
    /// An enforcer that carries every change out through `p`.
    pub fn with_programmer(p: Arc<dyn Programmer>) -> Self {
        Enforcer {
            inner: Mutex::default(),
            programmer: Some(p),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (Steering, Vec<String>)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `service`'s path without programming it (state reloaded after a restart;
    /// the hosts are brought in line when their agents are next reached).
    pub fn load(&self, service: &str, hops: &[Hop], ends: Option<&ServiceEnds>) {
        self.lock().0.insert(
            service.to_string(),
            Steered {
                ends: ends.cloned(),
                hops: hops.to_vec(),
                hosts: Vec::new(),
            },
        );
    }

    /// Installs (or replaces) the steering of `service`; `ends` default to the ones the
    /// service was installed with.
    pub fn install(
        &self,
        service: &str,
        hops: &[Hop],
        ends: Option<&ServiceEnds>,
    ) -> Result<(), String> {
        let before = self.lock().0.get(service).cloned();
        let mut now = Steered {
            ends: ends
                .cloned()
                .or_else(|| before.as_ref().and_then(|b| b.ends.clone())),
            hops: hops.to_vec(),
            hosts: Vec::new(),
        };
        if let Some(p) = &self.programmer {
            now.hosts = p.install(service, &now, before.as_ref())?;
        }
        let mut g = self.lock();
        let line = format!(
            "install {service}: {}",
            hops.iter()
                .map(|h| h.instance.as_str())
                .collect::<Vec<_>>()
                .join(" -> ")
        );
        g.0.insert(service.to_string(), now);
        push_log(&mut g.1, line);
        Ok(())
    }

    /// Whether the hosts would take `now` (always, without a programmer).
    pub fn check(&self, now: &Steered) -> Result<(), String> {
        self.programmer.as_ref().map_or(Ok(()), |p| p.check(now))
    }

    /// Removes the steering of `service` (no-op if absent).
    pub fn withdraw(&self, service: &str) -> Result<(), String> {
        let before = self.lock().0.get(service).cloned();
        if let Some(p) = &self.programmer {
            p.withdraw(service, before.as_ref())?;
        }
        let mut g = self.lock();
        g.0.remove(service);
        push_log(&mut g.1, format!("withdraw {service}"));
        Ok(())
    }

    /// The current path of `service`.
    pub fn path(&self, service: &str) -> Option<Vec<Hop>> {
        self.lock().0.get(service).map(|s| s.hops.clone())
    }

    /// Every recorded path.
    pub fn all(&self) -> BTreeMap<String, Steered> {
        self.lock().0.clone()
    }

    /// Services whose path goes through `instance`.
    pub fn services_using(&self, instance: &str) -> Vec<String> {
        self.lock()
            .0
            .iter()
            .filter(|(_, s)| s.hops.iter().any(|h| h.instance == instance))
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// The change log, oldest first.
    pub fn log(&self) -> Vec<String> {
        self.lock().1.clone()
    }
}

fn push_log(log: &mut Vec<String>, line: String) {
    if log.len() == LOG_CAP {
        log.remove(0);
    }
    log.push(line);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hop(i: &str) -> Hop {
        Hop {
            function: "nat".into(),
            instance: i.into(),
            device: "d".into(),
            host: "h".into(),
        }
    }

    #[test]
    fn install_replace_withdraw() {
        let e = Enforcer::default();
        e.install("s", &[hop("a"), hop("b")], None).unwrap();
        assert_eq!(e.services_using("b"), vec!["s".to_string()]);
        e.install("s", &[hop("c")], None).unwrap();
        assert!(e.services_using("b").is_empty());
        assert_eq!(e.path("s").unwrap()[0].instance, "c");
        e.withdraw("s").unwrap();
        assert!(e.path("s").is_none());
        assert_eq!(
            e.log(),
            vec!["install s: a -> b", "install s: c", "withdraw s"]
        );
    }

    /// Records what it is asked; refuses services named `bad`.
    #[derive(Default)]
    struct Rec(Mutex<Vec<String>>);

    impl Programmer for Rec {
        fn install(
            &self,
            s: &str,
            now: &Steered,
            before: Option<&Steered>,
        ) -> Result<Vec<String>, String> {
            if s == "bad" {
                return Err("refused".into());
            }
            self.0.lock().unwrap().push(format!(
                "{s} {} after {:?} ends {:?}",
                now.hops.len(),
                before.map(|b| b.hops.len()),
                now.ends.as_ref().map(|e| e.ingress.clone())
            ));
            Ok(vec!["h".into()])
        }

        fn withdraw(&self, s: &str, path: Option<&Steered>) -> Result<(), String> {
            self.0
                .lock()
                .unwrap()
                .push(format!("withdraw {s} known {}", path.is_some()));
            Ok(())
        }
    }

    #[test]
    fn programmer_sees_the_old_path_and_keeps_the_ends_and_a_refusal_records_nothing() {
        let rec = Arc::new(Rec::default());
        let e = Enforcer::with_programmer(rec.clone());
        let ends = ServiceEnds {
            ingress: "h1".into(),
            egress: "h3".into(),
            selector: None,
            inside: None,
            tunnel: None,
        };
        e.install("s", &[hop("a")], Some(&ends)).unwrap();
        e.install("s", &[hop("a"), hop("b")], None).unwrap();
        e.withdraw("s").unwrap();
        e.withdraw("gone").unwrap();
        assert!(e.install("bad", &[hop("a")], None).is_err());
        assert!(e.path("bad").is_none());
        assert_eq!(
            *rec.0.lock().unwrap(),
            [
                "s 1 after None ends Some(\"h1\")",
                "s 2 after Some(1) ends Some(\"h1\")",
                "withdraw s known true",
                "withdraw gone known false"
            ]
        );
    }
}
