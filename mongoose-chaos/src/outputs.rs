//! What the consumers' targets hold after a run: the file sinks' files, the HTTP
//! target's and the TCP receiver's records, the server's standard output, journals and
//! Kafka topics, each consumer's own (its outputs carry its prefix where a target is
//! shared), with what its sink promises.

use crate::scenario::{Also, SinkKind};
use crate::truth::{OutputRecord, Promise};
use crate::world::World;

/// The outputs of consumer `consumer` (0: the workload's, `i + 1`: `options.also[i]`,
/// whose outputs are returned without their prefix) and what its sink promises.
///
/// # Errors
/// A target cannot be read (a journal tool or a topic reader failed).
pub fn outputs_of(world: &World, consumer: usize) -> Result<(Vec<OutputRecord>, Promise), String> {
    let (kind, also) = match consumer.checked_sub(1) {
        None => (world.scenario.sink, None),
        Some(index) => match world.scenario.options.also.get(index) {
            Some(Also::Forward { sink }) => (*sink, Some(index)),
            _ => return Err(format!("consumer {consumer} has no sink")),
        },
    };
    let mut moved = false;
    let records: Vec<OutputRecord> = match kind {
        SinkKind::File => {
            let files = match also {
                // with the output files an operator moved away after a refusal
                None => crate::steps::output_files(world),
                Some(index) => vec![world.path(&format!("out/also{index}.txt"))],
            };
            moved = files.len() > 1;
            files
                .iter()
                .flat_map(|file| {
                    let text = std::fs::read(file).unwrap_or_default();
                    plain(&String::from_utf8_lossy(&text))
                })
                .collect()
        }
        SinkKind::Tcp => {
            plain(&std::fs::read_to_string(world.path("peers/tcp.txt")).unwrap_or_default())
        }
        SinkKind::Stdout => {
            plain(&std::fs::read_to_string(world.path("peers/stdout.txt")).unwrap_or_default())
        }
        SinkKind::Http => {
            let log = std::fs::read_to_string(world.path("peers/http.log")).unwrap_or_default();
            log.lines()
                .filter_map(|line| {
                    let mut fields = line.splitn(4, '\t');
                    let status = fields.next()?;
                    let key = fields.next()?;
                    let _attempt = fields.next()?;
                    let body = fields.next()?;
                    status.starts_with('2').then(|| OutputRecord {
                        key: Some(key.to_owned()),
                        body: body.to_owned(),
                    })
                })
                .collect()
        }
        SinkKind::Journal => {
            let journal = also.map_or("out/journal".to_owned(), |index| {
                format!("out/journal-also{index}")
            });
            let output = world
                .mongoose(&["journal", "tail", &journal])
                .output()
                .map_err(|error| format!("cannot run journal tail: {error}"))?;
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter_map(|line| line.split_once('\t'))
                .map(|(_, body)| OutputRecord {
                    key: None,
                    body: body.to_owned(),
                })
                .collect()
        }
        SinkKind::Kafka => world
            .kafka_outputs(consumer)?
            .into_iter()
            .map(|body| OutputRecord { key: None, body })
            .collect(),
    };
    let promise = match kind {
        // a new output file after a refusal: what the old one held may be written
        // again into the new one (the sink's record of it went with the old file)
        SinkKind::File if moved => Promise::AtLeastOnce,
        // a ledger keeping its state in a changelog writes the alerts of the lines a
        // takeover applies again once more through a sink: at least once
        // (docs/src/connectors/scaling-out.md; exactly once only with alerts_topic)
        SinkKind::File if consumer == 0 && world.changelog_ledger() => Promise::AtLeastOnce,
        SinkKind::File => Promise::ExactlyOnce,
        SinkKind::Http => Promise::AtLeastOnceKeyed,
        SinkKind::Kafka
            if world
                .scenario
                .options
                .kafka
                .is_some_and(|kafka| kafka.exactly_once) =>
        {
            Promise::ExactlyOnce
        }
        SinkKind::Tcp | SinkKind::Journal | SinkKind::Stdout | SinkKind::Kafka => {
            Promise::AtLeastOnce
        }
    };
    Ok((own(records, also), promise))
}

/// The records of one consumer at a target the consumers may share: the workload's
/// (`also` `None`) carry no consumer prefix; consumer `also + 1`'s carry `a<also> `,
/// taken off.
fn own(records: Vec<OutputRecord>, also: Option<usize>) -> Vec<OutputRecord> {
    match also {
        None => records
            .into_iter()
            .filter(|record| prefix_of(&record.body).is_none())
            .collect(),
        Some(index) => records
            .into_iter()
            .filter_map(|record| {
                (prefix_of(&record.body) == Some(index)).then(|| OutputRecord {
                    body: record.body[World::also_prefix(index).len()..].to_owned(),
                    key: record.key,
                })
            })
            .collect(),
    }
}

/// The also-consumer whose prefix (`a<i> `) `body` starts with.
fn prefix_of(body: &str) -> Option<usize> {
    let rest = body.strip_prefix('a')?;
    let (number, _) = rest.split_once(' ')?;
    if number.is_empty() || !number.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    number.parse().ok()
}

/// Records of a line-per-output target; a torn last line keeps no newline and matches
/// nothing.
fn plain(text: &str) -> Vec<OutputRecord> {
    text.split_inclusive('\n')
        .map(|line| OutputRecord {
            key: None,
            body: line
                .strip_suffix('\n')
                .map_or_else(|| format!("{line}<torn>"), str::to_owned),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_consumer_sees_its_own_records_at_a_shared_target() {
        let records = plain("E0x00000001 xx\na0 E0x00000001 xx\na1 u0x3,1\n12,u0x1,-1\n");
        let bodies = |records: Vec<OutputRecord>| -> Vec<String> {
            records.into_iter().map(|record| record.body).collect()
        };
        assert_eq!(
            bodies(own(records.clone(), None)),
            ["E0x00000001 xx", "12,u0x1,-1"]
        );
        assert_eq!(bodies(own(records.clone(), Some(0))), ["E0x00000001 xx"]);
        assert_eq!(bodies(own(records, Some(1))), ["u0x3,1"]);
    }
}
