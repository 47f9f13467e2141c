//! The experiment's plan (a load ramp 0 → N video streams → 0), the per-tick record it
//! writes, and the pure arithmetic of its results: totals per case, SLA checks per step,
//! energy per delivered Gbit, proportionality, and the Pareto frontier.

use serde::{Deserialize, Serialize};

/// The ramp: video streams per step, step length and meter tick.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// Streams during each step.
    pub streams: Vec<u32>,
    /// Seconds per step.
    pub step_s: f64,
    /// Seconds between samples.
    pub tick_s: f64,
}

impl Plan {
    /// 0, 10 %, 50 %, 100 %, 50 %, 10 %, 0 of `n` streams (the paper adds sessions in
    /// steps; the 10 % and 100 % steps give the proportionality figure).
    pub fn ramp(n: u32, step_s: f64) -> Self {
        let n = n.max(1);
        let tenth = n.div_ceil(10);
        let half = n.div_ceil(2);
        Self {
            streams: vec![0, tenth, half, n, half, tenth, 0],
            step_s,
            tick_s: (step_s / 6.0).clamp(0.25, 0.5),
        }
    }

    /// The peak stream count.
    pub fn peak(&self) -> u32 {
        self.streams.iter().copied().max().unwrap_or(0)
    }

    /// Steps whose load is the lowest non-zero one (10 %) and the peak (100 %).
    pub fn low_and_full_steps(&self) -> (Vec<usize>, Vec<usize>) {
        let low = self
            .streams
            .iter()
            .copied()
            .filter(|&s| s > 0)
            .min()
            .unwrap_or(0);
        let pick = |v: u32| -> Vec<usize> {
            (0..self.streams.len())
                .filter(|&i| v > 0 && self.streams[i] == v)
                .collect()
        };
        (pick(low), pick(self.peak()))
    }
}

/// One sample of one case (a row of `timeseries.csv`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Tick {
    /// Case name.
    pub case: String,
    /// Seconds since the case's ramp started.
    pub t_s: f64,
    /// Seconds since the current step started.
    pub in_step_s: f64,
    /// Seconds covered by this sample.
    pub interval_s: f64,
    /// Step index.
    pub step: usize,
    /// Video streams offered.
    pub streams: u32,
    /// Offered to the NAT box, Mbit/s.
    pub offered_mbps: f64,
    /// Delivered by the NAT box, Mbit/s.
    pub nat_mbps: f64,
    /// Delivered by the transcoding box, Mbit/s.
    pub transcoded_mbps: f64,
    /// Frames per second the streams carry (25 each).
    pub expected_fps: f64,
    /// Frames per second the transcoders produced.
    pub out_fps: f64,
    /// Round-trip time p99 through the NAT box, ms (none without replies).
    pub rtt_p99_ms: Option<f64>,
    /// NAT box power (dynamic + idle share), W.
    pub nat_w: f64,
    /// Transcoding box power, W.
    pub transcode_w: f64,
    /// Both boxes' dynamic power, W.
    pub dynamic_w: f64,
    /// NAT box CPU, cores (worker and the kernel's receive threads).
    pub nat_cpu: f64,
    /// Transcoders' CPU, cores.
    pub transcode_cpu: f64,
    /// `rapl` or `model`.
    pub source: String,
    /// NAT box speed knob (1 = full).
    pub nat_speed: f64,
    /// Transcoding box speed knob.
    pub transcode_speed: f64,
    /// Poll mode of the NAT box (`kernel` for kernel forwarding).
    pub poll: String,
    /// Cores the boxes may use.
    pub cpus: String,
}

/// Service-level targets of the experiment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Targets {
    /// Share of offered throughput (and frames) that must be delivered.
    pub min_delivery: f64,
    /// Largest acceptable round-trip p99, ms.
    pub max_rtt_ms: f64,
    /// Seconds after a step change not judged (streams starting, transcoders probing).
    pub warmup_s: f64,
}

/// One case's totals.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaseTotals {
    /// Case name.
    pub name: String,
    /// Energy of both boxes (dynamic + idle share), J.
    pub energy_j: f64,
    /// Their dynamic energy only, J.
    pub dynamic_j: f64,
    /// Gbit the NAT box delivered.
    pub delivered_gbit: f64,
    /// J per delivered Gbit.
    pub j_per_gbit: f64,
    /// Steps that broke the SLA.
    pub sla_violations: u32,
    /// Mean box power over the ramp, W.
    pub mean_w: f64,
}

fn per_step(ticks: &[Tick], step: usize) -> impl Iterator<Item = &Tick> {
    ticks.iter().filter(move |t| t.step == step)
}

