//! Multi-pattern matching engines: one automaton scan of the payload per packet for all
//! patterns (never a loop over the patterns), reporting every pattern that matches
//! anywhere in it.
//!
//! - `hybrid` (default): one Aho-Corasick scan (DFA, ASCII case-insensitive,
//!   overlapping) over the required literal factors of every pattern (see
//!   [`super::factor`]); a factor hit confirms a literal pattern directly and a regex
//!   pattern by running that one regex. Start-anchored regexes without a factor form
//!   one anchored meta regex (cheap: it stops after the first bytes); the remaining
//!   ones one unanchored meta regex that scans the whole payload.
//! - `regex`: a `regex-automata` meta regex built from all patterns with
//!   `MatchKind::All` and searched with `which_overlapping_matches` (lazy DFA; linear
//!   time whatever the pattern or payload) — one automaton, no prefilter.
//! - `aho_corasick`: an Aho-Corasick automaton with overlapping search; only for
//!   files whose patterns are all case-sensitive literals.

use super::factor;
use super::patterns::{syntax_config, Kind, PatternSpec};
use aho_corasick::{AhoCorasick, AhoCorasickKind};
use regex_automata::meta;
use regex_automata::util::syntax::parse_with;
use regex_automata::{Input, MatchKind, PatternID, PatternSet};
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// Which engine a DPI node uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    /// Literal-factor prefilter plus per-pattern confirmation.
    #[default]
    Hybrid,
    /// The multi-pattern meta regex.
    Regex,
    /// Aho-Corasick (literal-only files).
    AhoCorasick,
}

/// Lazy-DFA cache of a regex over many patterns (the default 2 MiB thrashes with
/// 100+ patterns).
const SET_CACHE_BYTES: usize = 8 << 20;
/// Lazy-DFA cache of one pattern's confirmation regex (the library default).
const ONE_CACHE_BYTES: usize = 2 << 20;
/// Bound on the compiled NFA of all patterns together.
const NFA_SIZE_LIMIT: usize = 64 << 20;

#[derive(Clone)]
enum Imp {
    Regex {
        re: meta::Regex,
        cache: Box<meta::Cache>,
    },
    AhoCorasick {
        ac: AhoCorasick,
    },
    Hybrid(Box<Hybrid>),
}

/// How a factor hit becomes a match of a pattern.
#[derive(Clone)]
enum Confirm {
    /// Case-sensitive literal: the hit's bytes must equal it exactly.
    Exact(Vec<u8>),
    /// Case-insensitive literal: the hit is the match.
    Hit,
    /// Regex: run it over the haystack.
    Regex(meta::Regex),
}

/// A meta regex over a subset of the patterns, with the global id of each.
#[derive(Clone)]
struct Group {
    re: meta::Regex,
    cache: meta::Cache,
    ids: Vec<PatternID>,
    local: PatternSet,
}

impl Group {
    fn scan(&mut self, input: &Input<'_>, set: &mut PatternSet) {
        clear_set(&mut self.local);
        self.re
            .which_overlapping_matches_with(&mut self.cache, input, &mut self.local);
        for l in self.local.iter().take(self.local.len()) {
            set.insert(self.ids[l.as_usize()]);
        }
    }
}

/// State of the hybrid engine.
#[derive(Clone)]
struct Hybrid {
    ac: Option<AhoCorasick>,
    /// Patterns each factor stands for.
    targets: Vec<Vec<PatternID>>,
    confirm: Vec<Confirm>,
    caches: Vec<Option<meta::Cache>>,
    candidates: PatternSet,
    anchored: Option<Group>,
    rest: Option<Group>,
}

