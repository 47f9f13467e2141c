//! `nfx experiment edge-video`: the edge-encryption paper's single-stream measurement
//! (its Table 2) on the namespace testbed. A video clip per codec made once with
//! ffmpeg's test source (H.264 in MPEG-TS, MJPEG raw) is paced out of `src` at its
//! bitrate; the encryption VNF on
//! `edge` reorganises it into 128/256/512-byte chunks and encrypts each with
//! PRESENT-80-CTR; the VNF on `cloud` decrypts; `dst` checks every chunk byte for byte
//! against the clip and decodes the reassembled stream with ffmpeg. Cases: No-VNF (the
//! same chain, chunks forwarded unencrypted), SW-VNF (the portable `soft` engine in the
//! VNF) and HW-VNF (the lookaside device, a reserved core running the bitsliced PRESENT
//! engine: modelled hardware, not an FPGA); TCP and UDP; per chunk the VNF's execution
//! time (hand-over to completion), the engine's own time and the end-to-end latency; means of `--runs` runs with 95 % confidence
//! intervals. Writes `summary.json`, `details.json`, `chart.png` and `report.md`.

mod cipher;
mod clip;
mod flow;
pub(crate) mod report;
mod streams;
mod vnf;

use anyhow::Context;
use cipher::ChunkCipher;
use clip::{Clip, Codec};
use flow::{Link, Proto};
use nfx_accel::{Direction, Engine, EngineKind, LookasideEngine};
use nfx_testbed::{Host, Spec, TestbedGuard};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Arguments of `nfx experiment edge-video`.
#[derive(clap::Args)]
pub struct Args {
    /// Output directory (created).
    #[arg(long)]
    out: PathBuf,
    /// A small clip and 2 runs per case (for CI).
    #[arg(long)]
    quick: bool,
    /// Runs per case (default 10, 2 with --quick).
    #[arg(long)]
    runs: Option<u32>,
    /// Seconds of video per run (default 2, 1 with --quick).
    #[arg(long)]
    seconds: Option<u32>,
    /// Codecs of the single-stream cases, comma-separated (default h264,mjpeg; h264
    /// with --quick); the multi-stream cases use the first.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "LIST")]
    codec: Vec<Codec>,
    /// Core the lookaside device (the HW-VNF's modelled hardware) is pinned to.
    #[arg(long, default_value_t = 1)]
    device_core: u32,
    /// Microseconds the device keeps polling after its last chunk before it sleeps
    /// (`nfx accel serve --spin-us`; default: the device's own).
    #[arg(long)]
    device_spin_us: Option<u64>,
    /// Concurrent streams of the multi-stream cases (the paper's Fig. 4), comma-separated;
    /// default 5,25,50,100 (none with --quick).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    streams: Vec<u32>,
    /// Infrastructure descriptor whose first host with a `power` model gives the energy
    /// model of the multi-stream cases.
    #[arg(long, default_value = "configs/energy/infrastructure.yaml")]
    infrastructure: PathBuf,
    /// Testbed namespace prefix.
    #[arg(long, default_value = "nfx-edge-")]
    prefix: String,
    /// Second octet of the testbed's 10.b.x.x addresses.
    #[arg(long, default_value_t = 213)]
    subnet_base: u8,
}

/// The VNF cases of the paper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vnf {
    /// No encryption (the chain forwards chunks unchanged).
    None,
    /// The portable engine in the VNF.
    Sw,
    /// The lookaside device (modelled hardware).
    Hw,
}

impl Vnf {
    /// Every case in run order.
    pub const ALL: [Vnf; 3] = [Vnf::None, Vnf::Sw, Vnf::Hw];

    /// Its name in `summary.json`.
    pub fn name(self) -> &'static str {
        match self {
            Vnf::None => "none",
            Vnf::Sw => "sw",
            Vnf::Hw => "hw",
        }
    }
}

/// Chunk sizes of the paper.
pub const CHUNKS: [usize; 3] = [128, 256, 512];
/// Chunk size of the multi-stream cases (over UDP: the paper scaled its lowest-latency
/// combination of Table 2).
pub const MULTI_CHUNK: usize = 512;
/// Transports of the paper.
pub const PROTOS: [Proto; 2] = [Proto::Tcp, Proto::Udp];

