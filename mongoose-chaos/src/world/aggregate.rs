//! The aggregate family's view of the aggregate after the final run: the server started
//! once more on the settled state (a query run, outside the schedule's runs), every key
//! the lines name asked for through the state query API with the admin token (one of
//! them through `mongoose state` too), the counters read from `/status`, then the
//! server stopped.

use std::io::Write;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::process::{code_of, Proc};
use crate::truth::{dead_letter_line, AggregateView, KeyTotals};

use super::config::{ADMIN_TOKEN, ADMIN_TOKEN_FILE, DEAD_LETTER_FILE};
use super::World;

/// The processor the aggregate family runs (`GROUP/NAME`).
pub const AGGREGATE_PROCESSOR: &str = "agg/agg";

/// How long the query run may take to answer and settle.
const QUERY_PATIENCE: Duration = Duration::from_secs(60);

impl World {
    /// Writes the admin token's file (mode 0600, as the server requires).
    ///
    /// # Errors
    /// It cannot be written.
    pub(super) fn write_admin_token(&self) -> Result<(), String> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.path(ADMIN_TOKEN_FILE);
        std::fs::write(&path, ADMIN_TOKEN)
            .and_then(|()| std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)))
            .map_err(|error| format!("cannot write {}: {error}", path.display()))
    }

    /// The aggregate as the server answers for it after the final run: a query run on
    /// the settled state, every key of `keys` asked for (`GET
    /// /processors/agg/agg/state?key=K` with the token; a 404 is a key never applied),
    /// `/status`'s `applied` and `rejected`.
    ///
    /// # Errors
    /// The query run did not start, settle or answer (its log says why).
    pub fn final_aggregate_view(&mut self, keys: &[String]) -> Result<AggregateView, String> {
        let mut log = self.log_file("server.log")?;
        let _ = writeln!(log, "=== chaos: query run (after the final run) ===");
        let mut command = Command::new(&self.bins.mongoose);
        command
            .args(["run", "--config", "mongoose.toml"])
            .current_dir(&self.dir)
            .env("RUST_LOG", crate::steps::SERVER_LOG)
            .stdout(std::process::Stdio::null())
            .stderr(log);
        let mut server = Proc::spawn("query server", &mut command, false)
            .map_err(|error| format!("cannot start the query run: {error}"))?;
        let view = self.query_view(&mut server, keys);
        let status = server.terminate(Duration::from_secs(60));
        self.event(format!(
            "the query run asked for {} keys, then stopped: exit {:?}",
            keys.len(),
            status.map(code_of)
        ));
        view
    }

    fn query_view(&mut self, server: &mut Proc, keys: &[String]) -> Result<AggregateView, String> {
        let deadline = Instant::now() + QUERY_PATIENCE;
        let counters = loop {
            if let Some(status) = server.exited() {
                return Err(format!(
                    "the query run exited {} before it settled",
                    code_of(status)
                ));
            }
            if Instant::now() >= deadline {
                return Err("the query run did not settle in 60 s".to_owned());
            }
            if let Some(status) = self.status() {
                let processor = &status["processors"][AGGREGATE_PROCESSOR];
                if status["settled"].as_bool() == Some(true) && processor.is_object() {
                    break (
                        processor["applied"].as_u64().unwrap_or(0),
                        processor["rejected"].as_u64().unwrap_or(0),
                    );
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(10)))
            .http_status_as_error(false)
            .build()
            .into();
        let mut view = AggregateView {
            applied: counters.0,
            rejected: counters.1,
            ..AggregateView::default()
        };
        for key in keys {
            let url = format!(
                "http://127.0.0.1:{}/processors/{AGGREGATE_PROCESSOR}/state?key={key}",
                self.ports.admin
            );
            let mut response = agent
                .get(&url)
                .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
                .call()
                .map_err(|error| format!("GET {url}: {error}"))?;
            let code = response.status().as_u16();
            let text = response.body_mut().read_to_string().unwrap_or_default();
            match code {
                404 => continue,
                200 => {}
                _ => return Err(format!("GET {url} answered {code}: {text}")),
            }
            let json: serde_json::Value = serde_json::from_str(&text)
                .map_err(|error| format!("GET {url}: not JSON ({error}): {text}"))?;
            let values = &json["values"];
            let (Some(count), Some(sum)) = (values["n"].as_u64(), values["total"].as_i64()) else {
                return Err(format!("GET {url}: no n and total: {text}"));
            };
            view.keys.insert(key.clone(), KeyTotals { count, sum });
        }
        if let Some((key, totals)) = view.keys.iter().next() {
            self.cli_agrees(key, *totals)?;
        }
        Ok(view)
    }

    /// `mongoose state --config mongoose.toml agg/agg KEY` (the command line over the
    /// same route, with the config's token) must answer what the route answered.
    fn cli_agrees(&self, key: &str, totals: KeyTotals) -> Result<(), String> {
        let output = self
            .mongoose(&[
                "state",
                "--config",
                "mongoose.toml",
                AGGREGATE_PROCESSOR,
                key,
            ])
            .output()
            .map_err(|error| format!("cannot run mongoose state: {error}"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let json: serde_json::Value = serde_json::from_str(&stdout).map_err(|error| {
            format!(
                "mongoose state {AGGREGATE_PROCESSOR} {key} printed no JSON ({error}; exit {:?}): {stdout} {}",
                output.status.code(),
                String::from_utf8_lossy(&output.stderr)
            )
        })?;
        let values = &json["values"];
        let said = (values["n"].as_u64(), values["total"].as_i64());
        if said != (Some(totals.count), Some(totals.sum)) {
            return Err(format!(
                "mongoose state {AGGREGATE_PROCESSOR} {key} answered {values}, the state route n = {} and total = {}",
                totals.count, totals.sum
            ));
        }
        Ok(())
    }

    /// The input lines the dead-letter file's letters carry (a line that is no dead
    /// letter is kept as it is: the check calls it invented).
    pub fn dead_letters(&self) -> Vec<String> {
        let text = std::fs::read_to_string(self.path(DEAD_LETTER_FILE)).unwrap_or_default();
        text.lines()
            .map(|line| dead_letter_line(line).unwrap_or_else(|| line.to_owned()))
            .collect()
    }
}
