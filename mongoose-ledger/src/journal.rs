//! The ledger's on-disk formats: the checksummed snapshot, the checksummed journal
//! records, and how damage is told from a torn last record.

use super::LedgerState;
use serde::{Deserialize, Serialize};
use tracing::debug;

/// The snapshot layout this ledger writes: `{"format":2,"crc32":N,"state":STATE}` and a
/// newline, where `N` is the crc32 of the exact bytes of `STATE` (the
/// [`LedgerState`] as compact JSON). Format 1 is a bare [`LedgerState`] without a
/// checksum (read, never written).
const SNAPSHOT_FORMAT: u32 = 2;

/// What comes before the state's bytes in a snapshot with checksum `crc32`.
fn snapshot_prefix(crc32: u32) -> String {
    format!("{{\"format\":{SNAPSHOT_FORMAT},\"crc32\":{crc32},\"state\":")
}

pub(super) fn encode_snapshot(state: &LedgerState) -> std::io::Result<Vec<u8>> {
    let body = serde_json::to_vec(state).map_err(std::io::Error::other)?;
    let mut bytes = snapshot_prefix(crc32fast::hash(&body)).into_bytes();
    bytes.extend_from_slice(&body);
    bytes.extend_from_slice(b"}\n");
    Ok(bytes)
}

/// The fields that tell a snapshot's layout (the others are ignored here).
#[derive(Deserialize)]
struct SnapshotHeader {
    format: Option<u32>,
    crc32: Option<u32>,
}

/// The state in a snapshot, or what is wrong with it (completing "the ledger snapshot
/// PATH ...").
pub(super) fn decode_snapshot(bytes: &[u8]) -> Result<LedgerState, String> {
    let header: SnapshotHeader = serde_json::from_slice(bytes)
        .map_err(|error| format!("is damaged: it is not valid JSON ({error})"))?;
    match (header.format, header.crc32) {
        (None, _) => {
            // format 1, written before snapshots had a checksum: the next one has it
            let state = serde_json::from_slice(bytes).map_err(|error| {
                format!("is damaged: it is not a ledger state ({error})")
            })?;
            debug!("the ledger snapshot has no checksum (format 1); the next snapshot has one");
            Ok(state)
        }
        (Some(SNAPSHOT_FORMAT), Some(crc32)) => {
            let body = bytes
                .strip_prefix(snapshot_prefix(crc32).as_bytes())
                .and_then(|rest| rest.strip_suffix(b"}\n"))
                .ok_or_else(|| {
                    format!("is damaged: it is not laid out as the ledger writes it (format {SNAPSHOT_FORMAT})")
                })?;
            if crc32fast::hash(body) != crc32 {
                return Err(
                    "fails its checksum: it was changed after it was written (a crash never does that: snapshots are renamed into place whole)"
                        .to_owned(),
                );
            }
            serde_json::from_slice(body).map_err(|error| {
                format!("is damaged: its state does not decode although its checksum matches ({error})")
            })
        }
        (Some(SNAPSHOT_FORMAT), None) => Err("is damaged: it has no crc32".to_owned()),
        (Some(format), _) => Err(format!(
            "has format {format}, which this ledger does not read (it reads {SNAPSHOT_FORMAT}, and 1 without a format field): it was written by a newer version, or it is damaged"
        )),
    }
}

/// The length of the first line of `bytes` with its newline, if it has one.
pub(super) fn first_line_length(bytes: &[u8]) -> Option<usize> {
    bytes
        .iter()
        .position(|byte| *byte == b'\n')
        .map(|index| index + 1)
}

