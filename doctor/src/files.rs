//! Reading what doctor checks: slurm.conf and gres.conf lines, and the plugin's ELF file.

use std::path::{Path, PathBuf};

/// One line of a Slurm config file, with where it came from.
#[derive(Debug, Clone)]
pub struct ConfLine {
    /// The file it is in (an `Include`d one, maybe).
    pub file: PathBuf,
    /// 1-based line number.
    pub number: usize,
    /// The text, without the newline.
    pub text: String,
}

/// Includes deeper than this are refused (Slurm's own limit is similar; it stops loops).
const MAX_INCLUDE_DEPTH: usize = 8;

/// A Slurm configuration file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `Include` lines nest too deep (a loop, most likely).
    #[error("{}: Include nested deeper than {MAX_INCLUDE_DEPTH}", path.display())]
    TooDeep {
        /// The file the limit was reached at.
        path: PathBuf,
    },
    /// An included file could not be read.
    #[error("{inner} (included from {}:{line})", from.display())]
    Included {
        /// What went wrong in the included file.
        inner: Box<ConfError>,
        /// The including file.
        from: PathBuf,
        /// Its `Include` line.
        line: usize,
    },
}

/// The lines of a slurm.conf or gres.conf with `Include FILE` lines replaced by the
/// file's lines (a relative FILE is taken from the including file's directory).
pub fn read_lines(path: &Path) -> Result<Vec<ConfLine>, ConfError> {
    let mut out = Vec::new();
    read_into(path, 0, &mut out)?;
    Ok(out)
}