/// A built engine with its per-node scratch state (no allocation per scan). A clone
/// shares the compiled automata (reference-counted) and has scratch state of its own,
/// so nodes over the same patterns need not compile them again.
#[derive(Clone)]
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
        let imp = match kind {
            EngineKind::Hybrid => Imp::Hybrid(Box::new(build_hybrid(specs)?)),
            EngineKind::Regex => {
                let (re, cache) =
                    build_meta(specs.iter().map(PatternSpec::regex_source), SET_CACHE_BYTES)?;
                Imp::Regex {
                    re,
                    cache: Box::new(cache),
                }
            }
            EngineKind::AhoCorasick => {
                if let Some(i) = specs.iter().position(|s| s.kind != Kind::Literal) {
                    return Err(BuildError {
                        pattern: Some(i),
                        problem: format!(
                            "engine aho_corasick takes only `literal` patterns, this one is `{}`",
                            specs[i].kind.as_str()
                        ),
                    });
                }
                build_ac(specs)?
            }
        };
        Ok(Engine {
            imp,
            patterns: specs.len(),
        })
    }

    /// `hybrid`, `regex` or `aho_corasick`.
    pub fn name(&self) -> &'static str {
        match self.imp {
            Imp::Regex { .. } => "regex",
            Imp::AhoCorasick { .. } => "aho_corasick",
            Imp::Hybrid(_) => "hybrid",
        }
    }

    /// Patterns scanned in full on every payload because they have no literal factor
    /// and no start anchor; for the engines without prefilter, every pattern.
    pub fn unaccelerated(&self) -> usize {
        match &self.imp {
            Imp::Hybrid(h) => h.rest.as_ref().map_or(0, |g| g.ids.len()),
            _ => self.patterns,
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
            Imp::Hybrid(h) => h.scan(hay, span, set),
        }
    }
}

impl Hybrid {
    fn scan(&mut self, hay: &[u8], span: Range<usize>, set: &mut PatternSet) {
        let input = Input::new(hay).range(span.clone());
        if let Some(ac) = &self.ac {
            let ac_input = aho_corasick::Input::new(hay).range(span.clone());
            for m in ac.find_overlapping_iter(ac_input) {
                for &pid in &self.targets[m.pattern().as_usize()] {
                    match &self.confirm[pid.as_usize()] {
                        Confirm::Exact(lit) if hay.get(m.range()) == Some(lit.as_slice()) => {
                            set.insert(pid);
                        }
                        Confirm::Exact(_) => {}
                        Confirm::Hit => {
                            set.insert(pid);
                        }
                        Confirm::Regex(_) => {
                            self.candidates.insert(pid);
                        }
                    }
                }
            }
            for pid in self.candidates.iter().take(self.candidates.len()) {
                let i = pid.as_usize();
                if let (Confirm::Regex(re), Some(cache)) =
                    (&self.confirm[i], self.caches[i].as_mut())
                {
                    if !set.contains(pid) && re.search_half_with(cache, &input).is_some() {
                        set.insert(pid);
                    }
                }
            }
            clear_set(&mut self.candidates);
        }
        if let Some(g) = self.anchored.as_mut() {
            g.scan(&input, set);
        }
        if let Some(g) = self.rest.as_mut() {
            g.scan(&input, set);
        }
    }
}

/// Empties `set`. `PatternSet::clear` writes every pattern's slot; a scan with no match
/// (most packets) leaves nothing to clear, so this skips the walk then.
pub(crate) fn clear_set(set: &mut PatternSet) {
    if !set.is_empty() {
        set.clear();
    }
}

fn build_meta(
    sources: impl Iterator<Item = String>,
    cache_bytes: usize,
) -> Result<(meta::Regex, meta::Cache), BuildError> {
    let sources: Vec<String> = sources.collect();
    let config = meta::Config::new()
        .match_kind(MatchKind::All)
        .utf8_empty(false)
        .hybrid_cache_capacity(cache_bytes)
        .nfa_size_limit(Some(NFA_SIZE_LIMIT));
    let re = meta::Builder::new()
        .configure(config)
        .syntax(syntax_config())
        .build_many(&sources)
        .map_err(|e| BuildError {
            pattern: e.pattern().map(|p| p.as_usize()),
            problem: format!("regex engine: {e}"),
        })?;
    let cache = re.create_cache();
    Ok((re, cache))
}

