//! The classical one-dimensional bin-packing benchmark sets (BPPLIB text files and the
//! `optima.csv` index) and their mapping onto placement instances: one device model of
//! cost 1 and capacity C, one VNF instance per item.

use crate::error::{PlacementError, Result};
use crate::instance::{Device, DeviceKind, Instance, VnfInstance};
use std::path::{Path, PathBuf};

/// One bin-packing instance: capacity and item weights.
#[derive(Debug, Clone, PartialEq)]
pub struct BppInstance {
    /// Name (file stem).
    pub name: String,
    /// Bin capacity C.
    pub capacity: u64,
    /// Item weights.
    pub weights: Vec<u64>,
}

/// Parses the BPPLIB text format: n, C, then n weights, one number per line.
pub fn parse_bpp(text: &str, file: &str, name: &str) -> Result<BppInstance> {
    let err = |line: usize, message: String| PlacementError::BppFormat {
        file: file.to_string(),
        line,
        message,
    };
    let mut nums = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let l = l.trim();
        if l.is_empty() {
            continue;
        }
        let v: u64 = l
            .parse()
            .map_err(|_| err(i + 1, format!("`{l}` is not a non-negative integer")))?;
        nums.push((i + 1, v));
    }
    let (&(_, n), rest) = nums
        .split_first()
        .ok_or_else(|| err(1, "empty file".into()))?;
    let (&(cl, capacity), weights) = rest
        .split_first()
        .ok_or_else(|| err(2, "missing the capacity line".into()))?;
    if capacity == 0 {
        return Err(err(cl, "capacity must be positive".into()));
    }
    if weights.len() as u64 != n {
        return Err(err(
            1,
            format!("declares {n} items but lists {}", weights.len()),
        ));
    }
    if let Some(&(l, w)) = weights.iter().find(|&&(_, w)| w > capacity) {
        return Err(err(l, format!("weight {w} exceeds capacity {capacity}")));
    }
    Ok(BppInstance {
        name: name.to_string(),
        capacity,
        weights: weights.iter().map(|&(_, w)| w).collect(),
    })
}

/// Reads one BPPLIB text file.
pub fn read_bpp(path: &Path) -> Result<BppInstance> {
    let text = std::fs::read_to_string(path).map_err(|source| PlacementError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    parse_bpp(&text, &path.display().to_string(), &name)
}

impl BppInstance {
    /// The placement instance: as many identical cost-1 devices as items.
    pub fn to_instance(&self) -> Instance {
        let f = "pack".to_string();
        Instance {
            name: self.name.clone(),
            functions: vec![f.clone()],
            devices: (0..self.weights.len())
                .map(|i| Device {
                    id: format!("bin{i}"),
                    model: "bin".into(),
                    kind: DeviceKind::Hardware,
                    functions: vec![f.clone()],
                    cost: 1,
                    tcam_capacity: Some(self.capacity),
                    cpu_capacity: None,
                    latency_us: 0,
                    throughput_gbps: 0,
                })
                .collect(),
            vnf_instances: self
                .weights
                .iter()
                .enumerate()
                .map(|(i, &w)| VnfInstance {
                    id: format!("item{i}"),
                    function: f.clone(),
                    tcam_need: w,
                    cpu_need: w,
                    latency_bound_us: 0,
                    throughput_gbps: 0,
                })
                .collect(),
        }
    }
}

/// One row of `optima.csv`.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimumEntry {
    /// Instance name.
    pub name: String,
    /// Set name (e.g. `hard28`).
    pub set: String,
    /// Number of items.
    pub n: usize,
    /// Bin capacity.
    pub capacity: u64,
    /// Proven optimal number of bins.
    pub optimum: u64,
    /// Path of the instance file.
    pub file: PathBuf,
}

/// Reads `optima.csv` of a data directory (`name,set,n,capacity,optimum,file`).
pub fn read_optima(dir: &Path) -> Result<Vec<OptimumEntry>> {
    let path = dir.join("optima.csv");
    let text = std::fs::read_to_string(&path).map_err(|source| PlacementError::Io {
        path: path.clone(),
        source,
    })?;
    let file = path.display().to_string();
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().skip(1) {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        let bad = |message: String| PlacementError::BppFormat {
            file: file.clone(),
            line: i + 1,
            message,
        };
        if f.len() != 6 {
            return Err(bad(format!("expected 6 fields, found {}", f.len())));
        }
        let num = |s: &str, what: &str| {
            s.parse::<u64>()
                .map_err(|_| bad(format!("{what} `{s}` is not an integer")))
        };
        out.push(OptimumEntry {
            name: f[0].to_string(),
            set: f[1].to_string(),
            n: num(f[2], "n")? as usize,
            capacity: num(f[3], "capacity")?,
            optimum: num(f[4], "optimum")?,
            file: dir.join(f[5]),
        });
    }
    Ok(out)
}

/// The benchmark data directory: `$NFX_BPP_DIR`, else `shared/data/bpp` next to the
/// repository (as in CI), else `../shared/data/bpp` from the working directory.
pub fn data_dir() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(d) = std::env::var_os("NFX_BPP_DIR") {
        candidates.push(PathBuf::from(d));
    }
    candidates.push(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/bpp"));
    candidates.push(PathBuf::from("../shared/data/bpp"));
    candidates
        .into_iter()
        .find(|d| d.join("optima.csv").is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_maps_to_instance() {
        let b = parse_bpp("3\n10\n6\n4\n\n5\n", "x.txt", "x").unwrap();
        assert_eq!(b.capacity, 10);
        assert_eq!(b.weights, vec![6, 4, 5]);
        let inst = b.to_instance();
        inst.validate("x").unwrap();
        assert_eq!(inst.devices.len(), 3);
        assert_eq!(inst.vnf_instances[2].tcam_need, 5);
    }

    #[test]
    fn rejects_malformed_files_with_line_numbers() {
        let e = parse_bpp("2\n10\n3\nabc\n", "f.txt", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("f.txt: line 4") && e.contains("abc"), "{e}");
        let e = parse_bpp("3\n10\n3\n4\n", "f.txt", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("declares 3 items but lists 2"), "{e}");
        let e = parse_bpp("1\n10\n11\n", "f.txt", "f")
            .unwrap_err()
            .to_string();
        assert!(e.contains("line 3") && e.contains("exceeds"), "{e}");
        assert!(parse_bpp("", "f.txt", "f").is_err());
        assert!(parse_bpp("1\n0\n", "f.txt", "f").is_err());
    }
}
