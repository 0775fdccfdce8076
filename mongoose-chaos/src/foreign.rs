//! "Another run's file": the state of a second, short run of the same workload over
//! another input, made once per harness folder and copied in place by a `foreign`
//! damage.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::scenario::{Options, Scenario, StateFile, Step};
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
        foreign.start_server(true)?;
        let ended = foreign
            .server
            .as_mut()
            .and_then(|server| server.wait_for(Duration::from_secs(60)));
        if ended.is_none() {
            return Err(format!(
                "the other run for a foreign {what:?} did not settle in 60 s (in {})",
                dir.display()
            ));
        }
        foreign.server = None;
        drop(foreign);
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
