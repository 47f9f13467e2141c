//! Required literal factors of a regex: a small set of strings, one of which occurs
//! (ignoring ASCII case) in every match. The hybrid engine searches all factors of
//! all patterns with one Aho-Corasick scan and runs a pattern's regex only when one
//! of its factors occurs ("fast pattern" as in Snort/Suricata, literal decomposition
//! as in Hyperscan).

use regex_syntax::hir::{Class, Hir, HirKind};

/// Shortest factor worth a prefilter entry.
pub const MIN_FACTOR: usize = 3;
/// Most alternatives a factor set may have.
const MAX_ALTERNATIVES: usize = 16;
/// Longest fixed string built from a counted repetition.
const MAX_REPEAT: u32 = 16;

/// Most distinct bytes a class may have to count as a small set of strings.
const MAX_CLASS: u32 = 4;

/// The bytes (lowercased, deduplicated) a class matches when there are at most
/// [`MAX_CLASS`] of them ignoring ASCII case.
fn class_bytes(c: &Class) -> Option<Vec<u8>> {
    let ranges: Vec<(u32, u32)> = match c {
        Class::Bytes(b) => b
            .ranges()
            .iter()
            .map(|r| (u32::from(r.start()), u32::from(r.end())))
            .collect(),
        Class::Unicode(u) => u
            .ranges()
            .iter()
            .map(|r| (u32::from(r.start()), u32::from(r.end())))
            .collect(),
    };
    let mut out: Vec<u8> = Vec::new();
    for (lo, hi) in ranges {
        if hi - lo >= 2 * MAX_CLASS {
            return None;
        }
        for b in lo..=hi {
            out.push(u8::try_from(b).ok()?.to_ascii_lowercase());
        }
    }
    out.sort_unstable();
    out.dedup();
    (!out.is_empty() && out.len() <= MAX_CLASS as usize).then_some(out)
}

/// Every string `x` followed by every string of `y`, if there are few enough.
fn cross(x: &[Vec<u8>], y: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
    if x.len() * y.len() > MAX_ALTERNATIVES {
        return None;
    }
    Some(
        x.iter()
            .flat_map(|a| y.iter().map(move |b| [a.as_slice(), b].concat()))
            .collect(),
    )
}

/// The small set of strings (lowercased) `h` matches exactly, ignoring ASCII case;
/// look-around assertions count as the empty string.
fn fixed(h: &Hir) -> Option<Vec<Vec<u8>>> {
    let mut set = match h.kind() {
        HirKind::Literal(l) => vec![l.0.to_ascii_lowercase()],
        HirKind::Class(c) => class_bytes(c)?.into_iter().map(|b| vec![b]).collect(),
        HirKind::Look(_) => vec![Vec::new()],
        HirKind::Capture(c) => fixed(&c.sub)?,
        HirKind::Concat(hs) => {
            let mut out = vec![Vec::new()];
            for h in hs {
                out = cross(&out, &fixed(h)?)?;
            }
            out
        }
        HirKind::Alternation(bs) => {
            let mut out = Vec::new();
            for b in bs {
                out.extend(fixed(b)?);
            }
            out
        }
        HirKind::Repetition(r) if Some(r.min) == r.max && r.min <= MAX_REPEAT => {
            let one = fixed(&r.sub)?;
            let mut out = vec![Vec::new()];
            for _ in 0..r.min {
                out = cross(&out, &one)?;
            }
            out
        }
        _ => return None,
    };
    set.sort();
    set.dedup();
    (set.len() <= MAX_ALTERNATIVES).then_some(set)
}

/// How good a factor set is: its shortest member first, then fewer members.
fn score(alts: &[Vec<u8>]) -> (usize, std::cmp::Reverse<usize>) {
    (
        alts.iter().map(Vec::len).min().unwrap_or(0),
        std::cmp::Reverse(alts.len()),
    )
}

fn better(best: Option<Vec<Vec<u8>>>, cand: Option<Vec<Vec<u8>>>) -> Option<Vec<Vec<u8>>> {
    match (best, cand) {
        (Some(b), Some(c)) => Some(if score(&c) > score(&b) { c } else { b }),
        (b, c) => b.or(c),
    }
}

