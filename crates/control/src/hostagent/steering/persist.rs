//! The host's programmed paths kept across an agent restart.
//!
//! The kernel keeps the `nfx_steer` table, the policy rules and the mark tables when the
//! agent dies, so traffic keeps flowing while it is down. A restarted agent that closed
//! the host and waited for the controller to send its paths again would stop every
//! service for that round trip. Instead each change of the paths is written to a record
//! (the paths and their mark slots), and a restarted agent loads the same table again in
//! one transaction — the packets see no change — keeping the rules and routes of marks
//! still in use and removing the others. The controller's paths, sent when it sees the
//! restart, then replace the record's as any update does (unchanged paths keep their
//! marks). A record that is missing, unreadable or names what this host no longer has
//! (a stage, a neighbor, a tunnel) closes the host as before.

use super::{Programmed, SteerError, Steering, MARK_BASE, RULE_PREF, SLOTS};
use crate::hostagent::record;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// One service's path as recorded: the path and its mark slot.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Recorded {
    path: super::HostPath,
    slot: u32,
}

/// What a restarted agent found in its steering record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restored {
    /// No record: the host was closed.
    Closed,
    /// The record's paths are programmed again (this many services).
    Paths(usize),
    /// The record could not be used (the reason); the host was closed.
    Refused(String),
}

impl Steering {
    /// Records every later change of the paths in `file` (written atomically).
    pub fn with_record(mut self, file: PathBuf) -> Self {
        self.record = Some(file);
        self
    }

    /// Writes the programmed paths to the record, if there is one. A failure is logged:
    /// the paths are programmed, only a restart would close the host until the
    /// controller sends them again.
    pub(super) fn save_record(&self) {
        let Some(file) = &self.record else {
            return;
        };
        let paths: BTreeMap<&String, Recorded> = self
            .services
            .iter()
            .map(|(s, p)| {
                let r = Recorded {
                    path: p.path.clone(),
                    slot: p.slot,
                };
                (s, r)
            })
            .collect();
        if let Err(e) = record::save(file, &paths) {
            log::warn!("steering record: {e}");
        }
    }

    /// At agent start: programs the recorded paths again if the record is whole and
    /// everything it names is here, else closes the host ([`Steering::reset`]). Call it
    /// after the tunnels are known ([`Steering::set_tunnel`]).
    pub fn restore(&mut self) -> Result<Restored, SteerError> {
        let Some(file) = self.record.clone() else {
            self.reset()?;
            return Ok(Restored::Closed);
        };
        if !file.exists() {
            self.reset()?;
            return Ok(Restored::Closed);
        }
        match self.reprogram(&file) {
            Ok(n) => Ok(Restored::Paths(n)),
            Err(why) => {
                log::warn!("steering record not used, host closed: {why}");
                if let Some(dir) = file.parent() {
                    record::set_aside(dir, &file);
                }
                self.reset()?;
                Ok(Restored::Refused(why))
            }
        }
    }

    /// Loads the record's paths: keeps the rules of marks they use (their routes
    /// replaced in place), removes the other rules at nfx's priority, then installs the
    /// table in one transaction.
    fn reprogram(&mut self, file: &Path) -> Result<usize, String> {
        let recorded: BTreeMap<String, Recorded> = record::load(file)?;
        let mut wanted = BTreeMap::new();
        let mut slots = BTreeSet::new();
        for (service, r) in recorded {
            super::check_service_id(&service).map_err(|e| e.to_string())?;
            if !(1..=SLOTS).contains(&r.slot) || !slots.insert(r.slot) {
                return Err(format!("{service}: slot {} out of range or reused", r.slot));
            }
            let segments = self
                .segments(&r.path, MARK_BASE | (r.slot << 4))
                .map_err(|e| format!("{service}: {e}"))?;
            let p = Programmed {
                path: r.path,
                segments,
                drains: Vec::new(),
                slot: r.slot,
            };
            wanted.insert(service, p);
        }
        let needed = super::routes_of(&wanted);
        self.services.clear();
        self.routed.clear();
        for table in self.rule_tables() {
            match table.parse::<u32>().ok().filter(|m| needed.contains_key(m)) {
                Some(mark) => {
                    self.routed.insert(mark);
                }
                None => self.remove_rule(&table),
            }
        }
        self.next_slot = slots.last().map_or(1, |s| s % SLOTS + 1);
        let n = wanted.len();
        self.switch_routes(wanted, true)
            .map_err(|e| e.to_string())?;
        Ok(n)
    }

    /// The tables named by nfx's rules (`ip rule` at [`RULE_PREF`]), as `ip` lists them.
    pub(super) fn rule_tables(&mut self) -> Vec<String> {
        #[derive(Deserialize)]
        struct Rule {
            #[serde(default)]
            table: Option<String>,
        }
        let rules = self
            .tools
            .ip(&["-j", "rule", "show", "pref", RULE_PREF])
            .unwrap_or_default();
        let rules: Vec<Rule> = serde_json::from_str(&rules).unwrap_or_default();
        rules.into_iter().filter_map(|r| r.table).collect()
    }

    /// Removes one of nfx's rules (the one naming `table`) and flushes that table.
    pub(super) fn remove_rule(&mut self, table: &str) {
        let _ = self.tools.ip(&["route", "flush", "table", table]);
        let _ = self
            .tools
            .ip(&["rule", "del", "table", table, "pref", RULE_PREF]);
    }
}
