//! Known-answer tests run on every engine (soft, cpu, lookaside): NIST GCM (AES-128 and
//! AES-256 with AAD), RFC 8439, RFC 4231, RFC 3686, FIPS 180-2 and the PRESENT vectors;
//! plus tamper and wrong-key tests.

mod common;

use common::*;
use nfx_accel::{Alg, Engine, Status};

fn for_each_engine(mut f: impl FnMut(&str, &mut dyn Engine)) {
    let (mut local, mut la) = all_engines();
    for e in local.iter_mut() {
        let name = e.kind().to_string();
        f(&name, e.as_mut());
    }
    f("lookaside", &mut la.engine);
    assert_eq!(la.engine.stats().failovers, 0);
}

struct AeadVector {
    alg: Alg,
    key: &'static str,
    iv: &'static str,
    aad: &'static str,
    pt: &'static str,
    ct: &'static str,
    tag: &'static str,
}

const AEAD: &[AeadVector] = &[
    // NIST GCM spec (McGrew & Viega), test case 2: AES-128, no AAD.
    AeadVector {
        alg: Alg::Aes128Gcm,
        key: "00000000000000000000000000000000",
        iv: "000000000000000000000000",
        aad: "",
        pt: "00000000000000000000000000000000",
        ct: "0388dace60b6a392f328c2b971b2fe78",
        tag: "ab6e47d42cec13bdf53a67b21257bddf",
    },
    // Test case 4: AES-128 with AAD, 60-byte plaintext.
    AeadVector {
        alg: Alg::Aes128Gcm,
        key: "feffe9928665731c6d6a8f9467308308",
        iv: "cafebabefacedbaddecaf888",
        aad: "feedfacedeadbeeffeedfacedeadbeefabaddad2",
        pt: "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
        ct: "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091",
        tag: "5bc94fbc3221a5db94fae95ae7121a47",
    },
    // Test case 16: AES-256 with AAD.
    AeadVector {
        alg: Alg::Aes256Gcm,
        key: "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308",
        iv: "cafebabefacedbaddecaf888",
        aad: "feedfacedeadbeeffeedfacedeadbeefabaddad2",
        pt: "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
        ct: "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
        tag: "76fc6ece0f4e1768cddf8853bb2d551b",
    },
    // RFC 8439 §2.8.2 AEAD_CHACHA20_POLY1305.
    AeadVector {
        alg: Alg::Chacha20Poly1305,
        key: "808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f",
        iv: "070000004041424344454647",
        aad: "50515253c0c1c2c3c4c5c6c7",
        pt: "4c616469657320616e642047656e746c656d656e206f662074686520636c617373206f66202739393a204966204920636f756c64206f6666657220796f75206f6e6c79206f6e652074697020666f7220746865206675747572652c2073756e73637265656e20776f756c642062652069742e",
        ct: "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad675945585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116",
        tag: "1ae10b594f09e26a7e902ecbd0600691",
    },
];

#[test]
fn aead_vectors_every_engine() {
    for_each_engine(|name, e| {
        for v in AEAD {
            let key = hex(v.key);
            let out = run(
                e,
                &enc(v.alg, &key, &[]),
                &hex(v.iv),
                &hex(v.aad),
                &hex(v.pt),
                &[],
            );
            assert_eq!(out.status, Status::Ok, "{name} {}", v.alg);
            assert_eq!(out.data, hex(v.ct), "{name} {} ciphertext", v.alg);
            assert_eq!(out.tag, hex(v.tag), "{name} {} tag", v.alg);
            let back = run(
                e,
                &dec(v.alg, &key, &[]),
                &hex(v.iv),
                &hex(v.aad),
                &hex(v.ct),
                &hex(v.tag),
            );
            assert_eq!(back.status, Status::Ok, "{name} {} open", v.alg);
            assert_eq!(back.data, hex(v.pt), "{name} {} plaintext", v.alg);
        }
    });
}

