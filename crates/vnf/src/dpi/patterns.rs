//! The DPI pattern file: one pattern per line, `id<TAB>action<TAB>kind<TAB>pattern`.
//!
//! - `id`: a unique name without whitespace (e.g. `http-get`, `1001`);
//! - `action`: `alert` (event, packet passes) or `drop` (event, packet dropped);
//! - `kind`: `literal` (exact bytes), `literal_nocase` (ASCII case-insensitive bytes)
//!   or `regex` (regex-automata syntax over bytes: Unicode off, `.` is any byte but
//!   `\n`, `\xHH` is one byte, `^`/`$` are the start/end of the payload);
//! - `pattern`: the rest of the line (it may contain tabs). In literals `\\`, `\t`,
//!   `\r`, `\n` and `\xHH` are escapes; any other backslash is an error.
//!
//! Blank lines and lines starting with `#` are ignored.

use super::DpiError;
use nfx_io::FileScope;
use regex_automata::util::syntax;
use std::path::Path;

/// Largest pattern file accepted.
pub const MAX_FILE_BYTES: u64 = 16 << 20;
/// Most patterns accepted in one file.
pub const MAX_PATTERNS: usize = 20_000;

/// What happens when a pattern matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Raise an event; the packet passes.
    Alert,
    /// Raise an event and drop the packet (`DropReason::DpiDrop`).
    Drop,
}

impl Action {
    /// Name as written in the pattern file and in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Alert => "alert",
            Action::Drop => "drop",
        }
    }
}

/// How the pattern text is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Exact bytes.
    Literal,
    /// Bytes, ASCII letters in any case.
    LiteralNocase,
    /// A regular expression over bytes.
    Regex,
}

impl Kind {
    /// Name as written in the pattern file.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Literal => "literal",
            Kind::LiteralNocase => "literal_nocase",
            Kind::Regex => "regex",
        }
    }
}

/// One parsed, validated pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternSpec {
    /// Unique id, reported in events.
    pub id: String,
    /// What a match does.
    pub action: Action,
    /// How `text` is read.
    pub kind: Kind,
    /// The pattern as written in the file.
    pub text: String,
    /// For literals, the bytes after unescaping (empty for regexes).
    pub literal: Vec<u8>,
    /// 1-based line in the file.
    pub line: usize,
}

/// The syntax every pattern is compiled with: bytes, not Unicode text.
pub fn syntax_config() -> syntax::Config {
    syntax::Config::new().unicode(false).utf8(false)
}

impl PatternSpec {
    /// The pattern as a regex for the multi-pattern regex engine.
    pub fn regex_source(&self) -> String {
        match self.kind {
            Kind::Regex => self.text.clone(),
            Kind::Literal => escape_bytes(&self.literal),
            Kind::LiteralNocase => format!("(?i:{})", escape_bytes(&self.literal)),
        }
    }
}

/// Writes bytes as a regex matching exactly them: ASCII letters and digits as
/// themselves (so `(?i)` applies), everything else as `\xHH`.
fn escape_bytes(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 4);
    for &b in bytes {
        if b.is_ascii_alphanumeric() {
            s.push(char::from(b));
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

/// Unescapes a literal pattern (`\\`, `\t`, `\r`, `\n`, `\xHH`).
fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len());
    let mut it = text.bytes();
    while let Some(b) = it.next() {
        if b != b'\\' {
            out.push(b);
            continue;
        }
        match it.next() {
            Some(b'\\') => out.push(b'\\'),
            Some(b't') => out.push(b'\t'),
            Some(b'r') => out.push(b'\r'),
            Some(b'n') => out.push(b'\n'),
            Some(b'x') => {
                let hex = [it.next(), it.next()];
                let digits: Option<Vec<u8>> = hex
                    .iter()
                    .map(|d| d.filter(u8::is_ascii_hexdigit))
                    .collect();
                let digits = digits.ok_or("\\x must be followed by two hex digits")?;
                let s = std::str::from_utf8(&digits).map_err(|e| e.to_string())?;
                out.push(u8::from_str_radix(s, 16).map_err(|e| e.to_string())?);
            }
            Some(_) => return Err("unknown escape in literal (\\\\ \\t \\r \\n \\xHH)".into()),
            None => return Err("literal ends with a lone backslash".into()),
        }
    }
    Ok(out)
}

