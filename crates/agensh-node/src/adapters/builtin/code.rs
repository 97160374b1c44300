//! Small mode's code step. A small model writes code badly inside a JSON string — it
//! breaks the quoting (`"""` became `"`), drops escapes, copies the stub back with its
//! `read_file` header — but well as a plain fenced block, which is how it answers a chat
//! request: the 1.5B model got every part of examples/numkit right in such a request 30
//! times of 30 (scripts/example-fit). So in small mode `write_file` takes only a path; the
//! agent then asks for the file's whole text in a request of its own, with no tools and no
//! JSON schema, shaped like the one the example was measured with: the tests, then the file
//! as it is, then the last failed check if there was one ([`request`]). What the answer's
//! code block holds is written ([`extract`]).

/// The system prompt of the code request.
pub const SYSTEM: &str = "You are a careful programmer. Complete the file so that the tests pass. Answer with the whole file in one code block.";

/// Longest failed check shown in the code request, in characters (its end is kept: the
/// assertion and the traceback's last lines are there).
pub const FAILURE_CHARS: usize = 1500;

/// The fence language of a file, from its extension ("" when unknown).
pub fn language(path: &str) -> &'static str {
    let ext = path.rsplit_once('.').map_or("", |(_, e)| e);
    match ext.to_ascii_lowercase().as_str() {
        "py" => "python",
        "rs" => "rust",
        "js" | "mjs" | "cjs" => "javascript",
        "ts" => "typescript",
        "go" => "go",
        "rb" => "ruby",
        "sh" => "sh",
        "c" | "h" => "c",
        "cc" | "cpp" | "hpp" => "cpp",
        "java" => "java",
        "toml" => "toml",
        "json" => "json",
        "md" => "markdown",
        _ => "",
    }
}

/// `text` in a fenced block of `lang`, ending with a newline before the closing fence.
fn fenced(lang: &str, text: &str) -> String {
    let nl = if text.ends_with('\n') || text.is_empty() {
        ""
    } else {
        "\n"
    };
    format!("```{lang}\n{text}{nl}```")
}

/// The user message of the code request for `path`: its tests (path and text), the file as
/// it is now (`None`: it does not exist yet), and the last failed check (its output).
pub fn request(
    path: &str,
    current: Option<&str>,
    tests: &[(String, String)],
    failure: Option<&str>,
) -> String {
    let mut s = String::new();
    for (p, t) in tests {
        s.push_str(&format!("The tests, {p}:\n{}\n\n", fenced(language(p), t)));
    }
    let lang = language(path);
    match current {
        Some(text) => s.push_str(&format!(
            "The file to complete, {path}:\n{}",
            fenced(lang, text)
        )),
        None => s.push_str(&format!("The file to write, {path}, does not exist yet.")),
    }
    if let Some(f) = failure.map(str::trim).filter(|f| !f.is_empty()) {
        let n = f.chars().count();
        let tail: String = if n > FAILURE_CHARS {
            f.chars().skip(n - FAILURE_CHARS).collect()
        } else {
            f.to_string()
        };
        s.push_str(&format!(
            "\n\nThe last check failed like this; fix the file so it passes:\n{}",
            fenced("", &tail)
        ));
    }
    s
}

/// The command that runs `tests`, when it is plain: Python test files under the
/// checkout, run by module name (`python3 -m unittest tests.test_leap`).
pub fn test_command(tests: &[(String, String)]) -> Option<String> {
    let modules: Vec<String> = tests
        .iter()
        .filter_map(|(p, _)| p.strip_suffix(".py"))
        .filter(|m| {
            m.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '/')
        })
        .map(|m| m.replace('/', "."))
        .collect();
    (!modules.is_empty() && modules.len() == tests.len())
        .then(|| format!("python3 -m unittest {}", modules.join(" ")))
}

/// A fenced block of an answer: its text and whether its closing fence is there.
#[derive(Debug, PartialEq, Eq)]
struct Block {
    text: String,
    closed: bool,
}

fn blocks(answer: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<String> = None;
    for line in answer.split_inclusive('\n') {
        let fence = line.trim_start().starts_with("```");
        match (&mut open, fence) {
            (None, true) => open = Some(String::new()),
            (None, false) => {}
            (Some(text), true) => {
                out.push(Block {
                    text: std::mem::take(text),
                    closed: true,
                });
                open = None;
            }
            (Some(text), false) => text.push_str(line),
        }
    }
    if let Some(text) = open {
        out.push(Block {
            text,
            closed: false,
        });
    }
    out
}

/// Whether a block holds tests rather than the code under test.
fn holds_tests(text: &str) -> bool {
    text.contains("import unittest")
        || text.contains("import pytest")
        || text.contains("#[cfg(test)]")
        || text
            .lines()
            .any(|l| l.trim_start().starts_with("class Test") && l.contains("TestCase"))
}

