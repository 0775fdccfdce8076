//! The pointer-file reader takes any bytes: no panic, damaged fields repaired.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mongoose_source_file::pointer::{PointerRecord, MAX_FINGERPRINT_BYTES, POINTER_FILE_SIZE};

fuzz_target!(|bytes: &[u8]| {
    let decoded = PointerRecord::decode(bytes);
    assert!(decoded.record.fingerprint_length <= MAX_FINGERPRINT_BYTES);
    assert!(decoded.record.offset <= i64::MAX as u64);
    // what it decodes encodes back to the same fields
    let mut page = [0u8; POINTER_FILE_SIZE];
    decoded.record.encode_into(&mut page);
    assert_eq!(PointerRecord::decode(&page).record, decoded.record);
});
