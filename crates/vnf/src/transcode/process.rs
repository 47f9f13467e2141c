//! The transcoder's `ffmpeg` child: started (inside the configured network namespace)
//! from a [`TranscodeConfig`], its progress read from the `-progress` lines it prints,
//! stopped with SIGTERM (SIGKILL after a grace period) when asked or dropped.

use super::TranscodeConfig;
use std::io::{self, BufRead, BufReader};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What ffmpeg reported last (its `-progress` block).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Progress {
    /// Frames encoded so far.
    pub frames: u64,
    /// Bytes written to the output so far.
    pub out_bytes: u64,
    /// Media time of the output, µs.
    pub out_time_us: u64,
    /// Encoding speed relative to real time (1.0 = keeping up), when known.
    pub speed: Option<f64>,
    /// Progress blocks received.
    pub updates: u64,
}

impl Progress {
    /// Applies one `key=value` progress line.
    pub fn apply(&mut self, line: &str) {
        let Some((k, v)) = line.trim().split_once('=') else {
            return;
        };
        let num = || v.trim().parse::<u64>().ok();
        match k {
            "frame" => self.frames = num().unwrap_or(self.frames),
            "total_size" => self.out_bytes = num().unwrap_or(self.out_bytes),
            "out_time_us" => self.out_time_us = num().unwrap_or(self.out_time_us),
            "speed" => self.speed = v.trim().trim_end_matches('x').parse().ok(),
            "progress" => self.updates += 1,
            _ => {}
        }
    }
}

/// A running transcoder process.
pub struct Transcoder {
    child: Option<Child>,
    progress: Arc<Mutex<Progress>>,
    reader: Option<JoinHandle<()>>,
}

/// Opens the handle of network namespace `ns` (before the fork: the child only calls
/// setns(2), which is async-signal-safe).
fn open_netns(ns: &str) -> io::Result<OwnedFd> {
    let path = format!("/run/netns/{ns}");
    std::fs::File::open(&path)
        .map(OwnedFd::from)
        .map_err(|e| io::Error::new(e.kind(), format!("opening network namespace {path}: {e}")))
}

impl Transcoder {
    /// Starts `ffmpeg` (from `PATH`) for `cfg`; its error output goes to `log` if given.
    /// ffmpeg is killed when the thread that started it ends (`PR_SET_PDEATHSIG`):
    /// start it from a thread that lives as long as the transcoder.
    pub fn start(cfg: &TranscodeConfig, log: Option<&Path>) -> io::Result<Self> {
        cfg.validate()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("transcode.{e}")))?;
        let mut cmd = Command::new("ffmpeg");
        cmd.args(cfg.ffmpeg_args())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(match log {
                Some(p) => Stdio::from(std::fs::File::create(p)?),
                None => Stdio::null(),
            });
        let ns_fd = cfg.netns.as_deref().map(open_netns).transpose()?;
        let raw = ns_fd.as_ref().map(|fd| fd.as_raw_fd());
        // SAFETY: the closure only calls prctl(2) and setns(2) (on a descriptor opened
        // before the fork); it allocates nothing and takes no lock.
        unsafe {
            cmd.pre_exec(move || {
                // ffmpeg never outlives its supervisor (an `nfx transcode` killed with
                // SIGKILL leaves no orphan encoder behind).
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if let Some(raw) = raw {
                    if libc::setns(raw, libc::CLONE_NEWNET) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = cmd.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("starting ffmpeg (install it with scripts/deps.sh): {e}"),
            )
        })?;
        drop(ns_fd);
        let progress = Arc::new(Mutex::new(Progress::default()));
        let out = child.stdout.take().expect("stdout is piped");
        let p2 = progress.clone();
        let reader = std::thread::Builder::new()
            .name("transcode-progress".into())
            .spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    p2.lock().unwrap_or_else(|e| e.into_inner()).apply(&line);
                }
            })?;
        Ok(Self {
            child: Some(child),
            progress,
            reader: Some(reader),
        })
    }

    /// Process id of the ffmpeg child.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// The latest progress.
    pub fn progress(&self) -> Progress {
        self.progress
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Whether ffmpeg still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// Stops ffmpeg (SIGTERM, SIGKILL after `grace`), reaps it and returns its last
    /// progress.
    pub fn stop(mut self, grace: Duration) -> Progress {
        self.terminate(grace);
        self.progress()
    }

    fn terminate(&mut self, grace: Duration) {
        let Some(mut c) = self.child.take() else {
            return;
        };
        if matches!(c.try_wait(), Ok(None)) {
            // SAFETY: kill(2) on our own child's pid; it is not reaped yet.
            unsafe { libc::kill(c.id() as libc::pid_t, libc::SIGTERM) };
            let end = Instant::now() + grace;
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(c.try_wait(), Ok(None)) {
                let _ = c.kill();
            }
        }
        let _ = c.wait();
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Transcoder {
    fn drop(&mut self) {
        self.terminate(Duration::from_secs(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_update_the_figures() {
        let mut p = Progress::default();
        for l in [
            "frame=250",
            "fps=25.0",
            "total_size=123456",
            "out_time_us=10000000",
            "speed=0.98x",
            "progress=continue",
            "garbage",
            "frame=x",
        ] {
            p.apply(l);
        }
        assert_eq!(
            p,
            Progress {
                frames: 250,
                out_bytes: 123456,
                out_time_us: 10_000_000,
                speed: Some(0.98),
                updates: 1,
            }
        );
        p.apply("speed=N/A");
        assert_eq!(p.speed, None);
    }

    #[test]
    fn a_bad_config_or_namespace_is_refused_before_anything_runs() {
        let mut c: TranscodeConfig = serde_yaml_ng::from_str(
            "{ listen_port: 5000, output: 127.0.0.1:6000, bitrate_kbps: 300 }",
        )
        .unwrap();
        c.bitrate_kbps = 1;
        let e = Transcoder::start(&c, None).err().unwrap().to_string();
        assert!(
            e.contains("transcode.") && e.contains("bitrate_kbps"),
            "{e}"
        );
        c.bitrate_kbps = 300;
        c.netns = Some("nfx-no-such-ns".into());
        let e = Transcoder::start(&c, None).err().unwrap().to_string();
        assert!(e.contains("/run/netns/nfx-no-such-ns"), "{e}");
    }
}
