//! Alone in its binary because it sets process environment variables: the HTTP sink
//! posts to its url, never through a proxy named in the environment.

mod support;

use mongoose_core::sink::Sink;
use mongoose_sink::{HttpSink, HttpSinkConfig};
use mongoose_testkit::http_target::HttpTarget;
use support::{nothing_listening, output};

#[test]
fn a_proxy_named_in_the_environment_is_not_used() {
    let dead_proxy = format!("http://{}", nothing_listening());
    for variable in ["ALL_PROXY", "HTTP_PROXY", "http_proxy"] {
        std::env::set_var(variable, &dead_proxy);
    }
    let server = HttpTarget::start();
    let mut sink = HttpSink::new(
        "proxy-test",
        HttpSinkConfig {
            url: server.url(),
            timeout_millis: 2_000,
            response_timeout_millis: 10_000,
            headers: Vec::new(),
            ..HttpSinkConfig::default()
        },
    )
    .expect("valid settings");
    let mut outcomes = Vec::new();
    sink.publish(&[output(1, 0, "direct")], &mut outcomes);
    assert!(outcomes[0].is_published(), "{:?}", outcomes[0]);
    assert_eq!(server.requests().len(), 1);
}
