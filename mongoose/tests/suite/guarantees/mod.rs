//! The guarantees (book: guarantees/commit-after-processing.md,
//! guarantees/where-a-feed-resumes.md, guarantees/epochs-and-identity.md,
//! guarantees/consumer-side-positions.md, guarantees/status.md and crashes/measured.md):
//! nothing lost and nothing applied twice across SIGKILLs, rotations, globs, full
//! disks and lost pointers; a run that cannot go on ends with its reason.

mod failures;
mod glob;
mod kill;
mod lost_pointer;
mod rotation;
mod server;
mod stalled_runs;
mod startup_failures;
