//! Migration of a table-tier instance to another table device of the host (the
//! controller's migrate branch: deploy the new instance, migrate, re-steer, destroy the
//! old one). The new instance has no chain until the re-steered path puts it in one, so
//! [`Tables::migrate`] only records the move (and measures the state it will carry);
//! the state moves with the steering, make-before-break:
//!
//! 1. **bulk copy**: when the path's chain holding the new instance is loaded, before
//!    it is attached, the old instance's flows (NAT mappings, connection-tracking
//!    entries, elephant counters) are exported from its running chain by batch map
//!    operations and imported into it, with the NAT's port cursors; a failed import
//!    fails the path, and the old chain, still attached and still steered to, keeps
//!    serving (the controller then rolls the migration back);
//! 2. **switch**: the host's steering sends the service's frames to the new device;
//! 3. **final copy**: the old chain, no longer steered to, gives what it created since
//!    the bulk copy (flows the new chain holds already are skipped), the mappings of
//!    both are compared ([`Moved::remapped`]), and the old chain is detached and its
//!    maps freed. On one device (the old chain replaced in place) the switch is the
//!    atomic `take_over` and the final copy follows it. Where the chain the instance
//!    leaves stays on the path with its other instances (switched in place to a chain
//!    without it), the chain taking the state is loaded first, while the old one
//!    still runs the instance, and the final copy follows the old one's switch.
//!
//! What the move carried is part of the new instance's state (`detail.migrated`).

use super::{Inner, Running, Tables};
use crate::vnfm::{MigrateReport, VnfmError};
use nfx_fastpath::table::TableChain;
use serde::Serialize;

/// A move under way: the instance whose state the new one takes, and the flows the
/// bulk copy carried (once it ran).
#[derive(Debug, Clone)]
pub(super) struct Move {
    from: String,
    bulk: Option<usize>,
}

/// What a finished move carried (the new instance's `detail.migrated`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(super) struct Moved {
    /// The instance the state came from.
    from: String,
    /// Flow records imported (bulk and final copy).
    flows: usize,
    /// Of those, records the old chain created during the bulk copy.
    after_switch: usize,
    /// NAT mappings of the old chain the new one does not hold identically (0 when no
    /// mapping changed).
    remapped: usize,
}

impl Tables {
    /// Records that instance `new` takes the flow state of instance `old` when the path
    /// puts it in a chain; both are table-tier instances of this host running the same
    /// function. Answers with the state `old` holds now (flows, bytes exported). The
    /// reverse call of a move not yet carried out cancels it (a rolled-back migration).
    pub fn migrate(&self, old: &str, new: &str) -> Result<MigrateReport, VnfmError> {
        let mut g = self.inner();
        if g.moves.get(old).is_some_and(|m| m.from == new) {
            g.moves.remove(old);
            return Ok(MigrateReport {
                flows: 0,
                bytes: 0,
                held_ms: None,
            });
        }
        let kind = |id: &str| {
            g.instances
                .get(id)
                .map(|d| d.spec.function.clone())
                .ok_or_else(|| VnfmError::NotFound(id.to_string()))
        };
        let (ko, kn) = (kind(old)?, kind(new)?);
        if ko != kn || old == new {
            return Err(VnfmError::Invalid(format!(
                "{old} ({ko}) → {new} ({kn}): state moves between two instances of one function"
            )));
        }
        let (flows, bytes) = match g.chain_of(old).and_then(|k| g.chains.get(&k)) {
            Some(r) => {
                let i = index_in(&r.instances, old);
                let mut blob = Vec::new();
                let n = r
                    .chain
                    .export_state(i, &mut blob)
                    .map_err(|e| VnfmError::Unavailable(format!("{old}: export: {e}")))?;
                (n as u64, blob.len() as u64)
            }
            None => (0, 0),
        };
        g.moves.insert(
            new.to_string(),
            Move {
                from: old.to_string(),
                bulk: None,
            },
        );
        log::info!("table instance {new}: takes the state of {old} ({flows} flows) at its steer");
        Ok(MigrateReport {
            flows,
            bytes,
            held_ms: None,
        })
    }
}

/// The instances a service's new chain of `ids` on a device keeps from its running
/// chain of `old`, as (index in `old`, index in the new chain). Their flow state goes
/// along when the new chain takes the old one's place ([`copy_kept`], then
/// [`finish_kept`]): a path change that only adds or removes another instance of the
/// chain leaves their connection tracking, NAT mappings and elephant counters as they
/// were.
pub(super) fn kept(old: &[String], ids: &[String]) -> Vec<(usize, usize)> {
    ids.iter()
        .enumerate()
        .filter_map(|(j, id)| Some((old.iter().position(|i| i == id)?, j)))
        .collect()
}

