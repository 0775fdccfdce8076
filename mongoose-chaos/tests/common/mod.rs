//! What the harness's own tests share: a world made from a seed's scenario, whose steps
//! the test runs itself.

use std::path::{Path, PathBuf};

use mongoose_chaos::world::World;
use mongoose_chaos::{generate_in, Binaries, Launcher};

/// The world of chaos seed `seed`'s scenario in `family` in `scratch/world`, running
/// `mongoose` (plugins in `scratch/plugins`, this package's harness binary as the peer).
pub(crate) fn seed_world(family: &str, seed: u64, mongoose: PathBuf, scratch: &Path) -> World {
    let bins = Binaries {
        mongoose,
        plugin_dir: scratch.join("plugins"),
        peer: Launcher {
            program: PathBuf::from(env!("CARGO_BIN_EXE_mongoose-chaos")),
            args: Vec::new(),
        },
    };
    let scenario = generate_in(family, seed).expect("a family of the harness");
    World::create(scenario, bins, &scratch.join("world")).expect("the scenario's folder")
}
