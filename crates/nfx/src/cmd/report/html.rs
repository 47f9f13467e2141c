//! `index.html`: one self-contained page (inline CSS, charts as base64 PNG data URIs, no
//! external fetch), one section per paper.

use super::{Machine, Section, Status};
use base64::Engine as _;
use std::fmt::Write as _;

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;padding:.25em .5em;text-align:left;vertical-align:top}\
.yes{background:#d8f5d8}.no{background:#f8d8d8}.skip{color:#777}.model{background:#fff4cc;padding:.4em;border-left:4px solid #e0b000}\
.err{background:#f8d8d8;padding:.4em;white-space:pre-wrap}img{max-width:100%;border:1px solid #ddd}code,pre{background:#f4f4f4}\
pre{padding:.5em;overflow-x:auto}";

/// Escapes text for HTML content and attribute values.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn claims_table(o: &mut String, s: &Section) {
    let _ = writeln!(
        o,
        "<table><tr><th>claim</th><th>paper value</th><th>nfx value</th><th>holds?</th></tr>"
    );
    for c in &s.claims {
        let (class, verdict) = match (c.holds, &c.reason) {
            (true, _) => ("yes", "yes".to_string()),
            (false, None) => ("no", "no".to_string()),
            (false, Some(r)) => ("no", format!("no — {r}")),
        };
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}</td></tr>",
            esc(&c.claim),
            esc(&c.paper_value),
            esc(c.shown()),
            esc(&verdict)
        );
    }
    o.push_str("</table>\n");
}

fn section(o: &mut String, s: &Section) {
    let e = s.experiment;
    let _ = writeln!(
        o,
        "<section id=\"{0}\"><h2>{1}</h2><p>Experiment <code>{0}</code>",
        e.name(),
        esc(e.paper())
    );
    match &s.status {
        Status::Done => o.push_str(": done."),
        Status::Skipped => o.push_str(": <span class=\"skip\">skipped (not in --only)</span>."),
        Status::Failed(err) => {
            let _ = write!(o, ": <b>failed</b>.</p><p class=\"err\">{}", esc(err));
        }
    }
    o.push_str("</p>\n");
    if s.status != Status::Skipped {
        let _ = writeln!(
            o,
            "<p>Command: <code>{}</code>{}</p>",
            esc(&s.command),
            s.elapsed_s
                .map_or(String::new(), |t| format!(" — {t:.1} s"))
        );
    }
    let _ = writeln!(o, "<p class=\"model\">Modelled: {}", esc(e.modelled()));
    if let Some(n) = &s.source_note {
        let _ = write!(o, " This run: {}.", esc(n));
    }
    o.push_str("</p>\n");
    claims_table(o, s);
    let b64 = base64::engine::general_purpose::STANDARD;
    for (name, png) in &s.charts {
        let _ = writeln!(
            o,
            "<figure><img alt=\"{0}\" src=\"data:image/png;base64,{1}\"><figcaption>{0}</figcaption></figure>",
            esc(name),
            b64.encode(png)
        );
    }
    if let Some(md) = &s.report_md {
        let _ = writeln!(
            o,
            "<details><summary>report.md</summary><pre>{}</pre></details>",
            esc(md)
        );
    }
    o.push_str("</section>\n");
}

/// The whole page.
pub fn page(sections: &[Section], m: &Machine, cli: &str) -> String {
    let mut o = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>nfx: the papers' experiments</title><style>{STYLE}</style></head><body>\n\
         <h1>nfx: the papers' experiments</h1>\n"
    );
    let (held, total) = sections
        .iter()
        .flat_map(|s| &s.claims)
        .fold((0, 0), |(h, t), c| (h + usize::from(c.holds), t + 1));
    let _ = writeln!(
        o,
        "<p>{held} of {total} headline claims hold. Every ratio is measured in one run on this \
         machine; figures marked modelled below stand in for hardware or a power meter.</p>"
    );
    let _ = writeln!(
        o,
        "<table><tr><th>command</th><td><code>{}</code></td></tr>\
         <tr><th>CPU</th><td>{}</td></tr><tr><th>cores</th><td>{}</td></tr>\
         <tr><th>kernel</th><td>{}</td></tr>\
         <tr><th>load average (1, 5, 15 min)</th><td>start {} — end {}</td></tr></table>",
        esc(cli),
        esc(&m.cpu),
        m.cores,
        esc(&m.kernel),
        esc(&m.load_start),
        esc(&m.load_end)
    );
    o.push_str("<ul>");
    for s in sections {
        let _ = write!(
            o,
            "<li><a href=\"#{}\">{}</a></li>",
            s.experiment.name(),
            esc(s.experiment.paper())
        );
    }
    o.push_str("</ul>\n");
    for s in sections {
        section(&mut o, s);
    }
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            esc("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
    }
}
