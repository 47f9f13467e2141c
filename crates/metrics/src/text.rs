//! Prometheus/OpenMetrics text taken apart and put back together, for the processes that
//! re-export metrics they did not make: an agent adds `host` and `worker` labels to each
//! worker's metrics, the controller merges every agent's into its own scrape. Families
//! with the same name from several sources become one family (one `# HELP`/`# TYPE`),
//! since a scraper rejects a family declared twice.
//!
//! The input comes from another nfx process over an authenticated link, but it is still
//! checked: lines are bounded, names must be metric names, and a malformed line is an
//! error naming it, never a panic.

use std::collections::BTreeMap;
use std::fmt;

/// Longest line accepted.
const MAX_LINE: usize = 64 * 1024;

/// Why a text could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong with it.
    pub what: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "metrics text, line {}: {}", self.line, self.what)
    }
}

impl std::error::Error for ParseError {}

/// One metric family: its metadata lines and its samples (each `name{labels} value...`).
#[derive(Debug, Clone, Default, PartialEq)]
struct Family {
    meta: Vec<String>,
    samples: Vec<String>,
}

/// A set of metric families, in the order they first appeared.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    order: Vec<String>,
    families: BTreeMap<String, Family>,
}

fn is_name(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_' || ch == ':')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
}

/// Escapes a label value for the text format.
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Exposition {
    /// Parses `text` (the `# EOF` line, if any, ends it).
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        let mut e = Exposition::default();
        let mut current: Option<String> = None;
        for (i, l) in text.lines().enumerate() {
            let err = |what: String| ParseError { line: i + 1, what };
            if l.len() > MAX_LINE {
                return Err(err(format!("longer than {MAX_LINE} bytes")));
            }
            if l.contains('\r') {
                return Err(err("a carriage return inside a line".into()));
            }
            if l == "# EOF" {
                break;
            }
            if l.trim().is_empty() {
                continue;
            }
            if let Some(rest) = l.strip_prefix("# ") {
                let mut it = rest.splitn(3, ' ');
                let (kind, name) = (it.next().unwrap_or(""), it.next().unwrap_or(""));
                if !matches!(kind, "HELP" | "TYPE" | "UNIT") {
                    continue;
                }
                if !is_name(name) {
                    return Err(err(format!("bad metric name {name:?}")));
                }
                let f = e.family(name);
                let tag = format!("# {kind} ");
                if f.meta.iter().any(|m| m.starts_with(&tag)) {
                    return Err(err(format!("second {kind} line for {name}")));
                }
                f.meta.push(l.to_string());
                current = Some(name.to_string());
                continue;
            }
            if l.starts_with('#') {
                continue;
            }
            let name_end = l.find(['{', ' ']).unwrap_or(l.len());
            let name = &l[..name_end];
            if !is_name(name) || name_end == l.len() {
                return Err(err(format!("not a sample: {:?}", truncate(l))));
            }
            if l[name_end..].starts_with('{') && !l.contains('}') {
                return Err(err(format!("unclosed labels: {:?}", truncate(l))));
            }
            let family = match &current {
                Some(f) if of_family(name, f) => f.clone(),
                _ => name.to_string(),
            };
            e.family(&family).samples.push(l.to_string());
        }
        Ok(e)
    }

    fn family(&mut self, name: &str) -> &mut Family {
        if !self.families.contains_key(name) {
            self.order.push(name.to_string());
        }
        self.families.entry(name.to_string()).or_default()
    }

    /// Puts `pairs` first in the labels of every sample (values escaped here).
    pub fn add_labels(&mut self, pairs: &[(&str, &str)]) {
        if pairs.is_empty() {
            return;
        }
        let added: Vec<String> = pairs
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let added = added.join(",");
        for f in self.families.values_mut() {
            for s in &mut f.samples {
                let i = s.find(['{', ' ']).unwrap_or(s.len());
                let (name, rest) = s.split_at(i);
                *s = match rest.strip_prefix('{') {
                    Some(r) if r.starts_with('}') => format!("{name}{{{added}{r}"),
                    Some(r) => format!("{name}{{{added},{r}"),
                    None => format!("{name}{{{added}}}{rest}"),
                };
            }
        }
    }

    /// Adds `other`'s samples; a family both have keeps this one's metadata.
    pub fn merge(&mut self, other: Exposition) {
        let Exposition {
            order,
            mut families,
        } = other;
        for name in order {
            let Some(f) = families.remove(&name) else {
                continue;
            };
            let mine = self.family(&name);
            if mine.meta.is_empty() {
                mine.meta = f.meta;
            }
            mine.samples.extend(f.samples);
        }
    }

    /// Number of samples.
    pub fn samples(&self) -> usize {
        self.families.values().map(|f| f.samples.len()).sum()
    }

    /// The text, ending in `# EOF`. Families without metadata (samples under their own
    /// name) come first: after a family's `# HELP`/`# TYPE` block a parser attributes
    /// samples by suffix to that family, so a bare `x_total` written there would join
    /// family `x` when the text is read back. Written before any metadata, each keeps
    /// its own family, and the text parses back to what renders it.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let (bare, declared): (Vec<&String>, Vec<&String>) = self
            .order
            .iter()
            .partition(|name| self.families[*name].meta.is_empty());
        for name in bare.into_iter().chain(declared) {
            let f = &self.families[name];
            for l in f.meta.iter().chain(&f.samples) {
                out.push_str(l);
                out.push('\n');
            }
        }
        out.push_str("# EOF\n");
        out
    }
}