/// Whether the journal bytes from a record that fails its checksum to the end are
/// damage (`Some`, completing "record N at byte offset B fails its checksum and ..."),
/// or a torn write (`None`).
///
/// A crash cuts the record being written short: what it leaves has no newline (the
/// newline is a record's last byte, and JSON holds none) and is the journal's end.
/// Anything else (a newline in it, whole records after it, or a whole record whose
/// newline alone is damaged) was changed after it was written.
pub(super) fn journal_damage(rest: &[u8]) -> Option<String> {
    let whole_after = whole_records_in(&rest[1..]);
    if whole_after > 0 {
        let follow = if whole_after == 1 {
            "whole record follows"
        } else {
            "whole records follow"
        };
        return Some(format!(
            "{whole_after} {follow} it: a crash only ever cuts the last record short, so this is damage, not a torn write"
        ));
    }
    let whole_but_damaged = rest.contains(&b'\n')
        || rest.split_last().is_some_and(|(_, body)| {
            let mut terminated = body.to_vec();
            terminated.push(b'\n');
            JournalRecord::decode(&terminated).is_some()
        });
    whole_but_damaged.then(|| {
        "it is the last record but a whole one (it has its newline, or only its newline is damaged): a crash only ever cuts a record short, so this is damage, and the line it saved may already be committed by the feed's pointer (cutting the record off would skip that line)"
            .to_owned()
    })
}

/// How many whole records with a valid checksum start anywhere in `bytes`, at a line
/// start or not (a lost newline merges two records into one line).
pub(super) fn whole_records_in(bytes: &[u8]) -> usize {
    (0..bytes.len())
        .filter(|start| {
            let candidate = &bytes[*start..];
            candidate.len() > 9
                && candidate[8] == b' '
                && candidate[..8].iter().all(u8::is_ascii_hexdigit)
                && first_line_length(candidate)
                    .and_then(|length| JournalRecord::decode(&candidate[..length]))
                    .is_some()
        })
        .count()
}

/// One journal record: what a delivery changed, with the counts and position after it.
/// Records hold absolute values, so replaying a record again changes nothing.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct JournalRecord {
    pub(super) account: Option<(String, i64)>,
    /// Accounts changed by earlier deliveries whose saves failed: a later record
    /// carries them, so a save that succeeds after failed ones never leaves their
    /// changes out while its position says they are applied.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) unsaved: Vec<(String, i64)>,
    pub(super) applied: u64,
    pub(super) rejected: u64,
    /// The lane of `epoch`/`position` (absent: lane 0, as in records written before
    /// lanes).
    #[serde(default, skip_serializing_if = "is_lane_zero")]
    pub(super) lane: u32,
    pub(super) epoch: u64,
    pub(super) position: u64,
    /// The `(lane, epoch, position)` of other lanes changed by earlier deliveries whose
    /// saves failed (as `unsaved` for accounts): their changes are in this record, so
    /// their positions are too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) unsaved_lanes: Vec<(u32, u64, u64)>,
}

fn is_lane_zero(lane: &u32) -> bool {
    *lane == 0
}

impl JournalRecord {
    /// `crc32 (8 hex digits) SPACE json NEWLINE` (the ledger writes its records with
    /// [`encode_record_into`], to the same bytes).
    #[cfg(test)]
    pub(super) fn encode(&self) -> Vec<u8> {
        let mut line = Vec::new();
        encode_record_into(
            &mut line,
            &RecordParts {
                accounts: self
                    .account
                    .iter()
                    .chain(&self.unsaved)
                    .map(|(account, balance)| (account.as_str(), *balance)),
                applied: self.applied,
                rejected: self.rejected,
                lane: self.lane,
                epoch: self.epoch,
                position: self.position,
                unsaved_lanes: self.unsaved_lanes.iter().copied(),
            },
        );
        line
    }

    pub(super) fn decode(line: &[u8]) -> Option<Self> {
        let body = line.strip_suffix(b"\n")?;
        if body.len() < 10 || body[8] != b' ' {
            return None;
        }
        let checksum = u32::from_str_radix(std::str::from_utf8(&body[..8]).ok()?, 16).ok()?;
        let json = &body[9..];
        if crc32fast::hash(json) != checksum {
            return None;
        }
        serde_json::from_slice(json).ok()
    }

    pub(super) fn apply(&self, state: &mut LedgerState) {
        for (account, balance) in self.unsaved.iter().chain(&self.account) {
            set_balance(state, account, *balance);
        }
        state.applied = self.applied;
        state.rejected = self.rejected;
        for (lane, epoch, position) in &self.unsaved_lanes {
            state.set_position(*lane, *epoch, *position);
        }
        state.set_position(self.lane, self.epoch, self.position);
    }
}

