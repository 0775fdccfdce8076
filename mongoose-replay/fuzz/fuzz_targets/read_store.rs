//! The replay store reader on arbitrary bytes: it returns a recording or an error, and
//! never panics. Run with `cargo +nightly fuzz run read_store` from mongoose-replay/.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mongoose_replay::{Recording, HEADER_LEN, MAGIC};

fuzz_target!(|data: &[u8]| {
    let _ = Recording::from_bytes(data);
    // also behind a valid head, so most inputs reach the frame parser
    let mut store = MAGIC.to_vec();
    store.extend_from_slice(&mongoose_replay::FORMAT_VERSION.to_le_bytes());
    debug_assert_eq!(store.len(), HEADER_LEN);
    store.extend_from_slice(data);
    if let Ok(recording) = Recording::from_bytes(&store) {
        for stream in recording.streams() {
            for entry in stream.entries() {
                let _ = (entry.kind(), entry.delivery(), entry.clock());
            }
        }
        let _ = recording.complete();
    }
});
