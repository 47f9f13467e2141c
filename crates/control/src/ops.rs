//! Long operations as records with an ETSI SOL003-like state machine, and the steps they
//! are made of. Each step is journaled (marked `started`) before it runs and marked `done`
//! after, so a controller restarted after a crash knows where every operation stood.

use crate::enforcer::Hop;
use crate::vnfm::InstanceSpec;
use serde::{Deserialize, Serialize};

/// Lifecycle of an operation (ETSI GS NFV-SOL 003 `LcmOperationStateType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OpState {
    /// Accepted and journaled, not yet running.
    Starting,
    /// Steps are being executed.
    Processing,
    /// Every step is done.
    Completed,
    /// A step failed; the operation will be rolled back.
    FailedTemp,
    /// Done steps are being undone in reverse order.
    RollingBack,
    /// Every done step was undone.
    RolledBack,
    /// Rollback itself failed; manual attention needed.
    Failed,
}

impl OpState {
    /// Every state, for metrics.
    pub const ALL: [OpState; 7] = [
        OpState::Starting,
        OpState::Processing,
        OpState::Completed,
        OpState::FailedTemp,
        OpState::RollingBack,
        OpState::RolledBack,
        OpState::Failed,
    ];

    /// The SOL003 name.
    pub fn as_str(self) -> &'static str {
        match self {
            OpState::Starting => "STARTING",
            OpState::Processing => "PROCESSING",
            OpState::Completed => "COMPLETED",
            OpState::FailedTemp => "FAILED_TEMP",
            OpState::RollingBack => "ROLLING_BACK",
            OpState::RolledBack => "ROLLED_BACK",
            OpState::Failed => "FAILED",
        }
    }

    /// Whether the operation has ended.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            OpState::Completed | OpState::RolledBack | OpState::Failed
        )
    }

    /// Whether `self → to` is a legal transition.
    pub fn can_go(self, to: OpState) -> bool {
        use OpState::*;
        matches!(
            (self, to),
            (Starting, Processing)
                | (Processing, Completed)
                | (Processing, FailedTemp)
                | (FailedTemp, RollingBack)
                | (FailedTemp, Processing)
                | (RollingBack, RolledBack)
                | (RollingBack, Failed)
        )
    }
}

/// What kind of request an operation carries out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpKind {
    /// Chain, place and deploy a service.
    Deploy,
    /// Steer away and destroy a service's instances.
    Destroy,
    /// Move an instance to another device.
    Migrate,
    /// Place a service again after it lost instances or a host on its path went down.
    Replace,
    /// A power manager decision: one knob on one worker of a service (no steps).
    Power,
    /// An SSM decision: a lookaside queue pair granted to a tunnel endpoint (no steps).
    Grant,
    /// An SSM decision: a tunnel endpoint's queue pair taken back (no steps).
    Revoke,
}

impl OpKind {
    /// The name as the API writes it (`deploy`, `migrate`, ...), for listings.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Deploy => "deploy",
            OpKind::Destroy => "destroy",
            OpKind::Migrate => "migrate",
            OpKind::Replace => "replace",
            OpKind::Power => "power",
            OpKind::Grant => "grant",
            OpKind::Revoke => "revoke",
        }
    }

    /// The event a decision of this kind is journaled under (`power.decision` for the
    /// power manager's, `ssm.decision` for the SSM's); `None` for the kinds that are
    /// operations with steps rather than one-shot decisions.
    pub fn decision_event(self) -> Option<&'static str> {
        match self {
            OpKind::Power => Some("power.decision"),
            OpKind::Grant | OpKind::Revoke => Some("ssm.decision"),
            OpKind::Deploy | OpKind::Destroy | OpKind::Migrate | OpKind::Replace => None,
        }
    }
}

/// One unit of work, executed against VNFMs, the enforcer or the resource model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// `deploy_instance` (undo: destruct).
    Deploy {
        /// The instance to create.
        spec: InstanceSpec,
    },
    /// `configure_instance` with the function's configuration.
    Configure {
        /// Instance id.
        instance: String,
        /// Configuration.
        config: serde_json::Value,
    },
    /// Push a service's hop-by-hop path to the forwarding enforcer (undo: withdraw it).
    Steer {
        /// Service id.
        service: String,
        /// Hops in order.
        hops: Vec<Hop>,
        /// Path it replaces, restored on undo.
        previous: Option<Vec<Hop>>,
    },
    /// Withdraw a service's path (undo: push it back).
    Unsteer {
        /// Service id.
        service: String,
        /// The withdrawn path.
        hops: Vec<Hop>,
    },
    /// `migrate_instance(old, new, flows)` (undo: move the flows back).
    Migrate {
        /// Source instance.
        old: String,
        /// Destination instance.
        new: String,
        /// Flow keys; empty = all.
        flows: Vec<String>,
    },
    /// The final copy of a migration across hosts, once the paths are re-steered: the
    /// flows `old` created after the `Migrate` step's copy go to `new` (flows `new`
    /// holds already are skipped). Undo: `new`'s flows copied back into `old`.
    CopyState {
        /// Source instance.
        old: String,
        /// Destination instance.
        new: String,
    },
    /// `destruct_instance` (cannot be undone; always the last kind of step).
    Destruct {
        /// Instance id.
        instance: String,
    },
}

