//! A topic's identity: Kafka's topic id, a UUID the broker gives each incarnation of a
//! topic name (KIP-516). A topic deleted and made again under the same name has a new
//! id, and its offsets start again at 0: an offset of the old incarnation says nothing
//! about the new one. The feed ([`crate::KafkaSource`]) and the changelog
//! ([`crate::changelog`]) record the input's id with their positions and compare offsets
//! only within one id.
//!
//! rdkafka 0.38 has no safe call for it; librdkafka 2.12 has `rd_kafka_DescribeTopics`,
//! called here through rdkafka-sys (one admin request, on the caller's client).

use std::ffi::{CStr, CString};
use std::fmt;
use std::time::Duration;

use rdkafka::bindings as rdsys;
use rdkafka::client::{Client, ClientContext};
use rdkafka::types::RDKafkaRespErr;

/// A topic incarnation's id (the broker's UUID, as 128 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicId(pub u128);

impl TopicId {
    /// The id as 16 big-endian bytes (what the changelog's markers carry).
    pub fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The id from 16 bytes written by [`TopicId::to_bytes`]; `None` for another length
    /// (a marker written before ids were recorded carries none).
    pub fn from_bytes(bytes: &[u8]) -> Option<TopicId> {
        let bytes: [u8; 16] = bytes.try_into().ok()?;
        Some(TopicId(u128::from_be_bytes(bytes)))
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// What the broker says of a topic's identity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopicIdentity {
    /// The topic exists with this id.
    Exists(TopicId),
    /// No topic of that name (deleted, or not made yet).
    Missing,
}

/// Frees what the describe call allocated, whatever path it leaves by.
struct Allocated {
    collection: *mut rdsys::rd_kafka_TopicCollection_t,
    options: *mut rdsys::rd_kafka_AdminOptions_t,
    queue: *mut rdsys::rd_kafka_queue_t,
    event: *mut rdsys::rd_kafka_event_t,
}

impl Drop for Allocated {
    fn drop(&mut self) {
        // SAFETY: each pointer is null or was returned by its librdkafka constructor in
        // `describe` and is destroyed here once, by its own destructor; the event (owned
        // by the caller once polled) before its queue.
        unsafe {
            if !self.event.is_null() {
                rdsys::rd_kafka_event_destroy(self.event);
            }
            if !self.queue.is_null() {
                rdsys::rd_kafka_queue_destroy(self.queue);
            }
            if !self.options.is_null() {
                rdsys::rd_kafka_AdminOptions_destroy(self.options);
            }
            if !self.collection.is_null() {
                rdsys::rd_kafka_TopicCollection_destroy(self.collection);
            }
        }
    }
}

/// Asks the broker (through `client`, any producer's, consumer's or admin client's) for
/// `topic`'s id, waiting up to `timeout`.
///
/// # Errors
/// The broker does not answer in time, or answers with an error other than "unknown
/// topic" (which is [`TopicIdentity::Missing`]).
pub fn describe<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    timeout: Duration,
) -> Result<TopicIdentity, String> {
    let name =
        CString::new(topic).map_err(|_| format!("topic name {topic:?} holds a zero byte"))?;
    let mut names = [name.as_ptr()];
    let millis = i32::try_from(timeout.as_millis())
        .unwrap_or(i32::MAX)
        .max(1);
    let rk = client.native_ptr();
    let mut allocated = Allocated {
        collection: std::ptr::null_mut(),
        options: std::ptr::null_mut(),
        queue: std::ptr::null_mut(),
        event: std::ptr::null_mut(),
    };
    // SAFETY: `rk` is the live handle of `client`, borrowed for the whole call; `names`
    // points at one NUL-terminated string that outlives the collection built from it
    // (librdkafka copies the names); every object made here is freed by `allocated`'s
    // drop; the result and its descriptions are owned by the event and read only while
    // it lives (before `allocated` drops).
    unsafe {
        allocated.collection =
            rdsys::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), 1);
        allocated.options = rdsys::rd_kafka_AdminOptions_new(
            rk,
            rdsys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS,
        );
        let mut errstr = [0 as std::os::raw::c_char; 256];
        rdsys::rd_kafka_AdminOptions_set_request_timeout(
            allocated.options,
            millis,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        allocated.queue = rdsys::rd_kafka_queue_new(rk);
        rdsys::rd_kafka_DescribeTopics(
            rk,
            allocated.collection,
            allocated.options,
            allocated.queue,
        );
        // the request's own timeout answers first; a little more for the event
        allocated.event = rdsys::rd_kafka_queue_poll(allocated.queue, millis.saturating_add(1_000));
        if allocated.event.is_null() {
            return Err(format!(
                "no answer to describing topic '{topic}' within {timeout:?}"
            ));
        }
        let error = rdsys::rd_kafka_event_error(allocated.event);
        if error != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            let text = rdsys::rd_kafka_event_error_string(allocated.event);
            let text = if text.is_null() {
                format!("{error:?}")
            } else {
                CStr::from_ptr(text).to_string_lossy().into_owned()
            };
            return Err(format!("describing topic '{topic}': {text}"));
        }
        let result = rdsys::rd_kafka_event_DescribeTopics_result(allocated.event);
        if result.is_null() {
            return Err(format!(
                "describing topic '{topic}': not a DescribeTopics result"
            ));
        }
        let mut count = 0usize;
        let descriptions = rdsys::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        for index in 0..count {
            let description = *descriptions.add(index);
            let error = rdsys::rd_kafka_TopicDescription_error(description);
            if !error.is_null() {
                let code = rdsys::rd_kafka_error_code(error);
                if code == RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART
                    || code == RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_ID
                {
                    return Ok(TopicIdentity::Missing);
                }
                let text = rdsys::rd_kafka_error_string(error);
                let text = if text.is_null() {
                    format!("{code:?}")
                } else {
                    CStr::from_ptr(text).to_string_lossy().into_owned()
                };
                return Err(format!("describing topic '{topic}': {text}"));
            }
            let id = rdsys::rd_kafka_TopicDescription_topic_id(description);
            if id.is_null() {
                continue;
            }
            let high = rdsys::rd_kafka_Uuid_most_significant_bits(id) as u64;
            let low = rdsys::rd_kafka_Uuid_least_significant_bits(id) as u64;
            let id = (u128::from(high) << 64) | u128::from(low);
            if id != 0 {
                return Ok(TopicIdentity::Exists(TopicId(id)));
            }
        }
        Ok(TopicIdentity::Missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_round_trips_through_its_bytes_and_an_empty_marker_has_none() {
        let id = TopicId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(TopicId::from_bytes(&id.to_bytes()), Some(id));
        assert_eq!(TopicId::from_bytes(&[]), None);
        assert_eq!(id.to_string(), "0123456789abcdef0011223344556677");
    }
}
