//! The configs: rsyslog's (imfile -> omfile), syslog-ng's (file source -> file
//! destination) and ours (a `forward` processor into a `file` sink).

use std::path::Path;

/// Quotes a path for rsyslog's RainerScript or TOML (both take a double-quoted string
/// with backslash escapes).
fn quoted(path: &Path) -> String {
    let text = path.display().to_string();
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// rsyslog's config: imfile reads `input` from its beginning (`freshStartTail="off"`)
/// into a ruleset of its own (rsyslog's internal messages stay out of the output), one
/// main-queue worker, a direct action queue, and omfile writes the message text alone
/// (`%msg%` of an imfile line has no leading space), unescaped.
pub(crate) fn rsyslog_config(
    input: &Path,
    output: &Path,
    work_directory: &Path,
    line_bytes: u64,
) -> String {
    // room for the longest line and then some: rsyslog truncates at maxMessageSize
    let max_message_size = (line_bytes + 1024).max(8192);
    format!(
        r#"# written by cargo mongoose-bench versus-rsyslog
global(
  workDirectory={work}
  maxMessageSize="{max_message_size}"
  parser.escapeControlCharactersOnReceive="off"
)
main_queue(queue.workerThreads="1")
module(load="imfile" mode="inotify")
template(name="message_only" type="string" string="%msg%\n")
ruleset(name="copy") {{
  action(type="omfile" file={output} template="message_only" queue.type="Direct")
}}
input(type="imfile" file={input} tag="t" ruleset="copy" freshStartTail="off" addMetadata="off")
"#,
        work = quoted(work_directory),
        output = quoted(output),
        input = quoted(input),
    )
}

/// syslog-ng's config: a `file()` source read from its beginning (a fresh persist file
/// each run), each line taken whole (`flags(no-parse)`: the message is the line), into a
/// `file()` destination that writes the message alone, unescaped, with flow control
/// (the source waits for the destination instead of dropping).
pub(crate) fn syslog_ng_config(input: &Path, output: &Path, line_bytes: u64) -> String {
    let max_message_size = (line_bytes + 1024).max(8192);
    format!(
        r#"# written by cargo mongoose-bench versus-rsyslog
@version: 3.38
options {{ log-msg-size({max_message_size}); stats_freq(0); }};
source s_input {{ file({input} follow-freq(1) flags(no-parse) log-fetch-limit(1000) log-iw-size(100000)); }};
destination d_output {{ file({output} template("${{MESSAGE}}\n") template-escape(no)); }};
log {{ source(s_input); destination(d_output); flags(flow-control); }};
"#,
        input = quoted(input),
        output = quoted(output),
    )
}

/// Our config: the file feed `lines` (COMMITED) forwarded by a `forward` processor into
/// the file sink `out`.
pub(crate) fn mongoose_config(input: &Path, output: &Path) -> String {
    format!(
        r#"# written by cargo mongoose-bench versus-rsyslog
[[feeds]]
name = "lines"
source = "file"
path = {input}
read_strategy = "COMMITED"

[[sinks]]
name = "out"
kind = "file"
path = {output}

[[groups]]
name = "forward"

[[groups.processors]]
name = "copy"
kind = "forward"
settings = {{ feed = "lines", sink = "out" }}
"#,
        input = quoted(input),
        output = quoted(output),
    )
}