/// Whether sample `name` belongs to family `family` (the name itself, or the name with one
/// of the suffixes OpenMetrics gives a family's samples).
fn of_family(name: &str, family: &str) -> bool {
    const SUFFIXES: [&str; 9] = [
        "", "_total", "_bucket", "_sum", "_count", "_created", "_info", "_gcount", "_gsum",
    ];
    name.strip_prefix(family)
        .is_some_and(|rest| SUFFIXES.contains(&rest))
}

fn truncate(l: &str) -> &str {
    let mut end = l.len().min(80);
    while !l.is_char_boundary(end) {
        end -= 1;
    }
    &l[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORKER: &str = "# HELP nfx_node_packets Packets.\n# TYPE nfx_node_packets counter\n\
nfx_node_packets_total{instance=\"a\",node=\"fw\"} 10\n\
# HELP nfx_uptime_seconds Up.\n# TYPE nfx_uptime_seconds gauge\nnfx_uptime_seconds 2.5\n# EOF\n";

    #[test]
    fn labels_go_first_and_families_merge_once() {
        let mut a = Exposition::parse(WORKER).unwrap();
        a.add_labels(&[("host", "h1"), ("worker", "d\"1")]);
        let mut b = Exposition::parse(WORKER).unwrap();
        b.add_labels(&[("host", "h2"), ("worker", "d2")]);
        a.merge(b);
        let t = a.render();
        assert_eq!(
            t.matches("# TYPE nfx_node_packets counter").count(),
            1,
            "{t}"
        );
        assert!(t.contains(
            "nfx_node_packets_total{host=\"h1\",worker=\"d\\\"1\",instance=\"a\",node=\"fw\"} 10"
        ));
        assert!(
            t.contains("nfx_uptime_seconds{host=\"h2\",worker=\"d2\"} 2.5"),
            "{t}"
        );
        assert_eq!(a.samples(), 4);
        assert!(t.ends_with("# TYPE nfx_uptime_seconds gauge\nnfx_uptime_seconds{host=\"h1\",worker=\"d\\\"1\"} 2.5\nnfx_uptime_seconds{host=\"h2\",worker=\"d2\"} 2.5\n# EOF\n"), "{t}");
        // What it renders parses back to the same thing.
        assert_eq!(Exposition::parse(&t).unwrap(), a);
    }

    #[test]
    fn a_sample_joins_the_family_only_by_its_suffix() {
        let t = "# HELP n N.\nnfx_x 1\nn_total 2\n# EOF\n";
        let e = Exposition::parse(t).unwrap();
        assert_eq!(e.render(), "nfx_x 1\n# HELP n N.\nn_total 2\n# EOF\n");
    }

    #[test]
    fn a_bare_sample_keeps_its_own_family_when_read_back() {
        // `c_total` is read while family `b_total` is current, so it keeps its own family,
        // ordered after `a`; written after `c`'s block it would join `c`, ahead of `a`.
        let t = "b_total 1\n# HELP c x\n# HELP b_total x\na 1\nc_total 1\n";
        let out = Exposition::parse(t).unwrap().render();
        assert_eq!(
            out,
            "a 1\nc_total 1\n# HELP b_total x\nb_total 1\n# HELP c x\n# EOF\n"
        );
        assert_eq!(Exposition::parse(&out).unwrap().render(), out);
    }

    #[test]
    fn malformed_text_is_an_error_naming_the_line() {
        for bad in [
            "x{a=\"1\" 2",
            "9x 1",
            "# TYPE b-d counter",
            "lonely",
            "# TYPE ok counter",
        ] {
            let e = Exposition::parse(&format!("# TYPE ok gauge\n{bad}\n")).unwrap_err();
            assert_eq!(e.line, 2, "{bad}: {e}");
        }
        assert!(Exposition::parse(&"x".repeat(MAX_LINE + 1)).is_err());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_text_renders_to_what_it_parses_back_to(
            s in "(# (HELP|TYPE) [a-c](_total|_bucket)? x\n|[a-c](_total|_bucket)?(\\{l=\"v\"\\})? 1\n){0,8}"
        ) {
            if let Ok(mut e) = Exposition::parse(&s) {
                e.add_labels(&[("host", "h")]);
                let out = e.render();
                let back = Exposition::parse(&out).expect("rendered text parses");
                proptest::prop_assert_eq!(back.samples(), e.samples());
                proptest::prop_assert_eq!(back.render(), out);
            }
        }

        #[test]
        fn arbitrary_text_never_panics(s in "[a-z_{}=\\\\\" #\n0-9.,:]{0,80}") {
            if let Ok(mut e) = Exposition::parse(&s) {
                e.add_labels(&[("host", "h")]);
                let _ = e.render();
            }
        }
    }
}