fn build_group(specs: &[PatternSpec], members: &[usize]) -> Result<Option<Group>, BuildError> {
    if members.is_empty() {
        return Ok(None);
    }
    let (re, cache) = build_meta(
        members.iter().map(|&i| specs[i].regex_source()),
        SET_CACHE_BYTES,
    )
    .map_err(|e| BuildError {
        pattern: e.pattern.map(|l| members[l]),
        problem: e.problem,
    })?;
    let ids = members
        .iter()
        .map(|&i| {
            PatternID::new(i).map_err(|e| BuildError {
                pattern: Some(i),
                problem: e.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Group {
        re,
        cache,
        local: PatternSet::new(members.len()),
        ids,
    }))
}

fn build_hybrid(specs: &[PatternSpec]) -> Result<Hybrid, BuildError> {
    let mut factors: Vec<Vec<u8>> = Vec::new();
    let mut targets: Vec<Vec<PatternID>> = Vec::new();
    let mut index = std::collections::HashMap::new();
    let mut confirm = Vec::with_capacity(specs.len());
    let mut caches = Vec::with_capacity(specs.len());
    let (mut anchored, mut rest) = (Vec::new(), Vec::new());
    for (i, s) in specs.iter().enumerate() {
        let err = |problem: String| BuildError {
            pattern: Some(i),
            problem,
        };
        let pid = PatternID::new(i).map_err(|e| err(e.to_string()))?;
        let alts = match s.kind {
            Kind::Literal | Kind::LiteralNocase => Some(vec![s.literal.to_ascii_lowercase()]),
            Kind::Regex => {
                let hir = parse_with(&s.text, &syntax_config()).map_err(|e| err(e.to_string()))?;
                let alts = factor::prefilter(&hir);
                if alts.is_none() {
                    let start = hir
                        .properties()
                        .look_set_prefix()
                        .contains(regex_syntax::hir::Look::Start);
                    if start { &mut anchored } else { &mut rest }.push(i);
                }
                alts
            }
        };
        let (c, cache) = match s.kind {
            Kind::Literal => (Confirm::Exact(s.literal.clone()), None),
            Kind::LiteralNocase => (Confirm::Hit, None),
            Kind::Regex => {
                let (re, cache) = build_meta(std::iter::once(s.regex_source()), ONE_CACHE_BYTES)
                    .map_err(|e| err(e.problem))?;
                (Confirm::Regex(re), Some(cache))
            }
        };
        confirm.push(c);
        caches.push(cache);
        for f in alts.into_iter().flatten() {
            let slot = *index.entry(f.clone()).or_insert_with(|| {
                factors.push(f);
                targets.push(Vec::new());
                targets.len() - 1
            });
            targets[slot].push(pid);
        }
    }
    let ac = if factors.is_empty() {
        None
    } else {
        Some(
            AhoCorasick::builder()
                .match_kind(aho_corasick::MatchKind::Standard)
                .ascii_case_insensitive(true)
                .kind(Some(AhoCorasickKind::DFA))
                .build(&factors)
                .map_err(|e| BuildError {
                    pattern: None,
                    problem: format!("aho-corasick prefilter: {e}"),
                })?,
        )
    };
    Ok(Hybrid {
        ac,
        targets,
        confirm,
        caches,
        candidates: PatternSet::new(specs.len()),
        anchored: build_group(specs, &anchored)?,
        rest: build_group(specs, &rest)?,
    })
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

    const ALL: [EngineKind; 3] = [
        EngineKind::Hybrid,
        EngineKind::Regex,
        EngineKind::AhoCorasick,
    ];

    #[test]
    fn all_engines_report_overlapping_literals() {
        for kind in ALL {
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
    fn hybrid_groups_patterns_by_how_they_are_found() {
        let text =
            "a\talert\tregex\tabc[0-9]+\nb\talert\tregex\t^[0-9]{2}x\nc\talert\tregex\t[0-9]{4}\n";
        let mut e = engine(text, EngineKind::Hybrid);
        assert_eq!(e.name(), "hybrid");
        assert_eq!(e.unaccelerated(), 1);
        assert_eq!(hits(&mut e, b"12x abc7 5555", 0..13), vec![0, 1, 2]);
        assert_eq!(hits(&mut e, b"ABC7 1x", 0..7), Vec::<usize>::new());
        assert_eq!(engine(text, EngineKind::Regex).unaccelerated(), 3);
    }

    #[test]
    fn hybrid_confirms_case_and_regex_after_a_factor_hit() {
        let text = "cs\talert\tliteral\tGET\nci\talert\tliteral_nocase\tpost\nre\talert\tregex\tUSER [a-z]+\n";
        let mut e = engine(text, EngineKind::Hybrid);
        assert_eq!(hits(&mut e, b"get POST user x", 0..15), vec![1]);
        assert_eq!(hits(&mut e, b"GET USER bob", 0..12), vec![0, 2]);
        assert_eq!(hits(&mut e, b"USER 42", 0..7), Vec::<usize>::new());
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
