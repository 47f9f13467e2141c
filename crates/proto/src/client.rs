//! The one client of a worker's control socket: typed requests out, typed answers in,
//! over one connection that is reopened after any failure (an exchange cut mid-line
//! leaves the stream out of step). Every read and write is bounded in time, and an
//! answer line in length.

use crate::request::{ExportState, ImportState, Poll, Reconfigure, Request, Steer};
use crate::response::{
    Ack, Drained, ErrorAnswer, Exported, Held, Imported, PollSet, Reconfigured, Steered,
};
use crate::stats::Stats;
use base64::Engine;
use serde::de::DeserializeOwned;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long one read or write may block by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

/// Longest answer line taken by default: the `export_state` of 4 million NAT mappings
/// (24 B each, base64) fits with room to spare.
pub const DEFAULT_MAX_LINE: usize = 256 << 20;

/// Why an exchange with a worker failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The socket could not be reached (no worker, or not ours).
    #[error(
        "connecting to control socket {socket} (is `nfx run` running with this name?): {source}"
    )]
    Connect {
        /// The socket path.
        socket: PathBuf,
        /// The connect error.
        source: std::io::Error,
    },
    /// A read or write failed or timed out.
    #[error("control socket {socket}: {source}")]
    Io {
        /// The socket path.
        socket: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The worker closed the connection without answering.
    #[error("control socket {socket}: closed without an answer")]
    Closed {
        /// The socket path.
        socket: PathBuf,
    },
    /// The answer line is longer than the client takes.
    #[error("control socket {socket}: answer longer than {limit} bytes")]
    TooLong {
        /// The socket path.
        socket: PathBuf,
        /// The limit.
        limit: usize,
    },
    /// The answer is not the one the request has.
    #[error("control socket {socket}: not an answer to `{cmd}`: {reason}")]
    BadAnswer {
        /// The socket path.
        socket: PathBuf,
        /// The request's command.
        cmd: &'static str,
        /// Why not.
        reason: String,
    },
    /// The worker refused the request (`{"error": ...}`).
    #[error("{socket}: {message}")]
    Refused {
        /// The socket path.
        socket: PathBuf,
        /// The worker's message.
        message: String,
    },
}

impl ClientError {
    /// True when the worker answered with a refusal (the request was wrong or could not
    /// be carried out); false when it could not be reached or did not answer properly.
    pub fn is_refusal(&self) -> bool {
        matches!(self, ClientError::Refused { .. })
    }
}

/// A client of one worker's control socket.
pub struct Client {
    socket: PathBuf,
    timeout: Duration,
    max_line: usize,
    conn: Option<BufReader<UnixStream>>,
}

impl Client {
    /// A client of the socket at `socket`; it connects at once, so that a missing
    /// worker is reported here, naming the socket.
    pub fn connect(socket: impl AsRef<Path>) -> Result<Self, ClientError> {
        let mut c = Self::lazy(socket);
        c.open()?;
        Ok(c)
    }

    /// A client that connects on its first request.
    pub fn lazy(socket: impl AsRef<Path>) -> Self {
        Self {
            socket: socket.as_ref().to_path_buf(),
            timeout: DEFAULT_TIMEOUT,
            max_line: DEFAULT_MAX_LINE,
            conn: None,
        }
    }

