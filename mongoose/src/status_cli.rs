//! `mongoose status` and the admin address of `status` and `top`: everything `/status`
//! says, as text (the feeds table, then per feed why it is where it is, its positions,
//! queues, losses and a glob's files; the sinks; the groups; the configuration
//! generation and the last reload's outcome), and the admin address and token taken
//! from `--admin`, `--token-file`, or the `[admin]` table of `--config`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use mongoose_delivery::{FeedStatus, StatusReport};
use mongoose_server::config::ServerConfig;
use mongoose_server::{admin, cli, ServerError};

/// The address `status` and `top` use when neither `--admin` nor `--config` gives one.
pub const DEFAULT_ADMIN: &str = "127.0.0.1:8089";

/// Where a running server's admin API is, and the token it may need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminTarget {
    /// `host:port` to connect to.
    pub address: String,
    /// The bearer token file, if one is known.
    pub token_file: Option<PathBuf>,
}

/// The admin target from the command line: `--admin` first, else the `[admin]` table of
/// `--config` (its `address`, an unspecified address such as `0.0.0.0` reached on
/// loopback, and its `token_file` when `--token-file` is not given), else
/// [`DEFAULT_ADMIN`].
///
/// # Errors
/// The config file does not load, or has no `[admin]` table (then nothing serves the
/// admin API, and the message says so).
pub fn admin_target(
    admin: Option<String>,
    config: Option<&Path>,
    token_file: Option<PathBuf>,
) -> Result<AdminTarget, ServerError> {
    let Some(config_path) = config.filter(|_| admin.is_none() || token_file.is_none()) else {
        return Ok(AdminTarget {
            address: admin.unwrap_or_else(|| DEFAULT_ADMIN.to_owned()),
            token_file,
        });
    };
    let config = ServerConfig::load(config_path)?;
    let Some(table) = &config.admin else {
        if let Some(address) = admin {
            return Ok(AdminTarget {
                address,
                token_file,
            });
        }
        return Err(ServerError::invalid(
            "admin",
            format!(
                "{} has no [admin] table, so its server serves no admin API: add [admin] (address = \"127.0.0.1:8089\") and restart it, or give --admin",
                config_path.display()
            ),
        ));
    };
    let address = admin.unwrap_or_else(|| reachable(&table.address));
    let token_file =
        token_file.or_else(|| table.token_file.as_ref().map(|path| config.resolve(path)));
    Ok(AdminTarget {
        address,
        token_file,
    })
}

/// A listening address as one to connect to: an unspecified IP (`0.0.0.0`, `::`) is
/// reached on loopback.
fn reachable(address: &str) -> String {
    match address.parse::<std::net::SocketAddr>() {
        Ok(parsed) if parsed.ip().is_unspecified() => {
            let loopback: std::net::IpAddr = if parsed.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            };
            std::net::SocketAddr::new(loopback, parsed.port()).to_string()
        }
        _ => address.to_owned(),
    }
}

/// Per feed, what the feeds table has no room for: why the source is where it is, its
/// positions and consumers, each queue, the losses, and a glob feed's files.
pub fn feed_details(report: &StatusReport) -> String {
    let mut out = String::new();
    for feed in &report.feeds {
        feed_detail(&mut out, feed);
    }
    out
}

fn feed_detail(out: &mut String, feed: &FeedStatus) {
    let _ = writeln!(
        out,
        "feed {}: {}{}, {}, {}",
        feed.feed,
        feed.state,
        if feed.bounded { " (bounded)" } else { "" },
        if feed.settled {
            "settled"
        } else {
            "not settled"
        },
        if feed.lossless {
            "lossless"
        } else {
            "NOT lossless"
        },
    );
    if let Some(detail) = &feed.detail {
        let _ = writeln!(out, "  why: {detail}");
    }
    if let Some(stalled) = &feed.stalled {
        let _ = writeln!(out, "  stalled: {stalled}");
    }
    let _ = writeln!(
        out,
        "  published {}, acknowledged {}, committed {}, runs awaiting acknowledgement {}, consumers {}{}",
        feed.sequence,
        feed.acknowledged,
        feed.committed,
        feed.pending_acks,
        feed.consumers,
        if feed.paused {
            format!(", PAUSED ({} pauses)", feed.pauses)
        } else {
            format!(", {} pauses", feed.pauses)
        },
    );
    for queue in &feed.subscribers {
        let _ = writeln!(
            out,
            "  queue {}: dispatched {} of {}",
            queue.queue, queue.dispatched, queue.position
        );
    }
    let losses: Vec<String> = [
        ("dropped", feed.dropped),
        ("refused", feed.refused),
        ("downgraded", feed.downgraded),
        ("completion failures", feed.completion_failures),
        ("earlier losses", feed.earlier_losses),
        ("rotated unread bytes", feed.rotated_unread_bytes),
        ("rotated unread files", feed.rotated_unread_files),
        ("losses", feed.losses),
        ("lost bytes", feed.lost_bytes),
        ("unterminated bytes", feed.unterminated),
    ]
    .iter()
    .filter(|(_, count)| *count > 0)
    .map(|(what, count)| format!("{what} {count}"))
    .collect();
    if !losses.is_empty() {
        let _ = writeln!(out, "  counted: {}", losses.join(", "));
    }
    if !feed.files.is_empty() {
        let _ = writeln!(out, "  files ({}):", feed.files.len());
        for file in &feed.files {
            let _ = writeln!(
                out,
                "    lane {} {}: committed {} of {} bytes (lag {})",
                file.lane, file.path, file.committed, file.size, file.lag
            );
        }
    }
}