/// The bulk copy of the `kept` instances' flows from `old` (still attached) into `new`
/// (not attached yet), with the NAT's port cursors when the NAT is one of them; returns
/// the records imported.
pub(super) fn copy_kept(
    old: &Running,
    new: &mut TableChain,
    kept: &[(usize, usize)],
) -> Result<usize, String> {
    let mut n = 0;
    for &(i, j) in kept {
        n += old
            .chain
            .copy_function_to(i, new, j)
            .map_err(|e| format!("carrying the state of {}: {e}", old.instances[i]))?;
        if old.chain.functions()[i].kind() == "nat" {
            new.copy_cursors_from(&old.chain)
                .map_err(|e| format!("carrying the port cursors of {}: {e}", old.instances[i]))?;
        }
    }
    Ok(n)
}

/// The final copy after `new` took `old`'s place: the flows of the `kept` instances
/// that `old` created after the bulk copy (flows `new` holds already are skipped).
pub(super) fn finish_kept(old: &Running, new: &mut TableChain, kept: &[(usize, usize)]) {
    for &(i, j) in kept {
        if let Err(e) = old.chain.copy_function_to(i, new, j) {
            log::error!("table instance {}: final copy: {e}", old.instances[i]);
        }
    }
}

/// Index of `id` in `ids` (0 if absent; callers look it up first).
fn index_in(ids: &[String], id: &str) -> usize {
    ids.iter().position(|i| i == id).unwrap_or(0)
}

impl Inner {
    /// The bulk copy into `chain` (loaded for instances `ids`, not attached yet): every
    /// instance of `ids` that takes another's state gets that instance's flows from its
    /// running chain, and the NAT's port cursors with them.
    pub(super) fn copy_moves_into(
        &mut self,
        chain: &mut TableChain,
        ids: &[String],
    ) -> Result<(), String> {
        for (j, id) in ids.iter().enumerate() {
            let Some(m) = self.moves.get(id) else {
                continue;
            };
            let from = m.from.clone();
            let Some(r) = self.chain_of(&from).and_then(|k| self.chains.get(&k)) else {
                continue;
            };
            let i = index_in(&r.instances, &from);
            let n = r
                .chain
                .copy_function_to(i, chain, j)
                .and_then(|n| chain.copy_cursors_from(&r.chain).map(|()| n))
                .map_err(|e| format!("moving the state of {from} into {id}: {e}"))?;
            log::info!("table instance {id}: {n} flows of {from} copied before the switch");
            if let Some(m) = self.moves.get_mut(id) {
                m.bulk = Some(n);
            }
        }
        Ok(())
    }

    /// The final copy out of chain `from`, which no longer carries traffic, into
    /// `to` (running instances `to_ids`): for every move from an instance of `from` to
    /// one of `to_ids` whose bulk copy ran, what `from` created since is copied and the
    /// mappings compared; the move is then done and recorded.
    pub(super) fn finish_moves(&mut self, from: &Running, to: &mut TableChain, to_ids: &[String]) {
        let done: Vec<(usize, String, usize, String, usize)> = to_ids
            .iter()
            .enumerate()
            .filter_map(|(j, id)| {
                let m = self.moves.get(id)?;
                let i = from.instances.iter().position(|x| *x == m.from)?;
                Some((j, id.clone(), i, m.from.clone(), m.bulk?))
            })
            .collect();
        for (j, id, i, old, bulk) in done {
            let delta = from.chain.copy_function_to(i, to, j).unwrap_or_else(|e| {
                log::error!("table instance {id}: final copy from {old}: {e}");
                0
            });
            let remapped = from.chain.remapped_in(to).unwrap_or(usize::MAX);
            if remapped != 0 {
                log::warn!("table instance {id}: {remapped} NAT mappings of {old} changed");
            }
            log::info!("table instance {id}: took {} flows of {old}", bulk + delta);
            self.moves.remove(&id);
            self.moved.insert(
                id,
                Moved {
                    from: old,
                    flows: bulk + delta,
                    after_switch: delta,
                    remapped,
                },
            );
        }
    }

    /// The final copy out of chain `from` (leaving its device) into every running chain
    /// that takes an instance's state from it.
    pub(super) fn finish_moves_out_of(&mut self, from: &Running) {
        let mut chains = std::mem::take(&mut self.chains);
        for r in chains.values_mut() {
            self.finish_moves(from, &mut r.chain, &r.instances);
        }
        self.chains = chains;
    }

    /// Forgets the moves into or out of instance `id`, and what moved into it.
    pub(super) fn forget_moves(&mut self, id: &str) {
        self.moves.retain(|new, m| new != id && m.from != id);
        self.moved.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::kept;

    #[test]
    fn a_new_chain_keeps_the_instances_both_chains_hold_wherever_they_stand() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let old = ids(&["fw", "ele", "nat"]);
        assert_eq!(kept(&old, &ids(&["fw", "nat"])), [(0, 0), (2, 1)]);
        assert_eq!(kept(&old, &ids(&["ele2", "nat"])), [(2, 1)]);
        assert_eq!(kept(&ids(&["nat"]), &ids(&["ele", "nat"])), [(0, 1)]);
        assert!(kept(&old, &ids(&["other"])).is_empty());
    }
}
