//! Completion for `kubectl kubeflake <TAB>`.
//!
//! kubectl (1.26 and later) completes a plugin's arguments by running
//! `kubectl_complete-<plugin>` from PATH with the words typed so far, the last one being
//! the word to complete (empty after a space). It prints one candidate per line, optionally
//! `candidate<TAB>description`, then `:<directive>` (Cobra's shell-completion directives).
//! The same binary serves both names: installed (or linked) as `kubectl_complete-kubeflake`,
//! it answers completions instead of running a command.
//!
//! The candidates come from the clap definition itself, so they never drift from the
//! commands and flags that exist.

use clap::{Arg, ArgAction, Command};

/// The executable name kubectl looks for.
pub const COMPLETER_NAME: &str = "kubectl_complete-kubeflake";

/// Cobra's directives: let the shell complete file names, or offer nothing but ours.
const DIRECTIVE_DEFAULT: u32 = 0;
const DIRECTIVE_NO_FILE: u32 = 4;

/// Whether this process was started under the completer's name.
pub fn invoked_as_completer(argv0: &str) -> bool {
    std::path::Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n == COMPLETER_NAME)
}

/// The completion answer for `words` (the plugin's arguments, the last one being completed):
/// the lines kubectl expects, the directive line last.
pub fn answer(mut root: Command, words: &[String]) -> String {
    root.build();
    let (current, done) = match words.split_last() {
        Some((last, rest)) => (last.as_str(), rest),
        None => ("", &[][..]),
    };
    let mut here = &root;
    let mut pending: Option<&Arg> = None;
    // Positional words given to the innermost command so far.
    let mut positionals = 0;
    // After `--` every word is positional: no flags are offered.
    let mut only_positionals = false;
    for word in done {
        if pending.take().is_some() {
            continue;
        }
        if word == "--" {
            only_positionals = true;
            break;
        }
        if let Some(long) = word.strip_prefix("--") {
            if !long.contains('=') {
                pending = find_arg(here, |a| a.get_long() == Some(long)).filter(|a| takes_value(a));
            }
        } else if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `-o` waits for its value; `-ojson` carries it.
            let mut chars = shorts.chars();
            if let (Some(c), None) = (chars.next(), chars.next()) {
                pending = find_arg(here, |a| a.get_short() == Some(c)).filter(|a| takes_value(a));
            }
        } else if let Some(sub) = here.find_subcommand(word) {
            here = sub;
            positionals = 0;
        } else {
            positionals += 1;
        }
    }
    let mut lines = Vec::new();
    let directive = if let Some(arg) = pending {
        values_of(arg, current, &mut lines)
    } else if current.starts_with('-') && !only_positionals {
        for arg in visible_args(here) {
            if let Some(long) = arg.get_long() {
                push(&mut lines, &format!("--{long}"), arg.get_help(), current);
            }
        }
        DIRECTIVE_NO_FILE
    } else if here.has_subcommands() {
        for sub in here.get_subcommands().filter(|s| !s.is_hide_set()) {
            push(&mut lines, sub.get_name(), sub.get_about(), current);
        }
        DIRECTIVE_NO_FILE
    } else {
        // A positional: its fixed choices if it has any (a shell name); an ID or a sequence
        // name has none, and file names would be wrong.
        match here.get_positionals().nth(positionals) {
            Some(arg) => values_of(arg, current, &mut lines),
            None => DIRECTIVE_NO_FILE,
        }
    };
    lines.push(format!(":{directive}"));
    lines.join("\n") + "\n"
}

fn takes_value(arg: &Arg) -> bool {
    matches!(arg.get_action(), ArgAction::Set | ArgAction::Append)
}

/// The options in scope: the command's own (clap's `build` has copied the global ones of
/// its ancestors into it).
fn visible_args(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
}

fn find_arg(cmd: &Command, matches: impl Fn(&Arg) -> bool) -> Option<&Arg> {
    visible_args(cmd).find(|a| matches(a))
}

