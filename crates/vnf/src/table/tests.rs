//! Flow table tests, including a property test against a `HashMap` model.

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct V {
    pinned: bool,
    tag: u32,
}

// SAFETY: a bool and an integer, valid when zero.
unsafe impl TableValue for V {
    fn evictable(&self) -> bool {
        !self.pinned
    }
}

fn key(i: u32) -> FlowKey {
    FlowKey {
        src: 0x0a00_0000 | i,
        dst: 0x0a01_0001,
        sport: (i % 60000) as u16,
        dport: 80,
        proto: 6,
    }
}

#[test]
fn insert_find_remove() {
    let mut t = FlowTable::<V>::with_hasher(100, FlowHasher::with_seed(1, 1));
    let Insert::New(s) = t.insert(
        key(1),
        10,
        V {
            pinned: false,
            tag: 7,
        },
        0,
    ) else {
        panic!()
    };
    assert_eq!(t.find(&key(1)), Some(s));
    assert_eq!(t.get(s).val.tag, 7);
    assert_eq!(t.find(&key(2)), None);
    assert_eq!(t.len(), 1);
    assert_eq!(t.remove(s).key, key(1));
    assert_eq!(t.find(&key(1)), None);
    assert!(t.is_empty());
}

#[test]
fn full_table_evicts_only_evictable_or_expired() {
    let mut t = FlowTable::<V>::with_hasher(4, FlowHasher::with_seed(2, 2));
    for i in 0..4 {
        assert!(matches!(
            t.insert(
                key(i),
                100 + u64::from(i),
                V {
                    pinned: true,
                    tag: i
                },
                0
            ),
            Insert::New(_)
        ));
    }
    // At capacity, everything pinned and alive: refused.
    assert!(matches!(
        t.insert(key(9), 500, V::default(), 0),
        Insert::Full
    ));
    // Once time passes the oldest expiry, that entry is replaced.
    match t.insert(key(9), 500, V::default(), 100) {
        Insert::Evicted { old, .. } => assert_eq!(old.key, key(0)),
        other => panic!("expected eviction, got {other:?}"),
    }
    assert_eq!(t.len(), 4);
    assert_eq!(t.evictions(), 1);
    assert!(t.find(&key(0)).is_none());
    // An evictable entry is replaced even before it expires, the closest to expiry first.
    let mut u = FlowTable::<V>::with_hasher(2, FlowHasher::with_seed(3, 3));
    u.insert(
        key(1),
        50,
        V {
            pinned: true,
            tag: 1,
        },
        0,
    );
    u.insert(
        key(2),
        70,
        V {
            pinned: false,
            tag: 2,
        },
        0,
    );
    match u.insert(key(3), 90, V::default(), 0) {
        Insert::Evicted { old, .. } => assert_eq!(old.key, key(2)),
        other => panic!("expected eviction, got {other:?}"),
    }
}

#[test]
fn expiry_scan_visits_in_slices() {
    let mut t = FlowTable::<V>::with_hasher(1000, FlowHasher::with_seed(4, 4));
    for i in 0..1000 {
        t.insert(key(i), if i % 2 == 0 { 10 } else { 1000 }, V::default(), 0);
    }
    let mut removed = 0;
    let mut ticks = 0;
    while removed < 500 {
        let mut budget = 64;
        while let Some(s) = t.next_expired(20, &mut budget) {
            assert!(t.get(s).expires_ns <= 20);
            t.remove(s);
            removed += 1;
        }
        assert_eq!(budget, 0, "a tick stops only when its budget is spent");
        ticks += 1;
        assert!(ticks <= t.slots() / 64 + 1, "one sweep covers the table");
    }
    assert_eq!(t.len(), 500);
    assert!(t.iter().all(|(_, e)| e.expires_ns == 1000));
}

