//! One frame through the chain's program in-process (BPF_PROG_TEST_RUN): what the
//! kernel would do with it on a hook, without an interface — for differential tests
//! against the software nodes and for fuzzing the parser with real verifier-checked code.

use super::raw::*;
use super::{TableChain, TableError};
use aya::programs::{SchedClassifier, TestRun, TestRunOptions};
use nfx_packet::DropReason;

/// `sizeof(struct __sk_buff)` and the offsets of the fields a run sets.
const SKB_LEN: usize = 192;
const SKB_INGRESS_IFINDEX: usize = 36;
const SKB_GSO_SEGS: usize = 164;
const SKB_GSO_SIZE: usize = 176;

const TC_ACT_OK: u32 = 0;
const TC_ACT_SHOT: u32 = 2;
const TC_ACT_STOLEN: u32 = 4;
const TC_ACT_REDIRECT: u32 = 7;
/// TC_ACT_UNSPEC (−1): tcx runs the next program on the hook.
const TC_ACT_UNSPEC: u32 = u32::MAX;

/// What the program did with a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Handed on after the chain (to the socket, or out of the interface).
    Pass,
    /// Forwarded to the other port (redirect).
    Redirect,
    /// Not the chain's: handed to the kernel untouched.
    Kernel,
    /// Dropped, with the reason counted.
    Drop(DropReason),
    /// Not this chain's service ([`TableChain::select`]): handed on untouched and
    /// uncounted to the next program on the hook.
    Next,
}

/// A frame after a run.
#[derive(Debug, Clone)]
pub struct Run {
    /// The verdict.
    pub verdict: Verdict,
    /// The frame as the program left it.
    pub frame: Vec<u8>,
}

/// The ifindex a test run's egress hook sees: the loopback device (a run needs a real
/// device for egress; ingress takes any number).
pub const EGRESS_TEST_IFINDEX: u32 = 1;

impl TableChain {
    /// Adds a port row without attaching (for in-process runs): frames run on `hook`
    /// with `ifindex` travel in `dir`, and are forwarded (`redirect` to `out_ifindex`
    /// with `macs` = destination then source) or handed on.
    pub fn bind_test_port(
        &mut self,
        ifindex: u32,
        hook: u32,
        dir: u32,
        redirect: Option<(u32, [u8; 12])>,
    ) -> Result<(), TableError> {
        let key = RawPortKey { ifindex, hook };
        let mut port = RawPort {
            dir,
            action: ACT_PASS,
            ..Default::default()
        };
        if let Some((out, macs)) = redirect {
            port.action = ACT_REDIRECT;
            port.out_ifindex = out;
            port.dst_mac.copy_from_slice(&macs[..6]);
            port.src_mac.copy_from_slice(&macs[6..]);
        }
        self.ports.put(&key, &port)?;
        self.port_rows.push(key);
        Ok(())
    }

    /// Every node's drops by reason, then the frames handed to the kernel.
    fn tallies(&self) -> Result<Vec<u64>, TableError> {
        let mut v = Vec::with_capacity(N_NODES * NREASONS + 1);
        let mut kernel = 0;
        for n in 0..N_NODES as u32 {
            let c = self.node_row(n)?;
            v.extend_from_slice(&c.drops);
            kernel += c.to_kernel;
        }
        v.push(kernel);
        Ok(v)
    }

    /// Runs `frame` through the program of `hook` as if it arrived on `ifindex` (ingress;
    /// egress runs use [`EGRESS_TEST_IFINDEX`]); `gso_size` > 0 makes it a GSO frame.
    pub fn run_frame(
        &mut self,
        hook: u32,
        ifindex: u32,
        frame: &[u8],
        gso_size: u16,
    ) -> Result<Run, TableError> {
        self.load_hook(hook)?;
        let before = self.tallies()?;
        let mut ctx = [0u8; SKB_LEN];
        ctx[SKB_INGRESS_IFINDEX..SKB_INGRESS_IFINDEX + 4].copy_from_slice(&ifindex.to_ne_bytes());
        if gso_size > 0 {
            let segs = (frame.len() as u32).div_ceil(u32::from(gso_size)).max(1);
            ctx[SKB_GSO_SEGS..SKB_GSO_SEGS + 4].copy_from_slice(&segs.to_ne_bytes());
            ctx[SKB_GSO_SIZE..SKB_GSO_SIZE + 4].copy_from_slice(&u32::from(gso_size).to_ne_bytes());
        }
        let mut out = vec![0u8; frame.len() + 256];
        let name = if hook == HOOK_EGRESS {
            "hvnf_egress"
        } else {
            "hvnf_ingress"
        };
        let prog: &SchedClassifier = self
            .bpf
            .program(name)
            .ok_or_else(|| TableError::Load(format!("program {name} missing")))?
            .try_into()
            .map_err(|e| TableError::Load(format!("program {name}: {e}")))?;
        let res = prog
            .test_run(TestRunOptions {
                data_in: Some(frame),
                data_out: Some(&mut out),
                ctx_in: Some(&ctx),
                ..TestRunOptions::default()
            })
            .map_err(|e| TableError::Request(format!("test run: {e:?}")))?;
        out.truncate(res.data_size_out as usize);
        let after = self.tallies()?;
        let kernel = N_NODES * NREASONS;
        let verdict = match res.return_value {
            TC_ACT_SHOT | TC_ACT_STOLEN => {
                let i = (0..kernel)
                    .find(|&i| after[i] > before[i])
                    .ok_or_else(|| TableError::Request("a drop without a counted reason".into()))?;
                let r = i % NREASONS;
                Verdict::Drop(
                    *DropReason::ALL
                        .get(r)
                        .ok_or_else(|| TableError::Request(format!("drop reason {r}")))?,
                )
            }
            TC_ACT_REDIRECT => Verdict::Redirect,
            TC_ACT_OK if after[kernel] > before[kernel] => Verdict::Kernel,
            TC_ACT_OK => Verdict::Pass,
            TC_ACT_UNSPEC if after == before => Verdict::Next,
            other => return Err(TableError::Request(format!("verdict {other}"))),
        };
        Ok(Run {
            verdict,
            frame: out,
        })
    }
}