    /// Sets how long one read or write may block.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        if let Some(c) = &self.conn {
            let _ = set_timeouts(c.get_ref(), timeout);
        }
        self
    }

    /// Sets the longest answer line taken.
    pub fn with_max_line(mut self, bytes: usize) -> Self {
        self.max_line = bytes;
        self
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn open(&mut self) -> Result<&mut BufReader<UnixStream>, ClientError> {
        if self.conn.is_none() {
            let connect = |source| ClientError::Connect {
                socket: self.socket.clone(),
                source,
            };
            let s = UnixStream::connect(&self.socket).map_err(connect)?;
            set_timeouts(&s, self.timeout).map_err(connect)?;
            self.conn = Some(BufReader::new(s));
        }
        Ok(self.conn.as_mut().expect("connection just opened"))
    }

    /// Sends `req` and reads its answer as `T`. A kept connection whose worker went
    /// away (the request could not be written) is replaced once; after any other
    /// failure, except a refusal, the connection is dropped.
    pub fn call<T: DeserializeOwned>(&mut self, req: &Request) -> Result<T, ClientError> {
        let mut line = req.to_line();
        line.push('\n');
        let reused = self.conn.is_some();
        if let Err(e) = self.send(&line) {
            self.conn = None;
            if !reused {
                return Err(e);
            }
            self.send(&line).inspect_err(|_| self.conn = None)?;
        }
        let result = self.receive(req.cmd());
        if matches!(result, Err(ref e) if !e.is_refusal()) {
            self.conn = None;
        }
        result
    }

    fn send(&mut self, line: &str) -> Result<(), ClientError> {
        let socket = self.socket.clone();
        let conn = self.open()?;
        conn.get_mut()
            .write_all(line.as_bytes())
            .map_err(|source| ClientError::Io { socket, source })
    }

    fn receive<T: DeserializeOwned>(&mut self, cmd: &'static str) -> Result<T, ClientError> {
        let (socket, limit) = (self.socket.clone(), self.max_line);
        let conn = self.open()?;
        let mut buf = Vec::new();
        let mut bounded = conn.take(limit as u64 + 1);
        bounded
            .read_until(b'\n', &mut buf)
            .map_err(|source| ClientError::Io {
                socket: socket.clone(),
                source,
            })?;
        if buf.last() != Some(&b'\n') {
            return Err(if buf.len() > limit {
                ClientError::TooLong { socket, limit }
            } else {
                ClientError::Closed { socket }
            });
        }
        parse_answer(&buf, cmd).map_err(|e| e.at(socket))
    }

    /// Every counter of the worker.
    pub fn stats(&mut self) -> Result<Stats, ClientError> {
        self.call(&Request::Stats {})
    }

    /// Replaces what the worker runs (see [`Reconfigure::chain`] and
    /// [`Reconfigure::services`]).
    pub fn reconfigure(&mut self, req: Reconfigure) -> Result<Reconfigured, ClientError> {
        self.call(&Request::Reconfigure(req))
    }

    /// The flow state of node `node`, as the answer carries it (base64).
    pub fn export_state_b64(&mut self, node: &str) -> Result<Exported, ClientError> {
        self.call(&Request::ExportState(ExportState { node: node.into() }))
    }

    /// The flow state of node `node`.
    pub fn export_state(&mut self, node: &str) -> Result<Vec<u8>, ClientError> {
        let e = self.export_state_b64(node)?;
        base64::engine::general_purpose::STANDARD
            .decode(&e.data_b64)
            .map_err(|err| ClientError::BadAnswer {
                socket: self.socket.clone(),
                cmd: "export_state",
                reason: format!("`data_b64` is not base64: {err}"),
            })
    }

    /// Loads an exported blob, still base64, into node `node`; returns the flows added.
    pub fn import_state_b64(&mut self, node: &str, data_b64: String) -> Result<u64, ClientError> {
        let req = Request::ImportState(ImportState {
            data_b64,
            node: node.into(),
        });
        self.call::<Imported>(&req).map(|a| a.flows)
    }

    /// Loads the blob `data` into node `node`; returns the flows added.
    pub fn import_state(&mut self, node: &str, data: &[u8]) -> Result<u64, ClientError> {
        let b64 = base64::engine::general_purpose::STANDARD.encode(data);
        self.import_state_b64(node, b64)
    }

    /// Stops reading the ports.
    pub fn hold(&mut self) -> Result<Held, ClientError> {
        self.call(&Request::Hold {})
    }

    /// Resumes reading the ports.
    pub fn release(&mut self) -> Result<Held, ClientError> {
        self.call(&Request::Release {})
    }

    /// Forwards what is queued, then holds.
    pub fn drain(&mut self) -> Result<Drained, ClientError> {
        self.call(&Request::Drain {})
    }

    /// Points the fanout groups at member `member`.
    pub fn steer(&mut self, member: u32) -> Result<Steered, ClientError> {
        self.call(&Request::Steer(Steer { member }))
    }

    /// Sets the poll mode of worker `worker` (all when `None`).
    pub fn poll(
        &mut self,
        mode: nfx_io::PollMode,
        worker: Option<usize>,
    ) -> Result<PollSet, ClientError> {
        self.call(&Request::Poll(Poll { mode, worker }))
    }

    /// Asks every worker thread to stop.
    pub fn shutdown(&mut self) -> Result<Ack, ClientError> {
        self.call(&Request::Shutdown {})
    }

    /// Waits (bounded by `limit`) until the socket answers a stats request; returns the
    /// client and that first answer, or the last error.
    pub fn wait_ready(socket: impl AsRef<Path>, limit: Duration) -> anyhow::Result<(Self, Stats)> {
        let deadline = Instant::now() + limit;
        let mut c = Self::lazy(socket);
        loop {
            match c.stats() {
                Ok(s) => return Ok((c, s)),
                Err(e) if Instant::now() >= deadline => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("dataplane not ready after {limit:?}")))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

/// The stats of the worker at `socket`, over a connection of their own.
pub fn fetch_stats(socket: &Path) -> Result<Stats, ClientError> {
    Client::connect(socket)?.stats()
}

fn set_timeouts(s: &UnixStream, t: Duration) -> std::io::Result<()> {
    s.set_read_timeout(Some(t))?;
    s.set_write_timeout(Some(t))
}

/// Why an answer line is not the answer: the worker's refusal, or not the shape.
#[derive(Debug)]
pub enum AnswerError {
    /// `{"error": ...}`.
    Refused(String),
    /// Not JSON, or not the answer's shape.
    Bad(&'static str, String),
}

impl AnswerError {
    fn at(self, socket: PathBuf) -> ClientError {
        match self {
            AnswerError::Refused(message) => ClientError::Refused { socket, message },
            AnswerError::Bad(cmd, reason) => ClientError::BadAnswer {
                socket,
                cmd,
                reason,
            },
        }
    }
}

/// Reads one answer line to `cmd` as `T`; the error form becomes
/// [`AnswerError::Refused`]. The line is read once when it is the answer.
pub fn parse_answer<T: DeserializeOwned>(line: &[u8], cmd: &'static str) -> Result<T, AnswerError> {
    match serde_json::from_slice::<T>(line) {
        Ok(v) => Ok(v),
        Err(e) => match serde_json::from_slice::<ErrorAnswer>(line) {
            Ok(a) => Err(AnswerError::Refused(a.error)),
            Err(_) => Err(AnswerError::Bad(cmd, e.to_string())),
        },
    }
}
