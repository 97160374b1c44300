//! Small models loop: the same action again and again, or a cycle of a few (edit, run,
//! edit, run…) with the same results each round. [`Loops`] watches the actions of a
//! session and says when to warn the model and when to end the turn.

use std::collections::VecDeque;

/// After this many identical repeats of an action with the same result, the result says so.
pub const REPEAT_WARN: u32 = 2;
/// After this many, the turn ends (stop reason `repeating`): the next prompt brings news.
pub const REPEAT_END: u32 = 4;
/// A cycle repeated this many times (A, B, A, B) is pointed out…
pub const CYCLE_WARN: usize = 2;
/// …and this many times (A, B, A, B, A, B) ends the turn.
pub const CYCLE_END: usize = 3;
/// The longest cycle looked for, in actions.
const LONGEST_CYCLE: usize = 3;

/// One action: its tool, its tool and arguments as text, and its result.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Step {
    tool: String,
    key: String,
    result: String,
}

/// What to do about the action just done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing.
    Fine,
    /// Append this note to the result.
    Warn(String),
    /// Append this note, and end the turn after this step.
    End(String),
}

/// The recent actions of a session.
#[derive(Debug, Default)]
pub struct Loops {
    recent: VecDeque<Step>,
}

impl Loops {
    /// Records an action (`key`: the tool and its arguments) and its result.
    pub fn push(&mut self, tool: &str, key: String, result: &str) -> Verdict {
        self.recent.push_back(Step {
            tool: tool.to_string(),
            key,
            result: result.to_string(),
        });
        let keep = LONGEST_CYCLE * CYCLE_END;
        while self.recent.len() > keep {
            self.recent.pop_front();
        }
        let repeats = self.repeats();
        if repeats >= REPEAT_WARN {
            let note = format!(
                "note: this is the {} time in a row you did exactly this and got exactly this; doing it again will not change the result — do something different (fix what the result says, read a file, or take another task)",
                ordinal(repeats + 1)
            );
            return if repeats >= REPEAT_END {
                Verdict::End(note)
            } else {
                Verdict::Warn(note)
            };
        }
        if let Some((period, rounds)) = self.cycle() {
            if rounds < CYCLE_WARN {
                return Verdict::Fine;
            }
            let names: Vec<&str> = self
                .recent
                .iter()
                .skip(self.recent.len() - period)
                .map(|s| s.tool.as_str())
                .collect();
            let note = format!(
                "note: your last {} actions were the same {period} actions ({}) done {rounds} times over, with the same results every time; another round will not change anything — do something else: read the error in the last result, read the file as it is now, and make a different change, or take other work",
                period * rounds,
                names.join(", then ")
            );
            return if rounds >= CYCLE_END {
                Verdict::End(note)
            } else {
                Verdict::Warn(note)
            };
        }
        Verdict::Fine
    }

    /// Forgets everything (after the turn ended for looping).
    pub fn reset(&mut self) {
        self.recent.clear();
    }

    /// How many times in a row the last action repeats the one before it.
    fn repeats(&self) -> u32 {
        let Some(last) = self.recent.back() else {
            return 0;
        };
        self.recent
            .iter()
            .rev()
            .skip(1)
            .take_while(|s| *s == last)
            .count() as u32
    }

    /// The shortest cycle of two or more different actions the recent ones end with, and
    /// how many rounds of it they end with.
    fn cycle(&self) -> Option<(usize, usize)> {
        let steps: Vec<&Step> = self.recent.iter().collect();
        (2..=LONGEST_CYCLE).find_map(|p| {
            let n = steps.len();
            if n < 2 * p {
                return None;
            }
            let block = &steps[n - p..];
            if block.iter().all(|s| *s == block[0]) {
                return None;
            }
            let rounds = (1..)
                .take_while(|r| r * p <= n && steps[n - r * p..n - (r - 1) * p] == *block)
                .count();
            (rounds >= 2).then_some((p, rounds))
        })
    }
}

/// "3rd", "4th", … for the repeat note.
fn ordinal(n: u32) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, r) if r != 11 => "st",
        (2, r) if r != 12 => "nd",
        (3, r) if r != 13 => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn push(l: &mut Loops, a: &str) -> Verdict {
        l.push(a, format!("{a} args"), &format!("{a} result"))
    }

    #[test]
    fn repeats_are_warned_about_then_end_the_turn() {
        let mut l = Loops::default();
        assert_eq!(push(&mut l, "read"), Verdict::Fine);
        assert_eq!(push(&mut l, "read"), Verdict::Fine);
        let Verdict::Warn(note) = push(&mut l, "read") else {
            panic!("no warning on the 3rd")
        };
        assert!(note.contains("3rd time in a row"), "{note}");
        assert!(matches!(push(&mut l, "read"), Verdict::Warn(_)));
        assert!(matches!(push(&mut l, "read"), Verdict::End(_)));
    }

    #[test]
    fn a_cycle_of_two_is_warned_about_then_ends_the_turn() {
        let mut l = Loops::default();
        for a in ["edit", "run", "edit"] {
            assert_eq!(push(&mut l, a), Verdict::Fine);
        }
        let Verdict::Warn(note) = push(&mut l, "run") else {
            panic!("no warning after edit, run, edit, run")
        };
        assert!(
            note.contains("(edit, then run) done 2 times over"),
            "{note}"
        );
        assert!(note.contains("make a different change"), "{note}");
        // run, edit, run, edit is the same cycle seen from its second action.
        assert!(matches!(push(&mut l, "edit"), Verdict::Warn(_)));
        assert!(matches!(push(&mut l, "run"), Verdict::End(_)));
        l.reset();
        assert_eq!(push(&mut l, "run"), Verdict::Fine);
    }

    #[test]
    fn a_cycle_of_three_is_found_and_a_new_result_breaks_a_cycle() {
        let mut l = Loops::default();
        for a in ["read", "edit", "run", "read", "edit"] {
            assert_eq!(push(&mut l, a), Verdict::Fine);
        }
        assert!(
            matches!(push(&mut l, "run"), Verdict::Warn(n) if n.contains("(read, then edit, then run)"))
        );
        let mut l = Loops::default();
        push(&mut l, "edit");
        push(&mut l, "run");
        push(&mut l, "edit");
        assert_eq!(
            l.push("run", "run args".into(), "run passed"),
            Verdict::Fine
        );
    }

    #[test]
    fn ordinals_read_right() {
        let o: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22].map(ordinal).to_vec();
        assert_eq!(
            o,
            ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd"]
        );
    }
}
