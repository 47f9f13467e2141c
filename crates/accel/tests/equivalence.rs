//! Property test: soft, cpu and lookaside produce byte-identical output for random keys,
//! nonces, AAD and lengths 0–9000, and every engine opens what any other sealed.

mod common;

use common::*;
use nfx_accel::{bitsliced_engine, soft_engine, Alg, Buf, Engine, Iv, Layout, Op, Status};
use proptest::prelude::*;

fn engines() -> (Vec<Box<dyn Engine>>, Lookaside) {
    all_engines()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn engines_agree(
        alg_i in 0usize..Alg::ALL.len(),
        key in proptest::collection::vec(any::<u8>(), 32),
        auth in proptest::collection::vec(any::<u8>(), 1..80),
        iv in proptest::collection::vec(any::<u8>(), 16),
        aad in proptest::collection::vec(any::<u8>(), 0..64),
        len in 0usize..9000,
        seed in any::<u8>(),
        long_tag in any::<bool>(),
    ) {
        let alg = Alg::ALL[alg_i];
        let key = &key[..alg.cipher_key_len()];
        let auth: &[u8] = if alg.needs_auth_key() { &auth } else { &[] };
        let iv = &iv[..alg.iv_len()];
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
        let mut e_spec = enc(alg, key, auth);
        let mut d_spec = dec(alg, key, auth);
        if long_tag && alg.tag_len_ok(32) {
            e_spec.tag_len = 32;
            d_spec.tag_len = 32;
        }
        let (mut local, mut la) = engines();
        if alg.is_present() {
            local.push(bitsliced_engine());
        }
        let mut all: Vec<&mut dyn Engine> = local.iter_mut().map(|e| e.as_mut() as &mut dyn Engine).collect();
        all.push(&mut la.engine);
        let sealed: Vec<Out> = all.iter_mut().map(|e| run(*e, &e_spec, iv, &aad, &data, &[])).collect();
        for s in &sealed[1..] {
            prop_assert_eq!(s, &sealed[0]);
        }
        prop_assert_eq!(sealed[0].status, Status::Ok);
        for e in all.iter_mut() {
            let opened = run(*e, &d_spec, iv, &aad, &sealed[0].data, &sealed[0].tag);
            prop_assert_eq!(opened.status, Status::Ok);
            prop_assert_eq!(&opened.data, &data);
            if alg != Alg::Sha256 {
                prop_assert!(len < 16 || sealed[0].data != data);
            }
        }
    }
}

/// Runs one batch of ops `[aad][data][tag]` (one per entry of `lens`) on `e`, all
/// submitted together, and returns the processed buffers in order.
fn batch(
    e: &mut dyn Engine,
    spec: &nfx_accel::SessionSpec,
    ivs: &[u64],
    lens: &[usize],
    seed: u8,
) -> Vec<Vec<u8>> {
    let sid = e.create_session(spec.clone()).unwrap();
    let mut ops: Vec<Op> = lens
        .iter()
        .zip(ivs)
        .enumerate()
        .map(|(i, (&len, iv))| {
            let bytes: Vec<u8> = (0..8 + len + spec.tag_len)
                .map(|j| (j as u8).wrapping_mul(13) ^ seed ^ i as u8)
                .collect();
            Op {
                session: sid,
                iv: Iv::new(&iv.to_be_bytes()),
                layout: Layout::packed(8, len),
                buf: Buf::from_slice(&bytes),
                user: i as u64,
            }
        })
        .collect();
    let mut out = Vec::new();
    while !ops.is_empty() {
        e.submit(&mut ops).unwrap();
        e.poll(&mut out, usize::MAX);
    }
    e.drain(&mut out).unwrap();
    assert!(out.iter().all(|c| c.status == Status::Ok));
    out.into_iter()
        .map(|c| c.op.buf.as_slice().to_vec())
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The bitsliced engine, whose keystream for a whole batch is computed in shared
    /// passes (blocks of several packets side by side), is byte-identical to the
    /// portable table engine for batches of any lengths (partial blocks included) and
    /// any counters (also ones that wrap past 2^64 inside a packet).
    #[test]
    fn bitsliced_batches_match_the_portable_engine(
        alg_i in 0usize..4,
        key in proptest::collection::vec(any::<u8>(), 16),
        ops in proptest::collection::vec((any::<u64>(), 0usize..1500), 1..40),
        wrap in any::<bool>(),
        seed in any::<u8>(),
    ) {
        let alg = [Alg::Present80Ctr, Alg::Present128Ctr, Alg::Present80CtrHmacSha256, Alg::Present128CtrHmacSha256][alg_i];
        let key = &key[..alg.cipher_key_len()];
        let auth: &[u8] = if alg.needs_auth_key() { &[7; 32] } else { &[] };
        let spec = enc(alg, key, auth);
        let ivs: Vec<u64> = ops.iter().map(|(iv, _)| if wrap { u64::MAX - (iv % 100) } else { *iv }).collect();
        let lens: Vec<usize> = ops.iter().map(|(_, l)| *l).collect();
        let want = batch(soft_engine().as_mut(), &spec, &ivs, &lens, seed);
        let got = batch(bitsliced_engine().as_mut(), &spec, &ivs, &lens, seed);
        prop_assert_eq!(got, want);
    }
}
