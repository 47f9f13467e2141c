//! The tunnel tier's processes an earlier agent left running: the pid files it wrote
//! under its tunnel directory (`ends/<id>/pid` for an `nfx tunnel` endpoint,
//! `accel/<id>.pid` for an `nfx accel serve` device) are read when the next agent
//! starts, and each process is killed only if its command line is exactly the one the
//! agent starts for that file: the subcommand, then the flag with that instance's own
//! path as a whole argument. A damaged or hostile pid file (any bytes, a pid of another
//! process, a process that merely names the directory, pid 1, a negative pid that
//! `kill(2)` would read as a process group) makes the agent signal nothing.

use std::path::{Path, PathBuf};

/// The configuration file of an endpoint, in its directory `ends/<id>/`.
pub const ENDPOINT_CONFIG: &str = "tunnel.yaml";
/// The socket of a device, in its directory `accel/<id>/`.
pub const DEVICE_SOCKET: &str = "device.sock";

/// What a pid file records, and how the process it names was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PidFile {
    /// The pid file.
    pub file: PathBuf,
    /// The subcommand words after the program (`tunnel`, or `accel serve`).
    pub subcommand: &'static [&'static str],
    /// The flag that precedes `path` on the command line.
    pub flag: &'static str,
    /// The instance's own file the agent passed after `flag`.
    pub path: PathBuf,
}

/// The pid files under the tunnel directory `dir`, each with the command line its
/// process was started with.
pub fn pid_files(dir: &Path) -> Vec<PidFile> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir.join("ends")) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.push(PidFile {
                    file: p.join("pid"),
                    subcommand: &["tunnel"],
                    flag: "--config",
                    path: p.join(ENDPOINT_CONFIG),
                });
            }
        }
    }
    if let Ok(rd) = std::fs::read_dir(dir.join("accel")) {
        for e in rd.flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "pid") && !p.is_dir() {
                out.push(PidFile {
                    file: p.clone(),
                    subcommand: &["accel", "serve"],
                    flag: "--socket",
                    path: p.with_extension("").join(DEVICE_SOCKET),
                });
            }
        }
    }
    out
}

/// The pid a pid file holds: decimal digits (surrounding ASCII white space allowed), above
/// 1 (pid 1 is init; 0 and negative numbers name process groups for `kill(2)`).
pub fn parse_pid(text: &[u8]) -> Option<i32> {
    let t = text.trim_ascii();
    if t.is_empty() || !t.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(t)
        .ok()?
        .parse::<i32>()
        .ok()
        .filter(|pid| *pid > 1)
}

/// True when `cmdline` (`/proc/<pid>/cmdline`: NUL-terminated arguments) is the one
/// the agent starts for `f`: a program (an interpreter and its script, too), then
/// `f.subcommand` as whole arguments, and after them `f.flag` followed by `f.path` as
/// two whole arguments.
pub fn started_for(f: &PidFile, cmdline: &[u8]) -> bool {
    let Some(body) = cmdline.strip_suffix(b"\0") else {
        return false;
    };
    let args: Vec<&[u8]> = body.split(|b| *b == 0).collect();
    let path = f.path.as_os_str().as_encoded_bytes();
    let sub: Vec<&[u8]> = f.subcommand.iter().map(|w| w.as_bytes()).collect();
    (1..args.len()).any(|i| {
        args[i..].starts_with(&sub)
            && args[i + sub.len()..]
                .windows(2)
                .any(|w| w[0] == f.flag.as_bytes() && w[1] == path)
    })
}

/// True when `cmdline` is the one the agent starts for the instance whose own file is
/// `path`: an endpoint's [`ENDPOINT_CONFIG`] or a device's [`DEVICE_SOCKET`]; false
/// for any other file name.
pub fn runs(path: &Path, cmdline: &[u8]) -> bool {
    let (subcommand, flag): (&'static [&'static str], &'static str) =
        match path.file_name().and_then(|n| n.to_str()) {
            Some(ENDPOINT_CONFIG) => (&["tunnel"], "--config"),
            Some(DEVICE_SOCKET) => (&["accel", "serve"], "--socket"),
            _ => return false,
        };
    let f = PidFile {
        file: PathBuf::new(),
        subcommand,
        flag,
        path: path.to_path_buf(),
    };
    started_for(&f, cmdline)
}

