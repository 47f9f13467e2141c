//! Scraping a `/metrics` endpoint in tests: one GET, and the text as series → value.

// Each test crate that includes this module uses part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Series name with labels → value, from Prometheus text.
pub fn parse(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (k, v) = l
                .rsplit_once(' ')
                .unwrap_or_else(|| panic!("bad line {l:?}"));
            (
                k.to_string(),
                v.parse().unwrap_or_else(|_| panic!("bad value in {l:?}")),
            )
        })
        .collect()
}

/// The body of `GET /metrics` on `addr` (which must answer 200).
pub fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: nfx\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// A free loopback port's address (bound and released).
pub fn free_addr() -> SocketAddr {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}").parse().unwrap()
}