/// Sets `account`'s balance, allocating its name only when the state does not hold it
/// yet (a replay sets a known account's balance a million times).
fn set_balance(state: &mut LedgerState, account: &str, balance: i64) {
    match state.balances.get_mut(account) {
        Some(known) => *known = balance,
        None => {
            state.balances.insert(account.to_owned(), balance);
        }
    }
}

/// A journal record borrowed from its line (accounts are never escaped in JSON: the
/// ledger's account names are `[A-Za-z0-9_-]`), for the replay at open.
#[derive(Deserialize)]
struct JournalRecordRef<'a> {
    #[serde(borrow)]
    account: Option<(&'a str, i64)>,
    #[serde(default, borrow)]
    unsaved: Vec<(&'a str, i64)>,
    applied: u64,
    rejected: u64,
    #[serde(default)]
    lane: u32,
    epoch: u64,
    position: u64,
    #[serde(default)]
    unsaved_lanes: Vec<(u32, u64, u64)>,
}

/// Applies the record `line` to `state` as [`JournalRecord::decode`] then
/// [`JournalRecord::apply`] do, without an allocation for an account the state
/// holds; false when `line` is not a whole journal record. For the replay at open: the
/// outbox checked the record's bytes against its own checksum, which covers the line's,
/// so the line's checksum is not computed again.
pub(super) fn replay_into(line: &[u8], state: &mut LedgerState) -> bool {
    let Some(body) = line.strip_suffix(b"\n") else {
        return false;
    };
    if body.len() < 10 || body[8] != b' ' || !body[..8].iter().all(u8::is_ascii_hexdigit) {
        return false;
    }
    let json = &body[9..];
    if let Some(record) = parse_written(json) {
        for (account, balance) in record.unsaved().chain(record.account) {
            set_balance(state, account, balance);
        }
        state.applied = record.applied;
        state.rejected = record.rejected;
        for (lane, epoch, position) in record.unsaved_lanes() {
            state.set_position(lane, epoch, position);
        }
        state.set_position(record.lane, record.epoch, record.position);
        return true;
    }
    // laid out otherwise than this ledger writes (an earlier build's record, or a
    // name JSON escapes): serde's way
    match serde_json::from_slice::<JournalRecordRef<'_>>(json) {
        Ok(record) => {
            for (account, balance) in record.unsaved.iter().chain(&record.account) {
                set_balance(state, account, *balance);
            }
            state.applied = record.applied;
            state.rejected = record.rejected;
            for (lane, epoch, position) in &record.unsaved_lanes {
                state.set_position(*lane, *epoch, *position);
            }
            state.set_position(record.lane, record.epoch, record.position);
            true
        }
        Err(_) => match serde_json::from_slice::<JournalRecord>(json) {
            Ok(record) => {
                record.apply(state);
                true
            }
            Err(_) => false,
        },
    }
}

/// A record as [`encode_record_into`] lays it out, borrowed: its `unsaved` accounts and
/// lanes are kept as their JSON (walked again when applied).
struct Written<'a> {
    account: Option<(&'a str, i64)>,
    unsaved: &'a [u8],
    applied: u64,
    rejected: u64,
    lane: u32,
    epoch: u64,
    position: u64,
    unsaved_lanes: &'a [u8],
}

impl<'a> Written<'a> {
    /// The `unsaved` accounts (checked whole by [`parse_written`]).
    fn unsaved(&self) -> impl Iterator<Item = (&'a str, i64)> {
        let mut rest = self.unsaved;
        std::iter::from_fn(move || {
            let (account, after) = take_account(rest)?;
            rest = after.strip_prefix(b",").unwrap_or(after);
            Some(account)
        })
    }

    /// The `unsaved_lanes` (checked whole by [`parse_written`]).
    fn unsaved_lanes(&self) -> impl Iterator<Item = LaneTriple> + 'a {
        let mut rest = self.unsaved_lanes;
        std::iter::from_fn(move || {
            let (lane, after) = take_lane(rest)?;
            rest = after.strip_prefix(b",").unwrap_or(after);
            Some(lane)
        })
    }
}

