//! The probe catalog: per server family/version range, the logical probes
//! (`innodb.mutex.wait`, …) and the symbol patterns that implement them.
//! The files live in `probes/` and are embedded at build time.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use wildmatch::WildMatch;

use crate::server::{Family, ServerInfo, Version};

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    #[error("cannot read catalog {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("catalog {file} is malformed: {source}")]
    Parse {
        file: String,
        source: Box<toml::de::Error>,
    },
    #[error("catalog {file} is invalid: {reason}")]
    Invalid { file: String, reason: String },
    #[error("unknown probe `{name}`; this catalog ({file}) has: {known}")]
    UnknownProbe {
        name: String,
        file: String,
        known: String,
    },
    #[error(
        "no catalog covers {server}; name functions with --probe PATTERN or supply --catalog FILE"
    )]
    NoCatalog { server: String },
}

/// How a probe measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Measure {
    /// Entry + return: calls, wait time, histogram, stacks weighted by time.
    Latency,
    /// Entry only: calls and stacks.
    Count,
}

/// How often a probe fires, which decides whether it is on by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CostClass {
    /// Every operation takes this path: opt-in.
    Hot,
    /// Taken only when a latch is busy: on by default.
    Contended,
    /// A few times per transaction at most: on by default.
    Rare,
    /// Ad-hoc `--probe`: the user asked for it explicitly.
    Unknown,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbeSpec {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub symbols: Vec<String>,
    pub measure: Measure,
    pub cost: CostClass,
}

impl ProbeSpec {
    pub fn is_default(&self) -> bool {
        matches!(self.cost, CostClass::Contended | CostClass::Rare)
    }

