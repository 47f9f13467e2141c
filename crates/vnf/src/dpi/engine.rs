//! Multi-pattern matching engines: every pattern in ONE automaton, one scan of the
//! payload per packet, reporting every pattern that matches anywhere in it.
//!
//! - `regex`: a `regex-automata` meta regex built from all patterns with
//!   `MatchKind::All` and searched with `which_overlapping_matches` (lazy DFA; linear
//!   time whatever the pattern or payload).
//! - `aho_corasick`: an Aho-Corasick automaton with overlapping search; only for
//!   files whose patterns are all case-sensitive literals.

use super::patterns::{syntax_config, Kind, PatternSpec};
use aho_corasick::AhoCorasick;
use regex_automata::meta;
use regex_automata::{Input, MatchKind, PatternID, PatternSet};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Which engine a DPI node uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// Aho-Corasick when every pattern is a case-sensitive literal, else regex.
    #[default]
    Auto,
    /// The multi-pattern meta regex.
    Regex,
    /// Aho-Corasick (literal-only files).
    AhoCorasick,
}

/// Lazy-DFA cache per engine (the default 2 MiB thrashes with 100+ patterns).
const HYBRID_CACHE_BYTES: usize = 128 << 20;
/// Bound on the compiled NFA of all patterns together.
const NFA_SIZE_LIMIT: usize = 64 << 20;

enum Imp {
    Regex { re: meta::Regex, cache: Box<meta::Cache> },
    AhoCorasick { ac: AhoCorasick },
}

/// A built engine with its per-node scratch state (no allocation per scan).
pub struct Engine {
    imp: Imp,
    patterns: usize,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("kind", &self.name())
            .field("patterns", &self.patterns)
            .finish()
    }
}

/// Why an engine could not be built; `pattern` is the index of the culprit if known.
#[derive(Debug)]
pub struct BuildError {
    /// Index (in the spec list) of the pattern at fault, if one is.
    pub pattern: Option<usize>,
    /// What is wrong.
    pub problem: String,
}

impl Engine {
    /// Builds `kind` over `specs` (pattern index i becomes `PatternID` i).
    pub fn build(specs: &[PatternSpec], kind: EngineKind) -> Result<Engine, BuildError> {
        let non_literal = specs.iter().position(|s| s.kind != Kind::Literal);
        let use_ac = match kind {
            EngineKind::Auto => non_literal.is_none(),
            EngineKind::Regex => false,
            EngineKind::AhoCorasick => {
                if let Some(i) = non_literal {
                    return Err(BuildError {
                        pattern: Some(i),
                        problem: format!(
                            "engine aho_corasick takes only `literal` patterns, this one is `{}`",
                            specs[i].kind.as_str()
                        ),
                    });
                }
                true
            }
        };
        let imp = if use_ac {
            build_ac(specs)?
        } else {
            build_regex(specs)?
        };
        Ok(Engine {
            imp,
            patterns: specs.len(),
        })
    }

    /// `regex` or `aho_corasick`.
    pub fn name(&self) -> &'static str {
        match self.imp {
            Imp::Regex { .. } => "regex",
            Imp::AhoCorasick { .. } => "aho_corasick",
        }
    }

    /// Number of patterns compiled in.
    pub fn pattern_len(&self) -> usize {
        self.patterns
    }

    /// Adds to `set` every pattern matching wholly within `hay[span]`; bytes outside
    /// the span are context for `^`, `$` and `\b` only.
    pub fn scan(&mut self, hay: &[u8], span: Range<usize>, set: &mut PatternSet) {
        if span.start >= span.end || span.end > hay.len() {
            return;
        }
        match &mut self.imp {
            Imp::Regex { re, cache } => {
                let input = Input::new(hay).range(span);
                re.which_overlapping_matches_with(cache, &input, set);
            }
            Imp::AhoCorasick { ac } => {
                let input = aho_corasick::Input::new(hay).range(span);
                for m in ac.find_overlapping_iter(input) {
                    // Pattern ids come from our own spec list, so always valid.
                    if let Ok(id) = PatternID::new(m.pattern().as_usize()) {
                        set.insert(id);
                    }
                }
            }
        }
    }
}

