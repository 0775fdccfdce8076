//! The configs: rsyslog's (imfile -> omfile) and ours (a `forward` processor into a
//! `file` sink).

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
        r#"# written by cargo xtask versus-rsyslog
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

/// Our config: the file feed `lines` (COMMITED) forwarded by a `forward` processor into
/// the file sink `out`.
pub(crate) fn mongoose_config(input: &Path, output: &Path) -> String {
    format!(
        r#"# written by cargo xtask versus-rsyslog
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