/// A set of strings, one of which occurs in every match of `h`; `None` when none is
/// known.
pub fn required(h: &Hir) -> Option<Vec<Vec<u8>>> {
    if let Some(set) = fixed(h) {
        return set.iter().all(|s| !s.is_empty()).then_some(set);
    }
    match h.kind() {
        HirKind::Capture(c) => required(&c.sub),
        HirKind::Repetition(r) if r.min >= 1 => required(&r.sub),
        HirKind::Alternation(bs) => {
            let mut all: Vec<Vec<u8>> = Vec::new();
            for b in bs {
                all.extend(required(b)?);
            }
            all.sort();
            all.dedup();
            (all.len() <= MAX_ALTERNATIVES).then_some(all)
        }
        HirKind::Concat(hs) => {
            let mut best = None;
            let empty = vec![Vec::new()];
            let mut run = empty.clone();
            for h in hs {
                if let Some(next) = fixed(h).and_then(|f| cross(&run, &f)) {
                    run = next;
                    continue;
                }
                if run.iter().all(|s| !s.is_empty()) {
                    best = better(best, Some(std::mem::replace(&mut run, empty.clone())));
                }
                run = match fixed(h) {
                    Some(f) => f,
                    None => {
                        best = better(best, required(h));
                        empty.clone()
                    }
                };
            }
            if run.iter().all(|s| !s.is_empty()) {
                best = better(best, Some(run));
            }
            best
        }
        _ => None,
    }
}

/// The factor set of `h` if every member has at least [`MIN_FACTOR`] bytes.
pub fn prefilter(h: &Hir) -> Option<Vec<Vec<u8>>> {
    required(h).filter(|alts| alts.iter().all(|a| a.len() >= MIN_FACTOR))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dpi::patterns::syntax_config;
    use regex_automata::util::syntax::parse_with;

    fn factors(re: &str) -> Option<Vec<String>> {
        let hir = parse_with(re, &syntax_config()).unwrap();
        required(&hir).map(|v| {
            v.into_iter()
                .map(|s| String::from_utf8_lossy(&s).into_owned())
                .collect()
        })
    }

    #[test]
    fn literals_concats_and_case_folding() {
        assert_eq!(factors("GET /"), Some(vec!["get /".into()]));
        assert_eq!(factors(r"^SSH-2\.0-[a-z]+"), Some(vec!["ssh-2.0-".into()]));
        assert_eq!(factors(r"(?i)union\s+select"), Some(vec!["select".into()]));
        assert_eq!(factors(r"ab{3}c"), Some(vec!["abbbc".into()]));
        assert_eq!(factors(r"\bfoo\b"), Some(vec!["foo".into()]));
    }

    #[test]
    fn alternations_give_sets_and_optional_parts_give_nothing() {
        assert_eq!(
            factors("(sleep|pg_sleep)x"),
            Some(vec!["pg_sleepx".into(), "sleepx".into()])
        );
        assert_eq!(
            factors("(?i)[?&](pass|pwd)="),
            Some(vec![
                "&pass=".into(),
                "&pwd=".into(),
                "?pass=".into(),
                "?pwd=".into()
            ])
        );
        assert_eq!(
            factors(r"^\x16\x03[\x01-\x02][\x00-\x3f]"),
            Some(vec!["\x16\x03\x01".into(), "\x16\x03\x02".into()])
        );
        assert_eq!(factors("[a-z]+"), None);
        assert_eq!(factors("(abc)?d"), Some(vec!["d".into()]));
        assert_eq!(factors("(abc)*"), None);
        assert_eq!(factors("x(abc|[0-9])"), Some(vec!["x".into()]));
        assert_eq!(
            factors("x(abc|[0-3])"),
            Some(vec![
                "x0".into(),
                "x1".into(),
                "x2".into(),
                "x3".into(),
                "xabc".into()
            ])
        );
    }

    #[test]
    fn prefilter_needs_min_length() {
        let hir = |re| parse_with(re, &syntax_config()).unwrap();
        assert!(prefilter(&hir("ab[0-9]")).is_none());
        assert!(prefilter(&hir("abc[0-9]")).is_some());
        assert!(prefilter(&hir("(abc|de)")).is_none());
    }
}