fn build_regex(specs: &[PatternSpec]) -> Result<Imp, BuildError> {
    let sources: Vec<String> = specs.iter().map(PatternSpec::regex_source).collect();
    let config = meta::Config::new()
        .match_kind(MatchKind::All)
        .utf8_empty(false)
        .hybrid_cache_capacity(HYBRID_CACHE_BYTES)
        .nfa_size_limit(Some(NFA_SIZE_LIMIT));
    let re = meta::Builder::new()
        .configure(config)
        .syntax(syntax_config())
        .build_many(&sources)
        .map_err(|e| BuildError {
            pattern: e.pattern().map(|p| p.as_usize()),
            problem: format!("regex engine: {e}"),
        })?;
    let cache = Box::new(re.create_cache());
    Ok(Imp::Regex { re, cache })
}

fn build_ac(specs: &[PatternSpec]) -> Result<Imp, BuildError> {
    let ac = AhoCorasick::builder()
        .match_kind(aho_corasick::MatchKind::Standard)
        .build(specs.iter().map(|s| &s.literal))
        .map_err(|e| BuildError {
            pattern: None,
            problem: format!("aho-corasick engine: {e}"),
        })?;
    Ok(Imp::AhoCorasick { ac })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dpi::patterns::parse;
    use std::path::Path;

    fn engine(text: &str, kind: EngineKind) -> Engine {
        Engine::build(&parse(text, Path::new("t")).unwrap(), kind).unwrap()
    }

    fn hits(e: &mut Engine, hay: &[u8], span: Range<usize>) -> Vec<usize> {
        let mut set = PatternSet::new(e.pattern_len());
        e.scan(hay, span, &mut set);
        set.iter().map(|p| p.as_usize()).collect()
    }

    const LITERALS: &str =
        "a\talert\tliteral\tfoo\nb\talert\tliteral\toob\nc\talert\tliteral\tbar\n";

    #[test]
    fn both_engines_report_overlapping_literals() {
        for kind in [EngineKind::Regex, EngineKind::AhoCorasick] {
            let mut e = engine(LITERALS, kind);
            let hay = b"xfoobarx";
            assert_eq!(hits(&mut e, hay, 0..hay.len()), vec![0, 1, 2], "{kind:?}");
            assert_eq!(hits(&mut e, hay, 0..4), vec![0], "{kind:?}");
            assert_eq!(hits(&mut e, hay, 2..8), vec![1, 2], "{kind:?}");
            assert!(hits(&mut e, hay, 3..3).is_empty());
            assert!(hits(&mut e, hay, 0..99).is_empty());
        }
    }

    #[test]
    fn auto_picks_aho_corasick_only_for_plain_literals() {
        assert_eq!(engine(LITERALS, EngineKind::Auto).name(), "aho_corasick");
        let mixed = format!("{LITERALS}r\tdrop\tregex\tba+r\n");
        assert_eq!(engine(&mixed, EngineKind::Auto).name(), "regex");
        let nocase = "n\talert\tliteral_nocase\tfoo\n";
        assert_eq!(engine(nocase, EngineKind::Auto).name(), "regex");
    }

    #[test]
    fn aho_corasick_refuses_regex_naming_the_pattern() {
        let specs = parse(
            "a\talert\tliteral\tx\nr\talert\tregex\ty+\n",
            Path::new("t"),
        )
        .unwrap();
        let e = Engine::build(&specs, EngineKind::AhoCorasick).unwrap_err();
        assert_eq!(e.pattern, Some(1));
        assert!(e.problem.contains("only `literal`"), "{}", e.problem);
    }

    #[test]
    fn regex_anchors_use_context_outside_the_span() {
        let mut e = engine(
            "s\talert\tregex\t^SSH-\nd\talert\tregex\tEND$\n",
            EngineKind::Regex,
        );
        assert_eq!(hits(&mut e, b"SSH-2.0 END", 0..11), vec![0, 1]);
        // A span that does not start/end at the haystack edges cannot match ^ or $.
        assert!(hits(&mut e, b"xSSH-2.0 ENDx", 1..12).is_empty());
    }

    #[test]
    fn regex_works_on_non_utf8_bytes_and_nocase() {
        let mut e = engine(
            "t\talert\tregex\t\\x16\\x03[\\x00-\\x03]\nu\talert\tliteral_nocase\tsElEcT\n",
            EngineKind::Regex,
        );
        assert_eq!(hits(&mut e, b"\xff\x16\x03\x01\xfe", 0..5), vec![0]);
        assert_eq!(hits(&mut e, b"\xffSELECT", 0..7), vec![1]);
    }
}
