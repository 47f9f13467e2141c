//! `/metrics` over HTTP for the long-running `nfx` processes that have no HTTP server of
//! their own (`nfx run`, `nfx accel serve`): a thread with a small tokio runtime serving
//! axum, answering each scrape with the text a component's renderer returns (e.g.
//! `nfx_dataplane::metrics::render`). Unknown paths get 404. With a token, a scrape
//! without `Authorization: Bearer <token>` (compared in constant time, `nfx_io::token`)
//! gets 401 and nothing is rendered.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;

use anyhow::Context;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::CONTENT_TYPE;

/// Renders the metrics of one scrape, or says why it cannot.
pub type Render = dyn Fn() -> anyhow::Result<String> + Send + Sync;

/// The bearer token a `--metrics-token-file` names, when one is given (the error names
/// the flag).
pub fn token_file(file: Option<&std::path::Path>) -> anyhow::Result<Option<nfx_io::token::Token>> {
    file.map(|f| {
        nfx_io::token::read_file(f).map_err(|e| anyhow::anyhow!("--metrics-token-file: {e}"))
    })
    .transpose()
}

/// Binds the endpoint's socket now, in the caller's network namespace (before a worker
/// enters its ports' namespace).
pub fn bind(listen: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(listen).with_context(|| format!("--metrics-listen {listen}"))
}

/// Serves `render` on `GET /metrics` of `listener` from a background thread until the
/// process exits, to scrapes carrying `token` when one is given; returns the address.
pub fn serve(
    std_listener: TcpListener,
    render: Arc<Render>,
    token: Option<zeroize::Zeroizing<String>>,
) -> anyhow::Result<SocketAddr> {
    let token = Arc::new(token);
    std_listener.set_nonblocking(true)?;
    let addr = std_listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .context("starting the metrics runtime")?;
    std::thread::Builder::new()
        .name("nfx-metrics".into())
        .spawn(move || {
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(std_listener) {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("nfx: metrics endpoint: {e}");
                        return;
                    }
                };
                let app = axum::Router::new().route(
                    "/metrics",
                    get(move |headers: HeaderMap| {
                        let (render, token) = (render.clone(), token.clone());
                        async move {
                            let given = headers
                                .get(header::AUTHORIZATION)
                                .and_then(|v| v.to_str().ok());
                            match &*token {
                                Some(t) if !nfx_io::token::bearer_matches(given, t) => {
                                    (StatusCode::UNAUTHORIZED, "missing or wrong bearer token\n")
                                        .into_response()
                                }
                                _ => scrape(&*render),
                            }
                        }
                    }),
                );
                if let Err(e) = axum::serve(listener, app).await {
                    eprintln!("nfx: metrics endpoint: {e}");
                }
            });
        })
        .context("starting the metrics thread")?;
    Ok(addr)
}

fn scrape(render: &Render) -> axum::response::Response {
    match render() {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn get(addr: SocketAddr, path: &str) -> String {
        get_with(addr, path, "")
    }

    fn get_with(addr: SocketAddr, path: &str, extra: &str) -> String {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_the_rendered_text_and_404_elsewhere() {
        let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let m = n.clone();
        let addr = serve(
            bind("127.0.0.1:0".parse().unwrap()).unwrap(),
            Arc::new(move || {
                let k = m.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok(format!("x_total {k}\n# EOF\n"))
            }),
            None,
        )
        .unwrap();
        let a = get(addr, "/metrics");
        assert!(a.starts_with("HTTP/1.1 200"), "{a}");
        assert!(a.contains("openmetrics-text"), "{a}");
        assert!(a.ends_with("x_total 0\n# EOF\n"), "{a}");
        assert!(get(addr, "/metrics").ends_with("x_total 1\n# EOF\n"));
        assert!(get(addr, "/other").starts_with("HTTP/1.1 404"));
    }

    #[test]
    fn a_failing_renderer_answers_503() {
        let addr = serve(
            bind("127.0.0.1:0".parse().unwrap()).unwrap(),
            Arc::new(|| anyhow::bail!("worker gone")),
            None,
        )
        .unwrap();
        let a = get(addr, "/metrics");
        assert!(a.starts_with("HTTP/1.1 503"), "{a}");
        assert!(a.contains("worker gone"), "{a}");
    }

    #[test]
    fn with_a_token_only_scrapes_that_carry_it_are_rendered() {
        let n = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let m = n.clone();
        let addr = serve(
            bind("127.0.0.1:0".parse().unwrap()).unwrap(),
            Arc::new(move || {
                m.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Ok("x_total 1\n# EOF\n".into())
            }),
            Some(zeroize::Zeroizing::new("s3cret-token".into())),
        )
        .unwrap();
        for extra in [
            "",
            "Authorization: Bearer wrong\r\n",
            "Authorization: Bearer s3cret-tokenx\r\n",
            "Authorization: s3cret-token\r\n",
        ] {
            let a = get_with(addr, "/metrics", extra);
            assert!(a.starts_with("HTTP/1.1 401"), "{extra:?}: {a}");
            assert!(!a.contains("x_total"), "{a}");
        }
        assert_eq!(n.load(std::sync::atomic::Ordering::Relaxed), 0);
        let a = get_with(addr, "/metrics", "Authorization: Bearer s3cret-token\r\n");
        assert!(
            a.starts_with("HTTP/1.1 200") && a.ends_with("x_total 1\n# EOF\n"),
            "{a}"
        );
    }
}