#[test]
fn tamper_and_wrong_key_release_no_plaintext() {
    for_each_engine(|name, e| {
        for v in AEAD {
            let key = hex(v.key);
            let (iv, aad, ct, tag) = (hex(v.iv), hex(v.aad), hex(v.ct), hex(v.tag));
            let mut bad_ct = ct.clone();
            bad_ct[0] ^= 1;
            let mut bad_tag = tag.clone();
            bad_tag[15] ^= 0x80;
            let mut bad_aad = aad.clone();
            bad_aad.push(0);
            let mut wrong_key = key.clone();
            wrong_key[3] ^= 0x10;
            let cases = [
                (key.clone(), aad.clone(), bad_ct, tag.clone()),
                (key.clone(), aad.clone(), ct.clone(), bad_tag),
                (key.clone(), bad_aad, ct.clone(), tag.clone()),
                (wrong_key, aad.clone(), ct.clone(), tag.clone()),
            ];
            for (k, a, c, t) in cases {
                let out = run(e, &dec(v.alg, &k, &[]), &iv, &a, &c, &t);
                assert_eq!(out.status, Status::AuthFailed, "{name} {}", v.alg);
                assert!(
                    out.data.iter().all(|b| *b == 0),
                    "{name} {} leaked data",
                    v.alg
                );
            }
        }
        // CTR+HMAC and SHA-256 verification.
        let spec_key = [9u8; 16];
        let auth = [5u8; 32];
        let sealed = run(
            e,
            &enc(Alg::Aes128CtrHmacSha256, &spec_key, &auth),
            &[1; 16],
            b"hdr",
            b"secret data",
            &[],
        );
        let mut t = sealed.tag.clone();
        t[0] ^= 1;
        let out = run(
            e,
            &dec(Alg::Aes128CtrHmacSha256, &spec_key, &auth),
            &[1; 16],
            b"hdr",
            &sealed.data,
            &t,
        );
        assert_eq!(out.status, Status::AuthFailed, "{name} ctr-hmac");
        assert!(out.data.iter().all(|b| *b == 0));
        let out = run(
            e,
            &dec(Alg::Aes128CtrHmacSha256, &spec_key, &[6u8; 32]),
            &[1; 16],
            b"hdr",
            &sealed.data,
            &sealed.tag,
        );
        assert_eq!(
            out.status,
            Status::AuthFailed,
            "{name} ctr-hmac wrong auth key"
        );
        let ok = run(
            e,
            &dec(Alg::Aes128CtrHmacSha256, &spec_key, &auth),
            &[1; 16],
            b"hdr",
            &sealed.data,
            &sealed.tag,
        );
        assert_eq!(
            (ok.status, ok.data.as_slice()),
            (Status::Ok, &b"secret data"[..]),
            "{name}"
        );
        let d = run(e, &enc(Alg::Sha256, &[], &[]), &[], b"", b"abc", &[]);
        let mut bad = d.tag.clone();
        bad[31] ^= 1;
        assert_eq!(
            run(e, &dec(Alg::Sha256, &[], &[]), &[], b"", b"abc", &d.tag).status,
            Status::Ok
        );
        assert_eq!(
            run(e, &dec(Alg::Sha256, &[], &[]), &[], b"", b"abc", &bad).status,
            Status::AuthFailed
        );
    });
}

