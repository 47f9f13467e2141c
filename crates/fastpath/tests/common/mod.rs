//! Namespaces for the table tier's tests: `ip` commands, namespaces named uniquely per
//! process and test (tests run in parallel, and beside other helpers' testbeds), veth
//! links between them, removed on drop.

#![allow(dead_code)]

use std::process::Command;

/// Runs `ip args…`, panicking with its stderr when it fails; returns stdout.
pub fn ip(args: &[&str]) -> String {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// True when the tests may build namespaces and load BPF.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Network namespaces `prefix-<pid>-<tag>-<name>`, deleted when dropped.
pub struct Namespaces {
    pub names: Vec<String>,
}

impl Namespaces {
    /// Creates one namespace per name, with loopback up.
    pub fn new(prefix: &str, tag: &str, names: &[&str]) -> Self {
        let id = std::process::id();
        let names: Vec<String> = names
            .iter()
            .map(|n| format!("{prefix}-{id}-{tag}-{n}"))
            .collect();
        let ns = Self { names };
        for n in &ns.names {
            ip(&["netns", "add", n]);
            ip(&["-n", n, "link", "set", "lo", "up"]);
        }
        ns
    }

    /// Links namespace `a`'s `x` (MAC `xa`) to namespace `b`'s `y` (MAC `ya`).
    pub fn link(&self, a: usize, x: &str, xa: &str, b: usize, y: &str, ya: &str) {
        ip(&[
            "-n",
            &self.names[a],
            "link",
            "add",
            x,
            "address",
            xa,
            "type",
            "veth",
            "peer",
            "name",
            y,
            "netns",
            &self.names[b],
            "address",
            ya,
        ]);
    }

    /// Adds `addr` (CIDR) to `dev` in namespace `n` and sets it up.
    pub fn addr(&self, n: usize, dev: &str, addr: &str) {
        ip(&["-n", &self.names[n], "addr", "add", addr, "dev", dev]);
        ip(&["-n", &self.names[n], "link", "set", dev, "up"]);
    }

    /// `ip -n <ns> args…`.
    pub fn ip(&self, n: usize, args: &[&str]) -> String {
        let mut all = vec!["-n", self.names[n].as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// Index of `dev` in namespace `n`.
    pub fn ifindex(&self, n: usize, dev: &str) -> u32 {
        let out = self.ip(n, &["-o", "link", "show", dev]);
        out.split(':').next().unwrap().trim().parse().unwrap()
    }

    /// Runs `f` on a thread that entered namespace `n` (the caller's namespace stays).
    pub fn within<T: Send + 'static>(&self, n: usize, f: impl FnOnce() -> T + Send + 'static) -> T {
        let ns = self.names[n].clone();
        std::thread::spawn(move || {
            nfx_io::netns::enter_netns(&ns).unwrap();
            f()
        })
        .join()
        .unwrap()
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}
