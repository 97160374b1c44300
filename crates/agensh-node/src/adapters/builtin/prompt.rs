//! The system prompt: short, because a small local model pays for every token of it on
//! every cold request. Who the agent is, where it works, how to act, how to share work and
//! how to end a turn; in JSON style also one line per tool (the schema is enforced by the
//! decoder, not read by the model).

use agensh_domain::prompt::WORKER_TEMPLATE;

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
    let share = if specs.iter().any(|t| t.org && t.name == "ship") {
        "To share your work: when your tests pass, call ship with a title and a summary; it \
         commits and pushes what you changed, opens the pull request, merges it and releases \
         your claim.\n"
            .to_string()
    } else {
        format!(
            "To share your work: run `git add -A && git commit -m \"<message>\" && git push origin HEAD`, \
             then pr_open with branch {worker}/work, then pr_merge.\n"
        )
    };
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

/// The system prompt of small mode: who the agent is, how to answer, and one line per
/// tool (its few tools); nothing about the team's ways, which the worker prompt says.
pub fn small_system_prompt(worker: &str, specs: &[ToolSpec], json: bool) -> String {
    let mut s = format!(
        "You are {worker}, a coding agent. You work in your own checkout of the team's git repository; file paths are relative to it.\n"
    );
    if !json {
        s.push_str("Use your tools. When the task is done, answer with a short summary and no tool call.\n");
        return s;
    }
    s.push_str(
        "Each answer is one JSON action, like {\"tool\": \"read_file\", \"args\": {\"path\": \"README.md\"}}; you then see its result.\nTools:\n",
    );
    for spec in specs {
        s.push_str(&format!("- {}\n", signature_line(spec, DESCRIPTION_CHARS)));
    }
    s.push_str(&format!("- {END_TURN}(summary): The task is done.\n"));
    s
}