#[test]
fn one_million_flows_fit_with_bounded_memory() {
    let n = 1_000_000u32;
    let mut t = FlowTable::<V>::with_hasher(n as usize, FlowHasher::with_seed(5, 5));
    for i in 0..n {
        let k = FlowKey {
            src: i,
            dst: !i,
            sport: i as u16,
            dport: (i >> 16) as u16,
            proto: 17,
        };
        assert!(
            t.insert_free(
                k,
                1,
                V {
                    pinned: true,
                    tag: i
                }
            )
            .is_some(),
            "flow {i} did not fit"
        );
    }
    assert_eq!(t.len(), n as usize);
    let per_flow = t.memory_bytes() as f64 / f64::from(n);
    assert!(per_flow < 40.0, "{per_flow} bytes per flow");
    let k = FlowKey {
        src: 0,
        dst: !0,
        sport: 0,
        dport: 0,
        proto: 17,
    };
    assert!(
        t.insert_free(FlowKey { proto: 6, ..k }, 1, V::default())
            .is_none(),
        "bounded"
    );
}

#[derive(Debug, Clone)]
enum Op {
    Insert(u32, u64, bool),
    Remove(u32),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..200, 0u64..100, any::<bool>()).prop_map(|(k, e, p)| Op::Insert(k, e, p)),
        (0u32..200).prop_map(Op::Remove),
    ]
}

proptest! {
    #[test]
    fn behaves_like_a_hashmap(ops in proptest::collection::vec(op(), 1..400), cap in 1usize..64) {
        let mut t = FlowTable::<V>::with_hasher(cap, FlowHasher::with_seed(6, 6));
        let mut model: HashMap<FlowKey, (u64, V)> = HashMap::new();
        let now = 50;
        for op in ops {
            match op {
                Op::Insert(k, exp, pinned) => {
                    let k = key(k);
                    if t.find(&k).is_some() {
                        continue;
                    }
                    let v = V { pinned, tag: exp as u32 };
                    match t.insert(k, exp, v, now) {
                        Insert::New(_) => {}
                        Insert::Evicted { old, .. } => {
                            prop_assert!(old.expires_ns <= now || old.val.evictable());
                            prop_assert!(model.remove(&old.key).is_some());
                        }
                        Insert::Full => {
                            prop_assert_eq!(model.len(), cap, "refused only when full");
                            continue;
                        }
                    }
                    model.insert(k, (exp, v));
                }
                Op::Remove(k) => {
                    let k = key(k);
                    match t.find(&k) {
                        Some(s) => {
                            prop_assert!(model.remove(&k).is_some());
                            t.remove(s);
                        }
                        None => prop_assert!(!model.contains_key(&k)),
                    }
                }
            }
            prop_assert_eq!(t.len(), model.len());
            prop_assert!(t.len() <= cap);
        }
        for (k, (exp, v)) in &model {
            let s = t.find(k);
            prop_assert!(s.is_some());
            let e = t.get(s.unwrap());
            prop_assert_eq!((e.expires_ns, e.val), (*exp, *v));
        }
        prop_assert_eq!(t.iter().count(), model.len());
    }
}

#[test]
fn lookups_end_when_every_bucket_has_overflowed() {
    let mut t = FlowTable::<V>::with_hasher(14, FlowHasher::with_seed(8, 8));
    assert_eq!(t.nbuckets, 2);
    let homed = |t: &FlowTable<V>, b: usize| -> Vec<FlowKey> {
        (0..5000)
            .map(key)
            .filter(|k| {
                let (b1, b2, _) = t.locate(k);
                b1 == b && b2 == b
            })
            .collect()
    };
    let (k0, k1) = (homed(&t, 0), homed(&t, 1));
    // Nine keys that only fit bucket 0: the ninth overflows into bucket 1.
    let slots: Vec<usize> = k0[..9]
        .iter()
        .map(|k| t.insert_free(*k, 1, V::default()).unwrap())
        .collect();
    assert_eq!(t.overflow[0], 1);
    for &s in &slots[..4] {
        t.remove(s);
    }
    // Bucket 1 fills up and its next key overflows back into bucket 0.
    for k in &k1[..8] {
        t.insert_free(*k, 1, V::default()).unwrap();
    }
    assert_eq!((t.overflow[0], t.overflow[1]), (1, 1));
    assert_eq!(t.find(&k0[20]), None, "a miss ends after one round");
    assert!(t.find(&k1[7]).is_some() && t.find(&k0[8]).is_some());
    for k in k0[4..9].iter().chain(&k1[..8]) {
        let s = t.find(k).unwrap();
        t.remove(s);
    }
    assert_eq!(
        (t.overflow[0], t.overflow[1], t.len()),
        (0, 0, 0),
        "counts return to zero"
    );
}
