//! The harness's truth about rotations made before the server caught up, on real files
//! renamed in a real folder: which lines a run may miss, provided it reports them.

use mongoose_chaos::scenario::{RotateMode, Step};
use mongoose_chaos::truth::Expect;

mod common;

/// Chaos seed 1796199420421 (rotation: ledger file->tcp, rename rotations): three
/// renames while the server was still reading the first file. Its restart finished the
/// pointer's file (`input.log.1`) and reported `input.log.2` and `input.log.3`, written
/// after it, as possible losses (exit 3), as documented. The harness took `input.log.1`
/// and `input.log.2` (the earlier rotation's file at each second rotation) for the
/// middle files, but the rotated files are numbered up, not shifted: the file each such
/// rotation makes is a middle one, so the 30,006 lines of `input.log.3` were called
/// lost though their loss was reported.
#[test]
fn a_file_rotated_away_while_an_earlier_rotation_is_unsettled_may_be_missing_if_reported() {
    let scratch = tempfile::tempdir().expect("scratch");
    // the seed's scenario: a ledger on a file (its steps are not run here); no server,
    // journal or archive here: nothing runs the binary
    let mut world = common::seed_world(
        "rotation",
        1_796_199_420_421,
        scratch.path().join("no-mongoose"),
        scratch.path(),
    );
    let append = |lines| Step::Append {
        lines,
        stream: 0,
        bytes: None,
    };
    let rotate = Step::Rotate {
        mode: RotateMode::Rename,
        stream: 0,
    };
    for step in [
        append(100),
        rotate.clone(),
        append(200),
        rotate.clone(),
        append(300),
        rotate,
        append(400),
    ] {
        world.step(&step).expect("the step runs");
    }

    // written after the pointer's file (`input.log.1`: the server read into it before
    // it was rotated, and finds it by its key) and rotated away before the server came
    // to them: a restart does not read them, and reports them as a possible loss
    let middle = [world.path("in/input.log.2"), world.path("in/input.log.3")];
    let mut wrong = Vec::new();
    for file in &world.streams[0].files {
        if !middle.contains(&file.path) {
            continue;
        }
        for &index in &file.lines {
            let expect = world.truth.lines[index].expect;
            if expect != (Expect::Maybe { report: true }) {
                wrong.push(format!(
                    "line {index} of {}: {expect:?}",
                    file.path.display()
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} lines of the middle files may not be missing even when reported (first: {}); events:\n{}",
        wrong.len(),
        wrong.first().map_or("", String::as_str),
        world.events.join("\n")
    );
}