/// The file text out of the answer to a code request for `path`: its first fenced block
/// that is not a test file (a test file's own block when `path` is one); for a text file
/// (no code language: `.txt`, Markdown, no extension) an answer without a block is the
/// text itself. An answer with no
/// block, only tests, or a block cut off (`cut`: the reply reached its token limit) is
/// refused with what went wrong, for the tool's answer.
pub fn extract(answer: &str, path: &str, cut: bool) -> Result<String, String> {
    let name = path.rsplit('/').next().unwrap_or(path);
    let test_file = name.starts_with("test_") || name.contains("_test.");
    let all = blocks(answer);
    let code = !matches!(language(path), "" | "markdown");
    if all.is_empty() && !code && !answer.trim().is_empty() {
        // A text file: the answer is its text (small models send a line of prose plain).
        return Ok(format!("{}\n", answer.trim()));
    }
    if all.is_empty() {
        return Err(format!(
            "your answer had no code block, so nothing was written to {path}; call write_file again and answer with the whole file in one ``` block"
        ));
    }
    let Some(block) = all.iter().find(|b| test_file || !holds_tests(&b.text)) else {
        return Err(format!(
            "your answer's code block holds tests, not {path}; nothing was written. Call write_file again and send the file itself, not its tests"
        ));
    };
    if !block.closed && cut {
        return Err(format!(
            "your code block was cut off at the reply's token limit, so nothing was written to {path}; write a shorter file"
        ));
    }
    if block.text.trim().is_empty() {
        return Err(format!(
            "your answer's code block is empty, so nothing was written to {path}; send the whole file"
        ));
    }
    Ok(block.text.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_shows_the_tests_then_the_file_then_the_failure() {
        let tests = vec![(
            "tests/test_leap.py".to_string(),
            "import unittest\n".to_string(),
        )];
        let r = request(
            "kit/leap.py",
            Some("def leap(y):\n    pass\n"),
            &tests,
            Some("AssertionError: True != False"),
        );
        let t = r.find("The tests, tests/test_leap.py:\n```python\nimport unittest\n```");
        let f =
            r.find("The file to complete, kit/leap.py:\n```python\ndef leap(y):\n    pass\n```");
        let e = r.find("The last check failed like this; fix the file so it passes:\n```\nAssertionError: True != False\n```");
        assert!(t.is_some() && f.is_some() && e.is_some(), "{r}");
        assert!(t < f && f < e, "{r}");
        let fresh = request("kit/new.py", None, &[], None);
        assert_eq!(fresh, "The file to write, kit/new.py, does not exist yet.");
    }

    #[test]
    fn a_long_failure_keeps_its_end() {
        let long = format!("{}\nAssertionError: the end", "x".repeat(5000));
        let r = request("a.py", Some(""), &[], Some(&long));
        assert!(r.contains("AssertionError: the end"));
        assert!(r.chars().count() < FAILURE_CHARS + 200, "{}", r.len());
    }

    #[test]
    fn the_first_block_that_is_not_a_test_is_the_file() {
        let answer = "Here:\n```python\nimport unittest\nclass TestX(unittest.TestCase): pass\n```\nand\n```python\ndef f():\n    return \"\"\"quoted\"\"\"\n```\nDone.";
        assert_eq!(
            extract(answer, "kit/f.py", false).unwrap(),
            "def f():\n    return \"\"\"quoted\"\"\"\n"
        );
        // A test file asked for: its block is the answer.
        assert!(extract(answer, "tests/test_f.py", false)
            .unwrap()
            .contains("TestX"));
    }

    #[test]
    fn answers_without_a_usable_block_are_refused_with_what_to_do() {
        let none = extract("def f(): pass", "kit/f.py", false).unwrap_err();
        assert!(none.contains("no code block"), "{none}");
        // A text file's text may come plain.
        assert_eq!(
            extract("hello from w01\n\n", "w01.txt", false).unwrap(),
            "hello from w01\n"
        );
        assert_eq!(extract("```\nhi\n```", "NOTES.md", false).unwrap(), "hi\n");
        let tests = extract("```python\nimport unittest\n```", "kit/f.py", false).unwrap_err();
        assert!(tests.contains("holds tests"), "{tests}");
        let cut = extract("```python\ndef f():\n    x = [", "kit/f.py", true).unwrap_err();
        assert!(cut.contains("cut off"), "{cut}");
        // Not cut: the closing fence was just left out.
        assert_eq!(
            extract("```python\ndef f():\n    pass\n", "kit/f.py", false).unwrap(),
            "def f():\n    pass\n"
        );
        let empty = extract("```\n```", "kit/f.py", false).unwrap_err();
        assert!(empty.contains("empty"), "{empty}");
    }

    #[test]
    fn python_tests_are_run_by_module_name() {
        let t = |p: &str| (p.to_string(), String::new());
        assert_eq!(
            test_command(&[t("tests/test_leap.py")]).as_deref(),
            Some("python3 -m unittest tests.test_leap")
        );
        assert_eq!(test_command(&[t("tests/leap_test.rs")]), None);
        assert_eq!(test_command(&[]), None);
    }

    #[test]
    fn languages_come_from_extensions() {
        assert_eq!(language("a/b.py"), "python");
        assert_eq!(language("src/main.rs"), "rust");
        assert_eq!(language("Makefile"), "");
    }
}
