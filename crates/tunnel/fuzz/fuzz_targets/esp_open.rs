//! Fuzz target: the receive side of an SA takes any bytes from the underlay. Raw bytes
//! must be rejected by the header checks or the ICV; and because a peer holding the
//! key can send any plaintext, payloads of any bytes are also sealed with the right
//! key and opened, so that the trailer checks (pad length, padding bytes, next header)
//! meet every value. Nothing panics, and an accepted inner packet lies inside the
//! decrypted payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfx_accel::{cpu_engine, Alg, AlgFamily, Buf, Direction, Engine, Op, SecretBytes, Status};
use nfx_tunnel::esp::{wire_len, Inbound, Outbound, Prepared, SaKeys, HEAD};

const ALGS: [Alg; 3] = [
    Alg::Aes128Gcm,
    Alg::Chacha20Poly1305,
    Alg::Aes128CtrHmacSha256,
];

fn keys(alg: Alg) -> SaKeys {
    let km = SecretBytes::new(vec![0x42; alg.cipher_key_len() + 4]);
    let auth = SecretBytes::new(vec![0x24; 32]);
    let auth = matches!(alg, Alg::Aes128CtrHmacSha256).then_some(&auth);
    SaKeys::new(alg, 0x1234, &km, auth).expect("fuzz SA keys")
}

/// Runs one operation of session `dir` on `buf`.
fn run(e: &mut dyn Engine, sa: &SaKeys, dir: Direction, buf: Buf, p: &Prepared) -> (Buf, Status) {
    let session = e.create_session(sa.spec(dir)).expect("session");
    let mut ops = vec![Op {
        session,
        iv: p.iv,
        layout: p.layout,
        buf,
        user: 0,
    }];
    e.submit(&mut ops).expect("submit");
    let mut out = Vec::new();
    e.drain(&mut out).expect("drain");
    let c = out.pop().expect("one completion");
    (c.op.buf, c.status)
}

/// Opens wire packet `wire` on `rx`; checks what an accepted packet returns.
fn open(e: &mut dyn Engine, rx: &mut Inbound, wire: &[u8]) {
    let mut buf = Buf::heap(4096);
    if buf.fill_from(wire).is_err() {
        return;
    }
    let Ok(p) = rx.prepare(&mut buf) else { return };
    let (buf, st) = run(e, &rx.keys, Direction::Decrypt, buf, &p);
    if st != Status::Ok {
        return;
    }
    if let Ok(r) = rx.finish(&p, &buf) {
        assert!(r.start == HEAD && r.end <= HEAD + p.layout.data_len as usize);
    }
}

fuzz_target!(|data: &[u8]| {
    // Byte 0: bits 0–1 transform, bit 2 ESN, bit 3 seal the rest as a payload (else
    // the rest is the wire packet itself).
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let alg = ALGS[usize::from(mode & 3) % ALGS.len()];
    let esn = mode & 4 != 0 && alg.family() == AlgFamily::Aead;
    let mut e = cpu_engine();
    let mut rx = Inbound::new(keys(alg), esn, 64);
    if mode & 8 == 0 {
        open(e.as_mut(), &mut rx, rest);
        return;
    }
    // Each 4-aligned chunk (up to 252 bytes, length from its first byte) is one payload.
    let mut tx = Outbound::new(keys(alg), esn);
    let mut rest = rest;
    while let Some((&n, tail)) = rest.split_first() {
        let n = (usize::from(n) & !3).clamp(4, 252).min(tail.len() & !3);
        if n < 4 {
            return;
        }
        let (payload, next) = tail.split_at(n);
        rest = next;
        let inner_len = n - 2;
        let mut buf = Buf::heap(4096);
        buf.set_len(HEAD + inner_len).expect("room");
        buf.as_mut_slice()[HEAD] = 0x45;
        let Ok(p) = tx.prepare(&mut buf, inner_len) else {
            return;
        };
        buf.as_mut_slice()[HEAD..HEAD + n].copy_from_slice(payload);
        let (buf, st) = run(e.as_mut(), &tx.keys, Direction::Encrypt, buf, &p);
        assert_eq!(st, Status::Ok);
        open(e.as_mut(), &mut rx, &buf.as_slice()[..wire_len(inner_len)]);
    }
});
