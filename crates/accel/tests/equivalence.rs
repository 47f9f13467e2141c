//! Property test: soft, cpu and lookaside produce byte-identical output for random keys,
//! nonces, AAD and lengths 0–9000, and every engine opens what any other sealed.

mod common;

use common::*;
use nfx_accel::{Alg, Engine, Status};
use proptest::prelude::*;

fn engines() -> (Vec<Box<dyn Engine>>, Lookaside) {
    all_engines()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn engines_agree(
        alg_i in 0usize..7,
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
            if alg == Alg::Sha256 {
                prop_assert_eq!(&opened.data, &data);
            } else {
                prop_assert_eq!(&opened.data, &data);
                prop_assert!(len < 16 || sealed[0].data != data);
            }
        }
    }
}
