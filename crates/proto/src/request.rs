//! The requests a worker's control socket takes: one JSON object per line whose `cmd`
//! names the command, its other fields the command's arguments.
//!
//! [`Request::parse`] reads a line in one pass (no intermediate JSON value, so a large
//! `import_state` costs one copy of its base64 text); only a refused line is looked at
//! again, to say what is wrong and where (`steer: field `member`: ...`).

use crate::services::{InstanceConfig, ServiceConfig, ServiceSet};
use nfx_io::PollMode;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;

/// The commands, in the order error messages list them.
pub const COMMANDS: &str =
    "stats, reconfigure, export_state, import_state, hold, release, drain, steer, poll, shutdown";

/// One control request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Every counter ([`crate::Stats`]).
    Stats {},
    /// Replaces what the workers run ([`crate::Reconfigured`]).
    Reconfigure(Reconfigure),
    /// The flow state of one node ([`crate::Exported`]).
    ExportState(ExportState),
    /// Loads flow state exported by another worker into one node ([`crate::Imported`]).
    ImportState(ImportState),
    /// Stops reading the ports; frames wait in the sockets ([`crate::Held`]).
    Hold {},
    /// Resumes reading, oldest queued frame first ([`crate::Held`]).
    Release {},
    /// Forwards what is queued, then holds ([`crate::Drained`]).
    Drain {},
    /// Points the fanout groups of both ports at one member ([`crate::Steered`]).
    Steer(Steer),
    /// Sets the poll mode of one worker or all, live ([`crate::PollSet`]).
    Poll(Poll),
    /// Stops every worker after its current vector ([`crate::Ack`]).
    Shutdown {},
}

/// `reconfigure`: either `chain` (one implicit service over a chain of node specs) or
/// the services form (`services` and `instances`), never both.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reconfigure {
    /// Node specs in chain order, each `{function: config}`; the configuration is the
    /// VNF's own format, checked by the worker's node builder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<Vec<serde_json::Value>>,
    /// Every instance the worker runs, by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<BTreeMap<String, InstanceConfig>>,
    /// Services in classification order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<Vec<ServiceConfig>>,
}

/// What a [`Reconfigure`] asks for, once checked.
#[derive(Debug, Clone, PartialEq)]
pub enum ReconfigureForm {
    /// The `chain:` form.
    Chain(Vec<serde_json::Value>),
    /// The services form.
    Services(ServiceSet),
}

impl Reconfigure {
    /// The request for the `chain:` form.
    pub fn chain(specs: Vec<serde_json::Value>) -> Self {
        Self {
            chain: Some(specs),
            ..Self::default()
        }
    }

    /// The request for the services form.
    pub fn services(set: ServiceSet) -> Self {
        Self {
            chain: None,
            instances: Some(set.instances),
            services: Some(set.services),
        }
    }

    /// Which form this is; both forms at once, or neither, is an error.
    pub fn topology(self) -> Result<ReconfigureForm, String> {
        match (self.chain, self.services, self.instances) {
            (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
                Err("reconfigure: give `chain` or `services`/`instances`, not both".into())
            }
            (Some(chain), None, None) => Ok(ReconfigureForm::Chain(chain)),
            (None, None, None) => {
                Err("reconfigure: needs `chain` or `services`/`instances`".into())
            }
            (None, services, instances) => Ok(ReconfigureForm::Services(ServiceSet {
                services: services.unwrap_or_default(),
                instances: instances.unwrap_or_default(),
            })),
        }
    }
}

/// `export_state`: which node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportState {
    /// Node name (instance id).
    pub node: String,
}

/// `import_state`: which node and the exported blob, base64.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportState {
    /// The blob an `export_state` answered with, base64 (standard alphabet, padded).
    pub data_b64: String,
    /// Node name (instance id).
    pub node: String,
}

/// `steer`: the fanout member (join order, from 0) that gets the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Steer {
    /// Fanout member index.
    pub member: u32,
}

/// `poll`: the new mode, for one worker or (no `worker`) all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Poll {
    /// `busy`, `interrupt` or `adaptive`.
    #[serde(serialize_with = "mode_out", deserialize_with = "mode_in")]
    pub mode: PollMode,
    /// Worker index; every worker when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<usize>,
}

fn mode_out<S: Serializer>(m: &PollMode, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(m.as_str())
}

/// The mode by name, with the error `nfx run`'s config gives for an unknown one.
fn mode_in<'de, D: Deserializer<'de>>(d: D) -> Result<PollMode, D::Error> {
    let name = std::borrow::Cow::<str>::deserialize(d)?;
    name.parse().map_err(serde::de::Error::custom)
}

/// A command without arguments, for the error of one given some.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

impl Request {
    /// The request's command name (`cmd`).
    pub fn cmd(&self) -> &'static str {
        match self {
            Request::Stats {} => "stats",
            Request::Reconfigure(_) => "reconfigure",
            Request::ExportState(_) => "export_state",
            Request::ImportState(_) => "import_state",
            Request::Hold {} => "hold",
            Request::Release {} => "release",
            Request::Drain {} => "drain",
            Request::Steer(_) => "steer",
            Request::Poll(_) => "poll",
            Request::Shutdown {} => "shutdown",
        }
    }

    /// Reads one request line. The error says what is wrong: not JSON, no `cmd`, an
    /// unknown command (listing the known ones), or the command and the field
    /// (`poll: field `worker`: invalid value ...`).
    pub fn parse(line: &str) -> Result<Request, String> {
        serde_json::from_str(line).map_err(|e| explain(line, e))
    }

    /// The request as one line of JSON (no newline).
    pub fn to_line(&self) -> String {
        // A request holds only strings, numbers, lists and string-keyed maps.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// Why `line` is not a request (`first` is the error of the one-pass parse).
fn explain(line: &str, first: serde_json::Error) -> String {
    let v: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return format!("request is not JSON: {e}"),
    };
    let Some(mut body) = v.as_object().cloned() else {
        return "request is not a JSON object".into();
    };
    let cmd = match body.remove("cmd") {
        Some(serde_json::Value::String(c)) => c,
        _ => return "request has no string field `cmd`".into(),
    };
    let body = serde_json::Value::Object(body);
    let why = match cmd.as_str() {
        "reconfigure" => field_error::<Reconfigure>(body),
        "export_state" => field_error::<ExportState>(body),
        "import_state" => field_error::<ImportState>(body),
        "steer" => field_error::<Steer>(body),
        "poll" => field_error::<Poll>(body),
        "stats" | "hold" | "release" | "drain" | "shutdown" => field_error::<NoArgs>(body),
        other => return format!("unknown cmd `{other}` ({COMMANDS})"),
    };
    format!("{cmd}: {}", why.unwrap_or_else(|| first.to_string()))
}

/// The error of reading `body` as `T`, naming the field when there is one.
fn field_error<T: DeserializeOwned>(body: serde_json::Value) -> Option<String> {
    let e = serde_path_to_error::deserialize::<_, T>(body).err()?;
    let path = e.path().to_string();
    Some(if path == "." {
        e.into_inner().to_string()
    } else {
        format!("field `{path}`: {}", e.into_inner())
    })
}