/// The configuration generation and the last reload: its outcome, when, what it
/// changed and why it was refused.
pub fn reload_text(status: &serde_json::Value) -> String {
    let mut out = String::new();
    let generation = status["configGeneration"].as_u64().unwrap_or_default();
    let last = &status["lastReload"];
    let Some(outcome) = last["outcome"].as_str() else {
        let _ = writeln!(
            out,
            "config generation {generation}; last reload: none since the start (SIGHUP reloads the file)"
        );
        return out;
    };
    let ago = last["atMillis"].as_u64().and_then(|at| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_millis() as u64;
        Some(format!(" {} s ago", now.saturating_sub(at) / 1000))
    });
    let _ = writeln!(
        out,
        "config generation {generation}; last reload: {outcome}{}",
        ago.unwrap_or_default()
    );
    for (title, key) in [("changed", "changes"), ("why", "reasons")] {
        for line in last[key].as_array().into_iter().flatten() {
            let _ = writeln!(out, "  {title}: {}", line.as_str().unwrap_or_default());
        }
    }
    out
}

/// `mongoose status`: the tables and details of `/status` and `/groups` (or the raw
/// JSON), printed; 0 when the server answered.
pub fn status(target: &AdminTarget, json: bool) -> Result<u8, (u8, ServerError)> {
    let failed = |error| (cli::EXIT_FAILED, error);
    let token = match &target.token_file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|error| {
            failed(ServerError::Io {
                context: format!("cannot read the token file {}", path.display()),
                error,
            })
        })?),
        None => None,
    };
    let token = token.as_deref().map(str::trim);
    let address = target.address.as_str();
    let text = admin::get_text_with_token(address, "/status", token).map_err(failed)?;
    if json {
        crate::outln!("{text}");
        return Ok(cli::EXIT_OK);
    }
    let unexpected = || {
        failed(ServerError::State(format!(
            "unexpected status answer: {text}"
        )))
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|_| unexpected())?;
    let report: StatusReport = serde_json::from_value(value.clone()).map_err(|_| unexpected())?;
    crate::out!("{}", cli::status_table(&report));
    crate::outln!();
    crate::out!("{}", feed_details(&report));
    let sinks: Vec<mongoose_sink::SinkStatus> =
        serde_json::from_value(value["sinks"].clone()).unwrap_or_default();
    if !sinks.is_empty() {
        crate::outln!();
        crate::out!("{}", cli::sinks_table(&sinks));
    }
    let groups = admin::get_text_with_token(address, "/groups", token).and_then(|text| {
        serde_json::from_str::<Vec<mongoose_control::GroupStatus>>(&text)
            .map_err(|error| ServerError::State(format!("unexpected groups answer: {error}")))
    });
    match groups {
        Ok(groups) => {
            crate::outln!();
            crate::out!("{}", cli::groups_table(&groups));
        }
        Err(error) => eprintln!("mongoose: no groups table: {error}"),
    }
    crate::outln!();
    crate::out!("{}", reload_text(&value));
    Ok(cli::EXIT_OK)
}

/// `mongoose state`: the aggregates of `key` of the aggregate processor `processor`
/// (`GROUP/NAME`), as the admin API's JSON.
///
/// # Errors
/// `processor` is not `GROUP/NAME`; the admin API cannot be reached, refused the
/// token, or answered another status than 200 (an unknown processor or key).
pub fn processor_state(
    address: &str,
    processor: &str,
    key: &str,
    token: Option<&str>,
) -> Result<String, ServerError> {
    let Some((group, name)) = processor.split_once('/') else {
        return Err(ServerError::invalid(
            "processor",
            format!("'{processor}' is not GROUP/NAME: give the processor's group and name, such as bank/balances"),
        ));
    };
    let path = format!(
        "/processors/{}/{}/state?key={}",
        percent_encoded(group),
        percent_encoded(name),
        percent_encoded(key)
    );
    admin::get_text_with_token(address, &path, token)
}

/// `text` with every byte but the unreserved ones and `,` percent-encoded.
fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~,".contains(&byte) {
            out.push(byte as char);
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unspecified_address_is_reached_on_loopback() {
        assert_eq!(reachable("0.0.0.0:8089"), "127.0.0.1:8089");
        assert_eq!(reachable("[::]:8089"), "[::1]:8089");
        assert_eq!(reachable("10.0.0.2:8089"), "10.0.0.2:8089");
    }
}
