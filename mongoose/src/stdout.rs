//! Standard output for every subcommand: a reader that goes away before the end
//! (`mongoose status | head`) ends the process cleanly, exit 0, instead of a panic on
//! the broken pipe (exit 101, what `println!` does once the pipe is closed).

use std::io::{self, Write};

/// Standard output, locked. A write or a flush that fails with `EPIPE` (the reader
/// closed its end) exits the process with 0: the reader had all it wanted, and nothing
/// is left to do but to stop writing.
#[derive(Debug)]
pub struct Stdout {
    inner: io::StdoutLock<'static>,
}

/// The standard output, as [`Stdout`].
pub fn stdout() -> Stdout {
    Stdout {
        inner: io::stdout().lock(),
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        exit_on_closed_pipe(self.inner.write(buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        exit_on_closed_pipe(self.inner.flush())
    }
}

/// `result`, unless it is the error of a closed pipe: then the process ends, exit 0.
fn exit_on_closed_pipe<T>(result: io::Result<T>) -> io::Result<T> {
    match result {
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => other,
    }
}

/// `print!` through [`stdout()`]: a closed pipe ends the process with exit 0; another
/// write error is ignored (the process has nowhere else to say it).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!($crate::stdout::stdout(), $($arg)*);
    }};
}

/// `println!` through [`stdout()`] (see [`out!`]).
#[macro_export]
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!($crate::stdout::stdout(), $($arg)*);
    }};
}
