//! Import of measured figures: accelerator calibration (`nfx bench accel --json`) and
//! dataplane benchmarks (`nfx bench dataplane --json`) set device latency and throughput
//! from measurement instead of guesses. The infrastructure descriptor names the files in
//! its `calibration` block ([`CalibrationFiles`]); [`Infrastructure::load`] applies them.

use crate::check::{non_negative, positive};
use crate::error::{parse_json, read_file, ModelError};
use crate::infra::{Infrastructure, Tier};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The `calibration` block of an infrastructure descriptor: the measurement files whose
/// figures the devices naming a `calibration` take (paths relative to the descriptor).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CalibrationFiles {
    /// Output of `nfx bench accel --json` (accelerators name an engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accel: Option<PathBuf>,
    /// Operation size whose accelerator figures are taken, bytes.
    #[serde(default = "default_accel_bytes")]
    pub accel_bytes: u64,
    /// Output of `nfx bench dataplane --json` (software and table devices name a case).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataplane: Option<PathBuf>,
}

/// A full-size ESP packet's payload: the operation size tunnels encrypt most.
fn default_accel_bytes() -> u64 {
    1420
}

/// Accelerator calibration as written by `nfx bench accel --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AccelCalibration {
    /// One record per engine, algorithm and buffer size.
    pub records: Vec<AccelRecord>,
}

/// One calibration point.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct AccelRecord {
    /// Engine name (`soft`, `cpu`, `lookaside`, ...).
    pub engine: String,
    /// Algorithm name.
    pub alg: String,
    /// Buffer size, bytes.
    pub bytes: u64,
    /// Throughput in MB/s (10^6 bytes per second).
    pub mbps: f64,
    /// Median latency of one operation, ns.
    pub lat_p50_ns: f64,
    /// 99th percentile latency of one operation, ns.
    pub lat_p99_ns: f64,
}

/// Dataplane figures as written by `nfx bench dataplane --json`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DataplaneBench {
    /// One case per measured configuration.
    pub cases: Vec<DataplaneCase>,
}

/// One measured dataplane configuration; a measurement that failed is `null` in the
/// bench's output (and is an error only if a device needs it).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct DataplaneCase {
    /// Case name (what a software device's `calibration` refers to).
    pub name: String,
    /// Single-stream TCP throughput, Gbit/s.
    #[serde(default)]
    pub tcp1_gbps: Option<f64>,
    /// Four-stream TCP throughput, Gbit/s.
    #[serde(default)]
    pub tcp4_gbps: Option<f64>,
    /// 64-byte UDP packet rate, Mpps.
    #[serde(default)]
    pub udp64_mpps: Option<f64>,
    /// Median latency, µs.
    #[serde(default)]
    pub lat_p50_us: Option<f64>,
    /// 99th percentile latency, µs.
    #[serde(default)]
    pub lat_p99_us: Option<f64>,
    /// CPU cores consumed while measuring.
    #[serde(default)]
    pub cpu_cores: Option<f64>,
}

/// Compares algorithm/engine names ignoring case, `-` and `_` (`AES-128-GCM` = `aes128gcm`).
fn same_name(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        s.chars()
            .filter(|c| *c != '-' && *c != '_')
            .map(|c| c.to_ascii_lowercase())
            .collect::<String>()
    };
    norm(a) == norm(b)
}

impl AccelCalibration {
    /// Reads and checks a calibration file.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let text = read_file(path)?;
        Self::from_json(&path.display().to_string(), &text)
    }

    /// Parses and checks calibration JSON; `file` names it in errors.
    pub fn from_json(file: &str, text: &str) -> Result<Self, ModelError> {
        let c: AccelCalibration = parse_json(file, text)?;
        for (i, r) in c.records.iter().enumerate() {
            let f = format!("records[{i}]");
            positive(file, &format!("{f}.mbps"), r.mbps)?;
            non_negative(file, &format!("{f}.lat_p50_ns"), r.lat_p50_ns)?;
            non_negative(file, &format!("{f}.lat_p99_ns"), r.lat_p99_ns)?;
        }
        Ok(c)
    }

    /// The record of `engine`/`alg` whose size is closest to `bytes` (larger on a tie).
    pub fn figure(&self, engine: &str, alg: &str, bytes: u64) -> Option<&AccelRecord> {
        self.records
            .iter()
            .filter(|r| same_name(&r.engine, engine) && same_name(&r.alg, alg))
            .min_by_key(|r| (r.bytes.abs_diff(bytes), std::cmp::Reverse(r.bytes)))
    }
}