    /// A probe for a user-supplied pattern, outside any catalog.
    pub fn ad_hoc(pattern: &str) -> Self {
        Self {
            name: pattern.to_string(),
            description: "ad-hoc probe (--probe)".into(),
            symbols: vec![pattern.to_string()],
            measure: Measure::Latency,
            cost: CostClass::Unknown,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerRange {
    pub family: Family,
    /// Inclusive `major.minor` bounds.
    pub min_version: String,
    pub max_version: String,
    /// Versions whose real binaries these symbols were checked against.
    #[serde(default)]
    pub verified: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogFile {
    #[serde(skip)]
    pub file: String,
    pub server: ServerRange,
    #[serde(rename = "probe")]
    pub probes: Vec<ProbeSpec>,
}

impl CatalogFile {
    pub fn parse(file: &str, text: &str) -> Result<Self, CatalogError> {
        let mut parsed: CatalogFile = toml::from_str(text).map_err(|e| CatalogError::Parse {
            file: file.into(),
            source: Box::new(e),
        })?;
        parsed.file = file.to_string();
        parsed.validate()?;
        Ok(parsed)
    }

    fn validate(&self) -> Result<(), CatalogError> {
        let invalid = |reason: String| {
            Err(CatalogError::Invalid {
                file: self.file.clone(),
                reason,
            })
        };
        for bound in [&self.server.min_version, &self.server.max_version] {
            if Version::parse(bound).is_none() {
                return invalid(format!("version bound `{bound}` is not MAJOR.MINOR"));
            }
        }
        let mut names = std::collections::HashSet::new();
        for p in &self.probes {
            if p.name.is_empty()
                || !p
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            {
                return invalid(format!(
                    "probe name `{}` must be non-empty [A-Za-z0-9._-]",
                    p.name
                ));
            }
            if !names.insert(&p.name) {
                return invalid(format!("probe `{}` is defined twice", p.name));
            }
            if p.symbols.is_empty()
                || p.symbols
                    .iter()
                    .any(|s| s.trim().is_empty() || s.trim() == "*")
            {
                return invalid(format!(
                    "probe `{}` needs specific symbol patterns (not empty, not `*`)",
                    p.name
                ));
            }
        }
        Ok(())
    }

    pub fn covers(&self, server: &ServerInfo) -> bool {
        let (Some(v), Some(lo), Some(hi)) = (
            server.version,
            Version::parse(&self.server.min_version),
            Version::parse(&self.server.max_version),
        ) else {
            return false;
        };
        let mm = (v.major, v.minor);
        self.server.family == server.family
            && (lo.major, lo.minor) <= mm
            && mm <= (hi.major, hi.minor)
    }

    /// A comma list of `default` (the cheap probes), `all`, names and
    /// globs (`innodb.redo.*`), e.g. `default,innodb.mutex.enter`.
    pub fn select(&self, selection: &str) -> Result<Vec<ProbeSpec>, CatalogError> {
        let mut out: Vec<ProbeSpec> = Vec::new();
        for want in selection
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            let hits: Vec<&ProbeSpec> = match want {
                "default" => self.probes.iter().filter(|p| p.is_default()).collect(),
                "all" => self.probes.iter().collect(),
                glob => {
                    let m = WildMatch::new(glob);
                    self.probes.iter().filter(|p| m.matches(&p.name)).collect()
                }
            };
            if hits.is_empty() {
                return Err(CatalogError::UnknownProbe {
                    name: want.into(),
                    file: self.file.clone(),
                    known: self
                        .probes
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
            for h in hits {
                if !out.iter().any(|p| p.name == h.name) {
                    out.push(h.clone());
                }
            }
        }
        Ok(out)
    }
}

const BUILTIN: &[(&str, &str)] = &[
    (
        "probes/mysql-5.6.toml",
        include_str!("../../probes/mysql-5.6.toml"),
    ),
    (
        "probes/mysql-8.0.toml",
        include_str!("../../probes/mysql-8.0.toml"),
    ),
    (
        "probes/mariadb-10.2.toml",
        include_str!("../../probes/mariadb-10.2.toml"),
    ),
    (
        "probes/mariadb-10.6.toml",
        include_str!("../../probes/mariadb-10.6.toml"),
    ),
];

#[derive(Debug, Clone)]
pub struct Catalog {
    pub files: Vec<CatalogFile>,
}

impl Catalog {
    pub fn builtin() -> Self {
        let files = BUILTIN
            .iter()
            .map(|(name, text)| {
                CatalogFile::parse(name, text).expect("embedded catalog is validated by tests")
            })
            .collect();
        Self { files }
    }

    /// A user catalog replaces the built-in one entirely.
    pub fn from_path(path: &Path) -> Result<Self, CatalogError> {
        let text = std::fs::read_to_string(path).map_err(|source| CatalogError::Read {
            path: path.into(),
            source,
        })?;
        Ok(Self {
            files: vec![CatalogFile::parse(&path.display().to_string(), &text)?],
        })
    }

    pub fn for_server(&self, server: &ServerInfo) -> Option<&CatalogFile> {
        self.files.iter().find(|f| f.covers(server))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(family: Family, v: &str) -> ServerInfo {
        ServerInfo {
            family,
            version: Version::parse(v),
        }
    }

    #[test]
    fn builtin_catalog_parses_and_covers_the_test_servers() {
        let cat = Catalog::builtin();
        assert_eq!(
            cat.for_server(&server(Family::Mysql, "5.6.24"))
                .unwrap()
                .file,
            "probes/mysql-5.6.toml"
        );
        assert_eq!(
            cat.for_server(&server(Family::Mysql, "8.0.15"))
                .unwrap()
                .file,
            "probes/mysql-8.0.toml"
        );
        assert_eq!(
            cat.for_server(&server(Family::Mariadb, "10.2.11"))
                .unwrap()
                .file,
            "probes/mariadb-10.2.toml"
        );
        assert_eq!(
            cat.for_server(&server(Family::Mariadb, "11.4.5"))
                .unwrap()
                .file,
            "probes/mariadb-10.6.toml"
        );
        assert!(cat.for_server(&server(Family::Mysql, "4.1.0")).is_none());
    }

    #[test]
    fn default_set_excludes_hot_paths() {
        let cat = Catalog::builtin();
        for f in &cat.files {
            let def = f.select("default").unwrap();
            assert!(!def.is_empty(), "{}", f.file);
            assert!(def.iter().all(|p| p.cost != CostClass::Hot));
            assert!(
                f.select("all").unwrap().len() > def.len(),
                "{} has no opt-in probe",
                f.file
            );
        }
    }

    #[test]
    fn selection_by_name_and_glob() {
        let f = &Catalog::builtin().files[2];
        let sel = f.select("innodb.redo.*,innodb.mutex.enter").unwrap();
        let names: Vec<_> = sel.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "innodb.redo.write_up_to",
                "innodb.redo.flush",
                "innodb.mutex.enter"
            ]
        );
        let mixed = f.select("default,innodb.mutex.enter").unwrap();
        assert_eq!(mixed.len(), f.select("default").unwrap().len() + 1);
        let err = f.select("innodb.nope").unwrap_err().to_string();
        assert!(err.contains("innodb.nope") && err.contains("innodb.mutex.enter"));
    }

    #[test]
    fn malformed_files_are_refused_with_the_reason() {
        let bad = |t: &str| CatalogFile::parse("x.toml", t).unwrap_err().to_string();
        assert!(bad("not toml [").contains("malformed"));
        let head = "[server]\nfamily='mysql'\nmin_version='5.6'\nmax_version='5.6'\n";
        assert!(bad(&format!(
            "{head}[[probe]]\nname='a'\nsymbols=['*']\nmeasure='count'\ncost='rare'\n"
        ))
        .contains("specific"));
        assert!(bad(&format!(
            "{head}[[probe]]\nname='a'\nsymbols=['f']\nmeasure='sometimes'\ncost='rare'\n"
        ))
        .contains("malformed"));
        let twice =
            format!("{head}[[probe]]\nname='a'\nsymbols=['f']\nmeasure='count'\ncost='rare'\n");
        assert!(bad(&format!("{twice}{}", &twice[head.len()..])).contains("twice"));
        assert!(
            bad("probe=[]\n[server]\nfamily='mysql'\nmin_version='five'\nmax_version='5.6'\n")
                .contains("MAJOR.MINOR")
        );
    }
}
