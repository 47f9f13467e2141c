use std::time::{Duration, Instant};
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let b = nfx_placement::bpp::read_bpp(std::path::Path::new(&a[1])).unwrap();
    let k: u64 = a[2].parse().unwrap();
    let mut m = std::collections::BTreeMap::new();
    for w in &b.weights { *m.entry(*w).or_insert(0u32) += 1; }
    let items: Vec<(u64, u32)> = m.into_iter().rev().collect();
    let t = Instant::now();
    let r = nfx_placement::waste::no_packing_in(&items, b.capacity, k, Instant::now() + Duration::from_secs(60));
    println!("proven infeasible {} in {:?}", r, t.elapsed());
}