/// Candidates for an option's value: its fixed choices, or file names for a path.
fn values_of(arg: &Arg, current: &str, lines: &mut Vec<String>) -> u32 {
    let choices = arg.get_possible_values();
    if !choices.is_empty() {
        for v in choices.iter().filter(|v| !v.is_hide_set()) {
            push(lines, v.get_name(), v.get_help(), current);
        }
        return DIRECTIVE_NO_FILE;
    }
    let is_path = arg
        .get_value_names()
        .is_some_and(|names| names.iter().any(|n| *n == "FILE" || *n == "PATH"));
    if is_path {
        DIRECTIVE_DEFAULT
    } else {
        DIRECTIVE_NO_FILE
    }
}

fn push(
    lines: &mut Vec<String>,
    candidate: &str,
    help: Option<&clap::builder::StyledStr>,
    current: &str,
) {
    if !candidate.starts_with(current) {
        return;
    }
    match help.map(|h| h.to_string()) {
        Some(h) if !h.is_empty() => {
            let first = h.lines().next().unwrap_or_default().trim_end_matches('.');
            lines.push(format!("{candidate}\t{first}"));
        }
        _ => lines.push(candidate.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::Cli;
    use clap::CommandFactory;

    fn complete(words: &[&str]) -> Vec<String> {
        let words: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        answer(Cli::command(), &words)
            .lines()
            .map(|l| l.split('\t').next().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn an_empty_word_offers_every_command_and_no_file_names() {
        let got = complete(&[""]);
        for cmd in ["decode", "compose", "plan", "slots", "completion"] {
            assert!(got.contains(&cmd.to_string()), "{cmd}: {got:?}");
        }
        assert_eq!(got.last().map(String::as_str), Some(":4"));
    }

    #[test]
    fn a_prefix_narrows_the_commands() {
        assert_eq!(complete(&["pl"]), ["plan", ":4"]);
    }

    #[test]
    fn a_dash_offers_the_commands_flags_and_the_global_ones() {
        let got = complete(&["plan", "--"]);
        for flag in ["--replicas", "--worker-bits", "--output", "--verbose"] {
            assert!(got.contains(&flag.to_string()), "{flag}: {got:?}");
        }
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), got.len(), "each flag once: {got:?}");
        for other in ["--time", "--all"] {
            assert!(
                !got.contains(&other.to_string()),
                "{other} is not plan's: {got:?}"
            );
        }
        assert_eq!(complete(&["plan", "--repl"]), ["--replicas", ":4"]);
    }

    #[test]
    fn an_option_with_fixed_values_offers_them_and_a_path_option_lets_the_shell_complete_files() {
        assert_eq!(
            complete(&["decode", "-o", ""]),
            ["table", "json", "yaml", ":4"]
        );
        assert_eq!(complete(&["decode", "--output", "j"]), ["json", ":4"]);
        assert_eq!(complete(&["decode", "-f", ""]), [":0"]);
        assert_eq!(complete(&["completion", ""])[..2], ["bash", "elvish"]);
    }

    #[test]
    fn unknown_words_and_flags_are_skipped_and_the_answer_stays_well_formed() {
        assert_eq!(complete(&["--nonsense", "zzz", "-", "pl"]), ["plan", ":4"]);
        assert_eq!(
            complete(&["plan", "--replicas", ""]),
            [":4"],
            "a number: no files"
        );
        assert_eq!(
            complete(&["decode", "--", "--"]),
            [":4"],
            "after --, only IDs"
        );
        assert_eq!(
            complete(&[]),
            complete(&[""]),
            "no words at all: as after a space"
        );
    }

    #[test]
    fn only_the_completer_name_switches_the_binary_to_completion() {
        assert!(invoked_as_completer(
            "/usr/local/bin/kubectl_complete-kubeflake"
        ));
        assert!(invoked_as_completer("kubectl_complete-kubeflake"));
        assert!(!invoked_as_completer("/usr/local/bin/kubectl-kubeflake"));
    }
}
