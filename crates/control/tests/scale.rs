//! Scale measurement (printed, not asserted): 1,000 simulated hosts, a 6-function chain
//! placed and chained. Run: `cargo test --release -p nfx-control --test scale -- --ignored --nocapture`.

#[test]
#[ignore]
fn thousand_hosts_six_function_chain() {
    let r = nfx_control::scale::bench_chain_placement(1000, 50).unwrap();
    println!("{}", serde_json::to_string_pretty(&r).unwrap());
}
