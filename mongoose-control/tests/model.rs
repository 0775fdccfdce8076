//! A model-based test of names, generations and replies on one group: every request
//! gets exactly one reply, and the reply is the one the model predicts
//! (book: guarantees/control-plane.md).

mod common;

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use common::*;
use mongoose_control::{ProcessorHandle, ReplyOutcome};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Add(u8),
    StopHandle(u8),
    StopName(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..3).prop_map(Op::Add),
        (0u8..8).prop_map(Op::StopHandle),
        (0u8..3).prop_map(Op::StopName),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn replies_follow_the_name_and_generation_model(ops in prop::collection::vec(op(), 1..24)) {
        let (plane, _numbers, _) = plane_with_feed();
        // model: name -> generation admitted now; every handle ever returned
        let mut admitted: HashMap<String, u64> = HashMap::new();
        let mut handles: Vec<ProcessorHandle> = Vec::new();
        for op in ops {
            match op {
                Op::Add(n) => {
                    let name = format!("p{n}");
                    let added = plane.add_processor("g", &name, || Scripted::new("p", &new_log()).no_feed());
                    let reply = added.reply.wait_for(WAIT).expect("one reply");
                    match admitted.entry(name) {
                        Entry::Occupied(_) => {
                            prop_assert_eq!(reply.outcome, ReplyOutcome::Refused);
                            prop_assert!(added.handle.is_none());
                        }
                        Entry::Vacant(slot) => {
                            prop_assert_eq!(reply.reason.as_str(), "started");
                            let handle = added.handle.expect("admitted");
                            prop_assert!(handles.iter().all(|h| h.generation() < handle.generation()), "generations grow");
                            slot.insert(handle.generation());
                            handles.push(handle);
                        }
                    }
                }
                Op::StopHandle(index) => {
                    let Some(handle) = handles.get(index as usize).cloned() else { continue };
                    let reply = plane.stop_processor(&handle).wait_for(WAIT).expect("one reply");
                    let current = admitted.get(handle.name()) == Some(&handle.generation());
                    prop_assert_eq!(reply.outcome, ReplyOutcome::Applied);
                    prop_assert_eq!(reply.reason.as_str(), if current { "stopped" } else { "alreadyStopped" });
                    if current {
                        admitted.remove(handle.name());
                    }
                }
                Op::StopName(n) => {
                    let name = format!("p{n}");
                    let reply = plane.stop_processor_wait("g", &name, WAIT).expect("a reply");
                    if admitted.remove(&name).is_some() {
                        prop_assert_eq!(reply.reason.as_str(), "stopped");
                    } else {
                        prop_assert_eq!(reply.outcome, ReplyOutcome::Refused);
                    }
                }
            }
            for (name, generation) in &admitted {
                let handle = plane.processor_handle("g", name).expect("admitted in the plane too");
                prop_assert_eq!(handle.generation(), *generation);
            }
        }
    }
}