/// The pid to kill for `f`: the one its file holds, if `cmdline_of` (the process's
/// `/proc/<pid>/cmdline`) shows that process is the one the agent started for `f`.
pub fn leftover(f: &PidFile, cmdline_of: impl Fn(i32) -> Option<Vec<u8>>) -> Option<i32> {
    let pid = parse_pid(&std::fs::read(&f.file).ok()?)?;
    (pid != std::process::id() as i32 && started_for(f, &cmdline_of(pid)?)).then_some(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoint(dir: &Path) -> PidFile {
        PidFile {
            file: dir.join("ends/t1/pid"),
            subcommand: &["tunnel"],
            flag: "--config",
            path: dir.join("ends/t1/tunnel.yaml"),
        }
    }

    fn device(dir: &Path) -> PidFile {
        PidFile {
            file: dir.join("accel/qat0.pid"),
            subcommand: &["accel", "serve"],
            flag: "--socket",
            path: dir.join("accel/qat0/device.sock"),
        }
    }

    fn cmdline(args: &[&str]) -> Vec<u8> {
        args.iter()
            .flat_map(|a| [a.as_bytes(), b"\0"].concat())
            .collect()
    }

    #[test]
    fn only_digits_above_one_are_a_pid() {
        assert_eq!(parse_pid(b"1234\n"), Some(1234));
        assert_eq!(parse_pid(b" 77 "), Some(77));
        for bad in [
            &b""[..],
            b"1",
            b"0",
            b"-1",
            b"-4242",
            b"+42",
            b"42 43",
            b"0x10",
            b"99999999999",
            b"\xff1",
        ] {
            assert_eq!(parse_pid(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn pid_files_name_what_the_agent_started() {
        let dir = std::env::temp_dir().join(format!("nfx-leftovers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ends/t1")).unwrap();
        std::fs::create_dir_all(dir.join("accel/qat0")).unwrap();
        std::fs::write(dir.join("accel/qat0.pid"), "5").unwrap();
        std::fs::write(dir.join("accel/qat0.log"), "").unwrap();
        let mut found = pid_files(&dir);
        found.sort_by(|a, b| a.file.cmp(&b.file));
        assert_eq!(found, vec![device(&dir), endpoint(&dir)]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn only_the_exact_command_line_is_a_leftover() {
        let dir = Path::new("/run/nfx/agent/tunnels");
        let (e, d) = (endpoint(dir), device(dir));
        let conf = "/run/nfx/agent/tunnels/ends/t1/tunnel.yaml";
        let sock = "/run/nfx/agent/tunnels/accel/qat0/device.sock";
        assert!(started_for(
            &e,
            &cmdline(&["/usr/bin/nfx", "tunnel", "--config", conf])
        ));
        assert!(started_for(
            &d,
            &cmdline(&[
                "nfx",
                "accel",
                "serve",
                "--queue-pairs",
                "4",
                "--socket",
                sock,
                "--core",
                "3"
            ])
        ));
        for other in [
            cmdline(&["tail", "-f", "/run/nfx/agent/tunnels/ends/t1/tunnel.log"]),
            cmdline(&["less", conf]),
            cmdline(&[
                "nfx",
                "tunnel",
                "--config",
                "/run/nfx/agent/tunnels/ends/t2/tunnel.yaml",
            ]),
            cmdline(&["nfx", "tunnel", "--config", &format!("{conf}x")]),
            cmdline(&["nfx", "tunnel", "--config"]),
            cmdline(&["nfx", "accel", "serve", "--socket", sock]),
            cmdline(&["nfx", "tunnel", conf]),
            cmdline(&["nfx"]),
            Vec::new(),
            [
                cmdline(&["nfx", "tunnel", "--config"]),
                conf.as_bytes().to_vec(),
            ]
            .concat(),
        ] {
            assert!(
                !started_for(&e, &other),
                "{:?}",
                String::from_utf8_lossy(&other)
            );
        }
        assert!(!started_for(
            &d,
            &cmdline(&["nfx", "tunnel", "--socket", sock])
        ));
        // An interpreted program: the interpreter, its script, then the subcommand.
        let script = cmdline(&["/bin/sh", "/tmp/nfx", "tunnel", "--config", conf]);
        assert!(started_for(&e, &script) && runs(Path::new(conf), &script));
        assert!(!runs(Path::new("/run/nfx/agent/tunnels/ends/t1"), &script));
    }

    #[test]
    fn a_process_that_only_names_the_directory_is_left_alone() {
        let dir = std::env::temp_dir().join(format!("nfx-leftovers-live-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ends/t1")).unwrap();
        let log = dir.join("ends/t1/tunnel.log");
        std::fs::write(&log, "").unwrap();
        let mut child = std::process::Command::new("tail")
            .arg("-f")
            .arg(&log)
            .spawn()
            .unwrap();
        std::fs::write(dir.join("ends/t1/pid"), child.id().to_string()).unwrap();
        let f = endpoint(&dir);
        let cmdline = |pid: i32| std::fs::read(format!("/proc/{pid}/cmdline")).ok();
        assert_eq!(leftover(&f, cmdline), None);
        assert!(!runs(&f.path, &cmdline(child.id() as i32).unwrap()));
        assert!(matches!(child.try_wait(), Ok(None)), "tail was signalled");
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
