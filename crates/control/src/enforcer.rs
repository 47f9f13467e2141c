//! The forwarding enforcer: holds the hop-by-hop steering of every service (which instance,
//! on which device and host, each hop goes to) and the ordered log of what it was told,
//! which the mediator's callers can read to check "steer away before destroy".

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;

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

/// Service id → hops.
type Steering = BTreeMap<String, Vec<Hop>>;

/// Steering state and its change log.
#[derive(Default)]
pub struct Enforcer {
    inner: Mutex<(Steering, Vec<String>)>,
}

/// How many log lines are kept.
const LOG_CAP: usize = 10_000;

impl Enforcer {
    fn lock(&self) -> std::sync::MutexGuard<'_, (Steering, Vec<String>)> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs (or replaces) the steering of `service`.
    pub fn install(&self, service: &str, hops: &[Hop]) {
        let mut g = self.lock();
        let line = format!(
            "install {service}: {}",
            hops.iter()
                .map(|h| h.instance.as_str())
                .collect::<Vec<_>>()
                .join(" -> ")
        );
        g.0.insert(service.to_string(), hops.to_vec());
        push_log(&mut g.1, line);
    }

    /// Removes the steering of `service` (no-op if absent).
    pub fn withdraw(&self, service: &str) {
        let mut g = self.lock();
        g.0.remove(service);
        push_log(&mut g.1, format!("withdraw {service}"));
    }

    /// The current path of `service`.
    pub fn path(&self, service: &str) -> Option<Vec<Hop>> {
        self.lock().0.get(service).cloned()
    }

    /// Services whose path goes through `instance`.
    pub fn services_using(&self, instance: &str) -> Vec<String> {
        self.lock()
            .0
            .iter()
            .filter(|(_, h)| h.iter().any(|h| h.instance == instance))
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
        e.install("s", &[hop("a"), hop("b")]);
        assert_eq!(e.services_using("b"), vec!["s".to_string()]);
        e.install("s", &[hop("c")]);
        assert!(e.services_using("b").is_empty());
        assert_eq!(e.path("s").unwrap()[0].instance, "c");
        e.withdraw("s");
        assert!(e.path("s").is_none());
        assert_eq!(
            e.log(),
            vec!["install s: a -> b", "install s: c", "withdraw s"]
        );
    }
}