/// Checks a regex on its own so that its error names its line and id, and refuses
/// regexes that can match the empty string (they would match every packet).
fn check_regex(text: &str) -> Result<(), String> {
    let hir = syntax::parse_with(text, &syntax_config()).map_err(|e| {
        // regex-syntax prints the pattern, a caret line and `error: ...`; keep one line.
        let full = e.to_string();
        full.lines()
            .last()
            .unwrap_or(&full)
            .trim_start_matches("error: ")
            .to_string()
    })?;
    if hir.properties().minimum_len() == Some(0) {
        return Err("can match the empty string (it would match every packet)".into());
    }
    Ok(())
}

/// Reads (within `files`, at most [`MAX_FILE_BYTES`]) and validates a pattern file.
pub fn load(files: &FileScope, name: &Path) -> Result<Vec<PatternSpec>, DpiError> {
    let text = files.read_text(name, MAX_FILE_BYTES)?;
    parse(&text, name)
}

/// Parses pattern-file text; `path` is only used in errors.
pub fn parse(text: &str, path: &Path) -> Result<Vec<PatternSpec>, DpiError> {
    let mut specs: Vec<PatternSpec> = Vec::new();
    let mut ids = std::collections::HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.strip_suffix('\r').unwrap_or(raw);
        if l.trim().is_empty() || l.trim_start().starts_with('#') {
            continue;
        }
        let line_err = |problem: String| DpiError::Line {
            path: path.to_path_buf(),
            line,
            problem,
        };
        let fields: Vec<&str> = l.splitn(4, '\t').collect();
        let [id, action, kind, text] = fields[..] else {
            return Err(line_err(format!(
                "expected 4 tab-separated fields id<TAB>action<TAB>kind<TAB>pattern, found {}",
                fields.len()
            )));
        };
        if id.is_empty() || id.chars().any(char::is_whitespace) {
            return Err(line_err(
                "the id must be non-empty, without whitespace".into(),
            ));
        }
        if let Some(first) = ids.insert(id.to_string(), line) {
            return Err(line_err(format!("duplicate id (first on line {first})")));
        }
        let action = match action {
            "alert" => Action::Alert,
            "drop" => Action::Drop,
            _ => return Err(line_err("action: expected alert or drop".into())),
        };
        let kind = match kind {
            "literal" => Kind::Literal,
            "literal_nocase" => Kind::LiteralNocase,
            "regex" => Kind::Regex,
            _ => {
                return Err(line_err(
                    "kind: expected literal, literal_nocase or regex".into(),
                ))
            }
        };
        if text.is_empty() {
            return Err(line_err("empty pattern".into()));
        }
        let literal = match kind {
            Kind::Regex => {
                check_regex(text).map_err(|e| line_err(format!("bad regex: {e}")))?;
                Vec::new()
            }
            Kind::Literal | Kind::LiteralNocase => unescape(text).map_err(line_err)?,
        };
        if specs.len() == MAX_PATTERNS {
            return Err(line_err(format!("more than {MAX_PATTERNS} patterns")));
        }
        specs.push(PatternSpec {
            id: id.to_string(),
            action,
            kind,
            text: text.to_string(),
            literal,
            line,
        });
    }
    if specs.is_empty() {
        return Err(DpiError::File {
            path: path.to_path_buf(),
            problem: "no patterns".into(),
        });
    }
    Ok(specs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Result<Vec<PatternSpec>, DpiError> {
        parse(text, Path::new("pats.txt"))
    }

    #[test]
    fn parses_all_kinds_comments_and_tabs_in_pattern() {
        let specs = p("# comment\n\na\talert\tliteral\tGET /\r\nb\tdrop\tregex\t^SSH-\\d\\.\\d\nc\talert\tliteral_nocase\tx\\x41\\t\\\\y\td\n").unwrap();
        assert_eq!(specs.len(), 3);
        assert_eq!(specs[0].literal, b"GET /");
        assert_eq!(specs[0].line, 3);
        assert_eq!(
            (specs[1].action, specs[1].kind),
            (Action::Drop, Kind::Regex)
        );
        assert_eq!(specs[2].literal, b"xA\t\\y\td");
        assert_eq!(specs[2].regex_source(), r"(?i:xA\x09\x5cy\x09d)");
        assert_eq!(specs[0].regex_source(), r"GET\x20\x2f");
    }

    #[test]
    fn errors_name_line_id_and_problem() {
        let cases = [
            (
                "a\talert\tliteral",
                "pats.txt:1: expected 4 tab-separated fields",
            ),
            ("\n a\talert\tliteral\tx", "pats.txt:2: the id must be"),
            (
                "a\tblock\tliteral\tx",
                "pats.txt:1: action: expected alert or drop",
            ),
            ("a\talert\tpcre\tx", "pats.txt:1: kind: expected literal"),
            (
                "a\talert\tregex\t(unclosed",
                "pats.txt:1: bad regex: unclosed group",
            ),
            (
                "a\talert\tregex\t[a-",
                "pats.txt:1: bad regex: unclosed character class",
            ),
            (
                "a\talert\tregex\tx*",
                "pats.txt:1: bad regex: can match the empty string",
            ),
            (
                "a\talert\tliteral\t\\q",
                "pats.txt:1: unknown escape in literal",
            ),
            (
                "a\talert\tliteral\t\\x4",
                "pats.txt:1: \\x must be followed",
            ),
            (
                "a\talert\tliteral\tab\\",
                "pats.txt:1: literal ends with a lone backslash",
            ),
            ("a\talert\tliteral\t", "pats.txt:1: empty pattern"),
            (
                "a\talert\tliteral\tx\na\talert\tliteral\ty",
                "pats.txt:2: duplicate id (first on line 1)",
            ),
            ("# only a comment\n", "pats.txt: no patterns"),
        ];
        for (text, want) in cases {
            let e = p(text).unwrap_err().to_string();
            assert!(e.starts_with(want), "{text:?}: got {e:?}, want {want:?}");
        }
    }

    #[test]
    fn load_reports_missing_file() {
        let e = load(
            &FileScope::new("/nonexistent"),
            Path::new("nfx-patterns.txt"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("`nfx-patterns.txt`: cannot read"), "{e}");
    }

    #[test]
    fn errors_never_quote_the_file() {
        // What a config pointed at a file that is not a pattern file would show.
        let secret = "root:$6$SECRETHASH:19000:0:99999:7:::";
        for text in [
            secret.to_string(),
            format!("{secret} x\talert\tliteral\tx"),
            format!("a\t{secret}\tliteral\tx"),
            format!("a\talert\t{secret}\tx"),
            format!("a\talert\tliteral\t\\q{secret}"),
            format!("a\talert\tregex\t({secret}"),
            format!("{secret}\talert\tliteral\tx\n{secret}\talert\tliteral\ty"),
        ] {
            let e = p(&text).expect_err(&text).to_string();
            assert!(!e.contains("SECRET"), "{e}");
        }
    }

    #[test]
    fn unescape_handles_every_escape() {
        assert_eq!(
            unescape(r"a\\b\t\r\n\x00\xff").unwrap(),
            b"a\\b\t\r\n\x00\xff"
        );
        assert_eq!(unescape("plain").unwrap(), b"plain");
    }
}
