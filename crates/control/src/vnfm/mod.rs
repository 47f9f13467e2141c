//! The unified VNFM interface (HYPER §III-A): the five calls every kind of infrastructure
//! answers, so that the mediator never knows which kind it is driving.

pub mod local;
pub mod remote;
pub mod sim;
pub mod state_file;

use serde::{Deserialize, Serialize};

/// What the mediator asks a VNFM to create: one instance of one function on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InstanceSpec {
    /// Instance id, chosen by the controller (deploy is idempotent per id).
    pub id: String,
    /// Function the instance runs (`firewall`, `nat`, ...).
    pub function: String,
    /// Device that hosts it.
    pub device: String,
    /// VNF configuration (rules etc.), the function's own format.
    #[serde(default)]
    pub config: serde_json::Value,
    /// Throughput the instance reserves on the device, Gbit/s.
    #[serde(default)]
    pub throughput_gbps: f64,
    /// Capacity the instance reserves on the device (cores, entries or queue pairs).
    #[serde(default)]
    pub capacity: f64,
}

/// What `get_instance_state` reports: identity, configuration generation and telemetry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InstanceState {
    /// Instance id.
    pub id: String,
    /// Function it runs.
    pub function: String,
    /// Device it runs on.
    pub device: String,
    /// `running` once deployed.
    pub status: String,
    /// How many times it was configured (1 after deploy).
    pub config_version: u64,
    /// Flow-state entries held.
    pub flows: u64,
    /// Packets processed.
    pub packets: u64,
    /// CPU utilisation of the instance's worker, percent (0 where not measurable).
    pub cpu_pct: f64,
    /// Implementation-specific details (node counters, device figures).
    #[serde(default)]
    pub detail: serde_json::Value,
}

/// Result of moving flow state between two instances.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MigrateReport {
    /// Flow entries moved.
    pub flows: u64,
    /// Bytes of exported state.
    pub bytes: u64,
    /// How long traffic was held at the new instance while the state moved (a
    /// loss-free handoff between workers sharing the interfaces), ms; absent when only
    /// the state was copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_ms: Option<f64>,
}

/// Most base64 characters of one instance's exported flow state that crosses hosts
/// (48 MiB of records: about 900,000 firewall flows of 56 bytes); a larger export is
/// refused, never truncated.
pub const MAX_STATE_B64: usize = 64 << 20;

/// One instance's flow state as it travels between VNFMs of different hosts (old agent →
/// controller → new agent): the worker's `export_state` blob, kept base64 as the worker
/// protocol carries it, so it is never decoded on the way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowState {
    /// Instance the state was exported from.
    pub instance: String,
    /// Its function: the importing instance must run the same one.
    pub function: String,
    /// Length of the blob in bytes.
    pub bytes: u64,
    /// The blob, base64 (standard alphabet, padded), at most [`MAX_STATE_B64`] characters.
    pub data_b64: String,
}

/// What importing a [`FlowState`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowImport {
    /// Flows added (records the instance held already, or refused, are not counted).
    pub flows: u64,
}

/// Why a VNFM call failed; the kind maps onto an HTTP status on the agent API.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VnfmError {
    /// Unknown instance or device.
    #[error("not found: {0}")]
    NotFound(String),
    /// The call conflicts with existing state (id reused with another spec, no room).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The request itself is wrong (bad config, unsupported function).
    #[error("invalid: {0}")]
    Invalid(String),
    /// The infrastructure could not be reached or failed.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// The five-call VNFM interface of HYPER, plus a listing used to reconcile after a restart.
pub trait Vnfm: Send + Sync {
    /// Short name of the implementation (`simulated`, `local`, `remote`).
    fn kind(&self) -> &'static str;
    /// Creates the instance (idempotent: the same spec twice is one instance).
    fn deploy_instance(&self, spec: &InstanceSpec) -> Result<InstanceState, VnfmError>;
    /// Removes the instance and frees its resources.
    fn destruct_instance(&self, id: &str) -> Result<(), VnfmError>;
    /// Replaces the instance's configuration without restarting it.
    fn configure_instance(
        &self,
        id: &str,
        config: &serde_json::Value,
    ) -> Result<InstanceState, VnfmError>;
    /// Moves flow state from `old` to `new`; an empty `flows` means every flow.
    fn migrate_instance(
        &self,
        old: &str,
        new: &str,
        flows: &[String],
    ) -> Result<MigrateReport, VnfmError>;
    /// Reads the instance's state and telemetry.
    fn get_instance_state(&self, id: &str) -> Result<InstanceState, VnfmError>;
    /// Ids of every instance the VNFM holds (for reconciliation).
    fn list_instances(&self) -> Result<Vec<String>, VnfmError>;
    /// Exports instance `id`'s flow state for another VNFM (a migration across hosts).
    /// VNFMs without movable flow state refuse.
    fn export_state(&self, id: &str) -> Result<FlowState, VnfmError> {
        Err(VnfmError::Invalid(format!(
            "{}: {id}: this VNFM exports no flow state to another host",
            self.kind()
        )))
    }
    /// Imports `state` (exported by another VNFM) into instance `id`: records it holds
    /// already are skipped, so a second, final copy adds only what is new.
    fn import_state(&self, id: &str, state: &FlowState) -> Result<FlowImport, VnfmError> {
        let _ = state;
        Err(VnfmError::Invalid(format!(
            "{}: {id}: this VNFM imports no flow state from another host",
            self.kind()
        )))
    }
    /// Hands tunnel endpoint `id` the pre-shared key its IKEv2 exchange authenticates
    /// with, before its deploy and over the VNFM's own authenticated channel (the key is
    /// never part of the spec, the plan or the journal). VNFMs that run no real tunnel
    /// endpoints have nothing to keep.
    fn provision_tunnel_key(&self, _id: &str, _psk: &[u8]) -> Result<(), VnfmError> {
        Ok(())
    }
}
