//! Measured engine performance (MB/s and ns per operation by engine, algorithm and size),
//! written by `nfx bench accel` and read by the performance model and the SSM.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One measured point.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CalPoint {
    /// Engine name (`soft`, `cpu`, `lookaside`, `openssl`, `openssl-masked`).
    pub engine: String,
    /// Algorithm name (`aes-128-gcm`, ...).
    pub alg: String,
    /// Data bytes per operation.
    pub bytes: u32,
    /// Throughput in MB/s (10^6 bytes per second).
    pub mbps: f64,
    /// Mean time per operation in nanoseconds.
    pub ns_per_op: f64,
}

/// A calibration file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    /// Where and how it was measured (free text, e.g. the CPU model and command).
    #[serde(default)]
    pub source: String,
    /// The measured points.
    pub points: Vec<CalPoint>,
}

/// Why a calibration file could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("calibration file {path}: {what}")]
pub struct CalibrationError {
    /// The file.
    pub path: PathBuf,
    /// What is wrong (with the field where there is one).
    pub what: String,
}

impl Calibration {
    /// Reads and validates a calibration file.
    pub fn load(path: &Path) -> Result<Calibration, CalibrationError> {
        let err = |what: String| CalibrationError {
            path: path.to_path_buf(),
            what,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        let cal: Calibration = serde_json::from_str(&text).map_err(|e| err(e.to_string()))?;
        for (i, p) in cal.points.iter().enumerate() {
            let bad = |field: &str, why: &str| err(format!("points[{i}].{field}: {why}"));
            if p.engine.is_empty() {
                return Err(bad("engine", "must not be empty"));
            }
            if p.alg.parse::<crate::Alg>().is_err() {
                return Err(bad("alg", &format!("unknown algorithm `{}`", p.alg)));
            }
            if p.bytes == 0 {
                return Err(bad("bytes", "must be positive"));
            }
            if !(p.mbps.is_finite() && p.mbps > 0.0) {
                return Err(bad("mbps", "must be a positive number"));
            }
            if !(p.ns_per_op.is_finite() && p.ns_per_op > 0.0) {
                return Err(bad("ns_per_op", "must be a positive number"));
            }
        }
        Ok(cal)
    }

    /// Writes the file as pretty JSON.
    pub fn save(&self, path: &Path) -> Result<(), CalibrationError> {
        let text = serde_json::to_string_pretty(self).map_err(|e| CalibrationError {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
        std::fs::write(path, text + "\n").map_err(|e| CalibrationError {
            path: path.to_path_buf(),
            what: e.to_string(),
        })
    }

    /// Adds a point, replacing one with the same engine, algorithm and size.
    pub fn insert(&mut self, p: CalPoint) {
        self.points
            .retain(|q| !(q.engine == p.engine && q.alg == p.alg && q.bytes == p.bytes));
        self.points.push(p);
    }

    /// Estimated nanoseconds per operation of `bytes` bytes, interpolated linearly between
    /// the measured sizes (cost = fixed + per-byte) and extrapolated along the nearest
    /// segment; `None` when the engine/algorithm was never measured.
    pub fn ns_per_op(&self, engine: &str, alg: &str, bytes: u32) -> Option<f64> {
        let mut pts: Vec<(f64, f64)> = self
            .points
            .iter()
            .filter(|p| p.engine == engine && p.alg == alg)
            .map(|p| (p.bytes as f64, p.ns_per_op))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let b = bytes as f64;
        match pts.len() {
            0 => None,
            1 => Some(pts[0].1 * (b / pts[0].0).max(f64::MIN_POSITIVE)),
            n => {
                let i = pts.windows(2).position(|w| b <= w[1].0).unwrap_or(n - 2);
                let ((x0, y0), (x1, y1)) = (pts[i], pts[i + 1]);
                let y = y0 + (y1 - y0) * (b - x0) / (x1 - x0);
                Some(y.max(1.0))
            }
        }
    }

    /// Estimated throughput in MB/s for operations of `bytes` bytes (see `ns_per_op`).
    pub fn throughput(&self, engine: &str, alg: &str, bytes: u32) -> Option<f64> {
        self.ns_per_op(engine, alg, bytes)
            .map(|ns| bytes as f64 * 1000.0 / ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(bytes: u32, ns: f64) -> CalPoint {
        CalPoint {
            engine: "cpu".into(),
            alg: "aes-128-gcm".into(),
            bytes,
            mbps: bytes as f64 * 1000.0 / ns,
            ns_per_op: ns,
        }
    }

    #[test]
    fn interpolates_and_extrapolates() {
        let mut c = Calibration::default();
        c.insert(pt(64, 100.0));
        c.insert(pt(1064, 600.0));
        assert_eq!(c.ns_per_op("cpu", "aes-128-gcm", 564), Some(350.0));
        assert_eq!(c.ns_per_op("cpu", "aes-128-gcm", 2064), Some(1100.0));
        assert_eq!(c.ns_per_op("cpu", "aes-128-gcm", 1), Some(68.5));
        let t = c.throughput("cpu", "aes-128-gcm", 64).unwrap();
        assert!((t - 640.0).abs() < 1e-9);
        assert_eq!(c.throughput("soft", "aes-128-gcm", 64), None);
        c.insert(pt(64, 50.0));
        assert_eq!(c.points.len(), 2);
    }

    #[test]
    fn save_load_round_trip_and_validation() {
        let dir = std::env::temp_dir().join(format!("nfx-cal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cal.json");
        let mut c = Calibration {
            source: "test".into(),
            points: vec![],
        };
        c.insert(pt(1420, 710.0));
        c.save(&path).unwrap();
        assert_eq!(Calibration::load(&path).unwrap(), c);
        c.points[0].mbps = -1.0;
        c.save(&path).unwrap();
        let e = Calibration::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("cal.json") && e.contains("points[0].mbps"),
            "{e}"
        );
        std::fs::write(&path, "{\"points\": [{\"engine\": 3}]}").unwrap();
        assert!(Calibration::load(&path)
            .unwrap_err()
            .to_string()
            .contains("cal.json"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