/// The record `json` if it is laid out exactly as [`encode_record_into`] writes it
/// with names that need no escape; `None` for anything else (serde then decides).
fn parse_written(json: &[u8]) -> Option<Written<'_>> {
    let rest = json.strip_prefix(b"{\"account\":")?;
    let (account, mut rest) = match rest.strip_prefix(b"null") {
        Some(rest) => (None, rest),
        None => {
            let (account, rest) = take_account(rest)?;
            (Some(account), rest)
        }
    };
    let mut unsaved: &[u8] = b"";
    if let Some(list) = rest.strip_prefix(b",\"unsaved\":[") {
        let mut walk = list;
        loop {
            let (_, after) = take_account(walk)?;
            match after.first()? {
                b',' => walk = &after[1..],
                b']' => {
                    unsaved = &list[..list.len() - after.len()];
                    rest = &after[1..];
                    break;
                }
                _ => return None,
            }
        }
    }
    let (applied, rest) = take_u64(rest.strip_prefix(b",\"applied\":")?)?;
    let (rejected, rest) = take_u64(rest.strip_prefix(b",\"rejected\":")?)?;
    let (lane, rest) = match rest.strip_prefix(b",\"lane\":") {
        Some(rest) => {
            let (lane, rest) = take_u64(rest)?;
            (u32::try_from(lane).ok()?, rest)
        }
        None => (0, rest),
    };
    let (epoch, rest) = take_u64(rest.strip_prefix(b",\"epoch\":")?)?;
    let (position, mut rest) = take_u64(rest.strip_prefix(b",\"position\":")?)?;
    let mut unsaved_lanes: &[u8] = b"";
    if let Some(list) = rest.strip_prefix(b",\"unsaved_lanes\":[") {
        let mut walk = list;
        loop {
            let (_, after) = take_lane(walk)?;
            match after.first()? {
                b',' => walk = &after[1..],
                b']' => {
                    unsaved_lanes = &list[..list.len() - after.len()];
                    rest = &after[1..];
                    break;
                }
                _ => return None,
            }
        }
    }
    (rest == b"}").then_some(Written {
        account,
        unsaved,
        applied,
        rejected,
        lane,
        epoch,
        position,
        unsaved_lanes,
    })
}

/// `["name",balance]` with a name of `[A-Za-z0-9_-]` (what the ledger accepts).
fn take_account(bytes: &[u8]) -> Option<((&str, i64), &[u8])> {
    let rest = bytes.strip_prefix(b"[\"")?;
    let end = rest.iter().position(|byte| *byte == b'"')?;
    let name = &rest[..end];
    if !name
        .iter()
        .all(|byte| byte.is_ascii_alphanumeric() || *byte == b'_' || *byte == b'-')
    {
        return None;
    }
    let rest = rest[end + 1..].strip_prefix(b",")?;
    let (negative, rest) = match rest.strip_prefix(b"-") {
        Some(rest) => (true, rest),
        None => (false, rest),
    };
    let (magnitude, rest) = take_u64(rest)?;
    let balance = if negative {
        0i64.checked_sub_unsigned(magnitude)?
    } else {
        i64::try_from(magnitude).ok()?
    };
    let rest = rest.strip_prefix(b"]")?;
    // only ASCII was let through
    let name = std::str::from_utf8(name).ok()?;
    Some(((name, balance), rest))
}

/// A lane's `(lane, epoch, position)`.
type LaneTriple = (u32, u64, u64);

/// `[lane,epoch,position]`.
fn take_lane(bytes: &[u8]) -> Option<(LaneTriple, &[u8])> {
    let (lane, rest) = take_u64(bytes.strip_prefix(b"[")?)?;
    let (epoch, rest) = take_u64(rest.strip_prefix(b",")?)?;
    let (position, rest) = take_u64(rest.strip_prefix(b",")?)?;
    Some((
        (u32::try_from(lane).ok()?, epoch, position),
        rest.strip_prefix(b"]")?,
    ))
}