impl Step {
    /// Short label for logs and metrics.
    pub fn label(&self) -> String {
        match self {
            Step::Deploy { spec } => format!("deploy {} on {}", spec.id, spec.device),
            Step::Configure { instance, .. } => format!("configure {instance}"),
            Step::Steer { service, .. } => format!("steer {service}"),
            Step::Unsteer { service, .. } => format!("unsteer {service}"),
            Step::Migrate { old, new, .. } => format!("migrate {old} -> {new}"),
            Step::CopyState { old, new } => format!("final copy {old} -> {new}"),
            Step::Destruct { instance } => format!("destruct {instance}"),
        }
    }
}

/// Journal status of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    /// Not yet run.
    Pending,
    /// Journaled as begun; its effect may or may not have happened.
    Started,
    /// Finished.
    Done,
    /// Undone during rollback.
    Undone,
}

/// A step and its journal status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The work.
    #[serde(flatten)]
    pub step: Step,
    /// Where it stands.
    pub status: StepStatus,
}

/// An operation record (stored, served by `GET /api/v1/operations/{id}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operation {
    /// Operation id.
    pub id: String,
    /// Kind of request.
    pub kind: OpKind,
    /// Service (deploy, destroy) or instance (migrate) it acts on.
    pub target: String,
    /// Current state.
    pub state: OpState,
    /// Steps in execution order.
    pub steps: Vec<StepRecord>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// Why it was decided (power manager decisions: the knob and the probe's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Set when a restarted controller picked the operation up.
    #[serde(default)]
    pub recovered: bool,
    /// Rows as they were before the operation, restored on rollback.
    #[serde(default)]
    pub restore: serde_json::Value,
    /// Creation time, ms since the epoch.
    pub created_ms: i64,
    /// Last change, ms since the epoch.
    pub updated_ms: i64,
}

/// An illegal state change.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("operation {id}: illegal transition {from} -> {to}")]
pub struct TransitionError {
    /// Operation id.
    pub id: String,
    /// Current state.
    pub from: &'static str,
    /// Requested state.
    pub to: &'static str,
}

impl Operation {
    /// A new operation in `STARTING` with every step pending.
    pub fn new(id: String, kind: OpKind, target: String, steps: Vec<Step>) -> Self {
        let now = crate::store::now_ms();
        Operation {
            id,
            kind,
            target,
            state: OpState::Starting,
            steps: steps
                .into_iter()
                .map(|step| StepRecord {
                    step,
                    status: StepStatus::Pending,
                })
                .collect(),
            error: None,
            reason: None,
            recovered: false,
            restore: serde_json::Value::Null,
            created_ms: now,
            updated_ms: now,
        }
    }

    /// Moves to `to` if the state machine allows it.
    pub fn go(&mut self, to: OpState) -> Result<(), TransitionError> {
        if !self.state.can_go(to) {
            return Err(TransitionError {
                id: self.id.clone(),
                from: self.state.as_str(),
                to: to.as_str(),
            });
        }
        self.state = to;
        self.updated_ms = crate::store::now_ms();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_machine_allows_only_sol003_paths() {
        let mut op = Operation::new("o".into(), OpKind::Deploy, "s".into(), vec![]);
        assert!(op.go(OpState::Completed).is_err());
        op.go(OpState::Processing).unwrap();
        op.go(OpState::FailedTemp).unwrap();
        op.go(OpState::RollingBack).unwrap();
        let e = op.go(OpState::Processing).unwrap_err();
        assert_eq!(e.from, "ROLLING_BACK");
        op.go(OpState::RolledBack).unwrap();
        assert!(op.state.is_final());
        for to in OpState::ALL {
            assert!(!op.state.can_go(to), "{to:?}");
        }
        let mut ok = Operation::new("p".into(), OpKind::Destroy, "s".into(), vec![]);
        ok.go(OpState::Processing).unwrap();
        ok.go(OpState::Completed).unwrap();
        assert!(ok.state.is_final() && !OpState::Processing.is_final());
    }

    #[test]
    fn kind_names_are_the_api_names() {
        for k in [
            OpKind::Deploy,
            OpKind::Destroy,
            OpKind::Migrate,
            OpKind::Replace,
            OpKind::Power,
            OpKind::Grant,
            OpKind::Revoke,
        ] {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str(), "{k:?}");
        }
    }

    #[test]
    fn records_serialize_with_sol003_names() {
        let op = Operation::new(
            "o".into(),
            OpKind::Migrate,
            "i".into(),
            vec![Step::Destruct {
                instance: "i".into(),
            }],
        );
        let v = serde_json::to_value(&op).unwrap();
        assert_eq!(v["state"], "STARTING");
        assert_eq!(v["steps"][0]["step"], "destruct");
        assert_eq!(v["steps"][0]["status"], "pending");
        let back: Operation = serde_json::from_value(v).unwrap();
        assert_eq!(back, op);
        assert_eq!(op.steps[0].step.label(), "destruct i");
    }
}
