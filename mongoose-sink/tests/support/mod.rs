//! What the sink's tests share: outputs, a port where nothing listens, a generous
//! wait. Their HTTP target is `mongoose_testkit::http_target::HttpTarget`.

#![allow(dead_code, unreachable_pub)]

pub mod gate;

use std::net::{SocketAddr, TcpListener};
use std::thread;
use std::time::{Duration, Instant};

use mongoose_core::sink::{Output, OutputKey};
use mongoose_core::Epoch;

/// Output `index` of the input at `position` of feed `lines`, first attempt.
pub fn output(position: u64, index: u32, payload: &str) -> Output {
    Output::new(
        OutputKey::new("lines", Epoch(1), 0, position, index, 1),
        payload.as_bytes().to_vec(),
    )
}

/// A local address where nothing listens (a port bound, then released).
pub fn nothing_listening() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a local port");
    listener.local_addr().expect("local address")
}

/// Waits (generously) until `condition` holds.
pub fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(10));
    }
}
