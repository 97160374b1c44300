//! The worker prompt: one template for every worker (in `prompts/` at the repository root,
//! readable and versioned with the code), filled with the worker's own values. Task packs
//! add fragments.

use crate::error::{Error, Result};

/// The launch prompt every worker gets.
pub const WORKER_TEMPLATE: &str = include_str!("../../../prompts/worker.md");
/// The prompt an idle worker gets.
pub const CONTINUE_TEMPLATE: &str = include_str!("../../../prompts/continue.md");
/// The prompt right after a turn that reached its step limit: carry on.
pub const RESUME_TEMPLATE: &str = include_str!("../../../prompts/resume.md");
/// The first prompt after a turn interrupted for urgent news (`run.interrupt_after_secs`):
/// `turn_secs`, `bound`, `news` (the events prompt).
pub const INTERRUPTED_TEMPLATE: &str = include_str!("../../../prompts/interrupted.md");
/// A deadline notice.
pub const DEADLINE_TEMPLATE: &str = include_str!("../../../prompts/deadline.md");
/// The first prompt after the worker's agent failed and was restarted.
pub const RESTART_TEMPLATE: &str = include_str!("../../../prompts/restart.md");
/// The first prompt of a worker that a spent budget stopped, once the budget is raised.
pub const BUDGET_RAISED_TEMPLATE: &str = include_str!("../../../prompts/budget_raised.md");
/// The task pack of a ProgramBench run (`agensh bench programbench`): `task`, `repository`,
/// `language`, `reference`, `checkpoint_minutes`.
pub const PROGRAMBENCH_PACK_TEMPLATE: &str = include_str!("../../../prompts/programbench.md");

/// Fills `{{name}}` placeholders from `values`; a placeholder without a value is an error
/// (a typo in a template must not reach an agent as literal braces).
pub fn render(template: &str, values: &[(&str, &str)]) -> Result<String> {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or_else(|| {
            Error::invalid(
                "bad_template",
                "a template has `{{` without `}}` — close the placeholder",
            )
        })?;
        let name = after[..end].trim();
        let value = values
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| *v)
            .ok_or_else(|| {
                Error::invalid(
                    "bad_template",
                    format!("the template uses {{{{{name}}}}}, which has no value — fix the placeholder's name"),
                )
            })?;
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// What the launch prompt is filled with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerPrompt<'a> {
    pub worker_id: &'a str,
    pub worker_count: usize,
    pub goal: &'a str,
    pub checkout: &'a str,
    pub branch: &'a str,
    /// When the run ends, as a sentence (empty for no limit).
    pub deadline: &'a str,
    /// Fragments of the task pack, appended in order.
    pub pack: &'a [String],
}

impl WorkerPrompt<'_> {
    /// The launch prompt for this worker.
    pub fn render(&self) -> Result<String> {
        let deadline = if self.deadline.is_empty() {
            String::new()
        } else {
            format!("\n# Time\n\n{}\n", self.deadline)
        };
        let pack: String = self
            .pack
            .iter()
            .map(|f| format!("\n{}\n", f.trim_end()))
            .collect();
        render(
            WORKER_TEMPLATE,
            &[
                ("worker_id", self.worker_id),
                ("worker_count", &self.worker_count.to_string()),
                ("goal", self.goal),
                ("checkout", self.checkout),
                ("branch", self.branch),
                ("deadline", &deadline),
                ("pack", &pack),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prompt<'a>(id: &'a str, pack: &'a [String]) -> WorkerPrompt<'a> {
        WorkerPrompt {
            worker_id: id,
            worker_count: 8,
            goal: "build a calculator",
            checkout: "/org/workers/w01",
            branch: "w01/work",
            deadline: "",
            pack,
        }
    }

    #[test]
    fn placeholders_are_filled() {
        assert_eq!(
            render("hi {{ who }}!", &[("who", "w01")]).unwrap(),
            "hi w01!"
        );
    }

    #[test]
    fn an_unknown_placeholder_is_an_error() {
        let e = render("hi {{whom}}", &[("who", "w01")]).unwrap_err();
        assert!(e.message.contains("{{whom}}"), "{}", e.message);
    }

    #[test]
    fn every_template_renders_with_the_values_its_callers_give() {
        assert!(prompt("w01", &[]).render().is_ok());
        assert!(render(
            CONTINUE_TEMPLATE,
            &[("idle_for", "5 minutes"), ("worker_id", "w01")]
        )
        .is_ok());
        assert!(render(RESUME_TEMPLATE, &[("worker_id", "w01")]).is_ok());
        let interrupted = render(
            INTERRUPTED_TEMPLATE,
            &[
                ("worker_id", "w01"),
                ("turn_secs", "300"),
                ("bound", "2 min"),
                ("news", "- DM from w02: stop"),
            ],
        )
        .unwrap();
        assert!(
            interrupted.ends_with("- DM from w02: stop\n"),
            "{interrupted}"
        );
        assert!(render(BUDGET_RAISED_TEMPLATE, &[("worker_id", "w01")]).is_ok());
        assert!(render(
            PROGRAMBENCH_PACK_TEMPLATE,
            &[
                ("task", "t"),
                ("repository", "o/r"),
                ("language", "c"),
                ("reference", "/r"),
                ("checkpoint_minutes", "30")
            ]
        )
        .is_ok());
        assert!(render(
            DEADLINE_TEMPLATE,
            &[("worker_id", "w01"), ("minutes_left", "5"), ("advice", "x")]
        )
        .is_ok());
        assert!(render(
            RESTART_TEMPLATE,
            &[
                ("worker_id", "w01"),
                ("error", "exit status 3"),
                ("restart", "1"),
                ("max_restarts", "5"),
                ("previous_prompt", "p")
            ]
        )
        .is_ok());
    }

    #[test]
    fn prompts_of_two_workers_differ_only_in_their_ids() {
        let a = prompt("w01", &[]).render().unwrap();
        let mut b = prompt("w02", &[]);
        b.checkout = "/org/workers/w02";
        b.branch = "w02/work";
        let b = b.render().unwrap();
        assert_eq!(a.replace("w01", "wXX"), b.replace("w02", "wXX"));
        assert!(!a.contains("{{"));
    }

    #[test]
    fn the_prompt_teaches_the_loop_and_the_record_rules() {
        let p = prompt("w01", &[]).render().unwrap();
        for needle in [
            "Gather context",
            "claim",
            "Verify",
            "PATCH_SUMMARY",
            "100 characters",
            "FAIL",
        ] {
            assert!(p.contains(needle), "missing {needle}");
        }
    }

    #[test]
    fn task_pack_fragments_are_appended() {
        let pack = vec!["# ProgramBench\nBuild ./executable with compile.sh.".to_string()];
        let p = prompt("w01", &pack).render().unwrap();
        assert!(p
            .trim_end()
            .ends_with("Build ./executable with compile.sh."));
    }
}
