//! Failure containment at the call boundary: a processor call that returns an error
//! or panics becomes a reason text, for groups and for replays alike.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};

use mongoose_core::ProcessorError;

/// The text of a panic's payload (a `&str` or `String`), or a placeholder.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(text) = payload.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = payload.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic with a non-text payload".to_owned()
    }
}

/// Runs a processor call; an error becomes its message and a panic
/// `"panicked: <message>"`.
pub(crate) fn contained<R>(call: impl FnOnce() -> Result<R, ProcessorError>) -> Result<R, String> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(error.message().to_owned()),
        Err(payload) => Err(format!("panicked: {}", panic_message(&*payload))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_and_a_panic_become_their_text() {
        assert_eq!(contained(|| Ok::<_, ProcessorError>(3)), Ok(3));
        assert_eq!(
            contained(|| Err::<(), _>(ProcessorError::new("bad line"))),
            Err("bad line".to_owned())
        );
        assert_eq!(
            contained(|| -> Result<(), ProcessorError> { panic!("boom {}", 7) }),
            Err("panicked: boom 7".to_owned())
        );
    }
}