impl DataplaneBench {
    /// Reads and checks a dataplane bench file.
    pub fn load(path: &Path) -> Result<Self, ModelError> {
        let text = read_file(path)?;
        Self::from_json(&path.display().to_string(), &text)
    }

    /// Parses and checks dataplane bench JSON; `file` names it in errors.
    pub fn from_json(file: &str, text: &str) -> Result<Self, ModelError> {
        let b: DataplaneBench = parse_json(file, text)?;
        for (i, c) in b.cases.iter().enumerate() {
            let f = format!("cases[{i}]");
            if let Some(v) = c.tcp1_gbps {
                positive(file, &format!("{f}.tcp1_gbps"), v)?;
            }
            if let Some(v) = c.cpu_cores {
                positive(file, &format!("{f}.cpu_cores"), v)?;
            }
            if let Some(v) = c.lat_p99_us {
                non_negative(file, &format!("{f}.lat_p99_us"), v)?;
            }
        }
        Ok(b)
    }

    /// The case called `name`.
    pub fn case(&self, name: &str) -> Option<&DataplaneCase> {
        self.cases.iter().find(|c| c.name == name)
    }
}

impl Infrastructure {
    /// Applies the files of the `calibration` block (relative to `dir`, the descriptor's
    /// directory): the accelerator calibration at `accel_bytes`, then the dataplane bench.
    /// Nothing without the block; `file` names the descriptor in errors.
    pub fn apply_calibration_files(&mut self, file: &str, dir: &Path) -> Result<(), ModelError> {
        let Some(c) = self.calibration.clone() else {
            return Ok(());
        };
        if c.accel_bytes == 0 {
            return Err(ModelError::new(
                file,
                "calibration.accel_bytes",
                "must be >= 1",
            ));
        }
        if let Some(p) = &c.accel {
            let cal = AccelCalibration::load(&dir.join(p))?;
            self.apply_accel_calibration(file, &cal, c.accel_bytes)?;
        }
        if let Some(p) = &c.dataplane {
            let bench = DataplaneBench::load(&dir.join(p))?;
            self.apply_dataplane_bench(file, &bench)?;
        }
        Ok(())
    }

    /// Sets each accelerator with a `calibration` engine from `cal` at `bytes`-sized
    /// operations: throughput = the slowest of its algorithms, latency = the largest p50.
    /// Returns the ids of the devices updated; `file` is the infrastructure file, named
    /// when a device refers to a figure the calibration lacks.
    pub fn apply_accel_calibration(
        &mut self,
        file: &str,
        cal: &AccelCalibration,
        bytes: u64,
    ) -> Result<Vec<String>, ModelError> {
        let mut updated = Vec::new();
        for (i, d) in self.devices.iter_mut().enumerate() {
            let (Tier::Accelerator, Some(engine)) = (d.tier, &d.calibration) else {
                continue;
            };
            let mut gbps = f64::INFINITY;
            let mut lat_us: f64 = 0.0;
            for (j, alg) in d.algorithms.iter().enumerate() {
                let r = cal.figure(engine, alg, bytes).ok_or_else(|| {
                    ModelError::new(
                        file,
                        format!("devices[{i}].algorithms[{j}]"),
                        format!("the calibration has no record for engine {engine:?}, algorithm {alg:?}"),
                    )
                })?;
                gbps = gbps.min(r.mbps * 8.0 / 1000.0);
                lat_us = lat_us.max(r.lat_p50_ns / 1000.0);
            }
            d.throughput_gbps = gbps;
            d.latency_us = lat_us;
            updated.push(d.id.clone());
        }
        Ok(updated)
    }