/// The launch prompt (the worker template of `prompts/worker.md`, filled) cut down for
/// small mode: the goal, the task pack's sections and the time limit stay; the template's
/// own sections (the loop, the board's rules, working with peers) become a few numbered
/// steps with the small mode's tools. Text before the template (a restart's preamble) is
/// kept. `None` when `prompt` holds no launch prompt.
pub fn small_worker_prompt(prompt: &str, worker: &str, ship: bool) -> Option<String> {
    let intro = WORKER_TEMPLATE
        .split("{{")
        .next()
        .filter(|i| !i.is_empty())?;
    let start = prompt.find(intro)?;
    let (before, launch) = prompt.split_at(start);
    let known: Vec<&str> = WORKER_TEMPLATE
        .lines()
        .filter_map(|l| l.strip_prefix("# "))
        .collect();
    let mut goal: Option<String> = None;
    let mut time = String::new();
    let mut extra = String::new();
    let mut heading: Option<&str> = None;
    let mut body = String::new();
    let lines = launch.lines().chain(std::iter::once("# "));
    for line in lines {
        let Some(next) = line.strip_prefix("# ") else {
            body.push_str(line);
            body.push('\n');
            continue;
        };
        match heading {
            Some("The goal") => goal = Some(body.trim().to_string()),
            Some("Time") => time = format!("\n{}\n", body.trim()),
            Some(h) if !known.contains(&h) => {
                extra.push_str(&format!("\n# {h}\n{}\n", body.trim_end()));
            }
            _ => {}
        }
        heading = Some(next.trim());
        body.clear();
    }
    let goal = goal?;
    let branch = format!("{worker}/work");
    let finish = if ship {
        "4. When the test passes, call ship: it commits, pushes, merges and releases your claim."
            .to_string()
    } else {
        format!(
            "4. When the test passes, run `git add -A && git commit -m \"implement the part\" && git push origin HEAD`, then pr_open with branch {branch}, then pr_merge."
        )
    };
    Some(format!(
        "{before}You are worker {worker} in a team of coding agents. Each of you takes one part of the goal at a time.\n\n\
         # The goal\n\n{goal}\n\n\
         # Steps\n\n\
         1. claim one part nobody holds: claim with text, label and paths (the files you will change). The answer names those files and their tests. If another worker holds the part, claim another one.\n\
         2. Write the part's code with write_file: give the path, then send the whole file in a code block. Do not change tests unless the goal asks for it.\n\
         3. Check it with run (the part's test).\n\
         {finish} If you cannot make it pass, post a FAIL with board_write saying what you tried.\n\
         5. Then claim the next part: the claim you held is let go.\n{extra}{time}"
    ))
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

    #[test]
    fn the_prompt_teaches_ship_when_the_hub_offers_it() {
        let mut specs = workspace_specs();
        let org = |name: &str| ToolSpec {
            name: name.into(),
            description: "An organization tool.".into(),
            schema: serde_json::json!({"type":"object","properties":{}}),
            org: true,
        };
        specs.push(org("pr_open"));
        let without = system_prompt("w01", &specs, true);
        assert!(without.contains("then pr_open with branch w01/work, then pr_merge"));
        specs.push(org("ship"));
        for json in [true, false] {
            let with = system_prompt("w01", &specs, json);
            assert!(
                with.contains("call ship with a title and a summary"),
                "{with}"
            );
            assert!(!with.contains("then pr_merge"), "{with}");
        }
    }

    fn launch(pack: &[String], deadline: &str) -> String {
        agensh_domain::prompt::WorkerPrompt {
            worker_id: "w01",
            worker_count: 4,
            goal: "Make the tests pass.\nOne module per part.",
            checkout: "/org/workers/w01",
            branch: "w01/work",
            deadline,
            pack,
        }
        .render()
        .unwrap()
    }

    #[test]
    fn the_small_worker_prompt_keeps_the_goal_the_pack_and_the_time() {
        let pack = vec!["# Pack\nBuild with make.".to_string()];
        let full = launch(&pack, "The run ends at 12:00 (UTC).");
        let small = small_worker_prompt(&full, "w01", true).unwrap();
        assert!(small.starts_with("You are worker w01 in a team"), "{small}");
        assert!(
            small.contains("# The goal\n\nMake the tests pass.\nOne module per part.\n"),
            "{small}"
        );
        assert!(small.contains("call ship"), "{small}");
        assert!(small.contains("# Pack\nBuild with make."), "{small}");
        assert!(small.contains("The run ends at 12:00 (UTC)."), "{small}");
        assert!(
            !small.contains("Board records") && !small.contains("pr_review"),
            "{small}"
        );
        assert!(
            small.len() * 2 < full.len(),
            "{} of {}",
            small.len(),
            full.len()
        );
        let without = small_worker_prompt(&full, "w01", false).unwrap();
        assert!(
            without.contains("pr_open with branch w01/work"),
            "{without}"
        );
        assert!(!without.contains('<'), "a placeholder to copy: {without}");
    }

    #[test]
    fn a_restart_preamble_stays_and_other_prompts_are_left_alone() {
        let full = launch(&[], "");
        let restart = format!("Worker w01: your agent was restarted. The prompt:\n\n{full}");
        let small = small_worker_prompt(&restart, "w01", true).unwrap();
        assert!(
            small.starts_with(
                "Worker w01: your agent was restarted. The prompt:\n\nYou are worker w01 in a team"
            ),
            "{small}"
        );
        assert_eq!(
            small_worker_prompt("While you were working, this happened:", "w01", true),
            None
        );
    }

    #[test]
    fn the_small_system_prompt_lists_only_the_tools_it_gets() {
        let specs: Vec<ToolSpec> = workspace_specs()
            .into_iter()
            .filter(|s| s.name != "list_files")
            .collect();
        let p = small_system_prompt("w01", &specs, true);
        assert!(p.contains("You are w01"));
        assert!(p.contains("- write_file(path, content): "));
        assert!(!p.contains("list_files"));
        assert!(p.contains("- end_turn(summary)"));
        assert!(p.len() < system_prompt("w01", &specs, true).len());
        assert!(!small_system_prompt("w01", &specs, false).contains("write_file(path"));
    }
}
