//! The answers of a worker's control socket, one type per request, and the error form
//! `{"error": "..."}` any request may get instead.

use crate::stats::NodeStats;
use serde::{Deserialize, Serialize};

/// The answer to a refused request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    /// What went wrong, for a person.
    pub error: String,
}

/// The answer to `shutdown`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// Always true.
    pub ok: bool,
}

/// The answer to `hold` and `release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    /// Always true.
    pub ok: bool,
    /// Whether the worker holds now.
    pub held: bool,
}

/// The answer to `drain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drained {
    /// Always true.
    pub ok: bool,
    /// Always true: a drained worker holds.
    pub held: bool,
    /// Frames processed while draining.
    pub packets: u64,
}

/// The answer to `steer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Steered {
    /// Always true.
    pub ok: bool,
    /// The member that gets the traffic now.
    pub member: u32,
}

/// The answer to `poll`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PollSet {
    /// Always true.
    pub ok: bool,
    /// The mode set.
    pub poll: String,
}

/// The answer to `import_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Imported {
    /// Always true.
    pub ok: bool,
    /// Flows added (all or nothing).
    pub flows: u64,
}

/// The answer to `export_state`. The blob travels as base64 text, which JSON carries
/// without escaping: tens of megabytes are written and read in one pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exported {
    /// The node exported.
    pub node: String,
    /// Length of the blob.
    pub bytes: u64,
    /// The blob, base64 (standard alphabet, padded).
    pub data_b64: String,
}

impl Exported {
    /// The answer line (no newline), as `serde_json::to_string` writes it, but with the
    /// base64 text copied in one piece instead of checked byte by byte for escapes
    /// (base64 needs none): about twice as fast for a blob of tens of megabytes.
    pub fn to_line(&self) -> String {
        let b64 = self.data_b64.as_bytes();
        if !b64
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
        {
            return serde_json::to_string(self).unwrap_or_default();
        }
        let node = serde_json::to_string(&self.node).unwrap_or_default();
        let mut line = String::with_capacity(b64.len() + node.len() + 64);
        line.push_str(r#"{"node":"#);
        line.push_str(&node);
        line.push_str(r#","bytes":"#);
        line.push_str(&self.bytes.to_string());
        line.push_str(r#","data_b64":""#);
        line.push_str(&self.data_b64);
        line.push_str(r#""}"#);
        line
    }
}

/// The answer to `reconfigure`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reconfigured {
    /// Always true.
    pub ok: bool,
    /// Instance ids (node names); for the `chain:` form in chain order.
    pub nodes: Vec<String>,
    /// Service ids in classification order (absent for the `chain:` form).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub services: Option<Vec<String>>,
    /// Flows carried from old nodes to new nodes of the same id.
    pub flows_carried: u64,
    /// The worker's instance name ([`crate::Stats::name`]).
    #[serde(default)]
    pub name: String,
    /// CPU of the worker threads over the last ~1 s, summed, in % of a core.
    #[serde(default)]
    pub cpu_pct: f64,
    /// The counters, right after the swap, of the instances this reconfiguration built
    /// (new ids or changed specs), in instance order: what a deploy or a configuration
    /// change reports about its instance. Kept instances are not listed; the `stats`
    /// request has every node. The three fields default to empty so that an agent reads
    /// the answer of a worker started by an older binary (which sent the whole stats
    /// document instead) and falls back to one `stats` request.
    #[serde(default)]
    pub built: Vec<NodeStats>,
}

/// The answer line of `result`: the answer, or the error form.
pub fn answer_line<T: Serialize>(result: Result<T, String>) -> String {
    let error = match result.map(|a| serde_json::to_string(&a)) {
        Ok(Ok(line)) => return line,
        Ok(Err(e)) => format!("the answer could not be written: {e}"),
        Err(e) => e,
    };
    serde_json::to_string(&ErrorAnswer { error }).unwrap_or_default()
}