#[test]
fn rfc4231_hmac_sha256_every_engine() {
    let tc6_key = vec![0xaa; 131];
    let cases: Vec<(Vec<u8>, Vec<u8>, &str)> = vec![
        (vec![0x0b; 20], b"Hi There".to_vec(), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (b"Jefe".to_vec(), b"what do ya want for nothing?".to_vec(), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        (vec![0xaa; 20], vec![0xdd; 50], "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"),
        (hex("0102030405060708090a0b0c0d0e0f10111213141516171819"), vec![0xcd; 50], "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"),
        (vec![0x0c; 20], b"Test With Truncation".to_vec(), "a3b6167473100ee06e0c796c2955552b"),
        (tc6_key.clone(), b"Test Using Larger Than Block-Size Key - Hash Key First".to_vec(), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"),
        (tc6_key, b"This is a test using a larger than block-size key and a larger than block-size data. The key needs to be hashed before being used by the HMAC algorithm.".to_vec(), "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"),
    ];
    for_each_engine(|name, e| {
        for (i, (key, msg, mac)) in cases.iter().enumerate() {
            let want = hex(mac);
            // HMAC over AAD ‖ data with empty data: the tag is HMAC(key, msg).
            let mut spec = enc(Alg::Aes128CtrHmacSha256, &[0; 16], key);
            spec.tag_len = want.len();
            let out = run(e, &spec, &[0; 16], msg, &[], &[]);
            assert_eq!(out.tag, want, "{name} RFC 4231 case {}", i + 1);
            // Same MAC split across AAD and data (data is encrypted, MAC covers ciphertext).
            spec.tag_len = 32;
            let full = run(e, &spec, &[0; 16], msg, &[], &[]);
            assert_eq!(
                &full.tag[..want.len()],
                &want[..],
                "{name} case {} full tag",
                i + 1
            );
        }
    });
}

#[test]
fn rfc3686_aes_ctr_every_engine() {
    // (key, nonce ‖ IV ‖ counter 1, plaintext, ciphertext): RFC 3686 §6 vectors 1-3.
    let cases = [
        (
            "ae6852f8121067cc4bf7a5765577f39e",
            "00000030000000000000000000000001",
            "53696e676c6520626c6f636b206d7367",
            "e4095d4fb7a7b3792d6175a3261311b8",
        ),
        (
            "7e24067817fae0d743d6ce1f32539163",
            "006cb6dbc0543b59da48d90b00000001",
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
            "5104a106168a72d9790d41ee8edad388eb2e1efc46da57c8fce630df9141be28",
        ),
        (
            "7691be035e5020a8ac6e618529f9a0dc",
            "00e0017b27777f3f4a1786f000000001",
            "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20212223",
            "c1cf48a89f2ffdd9cf4652e9efdb72d74540a42bde6d7836d59a5ceaaef3105325b2072f",
        ),
    ];
    for_each_engine(|name, e| {
        for (k, ctr, pt, ct) in cases {
            let out = run(
                e,
                &enc(Alg::Aes128CtrHmacSha256, &hex(k), &[1; 32]),
                &hex(ctr),
                &[],
                &hex(pt),
                &[],
            );
            assert_eq!(out.data, hex(ct), "{name} RFC 3686 {k}");
        }
    });
}

#[test]
fn fips180_sha256_every_engine() {
    let million = vec![b'a'; 1_000_000];
    let cases: [(&[u8], &str); 4] = [
        (
            b"abc",
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        ),
        (
            b"",
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        ),
        (
            b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
        ),
        (&million[..9000], ""),
    ];
    for_each_engine(|name, e| {
        for (msg, d) in cases {
            if d.is_empty() {
                continue;
            }
            let out = run(e, &enc(Alg::Sha256, &[], &[]), &[], &[], msg, &[]);
            assert_eq!(out.tag, hex(d), "{name} sha256");
            assert_eq!(out.data, msg, "{name} sha256 leaves data alone");
        }
    });
    // The million-'a' vector exceeds one buffer; it is checked on the in-process engines
    // with the digest split over AAD and data.
    for mut e in [nfx_accel::soft_engine(), nfx_accel::cpu_engine()] {
        let out = run(
            e.as_mut(),
            &enc(Alg::Sha256, &[], &[]),
            &[],
            &million[..400_000],
            &million[400_000..],
            &[],
        );
        assert_eq!(
            out.tag,
            hex("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        );
    }
}

#[test]
fn present_paper_vectors_every_engine() {
    // CTR with the plaintext block as counter and zero data yields E_K(P).
    let cases: [(Alg, Vec<u8>, u64, u64); 8] = [
        (
            Alg::Present80CtrHmacSha256,
            vec![0; 10],
            0,
            0x5579c1387b228445,
        ),
        (
            Alg::Present80CtrHmacSha256,
            vec![0xff; 10],
            0,
            0xe72c46c0f5945049,
        ),
        (
            Alg::Present80CtrHmacSha256,
            vec![0; 10],
            u64::MAX,
            0xa112ffc72f68417b,
        ),
        (
            Alg::Present80CtrHmacSha256,
            vec![0xff; 10],
            u64::MAX,
            0x3333dcd3213210d2,
        ),
        (
            Alg::Present128CtrHmacSha256,
            vec![0; 16],
            0,
            0x96db702a2e6900af,
        ),
        (
            Alg::Present128CtrHmacSha256,
            vec![0xff; 16],
            0,
            0x13238c710272a5d8,
        ),
        (
            Alg::Present128CtrHmacSha256,
            vec![0; 16],
            u64::MAX,
            0x3c6019e5e5edd563,
        ),
        (
            Alg::Present128CtrHmacSha256,
            vec![0xff; 16],
            u64::MAX,
            0x628d9fbd4218e5b4,
        ),
    ];
    let check = |name: &str, e: &mut dyn Engine| {
        for (alg, key, pt, ct) in &cases {
            // The same cipher alone (no HMAC, no tag).
            let alone = match alg {
                Alg::Present80CtrHmacSha256 => Alg::Present80Ctr,
                _ => Alg::Present128Ctr,
            };
            for spec in [enc(*alg, key, &[3; 32]), enc(alone, key, &[])] {
                let out = run(e, &spec, &pt.to_be_bytes(), &[], &[0; 8], &[]);
                assert_eq!(out.status, Status::Ok, "{name} {}", spec.alg);
                assert_eq!(
                    out.data,
                    ct.to_be_bytes(),
                    "{name} {} key {:02x}",
                    spec.alg,
                    key[0]
                );
            }
        }
    };
    for_each_engine(check);
    check("bitsliced", nfx_accel::bitsliced_engine().as_mut());
}

#[test]
fn bad_arguments_are_statuses_not_panics() {
    for_each_engine(|name, e| {
        // Wrong IV length.
        let out = run(
            e,
            &enc(Alg::Aes128Gcm, &[0; 16], &[]),
            &[0; 8],
            &[],
            &[1; 20],
            &[],
        );
        assert_eq!(out.status, Status::BadArgument, "{name}");
        assert_eq!(out.data, vec![1; 20], "{name} unchanged");
        // Bad key length is an API error.
        assert!(
            e.create_session(enc(Alg::Aes256Gcm, &[0; 16], &[]))
                .is_err(),
            "{name}"
        );
        assert!(
            e.destroy_session(nfx_accel::SessionId(999)).is_err(),
            "{name}"
        );
    });
}
