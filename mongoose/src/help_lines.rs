//! `mongoose -h` stays short (issue 39, item 8): every subcommand's and every
//! argument's short help is one line; the details are in the long form (`--help`),
//! which clap takes from a doc comment's paragraphs after the first.

use clap::CommandFactory as _;

/// The longest short help (`-h`) of a subcommand or an argument.
const SHORT_HELP_MAX: usize = 100;

/// Every short help over [`SHORT_HELP_MAX`] characters, or with a line break, in the
/// command tree below `command` (named by its path: `mongoose journal tail`).
fn long_short_helps(command: &clap::Command, path: &str, found: &mut Vec<String>) {
    let mut check = |what: String, text: Option<&clap::builder::StyledStr>| {
        let text = text.map(ToString::to_string).unwrap_or_default();
        if text.chars().count() > SHORT_HELP_MAX || text.contains('\n') {
            found.push(format!("{what} ({} chars): {text}", text.chars().count()));
        }
    };
    check(path.to_owned(), command.get_about());
    for argument in command.get_arguments() {
        check(
            format!("{path} --{}", argument.get_id()),
            argument.get_help(),
        );
    }
    for sub in command.get_subcommands() {
        long_short_helps(sub, &format!("{path} {}", sub.get_name()), found);
    }
}

#[test]
fn every_short_help_is_one_line_of_at_most_100_characters() {
    let mut found = Vec::new();
    long_short_helps(&super::Cli::command(), "mongoose", &mut found);
    assert!(
        found.is_empty(),
        "short helps too long (move the details to a second paragraph of the doc comment: \
         clap shows it with --help):\n{}",
        found.join("\n")
    );
}