/// What one run of one case measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Run {
    /// `h264` or `mjpeg`.
    pub codec: &'static str,
    /// `none`, `sw` or `hw`.
    pub vnf: &'static str,
    /// `tcp` or `udp`.
    pub proto: &'static str,
    /// Chunk size, bytes.
    pub chunk: usize,
    /// Concurrent streams (the figures are means over them).
    pub streams: u32,
    /// Run number (1-based).
    pub run: u32,
    /// Mean VNF execution time per chunk, ms: the worker's hand-over to the cipher until
    /// the batch's last operation completed, per chunk (HW-VNF: the offload round trip).
    pub exec_ms: f64,
    /// Mean engine time per chunk, ms: the portable cipher's time in the worker (SW-VNF)
    /// or the device's own processing time returned with each completion (HW-VNF).
    pub engine_ms: f64,
    /// Mean end-to-end latency per chunk, ms.
    pub e2e_ms: f64,
    /// Chunks that never arrived.
    pub lost_chunks: u64,
    /// Chunks that arrived different from the clip.
    pub corrupt_chunks: u64,
    /// Chunks a VNF dropped because the engine failed their operation (they count as
    /// lost at `dst` too).
    pub vnf_dropped: u64,
    /// Chunks verified.
    pub ok_chunks: u64,
    /// ffmpeg decoded the reassembled stream without an error.
    pub decoded: bool,
    /// Energy of the VNF threads and the device over the run, J (multi-stream runs).
    pub energy_j: Option<f64>,
}

/// The engine of a VNF for `vnf` (the device's socket for HW).
fn engine(vnf: Vnf, sock: &Path) -> anyhow::Result<Option<Box<dyn Engine>>> {
    Ok(match vnf {
        Vnf::None => None,
        Vnf::Sw => Some(nfx_accel::soft_engine()),
        Vnf::Hw => Some(Box::new(
            LookasideEngine::connect(sock, EngineKind::Soft).context("attaching to the device")?,
        )),
    })
}

/// A thread in namespace `ns` running `f`.
fn in_ns<T: Send + 'static>(
    ns: String,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> std::thread::JoinHandle<anyhow::Result<T>> {
    std::thread::spawn(move || {
        nfx_testbed::netns::enter(&ns)?;
        f()
    })
}

fn join<T>(h: std::thread::JoinHandle<anyhow::Result<T>>, what: &str) -> anyhow::Result<T> {
    h.join()
        .map_err(|_| anyhow::anyhow!("{what} thread panicked"))?
        .with_context(|| what.to_string())
}

/// One run of one case: which VNF, transport, chunk size, and the run's number.
#[derive(Debug, Clone, Copy)]
struct CaseRun {
    vnf: Vnf,
    proto: Proto,
    chunk: usize,
    run: u32,
}

/// The run's surroundings: the testbed, the clip, the device socket and a scratch dir.
struct Env<'a> {
    tb: &'a TestbedGuard,
    clip: &'a Clip,
    sock: &'a Path,
    work: &'a Path,
}

/// One stream of the clip through the chain.
fn one_run(env: &Env<'_>, c: CaseRun) -> anyhow::Result<Run> {
    let port = 7400 + c.run as u16 % 100;
    let mut runs = finish(env, c, start(env, c, &[port], None)?, true)?;
    runs.pop().context("one stream, one run")
}

/// The threads of a run in flight: a `src` and a `dst` per stream, one edge and one
/// cloud VNF worker serving every stream.
struct Pending {
    srcs: Vec<std::thread::JoinHandle<anyhow::Result<()>>>,
    edge: std::thread::JoinHandle<anyhow::Result<vnf::VnfCounts>>,
    cloud: std::thread::JoinHandle<anyhow::Result<vnf::VnfCounts>>,
    dsts: Vec<std::thread::JoinHandle<anyhow::Result<flow::Received>>>,
}

impl Pending {
    fn finished(&self) -> bool {
        self.srcs.iter().all(|t| t.is_finished())
            && self.edge.is_finished()
            && self.cloud.is_finished()
            && self.dsts.iter().all(|t| t.is_finished())
    }
}

/// (pid, tid) of the VNF threads (edge and cloud), for the energy meter.
type VnfThreads = std::sync::Arc<std::sync::Mutex<Vec<(u32, u32)>>>;

fn register(threads: &Option<VnfThreads>) {
    if let Some(t) = threads {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        if let Ok(mut v) = t.lock() {
            v.push((std::process::id(), tid));
        }
    }
}

