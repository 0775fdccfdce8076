//! Arbitrary bytes through the line splitter and the pointer-file reader: no panic, and
//! the splitter's invariants (the same entry points as the fuzz targets in `fuzz/`).

mod common;

use std::fs;
use std::sync::Arc;

use common::*;
use mongoose_core::{SourceOutput, SourceState};
use mongoose_delivery::SourceDriver;
use mongoose_source_file::pointer::{PointerRecord, MAX_FINGERPRINT_BYTES};
use mongoose_source_file::split::{decode_line, split_lines};
use mongoose_source_file::{FileEventSource, FileSourceConfig, Line, ReadStrategy};
use proptest::prelude::*;

fn line_bytes() -> impl Strategy<Value = Vec<u8>> {
    // mostly terminators and a few other bytes, so lines are short and every
    // terminator combination occurs
    proptest::collection::vec(
        prop_oneof![
            3 => Just(b'\n'),
            3 => Just(b'\r'),
            6 => any::<u8>(),
        ],
        0..200,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    // book: guarantees/epochs-and-identity.md: positions strictly increase and, for a once read,
    // the lines and the unterminated rest account for every byte
    #[test]
    fn the_splitter_accounts_for_every_byte(bytes in line_bytes(), once in any::<bool>()) {
        let split = split_lines(&bytes, once);
        let mut previous_end = 0usize;
        let mut consumed = 0usize;
        for &(start, text_end, end) in &split.lines {
            prop_assert_eq!(start, previous_end);
            prop_assert!(end > previous_end, "positions strictly increase");
            prop_assert!(text_end < end && end - text_end <= 2);
            prop_assert!(!bytes[start..text_end].contains(&b'\n'));
            prop_assert!(!bytes[start..text_end].contains(&b'\r'));
            let _ = decode_line(&bytes[start..text_end]);
            consumed += end - start;
            previous_end = end;
        }
        prop_assert_eq!(consumed + split.rest, bytes.len());
        if once {
            // a once read leaves no terminator behind
            prop_assert!(!bytes[previous_end..].contains(&b'\r'));
        }
        prop_assert!(!bytes[previous_end..].contains(&b'\n'));
    }

    // the pointer-file reader never panics and repairs what it cannot use
    #[test]
    fn the_pointer_reader_takes_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..1100)) {
        let decoded = PointerRecord::decode(&bytes);
        prop_assert!(decoded.record.fingerprint_length <= MAX_FINGERPRINT_BYTES);
        prop_assert!(decoded.record.offset <= i64::MAX as u64);
        if bytes.len() < 8 {
            prop_assert_eq!(decoded.record.offset, 0);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    // the source splits across read buffers of any size exactly like the whole-input
    // splitter: the same lines, the same positions, the same unterminated count
    #[test]
    fn a_once_read_through_small_buffers_matches_the_whole_input_split(
        bytes in line_bytes(),
        buffer in 1usize..16,
    ) {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("input.bin");
        fs::write(&path, &bytes).expect("write");
        let output = RecordingOutput::new();
        let erased: Arc<dyn SourceOutput<Line, u64>> = output.clone();
        let mut config = FileSourceConfig::new("lines", &path, ReadStrategy::OnceEarliest);
        config.read_buffer_bytes = buffer;
        config.max_bytes_per_cycle = buffer;
        let mut source = FileEventSource::new(config, Ok::<Line, String>, erased);
        SourceDriver::start_source(&mut source, &output).expect("start");
        drive_until(&mut source, &output, || output.last_state() == Some(SourceState::EndOfStream));
        let expected = split_lines(&bytes, true);
        let positions: Vec<u64> = expected.lines.iter().map(|&(_, _, end)| end as u64).collect();
        // the bytes as they are, never decoded: a line that is not UTF-8 is kept
        let lines: Vec<&[u8]> = expected
            .lines
            .iter()
            .map(|&(start, text_end, _)| &bytes[start..text_end])
            .collect();
        let items = output.items();
        let read: Vec<&[u8]> = items.iter().map(Line::as_bytes).collect();
        prop_assert_eq!(output.positions(), positions);
        prop_assert_eq!(read, lines);
        prop_assert_eq!(output.unterminated(), Some(expected.rest as u64));
    }
}
