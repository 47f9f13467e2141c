//! The host power model of the infrastructure descriptor ([`nfx_model::PowerModel`]):
//! power rises linearly from `idle_w` (no core busy) to `max_w` (every core busy), at the
//! CPU frequency in force when the descriptor gives per-frequency points. This is the
//! model Kepler and Scaphandre fall back to when a host has no energy meter.

use nfx_model::{FrequencyPower, PowerModel};

/// Idle watts per core of [`default_power`]: half of the 6.2 W the energy paper measured
/// on its idle 2-core host.
pub const DEFAULT_IDLE_W_PER_CORE: f64 = 3.1;
/// Full-load watts per core of [`default_power`]: half of the paper's 37.4 W at 2 busy
/// cores.
pub const DEFAULT_MAX_W_PER_CORE: f64 = 18.7;

/// The power model nfx writes for a host of `cores` cores when none is given (the
/// testbed's hosts): the energy paper's measured host scaled per core. It is a model,
/// and every figure computed from it says `model`.
pub fn default_power(cores: u32) -> PowerModel {
    let n = f64::from(cores.max(1));
    PowerModel {
        idle_w: DEFAULT_IDLE_W_PER_CORE * n,
        max_w: DEFAULT_MAX_W_PER_CORE * n,
        frequencies: vec![],
    }
}

/// A host's power model with the number of cores it spreads over.
#[derive(Debug, Clone, PartialEq)]
pub struct HostModel {
    /// Cores of the host (utilisation = busy cores / cores).
    pub cores: u32,
    /// The descriptor's model.
    pub power: PowerModel,
}

impl HostModel {
    /// The model of a host with `cores` cores.
    pub fn new(cores: u32, power: PowerModel) -> Self {
        Self {
            cores: cores.max(1),
            power,
        }
    }

    /// Idle and full-load watts at `mhz`: the descriptor's pair at that frequency,
    /// linearly interpolated between the two nearest points and clamped to the lowest
    /// and highest; the base pair when no frequency is known or none is described.
    pub fn pair_at(&self, mhz: Option<u32>) -> (f64, f64) {
        let base = (self.power.idle_w, self.power.max_w);
        let Some(f) = mhz else { return base };
        let mut pts: Vec<&FrequencyPower> = self.power.frequencies.iter().collect();
        if pts.is_empty() {
            return base;
        }
        pts.sort_by_key(|p| p.mhz);
        let (first, last) = (pts[0], pts[pts.len() - 1]);
        if f <= first.mhz {
            return (first.idle_w, first.max_w);
        }
        if f >= last.mhz {
            return (last.idle_w, last.max_w);
        }
        let hi = pts.iter().position(|p| p.mhz >= f).unwrap_or(pts.len() - 1);
        let (a, b) = (pts[hi - 1], pts[hi]);
        let x = f64::from(f - a.mhz) / f64::from(b.mhz - a.mhz);
        (
            a.idle_w + x * (b.idle_w - a.idle_w),
            a.max_w + x * (b.max_w - a.max_w),
        )
    }

    /// Watts one fully busy core adds over idle at `mhz`.
    pub fn watts_per_core(&self, mhz: Option<u32>) -> f64 {
        let (idle, max) = self.pair_at(mhz);
        (max - idle) / f64::from(self.cores)
    }

    /// Host power with `busy_cores` cores busy on average (clamped to 0..=cores).
    pub fn power_w(&self, busy_cores: f64, mhz: Option<u32>) -> f64 {
        let (idle, _) = self.pair_at(mhz);
        let busy = busy_cores.clamp(0.0, f64::from(self.cores));
        idle + self.watts_per_core(mhz) * busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> HostModel {
        HostModel::new(
            4,
            PowerModel {
                idle_w: 40.0,
                max_w: 120.0,
                frequencies: vec![
                    FrequencyPower {
                        mhz: 3000,
                        idle_w: 40.0,
                        max_w: 120.0,
                    },
                    FrequencyPower {
                        mhz: 1000,
                        idle_w: 30.0,
                        max_w: 60.0,
                    },
                ],
            },
        )
    }

    #[test]
    fn linear_between_idle_and_max() {
        let m = model();
        // Hand computation: 40 W + (120 - 40) W / 4 cores × 1.5 cores = 70 W.
        assert_eq!(m.power_w(1.5, None), 70.0);
        assert_eq!(m.power_w(0.0, None), 40.0);
        assert_eq!(m.power_w(4.0, None), 120.0);
        // Busy cores beyond the host's are clamped (sampling skew), never extrapolated.
        assert_eq!(m.power_w(9.0, None), 120.0);
        assert_eq!(m.power_w(-1.0, None), 40.0);
        assert_eq!(m.watts_per_core(None), 20.0);
    }

    #[test]
    fn frequency_points_interpolate_and_clamp() {
        let m = model();
        assert_eq!(m.pair_at(Some(1000)), (30.0, 60.0));
        assert_eq!(m.pair_at(Some(500)), (30.0, 60.0));
        assert_eq!(m.pair_at(Some(3600)), (40.0, 120.0));
        // 2000 MHz is half-way: idle 35 W, max 90 W; 2 of 4 cores busy → 35 + 55/4×2 = 62.5 W.
        assert_eq!(m.pair_at(Some(2000)), (35.0, 90.0));
        assert_eq!(m.power_w(2.0, Some(2000)), 62.5);
    }

    #[test]
    fn no_frequency_points_means_the_base_pair() {
        let m = HostModel::new(
            2,
            PowerModel {
                idle_w: 6.2,
                max_w: 37.4,
                frequencies: vec![],
            },
        );
        assert_eq!(m.pair_at(Some(1700)), (6.2, 37.4));
        // The default model of a 2-core host is that measured host.
        let d = default_power(2);
        assert!((d.idle_w - 6.2).abs() < 1e-9 && (d.max_w - 37.4).abs() < 1e-9);
        assert!((m.power_w(1.0, Some(1700)) - 21.8).abs() < 1e-9);
    }
}
