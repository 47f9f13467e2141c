//! The kernel baseline: nftables stateful firewall (conntrack + the standard ACL) and
//! masquerade on edge's outside interface, applied and removed cleanly.

use crate::{acl, netns, Host, Testbed};
use anyhow::Context;
use std::io::Write;
use std::process::Stdio;
use std::time::Duration;

/// Name of the filter table nfx adds.
pub const FILTER_TABLE: &str = "nfx_fw";
/// Name of the NAT table nfx adds.
pub const NAT_TABLE: &str = "nfx_nat";

/// The full ruleset text for a testbed: replaces any earlier copy of our tables
/// (so applying twice is fine) and leaves other tables alone.
pub fn ruleset(tb: &Testbed) -> String {
    let rules = acl::standard(tb.spec().addr(1, 0));
    let mut s = String::new();
    // `add` then `delete` makes the load idempotent whether or not the table exists.
    for t in [format!("inet {FILTER_TABLE}"), format!("ip {NAT_TABLE}")] {
        s.push_str(&format!("add table {t}\ndelete table {t}\n"));
    }
    s.push_str(&format!(
        "table inet {FILTER_TABLE} {{\n  chain forward {{\n"
    ));
    s.push_str("    type filter hook forward priority filter; policy drop;\n");
    s.push_str("    ct state established,related accept\n");
    s.push_str("    ct state invalid drop\n");
    for r in &rules {
        s.push_str("    ");
        s.push_str(&acl::to_nft(r));
        s.push('\n');
    }
    s.push_str("  }\n}\n");
    s.push_str(&format!(
        "table ip {NAT_TABLE} {{\n  chain postrouting {{\n"
    ));
    s.push_str("    type nat hook postrouting priority srcnat; policy accept;\n");
    s.push_str("    oifname \"to-cloud\" masquerade\n  }\n}\n");
    s
}

/// Loads a ruleset into namespace `ns` (`nft -f -`, bounded to 10 s); the error carries
/// nft's message.
pub fn load(ns: &str, text: &str) -> anyhow::Result<()> {
    let mut cmd = netns::command(ns, &["nft", "-f", "-"]);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .context("starting nft (is nftables installed?)")?;
    child
        .stdin
        .take()
        .context("nft stdin")?
        .write_all(text.as_bytes())?;
    let mut guard = crate::process::ChildGuard::new(child, "nft -f -");
    guard.wait_within(Duration::from_secs(10))?;
    let out = guard.take().wait_with_output()?;
    if !out.status.success() {
        anyhow::bail!(
            "nft in {ns}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The nftables baseline applied on edge; removed when dropped.
pub struct NftBaseline {
    ns: String,
}

impl NftBaseline {
    /// Loads [`ruleset`] into edge's namespace (`nft -f -`).
    pub fn apply(tb: &Testbed) -> anyhow::Result<Self> {
        let ns = tb.ns(Host::Edge);
        let text = ruleset(tb);
        load(&ns, &text).context("nft rejected the baseline ruleset")?;
        Ok(Self { ns })
    }

    /// Number of rules in our forward chain as the kernel reports them.
    pub fn rule_count(&self) -> anyhow::Result<usize> {
        let out = netns::exec(
            &self.ns,
            &["nft", "list", "chain", "inet", FILTER_TABLE, "forward"],
            Duration::from_secs(10),
        )?;
        Ok(out
            .lines()
            .map(str::trim)
            .filter(|l| l.ends_with("accept") || l.ends_with("drop"))
            .filter(|l| !l.starts_with("type "))
            .count())
    }

    /// Removes our tables (also done on drop).
    pub fn remove(&self) -> anyhow::Result<()> {
        for t in [["inet", FILTER_TABLE], ["ip", NAT_TABLE]] {
            let exists = netns::exec(
                &self.ns,
                &["nft", "list", "table", t[0], t[1]],
                Duration::from_secs(10),
            );
            if exists.is_ok() {
                netns::exec(
                    &self.ns,
                    &["nft", "delete", "table", t[0], t[1]],
                    Duration::from_secs(10),
                )?;
            }
        }
        Ok(())
    }
}

impl Drop for NftBaseline {
    fn drop(&mut self) {
        if let Err(e) = self.remove() {
            log::warn!("removing nftables baseline from {}: {e:#}", self.ns);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Spec, TestbedGuard};

    #[test]
    fn ruleset_shape() {
        let tb = Testbed::attach(Spec {
            prefix: "x-".into(),
            subnet_base: 9,
        })
        .unwrap();
        let r = ruleset(&tb);
        assert!(r.contains("ct state established,related accept"));
        assert!(r.contains("oifname \"to-cloud\" masquerade"));
        assert!(r.contains("ip saddr 10.9.1.0/24 tcp dport 5201-5210 accept"));
        assert_eq!(
            r.matches(" drop\n").count() + r.matches(" accept\n").count(),
            102
        );
    }

    #[test]
    #[cfg_attr(nfx_no_root, ignore = "needs root")]
    fn applies_twice_and_removes_cleanly() {
        let tb = TestbedGuard::up(Spec {
            prefix: "nfxut-nft-".into(),
            subnet_base: 233,
        })
        .unwrap();
        let a = NftBaseline::apply(&tb).unwrap();
        let b = NftBaseline::apply(&tb).unwrap();
        assert_eq!(b.rule_count().unwrap(), 102);
        drop(a);
        let edge = tb.ns(Host::Edge);
        let out = netns::exec(&edge, &["nft", "list", "tables"], Duration::from_secs(5)).unwrap();
        assert!(!out.contains(FILTER_TABLE), "{out}");
        b.remove().unwrap();
    }
}
