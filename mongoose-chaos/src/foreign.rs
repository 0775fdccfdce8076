//! "Another run's file": the state of a second, short run of the same workload over
//! another input, made once per harness folder and copied in place by a `foreign`
//! damage.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::process::code_of;
use crate::scenario::{Options, Scenario, StateFile, Step};
use crate::steps::last_error;
use crate::world::World;

/// The path of `what` in a finished run of `world`'s workload over other lines
/// (made the first time it is asked for, beside `world`'s folder).
///
/// # Errors
/// The other run could not be made.
pub fn foreign_state(world: &World, what: StateFile) -> Result<PathBuf, String> {
    let scenario = &world.scenario;
    let parent = world
        .dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = parent.join(format!(
        "foreign-{}",
        scenario.label().replace([' ', '>', '-'], "_")
    ));
    // the marker names the layout (state in the data folder, pointers that name their
    // owner): another run's folder from a harness of an earlier layout (its state
    // beside the files, or pointers without an owner) is made again
    let ready = dir.join("ready-pointer-owner");
    if !ready.exists() {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|error| format!("cannot remove {}: {error}", dir.display()))?;
        }
        let other = Scenario {
            seed: scenario.seed.wrapping_add(1_000_003),
            family: scenario.family.clone(),
            workload: scenario.workload,
            source: scenario.source,
            sink: scenario.sink,
            writers: scenario.writers,
            options: Options {
                output_tmpfs_kib: None,
                state_tmpfs_kib: None,
                ..scenario.options.clone()
            },
            steps: Vec::new(),
        };
        let mut foreign = World::create(other, world.bins.clone(), &dir)?;
        foreign.step(&Step::Append {
            lines: 700,
            stream: 0,
            bytes: None,
        })?;
        foreign.heal()?;
        settle_once(&mut foreign, what)?;
        drop(foreign);
        // only a run that settled and exited 0 is another run's state: a marker on a
        // failed one (its admin port taken by another harness) made every later seed of
        // this workload fail with "the other run has no ..." (soak of mixed-consumers,
        // two harnesses side by side)
        std::fs::write(&ready, b"").map_err(|error| error.to_string())?;
    }
    // the same relative path in the other run's folder (its own newest outbox segment)
    let path = world.state_path(what);
    let relative = path
        .strip_prefix(&world.dir)
        .map_err(|_| format!("{} is not in the scenario's folder", path.display()))?;
    let foreign = if what == StateFile::LedgerOutbox {
        let outbox = dir.join("state/outbox");
        let mut segments: Vec<PathBuf> = std::fs::read_dir(&outbox)
            .map_err(|error| format!("cannot list {}: {error}", outbox.display()))?
            .filter_map(|entry| entry.ok().map(|entry| entry.path()))
            .filter(|path| path.is_file())
            .collect();
        segments.sort();
        segments.pop().unwrap_or(outbox)
    } else if let Ok(inside) = relative.strip_prefix("data") {
        // the data folder's state folders are keyed by the absolute path: the other
        // run's is found by its feed's or sink's name
        let mut parts = inside.components();
        let (Some(kind), Some(key)) = (parts.next(), parts.next()) else {
            return Err(format!("{} is not a state folder's file", path.display()));
        };
        let key = key.as_os_str().to_string_lossy();
        let name = key.rsplit_once('-').map_or(key.as_ref(), |(name, _)| name);
        state_folder_in(&dir, &kind.as_os_str().to_string_lossy(), name).join(parts.as_path())
    } else {
        dir.join(relative)
    };
    if foreign.exists() {
        Ok(foreign)
    } else {
        Err(format!(
            "the other run has no {what:?} at {}",
            foreign.display()
        ))
    }
}

/// Runs the other run's server to its settled exit (0), starting it again on another
/// admin port when one was taken between the pick and the start (a few tries).
///
/// # Errors
/// It did not settle in 60 s, or exited otherwise than 0 (what its log said last).
fn settle_once(foreign: &mut World, what: StateFile) -> Result<(), String> {
    const TRIES: u32 = 5;
    for _ in 0..TRIES {
        foreign.start_server(true)?;
        let ended = foreign
            .server
            .as_mut()
            .and_then(|server| server.wait_for(Duration::from_secs(60)));
        foreign.server = None;
        let Some(status) = ended else {
            return Err(format!(
                "the other run for a foreign {what:?} did not settle in 60 s (in {})",
                foreign.dir.display()
            ));
        };
        let code = code_of(status);
        if code == 0 {
            return Ok(());
        }
        let said = last_error(&foreign.server_log_of_run());
        if code == 2 && said.contains("for the admin API (Address already in use") {
            foreign
                .move_admin_port()
                .map_err(|error| format!("the other run: {error}"))?;
            continue;
        }
        return Err(format!(
            "the other run for a foreign {what:?} exited {code} (in {}): {said}",
            foreign.dir.display()
        ));
    }
    Err(format!(
        "the other run for a foreign {what:?} found no free admin port in {TRIES} tries (in {})",
        foreign.dir.display()
    ))
}

/// The state folder the server keeps for the feed or sink `name` in the data folder of
/// the scenario folder `dir`: `data/<kind>/<name>-<key>` (`kind`: `feeds` or `sinks`),
/// found by its name (a scenario has one feed and its sinks have distinct names); a
/// path that does not exist before the server made it.
pub fn state_folder_in(dir: &Path, kind: &str, name: &str) -> PathBuf {
    let parent = dir.join("data").join(kind);
    std::fs::read_dir(&parent)
        .ok()
        .and_then(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .find(|entry| {
                    entry
                        .rsplit_once('-')
                        .is_some_and(|(found, _)| found == name)
                })
        })
        .map_or_else(
            || parent.join(format!("{name}-none")),
            |found| parent.join(found),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{SinkKind, SourceKind, Workload};
    use crate::world::{Binaries, Launcher};

    /// The other run's server exits 1 at once (`false` stands for a binary that could
    /// not start): no "ready" marker is left for the next seed of the workload, and the
    /// error says how the other run ended.
    #[test]
    fn another_run_that_failed_is_never_taken_for_ready() {
        let dir = tempfile::tempdir().expect("a folder");
        let scenario = Scenario {
            seed: 11,
            family: "mixed-consumers".to_owned(),
            workload: Workload::Forward,
            source: SourceKind::File,
            sink: SinkKind::File,
            writers: 1,
            options: Options::default(),
            steps: Vec::new(),
        };
        let bins = Binaries {
            mongoose: PathBuf::from("false"),
            plugin_dir: dir.path().join("no-plugins"),
            peer: Launcher {
                program: dir.path().join("no-peer"),
                args: Vec::new(),
            },
        };
        let world = World::create(scenario, bins, &dir.path().join("run")).expect("a world");
        let error = foreign_state(&world, StateFile::Pointer).expect_err("the other run failed");
        assert!(
            error.contains("exited 1"),
            "the error names the other run's exit: {error}"
        );
        let marked: Vec<_> = std::fs::read_dir(dir.path())
            .expect("the harness folder")
            .filter_map(Result::ok)
            .filter(|entry| entry.path().join("ready-pointer-owner").exists())
            .map(|entry| entry.path())
            .collect();
        assert!(
            marked.is_empty(),
            "a failed other run was marked ready: {marked:?}"
        );
    }
}
