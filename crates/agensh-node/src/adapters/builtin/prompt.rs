//! The system prompt: short, because a small local model pays for every token of it on
//! every cold request. Who the agent is, where it works, how to act, how to share work and
//! how to end a turn; in JSON style also one line per tool (the schema is enforced by the
//! decoder, not read by the model).

use super::actions::{signature_line, ToolSpec, END_TURN};

/// Characters of a tool's description in its line.
const DESCRIPTION_CHARS: usize = 72;

/// The system prompt for worker `worker`; `json` for the JSON-action style.
///
/// Tuned on Qwen2.5-Coder-0.5B (JSON style): the file tools first, `write_file` on top and
/// `end_turn` listed as one more tool; no advice paragraphs (each one made the model more
/// likely to end the turn at once or to run a file it had not written).
pub fn system_prompt(worker: &str, specs: &[ToolSpec], json: bool) -> String {
    let mut s = format!(
        "You are {worker}, a coding agent in a team of agents sharing one git repository. \
         Your working directory is your checkout of it, on branch {worker}/work; \
         file paths are relative to it. Changes left uncommitted are committed at the end of each turn.\n"
    );
    let share = format!(
        "To share your work: run `git add -A && git commit -m \"<message>\" && git push origin HEAD`, \
         then pr_open with branch {worker}/work, then pr_merge.\n"
    );
    if !json {
        s.push_str(
            "Use your tools: write_file, run (a shell in your checkout), read_file, edit_file and \
             list_files for the code; the other tools are the team's (board, messages, pull requests). \
             Work in small steps and check your work with run. \
             When the task is done, answer with a short summary and no tool call: that ends your turn.\n",
        );
        s.push_str(&share);
        return s;
    }
    s.push_str(
        "Each answer is one JSON action: {\"tool\": \"<name>\", \"args\": {...}}. \
         You then see its result and choose the next action.\n\nTools for files and shell:\n",
    );
    for spec in specs.iter().filter(|t| !t.org) {
        s.push_str(&format!("- {}\n", signature_line(spec, DESCRIPTION_CHARS)));
    }
    s.push_str(&format!("- {END_TURN}(summary): The task is done.\n"));
    if specs.iter().any(|t| t.org) {
        s.push_str("\nTeam tools (board, messages, pull requests):\n");
        for spec in specs.iter().filter(|t| t.org) {
            s.push_str(&format!("- {}\n", signature_line(spec, DESCRIPTION_CHARS)));
        }
        s.push_str(&share);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::actions::workspace_specs;
    use super::*;

    #[test]
    fn the_json_prompt_lists_each_tool_on_one_line() {
        let mut specs = workspace_specs();
        specs.push(ToolSpec {
            name: "board_write".into(),
            description: "Append a record to the shared board, which every worker reads. More.".into(),
            schema: serde_json::json!({"type":"object","properties":{"kind":{},"text":{}},"required":["kind","text"]}),
            org: true,
        });
        let p = system_prompt("w01", &specs, true);
        assert!(p.contains("You are w01"));
        assert!(p.contains("branch w01/work"));
        assert!(p.contains("- write_file(path, content): "));
        assert!(p.contains(
            "- board_write(kind, text): Append a record to the shared board, which every worker reads.\n"
        ));
        assert!(p.contains("end_turn"));
        let t = system_prompt("w01", &specs, false);
        assert!(!t.contains("board_write") && !t.contains("end_turn"));
        assert!(t.len() < p.len());
    }
}
