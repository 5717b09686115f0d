//! Man pages and shell completions generated from clap definitions, so the installed
//! documentation cannot drift from the code. Shared by `smartmig` (section 1, plus its
//! `smartmig.toml(5)`, see `smartmig::docs`) and `smartmigd` (section 8); both call these
//! from hidden `manpages DIR` / `completions SHELL` subcommands that serve
//! `scripts/package.sh`.

use std::io::Write;
use std::path::{Path, PathBuf};

/// A page or directory could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write {path}: {source}")]
pub struct WriteError {
    /// The file or directory.
    pub path: PathBuf,
    /// The cause.
    pub source: std::io::Error,
}

/// What a page says beyond what clap knows: more description, exit codes, files,
/// examples and related pages. Empty parts leave their section out.
#[derive(Debug, Clone, Default)]
pub struct PageText {
    /// Paragraphs after the command's own description.
    pub description: Vec<String>,
    /// Exit codes and what each means.
    pub exit_status: Vec<(String, String)>,
    /// Files the command reads or writes, and what they are.
    pub files: Vec<(String, String)>,
    /// Command lines and what each does.
    pub examples: Vec<(String, String)>,
    /// Related pages (`smartmig.toml(5)`) and documents.
    pub see_also: Vec<String>,
}

/// Writes the man page of `cmd` and of every visible subcommand (recursively) into `dir`,
/// in manual `section`; returns the files written. `text` gives each page's own sections
/// by page name (`smartmig-doctor`). `help` gets no page of its own.
pub fn write_man_pages(
    cmd: clap::Command,
    section: &str,
    dir: &Path,
    text: &dyn Fn(&str) -> PageText,
) -> Result<Vec<PathBuf>, WriteError> {
    fn generate(
        cmd: clap::Command,
        name: String,
        section: &str,
        dir: &Path,
        text: &dyn Fn(&str) -> PageText,
        out: &mut Vec<PathBuf>,
    ) -> Result<(), WriteError> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            let sub_name = format!("{name}-{}", sub.get_name());
            generate(sub, sub_name, section, dir, text, out)?;
        }
        let path = dir.join(clap_mangen::Man::new(cmd.clone()).section(section).get_filename());
        let page = render(cmd, section, &text(&name)).map_err(|source| WriteError {
            path: path.clone(),
            source,
        })?;
        std::fs::write(&path, page).map_err(|source| WriteError {
            path: path.clone(),
            source,
        })?;
        out.push(path);
        Ok(())
    }
    std::fs::create_dir_all(dir).map_err(|source| WriteError {
        path: dir.to_owned(),
        source,
    })?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    generate(cmd, name, section, dir, text, &mut out)?;
    Ok(out)
}

/// One page: clap's sections, then `text`'s in the usual order of a manual page.
fn render(cmd: clap::Command, section: &str, text: &PageText) -> std::io::Result<Vec<u8>> {
    use roff::{bold, roman, Roff};
    let man = clap_mangen::Man::new(cmd.clone()).section(section);
    let mut page = Vec::new();
    man.render_title(&mut page)?;
    man.render_name_section(&mut page)?;
    man.render_synopsis_section(&mut page)?;
    man.render_description_section(&mut page)?;
    let mut roff = Roff::new();
    for p in &text.description {
        roff.control("PP", []);
        roff.text([roman(p.as_str())]);
    }
    roff.to_writer(&mut page)?;
    if cmd.get_arguments().any(|a| !a.is_hide_set()) {
        man.render_options_section(&mut page)?;
    }
    if cmd.get_subcommands().any(|s| !s.is_hide_set()) {
        man.render_subcommands_section(&mut page)?;
    }
    let mut roff = Roff::new();
    let mut tagged = |title: &str, items: &[(String, String)]| {
        if items.is_empty() {
            return;
        }
        roff.control("SH", [title]);
        for (tag, what) in items {
            roff.control("TP", []);
            roff.text([bold(tag.as_str())]);
            roff.text([roman(what.as_str())]);
        }
    };
    tagged("EXIT STATUS", &text.exit_status);
    tagged("FILES", &text.files);
    tagged("EXAMPLES", &text.examples);
    if !text.see_also.is_empty() {
        roff.control("SH", ["SEE ALSO"]);
        roff.text([roman(text.see_also.join(", "))]);
    }
    roff.to_writer(&mut page)?;
    if cmd.get_version().or(cmd.get_long_version()).is_some() {
        man.render_version_section(&mut page)?;
    }
    Ok(page)
}

/// Writes the completion script of `cmd` for `shell` to `out`.
pub fn write_completions(cmd: &mut clap::Command, shell: clap_complete::Shell, out: &mut dyn Write) {
    let name = cmd.get_name().to_owned();
    clap_complete::generate(shell, cmd, name, out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool() -> clap::Command {
        clap::Command::new("tool")
            .about("A tool")
            .subcommand(clap::Command::new("run").subcommand(clap::Command::new("fast")))
            .subcommand(clap::Command::new("secret").hide(true))
    }

    #[test]
    fn every_visible_subcommand_gets_a_page_in_the_section_and_help_and_hidden_ones_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut names: Vec<String> = write_man_pages(tool(), "8", dir.path(), &|_| PageText::default())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["tool-run-fast.8", "tool-run.8", "tool.8"]);
        let page = std::fs::read_to_string(dir.path().join("tool.8")).unwrap();
        assert!(page.contains(".TH tool 8"), "{page}");
    }

    #[test]
    fn a_pages_own_text_becomes_its_exit_status_files_examples_and_see_also() {
        let dir = tempfile::tempdir().unwrap();
        let text = |name: &str| PageText {
            description: vec![format!("More about {name}.")],
            exit_status: vec![("0".into(), "success".into())],
            files: vec![("/etc/tool.conf".into(), "the config".into())],
            examples: vec![(format!("{} --now", name.replace('-', " ")), "runs it".into())],
            see_also: vec!["tool.conf(5)".into()],
        };
        write_man_pages(tool(), "1", dir.path(), &text).unwrap();
        let page = std::fs::read_to_string(dir.path().join("tool-run.1")).unwrap();
        for want in [
            ".SH DESCRIPTION",
            "More about tool\\-run.",
            ".SH \"EXIT STATUS\"",
            ".SH FILES",
            "/etc/tool.conf",
            ".SH EXAMPLES",
            "tool run \\-\\-now",
            ".SH \"SEE ALSO\"",
            "tool.conf(5)",
        ] {
            assert!(page.contains(want), "{want}: {page}");
        }
    }

    #[test]
    fn an_unwritable_directory_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let e = write_man_pages(tool(), "1", &file.join("man"), &|_| PageText::default()).unwrap_err();
        assert_eq!(e.path, file.join("man"));
        assert!(e.to_string().starts_with("cannot write "), "{e}");
    }

    #[test]
    fn bash_completions_name_the_command_and_its_subcommands() {
        let mut out = Vec::new();
        write_completions(&mut tool(), clap_complete::Shell::Bash, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.contains("complete -F _tool") && text.contains("run"),
            "{text}"
        );
    }
}
