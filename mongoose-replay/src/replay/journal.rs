//! The journal of a recording (`journal.replay`): the items of journalled feeds, one
//! stream per feed, which a replay looks up by feed and sequence for `Indexed` entries.

use std::collections::HashMap;
use std::path::Path;

use crate::entry::Entry;
use crate::key::parse_stream_key;
use crate::store::Recording;

/// Journalled items by (feed, sequence).
pub(super) type Journal = HashMap<(String, u64), Vec<u8>>;

/// The journal's items, and why it is incomplete (empty when it is complete).
pub(super) fn read_journal(path: &Path) -> Result<(Journal, Vec<String>), crate::ReplayError> {
    let recording = Recording::read(path)?;
    let incomplete = recording
        .incomplete()
        .iter()
        .map(ToString::to_string)
        .collect();
    let mut items = HashMap::new();
    for stream in recording.streams() {
        let (feed, _) = parse_stream_key(stream.key())?;
        for entry in stream.entries() {
            if let Entry::Inline { payload, route, .. } = entry {
                if let Ok(sequence) = route.parse::<u64>() {
                    items.insert((feed.clone(), sequence), payload.clone());
                }
            }
        }
    }
    Ok((items, incomplete))
}