/// A decimal `u64` as serde_json writes one (no sign, no leading zero but `0`).
fn take_u64(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let digits = bytes
        .iter()
        .take_while(|byte| byte.is_ascii_digit())
        .count();
    if digits == 0 || (digits > 1 && bytes[0] == b'0') {
        return None;
    }
    let mut value = 0u64;
    for digit in &bytes[..digits] {
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    Some((value, &bytes[digits..]))
}

/// A journal record from borrowed parts, for [`encode_record_into`]: `accounts` is the
/// record's `account` (the first) then its `unsaved` accounts (the rest).
pub(super) struct RecordParts<A, L> {
    pub(super) accounts: A,
    pub(super) applied: u64,
    pub(super) rejected: u64,
    pub(super) lane: u32,
    pub(super) epoch: u64,
    pub(super) position: u64,
    pub(super) unsaved_lanes: L,
}

/// Appends the record `parts` to `out` as [`JournalRecord::encode`] lays it out
/// (`crc32 SPACE json NEWLINE`), byte for byte what serde_json writes for the same
/// [`JournalRecord`], without building one: no allocation once `out` has grown (the
/// ledger writes one per line).
pub(super) fn encode_record_into<'a, A, L>(out: &mut Vec<u8>, parts: &RecordParts<A, L>)
where
    A: Iterator<Item = (&'a str, i64)> + Clone,
    L: Iterator<Item = (u32, u64, u64)> + Clone,
{
    let start = out.len();
    out.extend_from_slice(b"00000000 ");
    let json_start = out.len();
    let mut accounts = parts.accounts.clone();
    out.extend_from_slice(b"{\"account\":");
    match accounts.next() {
        Some(account) => write_account(out, account),
        None => out.extend_from_slice(b"null"),
    }
    let mut unsaved = accounts.peekable();
    if unsaved.peek().is_some() {
        out.extend_from_slice(b",\"unsaved\":[");
        for (index, account) in unsaved.enumerate() {
            if index > 0 {
                out.push(b',');
            }
            write_account(out, account);
        }
        out.push(b']');
    }
    out.extend_from_slice(b",\"applied\":");
    push_u64(out, parts.applied);
    out.extend_from_slice(b",\"rejected\":");
    push_u64(out, parts.rejected);
    if parts.lane != 0 {
        out.extend_from_slice(b",\"lane\":");
        push_u64(out, parts.lane.into());
    }
    out.extend_from_slice(b",\"epoch\":");
    push_u64(out, parts.epoch);
    out.extend_from_slice(b",\"position\":");
    push_u64(out, parts.position);
    let mut lanes = parts.unsaved_lanes.clone().peekable();
    if lanes.peek().is_some() {
        out.extend_from_slice(b",\"unsaved_lanes\":[");
        for (index, (lane, epoch, position)) in lanes.enumerate() {
            if index > 0 {
                out.push(b',');
            }
            out.push(b'[');
            push_u64(out, lane.into());
            out.push(b',');
            push_u64(out, epoch);
            out.push(b',');
            push_u64(out, position);
            out.push(b']');
        }
        out.push(b']');
    }
    out.push(b'}');
    let crc = crc32fast::hash(&out[json_start..]);
    for (at, digit) in out[start..json_start - 1].iter_mut().enumerate() {
        *digit = b"0123456789abcdef"[(crc >> (28 - 4 * at) & 0xf) as usize];
    }
    out.push(b'\n');
}

/// `["account",balance]`, the account escaped as serde_json escapes a string.
fn write_account(out: &mut Vec<u8>, (account, balance): (&str, i64)) {
    let plain = account
        .bytes()
        .all(|byte| byte >= 0x20 && byte != b'"' && byte != b'\\');
    out.push(b'[');
    if plain {
        out.push(b'"');
        out.extend_from_slice(account.as_bytes());
        out.push(b'"');
    } else {
        // a string serde_json escapes (a ledger's accounts never need it)
        let _ = serde_json::to_writer(&mut *out, account);
    }
    out.push(b',');
    if balance < 0 {
        out.push(b'-');
    }
    push_u64(out, balance.unsigned_abs());
    out.push(b']');
}

/// `value` in decimal, as serde_json writes it (two digits at a time).
fn push_u64(out: &mut Vec<u8>, mut value: u64) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    while value >= 100 {
        let pair = (value % 100) as usize * 2;
        value /= 100;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if value >= 10 {
        let pair = value as usize * 2;
        at -= 2;
        digits[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        digits[at] = b'0' + value as u8;
    }
    out.extend_from_slice(&digits[at..]);
}