    /// Sets each software or table-tier device with a `calibration` case from `bench`:
    /// latency = the case's p99; throughput = single-stream TCP per measured core × the
    /// device's cores (software), or the case's single-stream TCP as measured (table
    /// tier: the fast path, e.g. case `nfx-fastpath`, is not bounded by a core count).
    /// Returns the ids of the devices updated.
    pub fn apply_dataplane_bench(
        &mut self,
        file: &str,
        bench: &DataplaneBench,
    ) -> Result<Vec<String>, ModelError> {
        let mut updated = Vec::new();
        for (i, d) in self.devices.iter_mut().enumerate() {
            let (Tier::Software | Tier::Table, Some(name)) = (d.tier, &d.calibration) else {
                continue;
            };
            let c = bench.case(name).ok_or_else(|| {
                ModelError::new(
                    file,
                    format!("devices[{i}].calibration"),
                    format!("the dataplane bench has no case {name:?}"),
                )
            })?;
            let need = |what: &str, v: Option<f64>| {
                v.ok_or_else(|| {
                    ModelError::new(
                        file,
                        format!("devices[{i}].calibration"),
                        format!("case {name:?} of the dataplane bench has no {what} (null: that measurement failed)"),
                    )
                })
            };
            let tcp1 = need("tcp1_gbps", c.tcp1_gbps)?;
            d.throughput_gbps = if d.tier == Tier::Table {
                tcp1
            } else {
                tcp1 / need("cpu_cores", c.cpu_cores)? * f64::from(d.cpu_cores.unwrap_or(0))
            };
            d.latency_us = need("lat_p99_us", c.lat_p99_us)?;
            updated.push(d.id.clone());
        }
        Ok(updated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFRA: &str = "
hosts: [{ id: h, cores: 8 }]
devices:
  - { id: sw, host: h, tier: software, functions: [firewall], latency_us: 99, throughput_gbps: 1, cpu_cores: 2, calibration: fw }
  - { id: la, host: h, tier: accelerator, functions: [esp], latency_us: 99, throughput_gbps: 1, queue_pairs: 2, algorithms: [aes-128-gcm, chacha20-poly1305], calibration: lookaside }
  - { id: sw2, host: h, tier: software, functions: [nat], latency_us: 7, throughput_gbps: 3, cpu_cores: 1 }
  - { id: tb, host: h, tier: table, functions: [firewall, nat], latency_us: 9, throughput_gbps: 1, table_entries: 16, calibration: fast }
";

    const CAL: &str = r#"{"records":[
 {"engine":"lookaside","alg":"AES-128-GCM","bytes":64,"mbps":300,"lat_p50_ns":2000,"lat_p99_ns":5000},
 {"engine":"lookaside","alg":"aes128gcm","bytes":1420,"mbps":2000,"lat_p50_ns":4000,"lat_p99_ns":9000},
 {"engine":"lookaside","alg":"chacha20-poly1305","bytes":1420,"mbps":1500,"lat_p50_ns":3000,"lat_p99_ns":8000},
 {"engine":"cpu","alg":"aes-128-gcm","bytes":1420,"mbps":5000,"lat_p50_ns":300,"lat_p99_ns":900}]}"#;

