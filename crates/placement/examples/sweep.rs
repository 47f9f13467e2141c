use nfx_placement::bench::*;
use std::time::Duration;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let limit = Duration::from_secs_f64(a[2].parse().unwrap());
    let max: usize = a[3].parse().unwrap();
    let filter = a.get(4).cloned().unwrap_or_default();
    let dir = nfx_placement::bpp::data_dir().unwrap();
    let optima: Vec<_> = nfx_placement::bpp::read_optima(&dir).unwrap().into_iter().filter(|e| e.name.contains(&filter)).collect();
    for set in a[1].split(',') {
        let rows = if let Some(n) = set.strip_prefix("hyper_n") { generated_rows(n.parse().unwrap(), max, limit).unwrap() } else { public_set_rows(&optima, set, max, limit).unwrap() };
        for r in &rows { if !r.exact_proven || r.known_optimum.is_some_and(|k| k != r.exact.objective) || r.exact.seconds > 1.0 { println!("{} obj {} bound {} known {:?} ffd {} t {:.2}", r.name, r.exact.objective, r.exact_bound, r.known_optimum, r.ffd.objective, r.exact.seconds); } }
        println!("{}", serde_json::to_string(&summarize(set, &rows)).unwrap());
    }
}
