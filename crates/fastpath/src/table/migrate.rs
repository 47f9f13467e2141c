//! Live migration of a table-tier chain to another chain on the same host (HYPER's
//! `migrate_instance` for hardware VNFs; the new chain is typically prepared with larger
//! tables). The old chain keeps carrying traffic while its state is copied; then the new
//! chain replaces it on every hook in one `bpf_link_update` per hook, so each frame runs
//! exactly one of the two; last, the flows the old chain created during the copy are
//! copied too. Mappings and flow states travel in the export blobs (batch map
//! operations); the NAT's port cursors travel as well, so the new chain goes on
//! allocating where the old one stopped.
//!
//! What can still go wrong is counted, not hidden: a flow whose first frame reached the
//! old chain during the copy and whose next frame reached the new chain before the
//! final copy gets a mapping of the new chain's own (the final copy then skips it);
//! [`Migration::remapped`] counts every NAT mapping of the old chain the new one does
//! not hold identically after the move.

use super::raw::RawKey;
use super::{Function, TableChain, TableError};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What [`TableChain::migrate_to`] moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    /// Flow records imported into the new chain, over all functions (a firewall flow,
    /// a NAT mapping, an elephant counter each count one).
    pub flows: usize,
    /// Of those, records the old chain created during the bulk copy, copied after the
    /// switch.
    pub after_switch: usize,
    /// NAT mappings of the old chain that the new one does not hold with the same
    /// public address and port afterwards (0 when no mapping changed).
    pub remapped: usize,
    /// Time of the bulk copy (the old chain carries traffic throughout).
    pub copy: Duration,
    /// Time of the switch of every hook.
    pub switch: Duration,
    /// Time from the start to the end of the final copy.
    pub total: Duration,
}

impl Migration {
    /// Flow records moved per second of the whole migration.
    pub fn flows_per_s(&self) -> f64 {
        self.flows as f64 / self.total.as_secs_f64().max(1e-9)
    }
}

impl TableChain {
    /// Moves this chain's traffic and flow state to `new`: every function's state is
    /// exported and imported while this chain runs, `new` takes over this chain's hooks
    /// atomically ([`TableChain::take_over`]), then what was created here in between is
    /// copied (flows `new` holds already are skipped, so no flow it carries changes).
    /// `new` must hold the same functions in the same order, installed, with tables
    /// large enough, and not be attached; this chain must be attached. On an error
    /// before the switch this chain still carries the traffic.
    pub fn migrate_to(&mut self, new: &mut TableChain) -> Result<Migration, TableError> {
        let kinds = |c: &TableChain| c.functions.iter().map(Function::kind).collect::<Vec<_>>();
        if kinds(self) != kinds(new) {
            return Err(TableError::Request(format!(
                "migration needs the same functions in the same order: {:?} → {:?}",
                kinds(self),
                kinds(new)
            )));
        }
        if !self.is_attached() || new.is_attached() {
            return Err(TableError::Request(
                "migration goes from an attached chain to one that is not".into(),
            ));
        }
        let start = Instant::now();
        let bulk = self.copy_state_to(new)?;
        new.copy_cursors_from(self)?;
        let copy = start.elapsed();
        new.take_over(self)?;
        let switch = start.elapsed() - copy;
        let delta = self.copy_state_to(new)?;
        let total = start.elapsed();
        let remapped = self.remapped_in(new)?;
        Ok(Migration {
            flows: bulk + delta,
            after_switch: delta,
            remapped,
            copy,
            switch,
            total,
        })
    }

    /// Exports every function's flows and imports them into the same function of `to`
    /// (flows `to` holds already are skipped); returns the records imported.
    fn copy_state_to(&self, to: &mut TableChain) -> Result<usize, TableError> {
        let mut moved = 0;
        for i in 0..self.functions.len() {
            moved += self.copy_function_to(i, to, i)?;
        }
        Ok(moved)
    }

    /// Copies function `from`'s flows into function `to` of `new` (flows `new` holds
    /// already are skipped); returns the records imported. The step a move of one
    /// function between chains is made of (a controller's migration of one instance to
    /// another table device): the bulk copy while this chain carries the traffic (with
    /// [`TableChain::copy_cursors_from`]), and again, for what it created in between,
    /// once the traffic runs the new chain. The two must be functions of one kind.
    pub fn copy_function_to(
        &self,
        from: usize,
        new: &mut TableChain,
        to: usize,
    ) -> Result<usize, TableError> {
        let (a, b) = (
            self.function_index(from)?.kind(),
            new.function_index(to)?.kind(),
        );
        if a != b {
            return Err(TableError::Request(format!(
                "state of a {a} cannot move into a {b}"
            )));
        }
        let mut blob = Vec::new();
        self.export_state(from, &mut blob)?;
        let moved = new.import_state(to, &blob).map_err(|e| {
            TableError::Request(format!("importing {}'s state: {e}", self.names[from]))
        })?;
        Ok(moved)
    }

    /// Takes the NAT's per-protocol port cursors of `old` (nothing when either chain has
    /// no NAT), so this chain goes on allocating where `old` stopped. Call it before
    /// this chain carries traffic.
    pub fn copy_cursors_from(&self, old: &TableChain) -> Result<(), TableError> {
        if self.index_of("nat").is_none() || old.index_of("nat").is_none() {
            return Ok(());
        }
        for ci in 0..3u32 {
            if let Some(c) = old.nat_cursor.get::<u32, u32>(&ci)? {
                self.nat_cursor.put(&ci, &c)?;
            }
        }
        Ok(())
    }

    /// Live NAT mappings: inside flow → (public address, public port).
    fn nat_forward(&self) -> Result<HashMap<RawKey, ([u32; 4], u16)>, TableError> {
        Ok(self
            .nat_live(self.now_ns())?
            .into_iter()
            .map(|(k, v, _)| (k, (v.addr, v.port)))
            .collect())
    }

    /// NAT mappings of this chain that `new` lacks or holds with another public end (0
    /// when either has no NAT): what a move changed, which a move should leave at 0.
    pub fn remapped_in(&self, new: &TableChain) -> Result<usize, TableError> {
        if self.index_of("nat").is_none() || new.index_of("nat").is_none() {
            return Ok(0);
        }
        let now = new.nat_forward()?;
        Ok(self
            .nat_forward()?
            .iter()
            .filter(|(k, v)| now.get(k) != Some(v))
            .count())
    }
}
