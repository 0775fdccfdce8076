//! The TCP line target against raw-socket clients: whole lines only, each with its
//! connection's number, and appended to a file when asked.

use std::io::{Read, Write};
use std::net::TcpStream;

use mongoose_testkit::tcp_target::TcpLineTarget;

#[test]
fn whole_lines_are_taken_with_their_connection_and_a_cut_line_is_not() {
    let file = tempfile::NamedTempFile::new().expect("a file");
    let target = TcpLineTarget::builder()
        .append_to(file.reopen().expect("the file again"))
        .start();
    let mut first = TcpStream::connect(target.address()).expect("connect");
    first.write_all(b"one\ntw").expect("write");
    first.write_all(b"o\nthree, cut").expect("write");
    drop(first);
    assert_eq!(
        target.wait_for_lines(2),
        [(0, "one".to_owned()), (0, "two".to_owned())]
    );
    let mut second = TcpStream::connect(target.address()).expect("connect");
    second.write_all(b"four\n").expect("write");
    assert_eq!(target.wait_for_lines(3)[2], (1, "four".to_owned()));
    let mut appended = String::new();
    file.reopen()
        .expect("the file")
        .read_to_string(&mut appended)
        .expect("read");
    assert_eq!(appended, "one\ntwo\nfour\n", "the cut line is not received");
    assert_eq!(target.lines().len(), 3);
}
