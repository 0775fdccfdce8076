//! The operator's taps ([`mongoose_core::tap`]): a live sample of a feed's published
//! items or of a sink's outputs, for the admin API's tap routes and `mongoose tap`.

use mongoose_core::tap::TapReceiver;

use super::Server;

/// Why a tap was not attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TapRefused {
    /// No feed or sink of that name: the message lists those there are.
    Unknown(String),
    /// The feed's items have no text view, or the point serves as many taps as it can.
    Unavailable(String),
}

impl Server {
    /// Attaches a tap of feed `name`'s published items holding up to `capacity`
    /// unread ones (more are dropped from the tap and counted, never from the feed).
    ///
    /// # Errors
    /// [`TapRefused`] naming the feeds there are, or why this one cannot be tapped.
    pub fn tap_feed(&self, name: &str, capacity: usize) -> Result<TapReceiver, TapRefused> {
        let Some(feed) = self.inner.registry.get(name) else {
            let names: Vec<String> = self
                .inner
                .registry
                .feeds()
                .iter()
                .map(|feed| feed.name().to_owned())
                .collect();
            return Err(TapRefused::Unknown(format!(
                "no feed '{name}': the feeds are {}",
                listed(&names)
            )));
        };
        feed.attach_tap(capacity).ok_or_else(|| {
            TapRefused::Unavailable(format!(
                "feed '{name}' cannot be tapped now: its items ({}) have no text view, or it serves {} taps already",
                feed.item_type_name(),
                mongoose_core::tap::TAP_RECEIVERS_MAX
            ))
        })
    }

    /// Attaches a tap of the outputs sink `name` is given (each attempt) holding up to
    /// `capacity` unread ones.
    ///
    /// # Errors
    /// [`TapRefused`] naming the sinks there are, or when the sink serves as many taps
    /// as it can.
    pub fn tap_sink(&self, name: &str, capacity: usize) -> Result<TapReceiver, TapRefused> {
        match self.inner.sinks.attach_tap(name, capacity) {
            Ok(Some(tap)) => Ok(tap),
            Ok(None) => Err(TapRefused::Unavailable(format!(
                "sink '{name}' serves {} taps already: stop one",
                mongoose_core::tap::TAP_RECEIVERS_MAX
            ))),
            Err(names) => Err(TapRefused::Unknown(format!(
                "no sink '{name}': the sinks are {}",
                listed(&names)
            ))),
        }
    }
}

fn listed(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}