/// Whether step `step` broke the SLA (its ticks after the warm-up, aggregated).
pub fn step_violates(ticks: &[Tick], step: usize, t: &Targets) -> bool {
    let judged: Vec<&Tick> = per_step(ticks, step)
        .filter(|k| k.in_step_s >= t.warmup_s)
        .collect();
    if judged.is_empty() {
        return false;
    }
    let sum = |f: &dyn Fn(&Tick) -> f64| judged.iter().map(|k| f(k) * k.interval_s).sum::<f64>();
    let offered = sum(&|k| k.offered_mbps);
    let nat = sum(&|k| k.nat_mbps);
    let expected = sum(&|k| k.expected_fps);
    let frames = sum(&|k| k.out_fps);
    let late = judged
        .iter()
        .any(|k| k.rtt_p99_ms.is_some_and(|r| r > t.max_rtt_ms));
    let short_nat = offered > 0.1 && nat < t.min_delivery * offered;
    let short_frames = expected > 0.0 && frames < t.min_delivery * expected;
    late || short_nat || short_frames
}

/// Energy (total and dynamic, J) and delivered Gbit of the ticks of `steps`.
pub fn energy_and_bits(ticks: &[Tick], steps: &[usize]) -> (f64, f64, f64) {
    ticks
        .iter()
        .filter(|k| steps.contains(&k.step))
        .fold((0.0, 0.0, 0.0), |(e, d, g), k| {
            (
                e + (k.nat_w + k.transcode_w) * k.interval_s,
                d + k.dynamic_w * k.interval_s,
                g + k.nat_mbps * k.interval_s / 1000.0,
            )
        })
}

/// Totals of one case over the whole ramp.
pub fn totals(name: &str, ticks: &[Tick], steps: usize, t: &Targets) -> CaseTotals {
    let all: Vec<usize> = (0..steps).collect();
    let (energy_j, dynamic_j, delivered_gbit) = energy_and_bits(ticks, &all);
    let secs: f64 = ticks.iter().map(|k| k.interval_s).sum();
    CaseTotals {
        name: name.to_string(),
        energy_j,
        dynamic_j,
        delivered_gbit,
        j_per_gbit: if delivered_gbit > 0.0 {
            energy_j / delivered_gbit
        } else {
            0.0
        },
        sla_violations: (0..steps).filter(|&s| step_violates(ticks, s, t)).count() as u32,
        mean_w: if secs > 0.0 { energy_j / secs } else { 0.0 },
    }
}

/// The NAT box's CPU seconds over `ticks` (its threads' CPU time from the kernel).
pub fn nat_cpu_s(ticks: &[Tick]) -> f64 {
    ticks.iter().map(|k| k.nat_cpu * k.interval_s).sum()
}

/// The share `with` saves against `without` (1 − with / without; negative when it costs
/// more); `None` when `without` is nothing.
pub fn saving(with: f64, without: f64) -> Option<f64> {
    (without > 0.0).then(|| 1.0 - with / without)
}

/// Dynamic J per delivered Gbit at the 10 % steps over that at the 100 % steps (the
/// idle share, which no dataplane can remove, is left out); `None` without traffic.
pub fn proportionality(ticks: &[Tick], plan: &Plan) -> Option<f64> {
    let (low, full) = plan.low_and_full_steps();
    let jpg = |steps: &[usize]| {
        let (_, d, g) = energy_and_bits(ticks, steps);
        (g > 0.0).then(|| d / g)
    };
    Some(jpg(&low)? / jpg(&full)?)
}

/// The points no other point beats (at least as much throughput for at most as much
/// power, one of them strictly), by ascending throughput: `(throughput, power)`.
pub fn pareto(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|p| p.0.is_finite() && p.1.is_finite())
        .collect();
    // Highest throughput first; among equals the lowest power first.
    v.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.total_cmp(&b.1)));
    let mut front = Vec::new();
    let mut best_power = f64::INFINITY;
    for p in v {
        if p.1 < best_power {
            best_power = p.1;
            front.push(p);
        }
    }
    front.reverse();
    front
}