fn read_into(path: &Path, depth: usize, out: &mut Vec<ConfLine>) -> Result<(), ConfError> {
    if depth > MAX_INCLUDE_DEPTH {
        return Err(ConfError::TooDeep {
            path: path.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(|source| ConfError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    for (n, line) in text.lines().enumerate() {
        let bare = line.split('#').next().unwrap_or("").trim();
        let include = bare
            .split_once(char::is_whitespace)
            .filter(|(k, _)| k.eq_ignore_ascii_case("include"))
            .map(|(_, f)| f.trim());
        match include {
            Some(file) => {
                let file = Path::new(file);
                let file = match path.parent() {
                    Some(dir) if file.is_relative() => dir.join(file),
                    _ => file.to_path_buf(),
                };
                read_into(&file, depth + 1, out).map_err(|e| ConfError::Included {
                    inner: Box::new(e),
                    from: path.to_path_buf(),
                    line: n + 1,
                })?;
            }
            None => out.push(ConfLine {
                file: path.to_path_buf(),
                number: n + 1,
                text: line.to_string(),
            }),
        }
    }
    Ok(())
}

use object::{Object, ObjectSection, ObjectSymbol};

/// slurm.conf as key → value (keys case-insensitive, the last setting wins, `Include`
/// files read in place).
#[derive(Debug, Clone, Default)]
pub struct SlurmConf {
    entries: Vec<(String, String)>,
}

impl SlurmConf {
    /// Reads a slurm.conf.
    pub fn read(path: &Path) -> Result<SlurmConf, ConfError> {
        let text: Vec<String> = read_lines(path)?.into_iter().map(|l| l.text).collect();
        Ok(SlurmConf::parse(&text.join("\n")))
    }

    /// Parses slurm.conf text.
    pub fn parse(text: &str) -> SlurmConf {
        let entries = text
            .lines()
            .map(|l| l.split('#').next().unwrap_or("").trim())
            // Node and partition lines hold several pairs; their first key names them.
            .filter(|l| {
                let lower = l.to_ascii_lowercase();
                !lower.starts_with("nodename=") && !lower.starts_with("partitionname=")
            })
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        SlurmConf { entries }
    }

    /// The value of `key` (case-insensitive).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v.as_str())
    }
}

/// The `KEY=VALUE` pairs of one gres.conf line.
pub(crate) fn key_values(line: &str) -> Vec<(String, String)> {
    line.split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Expands Slurm's device ranges: `/dev/nvidia[0-2,5]` → nvidia0, nvidia1, nvidia2, nvidia5;
/// a comma list of paths is split.
pub fn expand_brackets(spec: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    // Split on commas outside brackets.
    let mut depth = 0;
    let mut start = 0;
    let mut parts = Vec::new();
    for (i, ch) in spec.char_indices() {
        match ch {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&spec[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&spec[start..]);
    for part in parts {
        let Some(open) = part.find('[') else {
            out.push(part.to_string());
            continue;
        };
        let close = part[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| format!("`{part}` has an unclosed ["))?;
        let (head, inner, tail) = (&part[..open], &part[open + 1..close], &part[close + 1..]);
        for item in inner.split(',') {
            let (a, b) = item.split_once('-').unwrap_or((item, item));
            let lo: u32 = a
                .parse()
                .map_err(|_| format!("`{item}` in `{part}` is not a number or range"))?;
            let hi: u32 = b
                .parse()
                .map_err(|_| format!("`{item}` in `{part}` is not a number or range"))?;
            if hi < lo || hi - lo > 4096 {
                return Err(format!("range `{item}` in `{part}` is backwards or too long"));
            }
            // Keep the width of zero-padded ranges (`[00-03]`).
            let width = a.len();
            for n in lo..=hi {
                out.push(format!("{head}{n:0width$}{tail}"));
            }
        }
    }
    Ok(out)
}

/// Why a plugin file's `plugin_version` could not be read (the file is named by the caller).
#[derive(Debug, thiserror::Error)]
pub enum PluginFileError {
    /// The file could not be read.
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    /// The file is not an object file `object` can parse.
    #[error("not a shared object: {0}")]
    NotObject(#[source] object::Error),
    /// No `plugin_version` symbol.
    #[error("exports no plugin_version: not a Slurm plugin")]
    NoSymbol,
    /// The symbol is there but its value cannot be read.
    #[error("plugin_version {0}")]
    Unreadable(&'static str),
}

/// The `plugin_version` a job_submit plugin exports, read from its ELF file without
/// loading it (loading would need slurmctld's symbols).
pub fn plugin_version(so: &Path) -> Result<u32, PluginFileError> {
    use PluginFileError::Unreadable;
    let data = std::fs::read(so).map_err(PluginFileError::Read)?;
    let file = object::File::parse(&*data).map_err(PluginFileError::NotObject)?;
    let sym = file
        .dynamic_symbols()
        .chain(file.symbols())
        .find(|s| s.name() == Ok("plugin_version"))
        .ok_or(PluginFileError::NoSymbol)?;
    let index = sym
        .section_index()
        .ok_or(Unreadable("is not defined in the file"))?;
    let section = file
        .section_by_index(index)
        .map_err(|_| Unreadable("names a section the file does not have"))?;
    let bytes = section
        .data_range(sym.address(), 4)
        .map_err(|_| Unreadable("lies in a section whose data cannot be read"))?
        .ok_or(Unreadable("lies outside its section"))?;
    let raw: [u8; 4] = bytes.try_into().map_err(|_| Unreadable("is not 4 bytes"))?;
    Ok(if file.is_little_endian() {
        u32::from_le_bytes(raw)
    } else {
        u32::from_be_bytes(raw)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_ranges_expand_like_slurm() {
        assert_eq!(
            expand_brackets("/d/nvidia[0-2,5]").unwrap(),
            ["/d/nvidia0", "/d/nvidia1", "/d/nvidia2", "/d/nvidia5"]
        );
        assert_eq!(expand_brackets("/a,/b[01-02]").unwrap(), ["/a", "/b01", "/b02"]);
        assert!(expand_brackets("/d/nvidia[2-0]").is_err());
        assert!(expand_brackets("/d/nvidia[0-").is_err());
    }

    #[test]
    fn slurm_conf_keys_are_case_insensitive_and_node_lines_ignored() {
        let c = SlurmConf::parse(
            "jobsubmitplugins=lua # old\nJobSubmitPlugins=lua,smartmig\nNodeName=n1 PluginDir=/x\n",
        );
        assert_eq!(c.get("JOBSUBMITPLUGINS"), Some("lua,smartmig"));
        assert_eq!(c.get("PluginDir"), None);
    }

    #[test]
    fn include_lines_are_read_in_place_and_a_loop_is_refused() {
        let d = std::env::temp_dir().join(format!("smartmig-include-{}", std::process::id()));
        std::fs::create_dir_all(d.join("nodes")).unwrap();
        std::fs::write(
            d.join("gres.conf"),
            "AutoDetect=off\nInclude nodes/n1.conf\nName=gpu Type=x\n",
        )
        .unwrap();
        std::fs::write(
            d.join("nodes/n1.conf"),
            "# n1\nNodeName=n1 Name=gpu Type=1g.5gb File=/dev/x\n",
        )
        .unwrap();
        let lines = read_lines(&d.join("gres.conf")).unwrap();
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "AutoDetect=off",
                "# n1",
                "NodeName=n1 Name=gpu Type=1g.5gb File=/dev/x",
                "Name=gpu Type=x"
            ]
        );
        assert_eq!(
            (lines[2].file.clone(), lines[2].number),
            (d.join("nodes/n1.conf"), 2)
        );
        std::fs::write(d.join("loop.conf"), "Include loop.conf\n").unwrap();
        let e = read_lines(&d.join("loop.conf")).unwrap_err().to_string();
        assert!(
            e.contains("nested deeper") && e.contains("(included from "),
            "{e}"
        );
        std::fs::remove_dir_all(&d).ok();
    }

    #[test]
    fn a_file_that_is_no_elf_is_refused_with_the_reason() {
        let p = std::env::temp_dir().join(format!("smartmig-notelf-{}", std::process::id()));
        std::fs::write(&p, b"hello").unwrap();
        let e = plugin_version(&p).unwrap_err();
        std::fs::remove_file(&p).unwrap();
        assert!(matches!(e, PluginFileError::NotObject(_)), "{e}");
        assert!(e.to_string().starts_with("not a shared object"), "{e}");
    }
}
