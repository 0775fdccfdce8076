//! The fixed set CI runs: seeds and kept schedules (`seeds.toml`), each either expected
//! to pass or marked with the known hole it still finds.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::scenario::Scenario;

/// `seeds.toml`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedList {
    /// Seeds of generated schedules.
    #[serde(default)]
    pub seed: Vec<SeedEntry>,
    /// Kept schedules (minimised failing seeds), files of `schedules/`.
    #[serde(default)]
    pub schedule: Vec<ScheduleEntry>,
}

/// One seed of the set.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SeedEntry {
    /// The seed.
    pub seed: u64,
    /// Its family (required: a seed's family by number changes when families are
    /// added).
    pub family: String,
    /// What it covers.
    #[serde(default)]
    pub covers: String,
    /// The open hole it finds (the issue and item): it may fail, and CI says so.
    #[serde(default)]
    pub known: Option<String>,
    /// The hole it found before that hole's fix landed: it must pass, as any seed.
    #[serde(default)]
    pub fixed: Option<String>,
}

/// One kept schedule of the set.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleEntry {
    /// Its file, in `schedules/`.
    pub file: String,
    /// The open hole it finds.
    #[serde(default)]
    pub known: Option<String>,
}

/// One entry of the set, ready to run.
#[derive(Clone, Debug)]
pub struct Planned {
    /// `seed N` or the schedule's file name.
    pub name: String,
    /// The scenario.
    pub scenario: Scenario,
    /// The open hole it finds.
    pub known: Option<String>,
}

/// The crate's folder (where `seeds.toml` and `schedules/` are).
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Reads a schedule file.
///
/// # Errors
/// It cannot be read or is not a schedule.
pub fn read_schedule(path: &Path) -> Result<Scenario, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    Scenario::from_toml(&text).map_err(|error| format!("{}: {error}", path.display()))
}

/// The set in `seeds.toml` of `dir`, each entry ready to run.
///
/// # Errors
/// The list or a schedule cannot be read.
pub fn planned(dir: &Path) -> Result<Vec<Planned>, String> {
    let path = dir.join("seeds.toml");
    let text = std::fs::read_to_string(&path)
        .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
    let list: SeedList =
        toml::from_str(&text).map_err(|error| format!("{}: {error}", path.display()))?;
    let mut planned: Vec<Planned> = Vec::new();
    for entry in list.seed {
        planned.push(Planned {
            name: format!("seed {} ({})", entry.seed, entry.family),
            scenario: crate::generate_in(&entry.family, entry.seed)
                .map_err(|error| format!("{}: seed {}: {error}", path.display(), entry.seed))?,
            known: entry.known,
        });
    }
    for entry in list.schedule {
        planned.push(Planned {
            name: entry.file.clone(),
            scenario: read_schedule(&dir.join("schedules").join(&entry.file))?,
            known: entry.known,
        });
    }
    Ok(planned)
}