/// p99 of `v` (nearest rank), `None` when empty.
pub fn p99(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((0.99 * s.len() as f64).ceil() as usize).clamp(1, s.len());
    Some(s[rank - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tick(step: usize, in_step: f64, offered: f64, nat: f64, w: f64, dyn_w: f64) -> Tick {
        Tick {
            case: "c".into(),
            t_s: 0.0,
            in_step_s: in_step,
            interval_s: 1.0,
            step,
            streams: 1,
            offered_mbps: offered,
            nat_mbps: nat,
            transcoded_mbps: 0.0,
            expected_fps: 25.0,
            out_fps: 25.0,
            rtt_p99_ms: Some(1.0),
            nat_w: w / 2.0,
            transcode_w: w / 2.0,
            dynamic_w: dyn_w,
            nat_cpu: 0.0,
            transcode_cpu: 0.0,
            source: "model".into(),
            nat_speed: 1.0,
            transcode_speed: 1.0,
            poll: "adaptive".into(),
            cpus: "0-1".into(),
        }
    }

    const T: Targets = Targets {
        min_delivery: 0.95,
        max_rtt_ms: 20.0,
        warmup_s: 1.0,
    };

    #[test]
    fn savings_by_hand() {
        // 2 s at 0.5 core and 1 s at 0.2: 1.2 CPU seconds; against 2.0, 40 % saved.
        let mut ticks = vec![tick(0, 0.0, 1.0, 1.0, 1.0, 1.0); 3];
        ticks[0].nat_cpu = 0.5;
        ticks[1].nat_cpu = 0.5;
        ticks[2].nat_cpu = 0.2;
        let cpu = nat_cpu_s(&ticks);
        assert!((cpu - 1.2).abs() < 1e-12, "{cpu}");
        assert!((saving(cpu, 2.0).unwrap() - 0.4).abs() < 1e-12);
        assert!((saving(3.0, 2.0).unwrap() + 0.5).abs() < 1e-12);
        assert_eq!(saving(1.0, 0.0), None);
    }

    #[test]
    fn ramp_has_the_ten_and_hundred_percent_steps() {
        let p = Plan::ramp(10, 10.0);
        assert_eq!(p.streams, [0, 1, 5, 10, 5, 1, 0]);
        assert_eq!(p.low_and_full_steps(), (vec![1, 5], vec![3]));
        assert_eq!(p.tick_s, 0.5);
        assert_eq!(Plan::ramp(4, 1.2).streams, [0, 1, 2, 4, 2, 1, 0]);
        assert_eq!(Plan::ramp(4, 1.2).tick_s, 0.25);
    }

    #[test]
    fn totals_and_violations_by_hand() {
        // Step 0: 2 s at 10 W, 100 Mbit/s delivered of 100. Step 1: the warm-up second
        // delivers nothing (not judged), then 50 of 100 → a violation.
        let ticks = vec![
            tick(0, 0.0, 100.0, 100.0, 10.0, 4.0),
            tick(0, 1.0, 100.0, 100.0, 10.0, 4.0),
            tick(1, 0.0, 100.0, 0.0, 10.0, 4.0),
            tick(1, 1.0, 100.0, 50.0, 10.0, 4.0),
        ];
        let c = totals("c", &ticks, 2, &T);
        assert_eq!(c.energy_j, 40.0);
        assert_eq!(c.dynamic_j, 16.0);
        assert!((c.delivered_gbit - 0.25).abs() < 1e-12);
        assert!((c.j_per_gbit - 160.0).abs() < 1e-9);
        assert_eq!(c.sla_violations, 1);
        assert_eq!(c.mean_w, 10.0);
        let mut late = ticks[..2].to_vec();
        late[1].rtt_p99_ms = Some(25.0);
        assert!(step_violates(&late, 0, &T));
        let mut dropped_frames = ticks[..2].to_vec();
        dropped_frames[1].out_fps = 20.0;
        assert!(step_violates(&dropped_frames, 0, &T));
    }

    #[test]
    fn proportionality_of_a_busy_poller_and_of_a_proportional_box() {
        let p = Plan::ramp(10, 1.0);
        // Busy poller: the same dynamic power at 10 and 100 Mbit/s → 10×.
        let busy = vec![
            tick(1, 1.0, 10.0, 10.0, 20.0, 15.0),
            tick(3, 1.0, 100.0, 100.0, 20.0, 15.0),
        ];
        assert!((proportionality(&busy, &p).unwrap() - 10.0).abs() < 1e-9);
        // Power in proportion to load → 1×.
        let prop = vec![
            tick(1, 1.0, 10.0, 10.0, 7.0, 1.5),
            tick(3, 1.0, 100.0, 100.0, 21.0, 15.0),
        ];
        assert!((proportionality(&prop, &p).unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(proportionality(&[], &p), None);
    }

    #[test]
    fn pareto_keeps_only_undominated_points() {
        let pts = [
            (10.0, 5.0),
            (10.0, 7.0),
            (20.0, 6.0),
            (15.0, 8.0),
            (30.0, 9.0),
            (5.0, 6.0),
        ];
        assert_eq!(pareto(&pts), vec![(10.0, 5.0), (20.0, 6.0), (30.0, 9.0)]);
        assert!(pareto(&[]).is_empty());
    }

    #[test]
    fn p99_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(p99(&v), Some(99.0));
        assert_eq!(p99(&[3.0]), Some(3.0));
        assert_eq!(p99(&[]), None);
    }
}
