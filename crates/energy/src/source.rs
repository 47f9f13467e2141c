//! Where an energy or power figure comes from. Every figure nfx reports carries one, so a
//! modeled number is never mistaken for a measured one.

use serde::{Deserialize, Serialize};

/// The origin of an energy or power figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Measured by the CPU's energy counters (Intel/AMD RAPL through powercap, or AMD's
    /// `amd_energy` hwmon driver).
    Rapl,
    /// Computed from the host's power model (infrastructure descriptor) and the kernel's
    /// CPU-time accounting; no meter was read.
    Model,
}

impl Source {
    /// The lowercase name used in JSON, CSV and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Rapl => "rapl",
            Source::Model => "model",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_json() {
        for s in [Source::Rapl, Source::Model] {
            let j = serde_json::to_string(&s).unwrap();
            assert_eq!(j, format!("\"{s}\""));
            assert_eq!(serde_json::from_str::<Source>(&j).unwrap(), s);
        }
    }
}
