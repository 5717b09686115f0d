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

/// Writes the man page of `cmd` and of every visible subcommand (recursively) into `dir`,
/// in manual `section`; returns the files written. `help` gets no page of its own.
pub fn write_man_pages(cmd: clap::Command, section: &str, dir: &Path) -> Result<Vec<PathBuf>, WriteError> {
    fn generate(
        cmd: clap::Command,
        section: &str,
        dir: &Path,
        out: &mut Vec<PathBuf>,
    ) -> Result<(), WriteError> {
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            generate(sub, section, dir, out)?;
        }
        let man = clap_mangen::Man::new(cmd).section(section);
        let path = dir.join(man.get_filename());
        let written = man.generate_to(dir).map_err(|source| WriteError {
            path: path.clone(),
            source,
        })?;
        out.push(written);
        Ok(())
    }
    std::fs::create_dir_all(dir).map_err(|source| WriteError {
        path: dir.to_owned(),
        source,
    })?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    let mut out = Vec::new();
    generate(cmd, section, dir, &mut out)?;
    Ok(out)
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
        let mut names: Vec<String> = write_man_pages(tool(), "8", dir.path())
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
    fn an_unwritable_directory_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let e = write_man_pages(tool(), "1", &file.join("man")).unwrap_err();
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
