//! The line splitter takes any bytes: no panic, positions strictly increase, and a
//! once read accounts for every byte.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mongoose_source_file::split::{decode_line, split_lines};

fuzz_target!(|bytes: &[u8]| {
    for once in [false, true] {
        let split = split_lines(bytes, once);
        let mut previous_end = 0;
        for &(start, text_end, end) in &split.lines {
            assert_eq!(start, previous_end);
            assert!(text_end < end && end > previous_end);
            let _ = decode_line(&bytes[start..text_end]);
            previous_end = end;
        }
        assert_eq!(previous_end + split.rest, bytes.len());
    }
});