    const DP: &str = r#"{"cases":[{"name":"fw","tcp1_gbps":12,"tcp4_gbps":20,"udp64_mpps":3,"lat_p50_us":20,"lat_p99_us":45,"cpu_cores":1.5},
 {"name":"fast","tcp1_gbps":21,"tcp4_gbps":40,"udp64_mpps":0.4,"lat_p50_us":15,"lat_p99_us":30,"cpu_cores":2}]}"#;

    #[test]
    fn closest_size_is_chosen() {
        let c = AccelCalibration::from_json("c.json", CAL).unwrap();
        assert_eq!(
            c.figure("lookaside", "aes-128-gcm", 1500).unwrap().bytes,
            1420
        );
        assert_eq!(c.figure("lookaside", "aes-128-gcm", 100).unwrap().bytes, 64);
        assert!(c.figure("gpu", "aes-128-gcm", 100).is_none());
    }

    #[test]
    fn accelerator_figures_are_conservative() {
        let mut i = Infrastructure::from_yaml("i.yaml", INFRA).unwrap();
        let c = AccelCalibration::from_json("c.json", CAL).unwrap();
        let up = i.apply_accel_calibration("i.yaml", &c, 1420).unwrap();
        assert_eq!(up, vec!["la".to_string()]);
        let d = i.device("la").unwrap();
        assert_eq!(d.throughput_gbps, 12.0);
        assert_eq!(d.latency_us, 4.0);
    }

    #[test]
    fn missing_record_names_the_algorithm() {
        let mut i = Infrastructure::from_yaml("i.yaml", INFRA).unwrap();
        let c =
            AccelCalibration::from_json("c.json", &CAL.replace("chacha20-poly1305", "x")).unwrap();
        let e = i.apply_accel_calibration("i.yaml", &c, 1420).unwrap_err();
        assert_eq!(e.field, "devices[1].algorithms[1]");
    }

    #[test]
    fn software_figures_scale_by_cores() {
        let mut i = Infrastructure::from_yaml("i.yaml", INFRA).unwrap();
        let b = DataplaneBench::from_json("d.json", DP).unwrap();
        assert_eq!(
            i.apply_dataplane_bench("i.yaml", &b).unwrap(),
            vec!["sw", "tb"]
        );
        let d = i.device("sw").unwrap();
        assert_eq!(d.throughput_gbps, 16.0);
        assert_eq!(d.latency_us, 45.0);
        let t = i.device("tb").unwrap();
        assert_eq!(
            (t.throughput_gbps, t.latency_us),
            (21.0, 30.0),
            "table tier: as measured"
        );
        assert_eq!(i.device("sw2").unwrap().latency_us, 7.0);
        let b = DataplaneBench::from_json("d.json", &DP.replace("\"fw\"", "\"other\"")).unwrap();
        let e = i.apply_dataplane_bench("i.yaml", &b).unwrap_err();
        assert_eq!(e.field, "devices[0].calibration");
    }

    #[test]
    fn bad_figures_are_rejected() {
        let e = AccelCalibration::from_json("c.json", &CAL.replacen("300", "-300", 1)).unwrap_err();
        assert_eq!(e.field, "records[0].mbps");
        let e = DataplaneBench::from_json("d.json", &DP.replace("1.5", "0")).unwrap_err();
        assert_eq!(e.field, "cases[0].cpu_cores");
        let e = DataplaneBench::from_json("d.json", r#"{"cases":[{"tcp1_gbps":1}]}"#).unwrap_err();
        assert_eq!(e.field, "cases[0]");
    }

    #[test]
    fn a_failed_measurement_is_an_error_only_where_it_is_needed() {
        let mut i = Infrastructure::from_yaml("i.yaml", INFRA).unwrap();
        let dp = DP.replace(r#""lat_p99_us":30"#, r#""lat_p99_us":null"#);
        let b = DataplaneBench::from_json("d.json", &dp).unwrap();
        let e = i.apply_dataplane_bench("i.yaml", &b).unwrap_err();
        assert_eq!(e.field, "devices[3].calibration");
        assert!(e.message.contains("lat_p99_us"), "{e}");
        let ok = DataplaneBench::from_json(
            "d.json",
            &DP.replace("\"udp64_mpps\":3", "\"udp64_mpps\":null"),
        );
        assert!(ok.is_ok());
    }

    /// The figures `nfx bench dataplane --json` and `nfx bench accel --json` write, named
    /// from a descriptor's `calibration` block, are what the loaded descriptor holds.
    #[test]
    fn the_calibration_block_applies_the_bench_outputs_at_load() {
        let dir = std::env::temp_dir().join(format!("nfx-cal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("accel.json"), CAL).unwrap();
        let dp = r#"{"cases":[{"name":"fw","tcp1_gbps":12,"tcp4_gbps":null,"udp64_mpps":null,
          "udp64_offered_mpps":null,"udp64_runs":[],"lat_p50_us":20,"lat_p99_us":45,
          "lat_p50_runs_us":[20],"lat_p99_runs_us":[45],"cpu_cores":1.5},
          {"name":"fast","tcp1_gbps":21,"lat_p99_us":30,"cpu_cores":null}],
          "idle_cpu_pct_adaptive":null,"generator":"mmsg","sink":"ingress","repeat":3,"lat_repeat":3}"#;
        std::fs::write(dir.join("dp.json"), dp).unwrap();
        let text = format!(
            "{INFRA}calibration: {{ accel: accel.json, dataplane: dp.json, accel_bytes: 1420 }}\n"
        );
        std::fs::write(dir.join("infra.yaml"), &text).unwrap();
        let i = Infrastructure::load(&dir.join("infra.yaml")).unwrap();
        assert_eq!(i.device("la").unwrap().throughput_gbps, 12.0);
        assert_eq!(i.device("sw").unwrap().throughput_gbps, 16.0);
        assert_eq!(i.device("tb").unwrap().latency_us, 30.0);
        assert_eq!(i.device("sw2").unwrap().latency_us, 7.0);
        let nominal = Infrastructure::from_yaml("i.yaml", &text).unwrap();
        assert_eq!(nominal.device("sw").unwrap().throughput_gbps, 1.0);
        std::fs::write(
            dir.join("infra.yaml"),
            text.replace("dp.json", "missing.json"),
        )
        .unwrap();
        let e = Infrastructure::load(&dir.join("infra.yaml")).unwrap_err();
        assert!(e.file.ends_with("missing.json"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
