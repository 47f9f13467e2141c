//! `nfx completions SHELL` and `nfx man`: a shell completion script and a roff man page,
//! both generated from the clap definition of the command line, so they never drift
//! from `nfx --help`.

use std::io::Write;

/// Arguments of `nfx completions`.
#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// Shell to write the completion script for.
    shell: clap_complete::Shell,
}

/// Writes the completion script for `args.shell` to stdout.
pub fn completions(args: CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<()> {
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, name, &mut out);
    std::io::stdout().lock().write_all(&out)?;
    Ok(())
}

/// Writes the man page nfx(1), with a section per subcommand, to stdout.
pub fn man(cmd: clap::Command) -> anyhow::Result<()> {
    let mut out = Vec::new();
    let cmd = cmd.version(env!("CARGO_PKG_VERSION"));
    let man = clap_mangen::Man::new(cmd.clone());
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    man.render_subcommands_section(&mut out)?;
    render_subcommand_options(&cmd, "nfx", &mut out)?;
    man.render_version_section(&mut out)?;
    std::io::stdout().lock().write_all(&out)?;
    Ok(())
}

/// One `.SH` section per leaf subcommand with its options (clap_mangen renders only the
/// top level's).
fn render_subcommand_options(
    cmd: &clap::Command,
    path: &str,
    out: &mut Vec<u8>,
) -> anyhow::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let full = format!("{path} {}", sub.get_name());
        if sub.has_subcommands() {
            render_subcommand_options(sub, &full, out)?;
            continue;
        }
        writeln!(out, ".SH \"{}\"", full.to_uppercase())?;
        if let Some(about) = sub.get_about() {
            writeln!(out, "{}", escape(&about.to_string()))?;
        }
        let page = clap_mangen::Man::new(sub.clone());
        let mut opts = Vec::new();
        page.render_options_section(&mut opts)?;
        // Drop the sub-page's own `.SH OPTIONS` heading: the section above names it.
        let text = String::from_utf8(opts)?;
        out.extend(
            text.lines()
                .skip(1)
                .flat_map(|l| [l, "\n"])
                .flat_map(str::bytes),
        );
    }
    Ok(())
}

/// Escapes a line for roff: a leading `.` or `'` would be read as a request.
fn escape(s: &str) -> String {
    let s = s.replace('\\', "\\\\");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}
