//! Runs closures on threads that entered a network namespace, so a controller in the root
//! namespace can open sockets in the management namespace (a socket keeps the namespace
//! it was opened in; connections pooled by an HTTP client stay there too) without any
//! interface being added to the root namespace.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

type Job = Box<dyn FnOnce() + Send>;

/// A fixed set of threads inside one namespace, taking jobs from a queue.
pub struct NetnsExecutor {
    netns: String,
    tx: Mutex<mpsc::Sender<Job>>,
}

impl NetnsExecutor {
    /// Starts `threads` threads inside `netns`; fails if they cannot enter it.
    pub fn start(netns: &str, threads: usize) -> anyhow::Result<Arc<Self>> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for k in 0..threads.max(1) {
            let (rx, ns) = (rx.clone(), netns.to_string());
            let (ok_tx, ok_rx) = mpsc::channel();
            std::thread::Builder::new()
                .name(format!("netns-{ns}-{k}"))
                .spawn(move || {
                    let entered = nfx_io::netns::enter_netns(&ns);
                    let failed = entered.is_err();
                    let _ = ok_tx.send(entered);
                    if failed {
                        return;
                    }
                    loop {
                        let job = match rx.lock() {
                            Ok(r) => r.recv(),
                            Err(_) => return,
                        };
                        match job {
                            Ok(j) => j(),
                            Err(_) => return,
                        }
                    }
                })?;
            ok_rx
                .recv()
                .map_err(|_| anyhow::anyhow!("thread for {netns} ended"))??;
        }
        Ok(Arc::new(NetnsExecutor {
            netns: netns.to_string(),
            tx: Mutex::new(tx),
        }))
    }

    /// The namespace.
    pub fn netns(&self) -> &str {
        &self.netns
    }

    /// Runs `f` on one of the threads and returns its result (`None` if the threads are
    /// gone).
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
        let (tx, rx) = mpsc::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        self.tx.lock().ok()?.send(job).ok()?;
        rx.recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_namespace_is_an_error() {
        let e = NetnsExecutor::start("nfx-no-such-ns-xyz", 2)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("nfx-no-such-ns-xyz"), "{e}");
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn jobs_run_in_the_namespace() {
        let ns = format!("nfxut-exec-{}", std::process::id());
        let add = std::process::Command::new("ip")
            .args(["netns", "add", &ns])
            .status()
            .unwrap();
        assert!(add.success());
        let ex = NetnsExecutor::start(&ns, 2).unwrap();
        let own = std::fs::read_link("/proc/thread-self/ns/net").unwrap();
        let theirs = ex
            .run(|| std::fs::read_link("/proc/thread-self/ns/net").unwrap())
            .unwrap();
        assert_ne!(own, theirs);
        assert_eq!(ex.run(|| 6 * 7), Some(42));
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &ns])
            .status();
    }
}