/// How many receivers of a run have bound their sockets: a UDP `src` starts sending only
/// once every receiver (each `dst` and both VNF workers) listens, since a datagram to an
/// unbound port is lost (with hundreds of threads starting on a loaded machine, a fixed
/// head start is not enough).
#[derive(Clone, Default)]
struct Bound(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl Bound {
    fn mark(&self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Waits until `n` receivers are bound, at most `limit`.
    fn wait(&self, n: usize, limit: Duration) {
        let end = Instant::now() + limit;
        while self.0.load(std::sync::atomic::Ordering::SeqCst) < n && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// A VNF worker in namespace `ns`: accepts every stream's upstream on `ins`, connects
/// each downstream to `outs`, then runs `work` over the hops.
fn vnf_worker(
    ns: String,
    (proto, limit): (Proto, Duration),
    (ins, outs): (Vec<SocketAddr>, Vec<SocketAddr>),
    (threads, bound): (Option<VnfThreads>, Bound),
    work: impl FnOnce(Vec<vnf::Hop>) -> anyhow::Result<vnf::VnfCounts> + Send + 'static,
) -> std::thread::JoinHandle<anyhow::Result<vnf::VnfCounts>> {
    in_ns(ns, move || {
        register(&threads);
        let ups = ins
            .iter()
            .map(|a| Link::accept(proto, *a, limit))
            .collect::<anyhow::Result<Vec<_>>>()?;
        bound.mark();
        let mut hops = Vec::with_capacity(ups.len());
        for (up, to) in ups.into_iter().zip(outs) {
            let down = Link::connect(proto, to, limit)?;
            hops.push(vnf::Hop { up, down });
        }
        work(hops)
    })
}

/// Starts one stream of the clip through the chain per port of `ports`, each with its
/// own key.
fn start(
    env: &Env<'_>,
    c: CaseRun,
    ports: &[u16],
    threads: Option<VnfThreads>,
) -> anyhow::Result<Pending> {
    let CaseRun {
        vnf, proto, chunk, ..
    } = c;
    let (tb, clip, sock) = (env.tb, env.clip, env.sock);
    let keys = ports
        .iter()
        .map(|_| random_key())
        .collect::<anyhow::Result<Vec<_>>>()?;
    let limit = Duration::from_secs(10);
    let at = |ip: std::net::Ipv4Addr| -> Vec<SocketAddr> {
        ports.iter().map(|&p| SocketAddr::from((ip, p))).collect()
    };
    let (edge_in, cloud_in, dst_in) = (at(tb.edge_inside_ip()), at(tb.cloud_ip()), at(tb.dst_ip()));
    let t0 = Instant::now();
    let bytes = std::sync::Arc::new(clip.bytes.clone());
    let bound = Bound::default();
    let dsts = dst_in
        .iter()
        .map(|&a| {
            let b = bytes.clone();
            let bound = bound.clone();
            in_ns(tb.ns(Host::Dst), move || {
                let up = Link::accept(proto, a, limit)?;
                bound.mark();
                flow::sink(up, &b, chunk, t0)
            })
        })
        .collect();
    let (ek, ck) = (engine(vnf, sock)?, engine(vnf, sock)?);
    let cloud = {
        let cipher = ChunkCipher::new(ck, &keys, Direction::Decrypt)?;
        vnf_worker(
            tb.ns(Host::Cloud),
            (proto, limit),
            (cloud_in.clone(), dst_in),
            (threads.clone(), bound.clone()),
            move |hops| vnf::cloud(hops, cipher, limit),
        )
    };
    let edge = {
        let cipher = ChunkCipher::new(ek, &keys, Direction::Encrypt)?;
        vnf_worker(
            tb.ns(Host::Edge),
            (proto, limit),
            (edge_in.clone(), cloud_in),
            (threads, bound.clone()),
            move |hops| vnf::edge(hops, chunk, cipher, limit),
        )
    };
    let rate = clip.bits_per_s;
    let receivers = ports.len() + 2;
    let srcs = edge_in
        .into_iter()
        .map(|a| {
            let b = bytes.clone();
            let bound = bound.clone();
            in_ns(tb.ns(Host::Src), move || {
                // UDP has no handshake (TCP's connect retries until the edge listens).
                if proto == Proto::Udp {
                    bound.wait(receivers, limit);
                }
                let link = Link::connect(proto, a, limit)?;
                flow::source(link, &b, rate, t0)
            })
        })
        .collect();
    Ok(Pending {
        srcs,
        edge,
        cloud,
        dsts,
    })
}

/// Waits for a run's threads and checks what arrived, one `Run` per stream (decoding
/// the first stream with ffmpeg when `decode`).
fn finish(env: &Env<'_>, case: CaseRun, p: Pending, decode: bool) -> anyhow::Result<Vec<Run>> {
    let Pending {
        srcs,
        edge,
        cloud,
        dsts,
    } = p;
    // Every role is joined before any error is returned, and the error names each
    // role that failed (one failure breaks the others' connections).
    let srcs: Vec<_> = srcs.into_iter().map(|t| join(t, "src")).collect();
    let (e, c) = (join(edge, "edge VNF"), join(cloud, "cloud VNF"));
    let dsts: Vec<_> = dsts.into_iter().map(|t| join(t, "dst")).collect();
    let mut errors: Vec<String> = srcs
        .iter()
        .filter_map(|r| r.as_ref().err())
        .chain(e.as_ref().err())
        .chain(c.as_ref().err())
        .chain(dsts.iter().filter_map(|r| r.as_ref().err()))
        .map(|e| format!("{e:#}"))
        .collect();
    errors.dedup();
    anyhow::ensure!(errors.is_empty(), "{}", errors.join("; "));
    let (edge, cloud) = (e?, c?);
    let mut runs = Vec::with_capacity(dsts.len());
    for (i, got) in dsts.into_iter().enumerate() {
        let got = got?;
        let decoded = match &got.stream {
            Some(s) if decode && i == 0 => clip::decodes(env.work, env.clip.codec, s)?,
            _ => false,
        };
        let n = got.ok.len().max(1) as f64;
        let mean = |f: fn(&(u32, u32, u64)) -> f64| got.ok.iter().map(f).sum::<f64>() / n / 1e6;
        runs.push(Run {
            codec: env.clip.codec.name(),
            vnf: case.vnf.name(),
            proto: report::proto_name(case.proto),
            chunk: case.chunk,
            streams: 1,
            run: case.run,
            exec_ms: mean(|x| f64::from(x.0)),
            engine_ms: mean(|x| f64::from(x.1)),
            e2e_ms: mean(|x| x.2 as f64),
            lost_chunks: got.lost,
            corrupt_chunks: got.corrupt + edge.malformed[i] + cloud.malformed[i],
            vnf_dropped: edge.dropped[i] + cloud.dropped[i],
            ok_chunks: got.ok.len() as u64,
            decoded,
            energy_j: None,
        });
    }
    Ok(runs)
}

fn random_key() -> anyhow::Result<Vec<u8>> {
    use std::io::Read;
    let mut k = vec![0u8; 10];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut k)?;
    Ok(k)
}

/// Runs the subcommand.
pub fn run(a: Args) -> anyhow::Result<()> {
    nfx_testbed::root::require_root()?;
    let runs = a.runs.unwrap_or(if a.quick { 2 } else { 10 });
    let stream_counts = match (&a.streams[..], a.quick) {
        ([], false) => vec![5, 25, 50, 100],
        (s, _) => s.to_vec(),
    };
    anyhow::ensure!(
        stream_counts.iter().all(|n| (2..=100).contains(n)),
        "--streams {stream_counts:?}: each 2..=100"
    );
    let secs = a.seconds.unwrap_or(if a.quick { 1 } else { 2 });
    let codecs = codecs(&a.codec, a.quick);
    anyhow::ensure!(
        (2..=50).contains(&runs),
        "--runs {runs}: 2..=50 (a CI needs two)"
    );
    anyhow::ensure!((1..=30).contains(&secs), "--seconds {secs}: 1..=30");
    std::fs::create_dir_all(&a.out).with_context(|| format!("--out {}", a.out.display()))?;
    let work = nfx_testbed::tempfile::Builder::new()
        .prefix("edge-video-")
        .tempdir()?;
    let started = Instant::now();
    let mut clips = Vec::with_capacity(codecs.len());
    for &codec in &codecs {
        crate::note!("edge-video: encoding the {} clip ...", codec.name());
        clips.push(clip::make(work.path(), codec, a.quick, secs)?);
    }
    let tb = TestbedGuard::up(Spec {
        prefix: a.prefix.clone(),
        subnet_base: a.subnet_base,
    })
    .context("testbed")?;
    let sock = work.path().join("accel.sock");
    // Two queue pairs per run (the edge and the cloud VNF worker, each serving every
    // stream of the run), with room for the previous run's pair while the device
    // releases it; slots of 2 KiB (a chunk is at most 512 bytes), enough for the ring.
    let device = super::bench_tunnel::start_device_with(
        &sock,
        Some(a.device_core),
        a.device_spin_us,
        &[
            "--queue-pairs",
            "4",
            "--slots",
            "256",
            "--slot-size",
            "2048",
        ],
    )?;
    let device_pid = device.0.first().map_or(0, |c| c.id());
    let total = runs as usize
        * Vnf::ALL.len()
        * (clips.len() * PROTOS.len() * CHUNKS.len() + stream_counts.len());
    let progress = super::output::Progress::bar("edge-video", total as u64);
    let envs: Vec<Env<'_>> = clips
        .iter()
        .map(|clip| Env {
            tb: &tb,
            clip,
            sock: &sock,
            work: work.path(),
        })
        .collect();
    let mut all = Vec::new();
    for run in 1..=runs {
        for env in &envs {
            for proto in PROTOS {
                for chunk in CHUNKS {
                    for vnf in Vnf::ALL {
                        let what = format!(
                            "{} {} {} {chunk} B run {run}",
                            env.clip.codec.name(),
                            vnf.name(),
                            report::proto_name(proto)
                        );
                        progress.message(what.clone());
                        let c = CaseRun {
                            vnf,
                            proto,
                            chunk,
                            run,
                        };
                        all.push(one_run(env, c).context(what)?);
                        progress.inc();
                    }
                }
            }
        }
    }
    let env = &envs[0];
    let mut energy_source = None;
    if !stream_counts.is_empty() {
        let (_, model) = super::experiment_energy::power_host(&super::data::resolve(
            &a.infrastructure,
            work.path(),
        )?)?;
        for run in 1..=runs {
            for &n in &stream_counts {
                for vnf in Vnf::ALL {
                    progress.message(format!("{} udp 512 B × {n} streams run {run}", vnf.name()));
                    let c = CaseRun {
                        vnf,
                        proto: Proto::Udp,
                        chunk: MULTI_CHUNK,
                        run,
                    };
                    let (r, source) = streams::multi_run(env, c, n, &model, device_pid)
                        .with_context(|| format!("{} udp × {n} streams, run {run}", vnf.name()))?;
                    energy_source = Some(source.as_str());
                    all.push(r);
                    progress.inc();
                }
            }
        }
    }
    drop(progress);
    drop(envs);
    drop(device);
    drop(tb);
    let inputs = report::Inputs {
        energy_source,
        runs: &all,
        clips: clips
            .iter()
            .map(|c| report::ClipInfo {
                codec: c.codec.name(),
                bytes: c.bytes.len(),
                mbps: c.bits_per_s / 1e6,
            })
            .collect(),
        quick: a.quick,
        secs,
        device_core: a.device_core,
        elapsed_s: started.elapsed().as_secs_f64(),
        loadavg: std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
            .to_string(),
    };
    let s = report::write(&a.out, &inputs)?;
    print!("{}", report::console(&s, &inputs));
    println!(
        "wrote {}/{{summary.json,details.json,chart.png,report.md}}",
        a.out.display()
    );
    let corrupt: u64 = s.cases.iter().map(|c| c.corrupt_chunks).sum();
    let undecoded = all
        .iter()
        .filter(|r| r.lost_chunks == 0 && !r.decoded)
        .count();
    anyhow::ensure!(
        corrupt == 0 && undecoded == 0,
        "the video check failed: {corrupt} chunk(s) arrived corrupt, {undecoded} complete \
         stream(s) did not decode"
    );
    Ok(())
}

/// The codecs of a run: those asked for (duplicates dropped, order kept), else H.264 and
/// MJPEG (H.264 alone with `--quick`, which CI runs within its time budget).
fn codecs(asked: &[Codec], quick: bool) -> Vec<Codec> {
    let mut v: Vec<Codec> = Vec::new();
    for &c in asked {
        if !v.contains(&c) {
            v.push(c);
        }
    }
    match (v.is_empty(), quick) {
        (false, _) => v,
        (true, true) => vec![Codec::H264],
        (true, false) => vec![Codec::H264, Codec::Mjpeg],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        a: Args,
    }

    #[test]
    fn codecs_default_to_both_and_to_h264_when_quick() {
        let parse = |extra: &[&str]| {
            let mut v = vec!["x", "--out", "/tmp/o"];
            v.extend(extra);
            let a = Cli::try_parse_from(v).unwrap().a;
            codecs(&a.codec, a.quick)
        };
        assert_eq!(parse(&[]), [Codec::H264, Codec::Mjpeg]);
        assert_eq!(parse(&["--quick"]), [Codec::H264]);
        assert_eq!(parse(&["--quick", "--codec", "mjpeg"]), [Codec::Mjpeg]);
        assert_eq!(
            parse(&["--codec", "mjpeg,h264,mjpeg"]),
            [Codec::Mjpeg, Codec::H264]
        );
        let bad = Cli::try_parse_from(["x", "--out", "/o", "--codec", "vp9"]);
        assert!(bad.is_err());
    }
}
