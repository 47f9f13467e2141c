//! The control channel between the lead packet worker and the sending lanes.
//!
//! With more than one worker thread the endpoint runs a lead worker (underlay receive,
//! decrypt, TUN write, IKE and EM commands) and sending lanes, each reading one queue of
//! a multi-queue TUN and encrypting with its own engine and its own block of the SA's
//! sequence space. The lead forwards what concerns the lanes (outbound SA changes,
//! engine switches) and waits for every lane to confirm between two of its batches, so
//! a change is in place everywhere before the IKE thread or the EM is answered.
//!
//! A lookaside queue pair is one device queue: while one is attached the lanes pause
//! (after finishing their batches) and the lead reads every TUN queue itself, so the
//! whole data path goes through the device, in order; on release (or a switch to a
//! software engine) the lanes take their queues back.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::Duration;

use nfx_accel::EngineKind;

use crate::worker::SaChange;

/// How long the lead waits for a lane to confirm a command (a lane finishes at most
/// one batch first).
const ACK_WAIT: Duration = Duration::from_secs(2);

/// What a lane is told to do between two of its batches.
pub enum LaneOp {
    /// Apply these outbound SA changes.
    Sa(Vec<SaChange>),
    /// Run on this software engine (switching if it runs another) and read its TUN
    /// queue (again).
    Engine(EngineKind),
    /// Stop reading the TUN queue until the next `Engine` (the lead reads it).
    Pause,
}

/// A command with the channel its outcome goes back on.
pub struct LaneCmd {
    /// What to do.
    pub op: LaneOp,
    /// Answered once it is done.
    pub ack: Sender<Result<(), String>>,
}

/// The lead's end of one lane's control channel.
pub struct LaneLink {
    tx: Sender<LaneCmd>,
}

/// A control channel: the lead's end and the lane's.
pub fn channel() -> (LaneLink, Receiver<LaneCmd>) {
    let (tx, rx) = mpsc::channel();
    (LaneLink { tx }, rx)
}

/// Sends each lane its command (`ops[i]` to `lanes[i]`) and waits until all have
/// confirmed; the first failure is the result (a lane that ended, or did not answer in
/// time, is a failure too).
pub fn tell(lanes: &[LaneLink], ops: Vec<LaneOp>) -> Result<(), String> {
    let mut waits = Vec::with_capacity(lanes.len());
    for (i, (l, op)) in lanes.iter().zip(ops).enumerate() {
        let (ack, rx) = mpsc::channel();
        if l.tx.send(LaneCmd { op, ack }).is_err() {
            return Err(format!("sending lane {} has ended", i + 1));
        }
        waits.push(rx);
    }
    let mut first = Ok(());
    for (i, rx) in waits.iter().enumerate() {
        let r = match rx.recv_timeout(ACK_WAIT) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => Err(format!("sending lane {} did not answer", i + 1)),
            Err(RecvTimeoutError::Disconnected) => Err(format!("sending lane {} has ended", i + 1)),
        };
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// `tell` with the same command, made by `op`, for every lane.
pub fn tell_all(lanes: &[LaneLink], op: impl Fn() -> LaneOp) -> Result<(), String> {
    tell(lanes, lanes.iter().map(|_| op()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lane_confirms_or_the_failure_is_named() {
        let (a, a_rx) = channel();
        let (b, b_rx) = channel();
        let lane = |rx: Receiver<LaneCmd>, answer: Result<(), String>| {
            std::thread::spawn(move || {
                let c = rx.recv().unwrap();
                assert!(matches!(c.op, LaneOp::Pause));
                c.ack.send(answer).unwrap();
            })
        };
        let (ha, hb) = (lane(a_rx, Ok(())), lane(b_rx, Err("no engine".into())));
        let lanes = [a, b];
        assert_eq!(tell_all(&lanes, || LaneOp::Pause), Err("no engine".into()));
        ha.join().unwrap();
        hb.join().unwrap();
        // Both lanes have ended now.
        let e = tell_all(&lanes, || LaneOp::Pause).unwrap_err();
        assert!(e.contains("lane 1 has ended"), "{e}");
    }
}
