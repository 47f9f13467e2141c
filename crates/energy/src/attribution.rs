//! Splitting a host's power among the things that run on it (VNFs, workers), the way
//! Kepler and Scaphandre do when no per-process meter exists:
//!
//! * **dynamic power** (above idle) goes to each consumer in proportion to its CPU time:
//!   with the model, each busy core-second costs `(max_w - idle_w) / cores` joules;
//!   with RAPL, the measured power above idle is shared by CPU-time fraction of the
//!   host's busy time;
//! * **idle power** (drawn with nothing running) is shared by *reserved cores*: a
//!   consumer that reserves `r` of the host's `n` cores carries `r / n` of it (the share
//!   of the machine it keeps from others, as the GHG Protocol's ICT guidance allocates
//!   idle servers); what nobody reserves stays with the host.
//!
//! Consumers may overlap (a worker thread is part of its VNF): each share is computed
//! from the consumer's own CPU time, never by subtracting others.

use crate::model::HostModel;

/// One consumer's use of the host over an interval.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Load {
    /// CPU seconds it consumed in the interval.
    pub cpu_s: f64,
    /// Cores it reserves on the host (its share of idle power).
    pub reserved_cores: f64,
}

/// How the host's power is known.
#[derive(Debug, Clone, Copy)]
pub enum HostPower<'a> {
    /// From the power model at a CPU frequency (MHz), if known.
    Model {
        /// The host's model.
        model: &'a HostModel,
        /// Current CPU frequency, MHz.
        mhz: Option<u32>,
    },
    /// Measured (RAPL) average watts, with the idle watts and cores of the host.
    Measured {
        /// Average host watts over the interval.
        watts: f64,
        /// Watts the host draws idle (from its model; 0 when unknown).
        idle_w: f64,
        /// Cores of the host.
        cores: u32,
    },
}

/// A consumer's share of the host's power.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Share {
    /// Watts caused by its CPU time.
    pub dynamic_w: f64,
    /// Its share of the idle watts (by reserved cores).
    pub idle_w: f64,
}

impl Share {
    /// Dynamic plus idle share.
    pub fn total_w(&self) -> f64 {
        self.dynamic_w + self.idle_w
    }
}

/// The host's average power and every consumer's share over one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    /// Host watts (idle + everything that ran).
    pub host_w: f64,
    /// The host's idle watts.
    pub idle_w: f64,
    /// One share per load, in order.
    pub shares: Vec<Share>,
}

/// Splits the host's power over an interval of `interval_s` in which the host was busy
/// `host_busy_s` CPU seconds and each consumer used its [`Load`].
pub fn split(host: HostPower<'_>, interval_s: f64, host_busy_s: f64, loads: &[Load]) -> Split {
    let interval = interval_s.max(1e-9);
    let (host_w, idle_w, cores, dynamic): (f64, f64, u32, Box<dyn Fn(f64) -> f64>) = match host {
        HostPower::Model { model, mhz } => {
            let per_core = model.watts_per_core(mhz);
            (
                model.power_w(host_busy_s / interval, mhz),
                model.pair_at(mhz).0,
                model.cores,
                Box::new(move |cpu_s| per_core * cpu_s / interval),
            )
        }
        HostPower::Measured {
            watts,
            idle_w,
            cores,
        } => {
            let above = (watts - idle_w).max(0.0);
            let busy = host_busy_s;
            (
                watts,
                idle_w.min(watts),
                cores.max(1),
                Box::new(move |cpu_s| {
                    if busy > 0.0 {
                        above * (cpu_s / busy).min(1.0)
                    } else {
                        0.0
                    }
                }),
            )
        }
    };
    let shares = loads
        .iter()
        .map(|l| Share {
            dynamic_w: dynamic(l.cpu_s.max(0.0)),
            idle_w: idle_w * (l.reserved_cores.max(0.0) / f64::from(cores)).min(1.0),
        })
        .collect();
    Split {
        host_w,
        idle_w,
        shares,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nfx_model::PowerModel;

    fn host() -> HostModel {
        HostModel::new(
            2,
            PowerModel {
                idle_w: 6.0,
                max_w: 36.0,
                frequencies: vec![],
            },
        )
    }

    #[test]
    fn model_split_by_hand() {
        let m = host();
        // 2 s interval; host busy 3 CPU-seconds (1.5 cores): 6 + 15 × 1.5 = 28.5 W.
        // A: 2 CPU-s = 1 core → 15 W dynamic, reserves 1 of 2 cores → 3 W idle.
        // B: 0.5 CPU-s = 0.25 core → 3.75 W, reserves nothing.
        let s = split(
            HostPower::Model {
                model: &m,
                mhz: None,
            },
            2.0,
            3.0,
            &[
                Load {
                    cpu_s: 2.0,
                    reserved_cores: 1.0,
                },
                Load {
                    cpu_s: 0.5,
                    reserved_cores: 0.0,
                },
            ],
        );
        assert_eq!(s.host_w, 28.5);
        assert_eq!(s.idle_w, 6.0);
        assert_eq!(
            s.shares[0],
            Share {
                dynamic_w: 15.0,
                idle_w: 3.0
            }
        );
        assert_eq!(s.shares[1].dynamic_w, 3.75);
        assert_eq!(s.shares[1].total_w(), 3.75);
    }

    #[test]
    fn measured_split_by_cpu_fraction() {
        // 20 W measured, 8 W idle → 12 W dynamic; A used 1 of the host's 4 busy CPU-s.
        let s = split(
            HostPower::Measured {
                watts: 20.0,
                idle_w: 8.0,
                cores: 4,
            },
            1.0,
            4.0,
            &[Load {
                cpu_s: 1.0,
                reserved_cores: 2.0,
            }],
        );
        assert_eq!(s.host_w, 20.0);
        assert_eq!(s.shares[0].dynamic_w, 3.0);
        assert_eq!(s.shares[0].idle_w, 4.0);
        // An idle host gives nobody dynamic power.
        let s = split(
            HostPower::Measured {
                watts: 8.0,
                idle_w: 8.0,
                cores: 4,
            },
            1.0,
            0.0,
            &[Load::default()],
        );
        assert_eq!(s.shares[0], Share::default());
    }

    #[test]
    fn shares_never_exceed_the_host() {
        let m = host();
        let s = split(
            HostPower::Model {
                model: &m,
                mhz: None,
            },
            1.0,
            2.0,
            &[Load {
                cpu_s: 2.0,
                reserved_cores: 5.0,
            }],
        );
        assert!(s.shares[0].total_w() <= s.host_w + 1e-9);
    }
}
