//! Bounded external commands (`nft`, `ip`): the one place the dataplane and the host
//! agent run a system tool, with its input on stdin, its output collected and a time
//! limit after which it is killed and reported.

use std::io::{self, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `program args` (with `input` on stdin) and returns its stdout; a non-zero exit is
/// an error carrying stderr, and a command still running after `limit` is killed.
pub fn run(
    program: &str,
    args: &[&str],
    input: Option<&str>,
    limit: Duration,
) -> io::Result<String> {
    let what = format!("{program} {}", args.join(" "));
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("{what}: {e}")))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(text.as_bytes())?;
    }
    // Read both pipes on their own threads so a chatty command cannot block on a full
    // pipe; each says when its pipe reached end of file, which the command's exit
    // brings, so the wait below needs no polling while the command runs.
    let (eof_tx, eof) = std::sync::mpsc::channel::<()>();
    let drain = |p: Option<Box<dyn Read + Send>>| {
        let eof_tx = eof_tx.clone();
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = p {
                let _ = p.read_to_string(&mut s);
            }
            let _ = eof_tx.send(());
            s
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + limit;
    let timed_out = |child: &mut std::process::Child| {
        let _ = child.kill();
        let _ = child.wait();
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{what}: no answer within {limit:?}"),
        )
    };
    for _ in 0..2 {
        if eof
            .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            .is_err()
        {
            return Err(timed_out(&mut child));
        }
    }
    // Both pipes closed: the command has ended, or (rarely) closed them and runs on.
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if Instant::now() >= deadline {
            return Err(timed_out(&mut child));
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    if !status.success() {
        return Err(io::Error::other(format!(
            "{what}: {status}: {}",
            err.trim()
        )));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_errors_and_time_limit() {
        let out = run("cat", &[], Some("hello"), Duration::from_secs(5)).unwrap();
        assert_eq!(out, "hello");
        let e = run(
            "sh",
            &["-c", "echo bad >&2; exit 3"],
            None,
            Duration::from_secs(5),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("bad") && e.contains('3'), "{e}");
        let e = run("sleep", &["5"], None, Duration::from_millis(100)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        let e = run("/nonexistent/tool", &[], None, Duration::from_secs(1)).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/tool"), "{e}");
    }
}
