//! What the model puts into files and commands, checked before it is used.
//!
//! Small models copy the harness's own formats back: the header of a `read_file` result,
//! the `result of read_file:` line of JSON style, a code fence around the whole file, the
//! note that marks where an output was cut. The framing lines are stripped from file
//! content ([`clean`]); a placeholder instead of real text is refused ([`placeholder`]),
//! with what to write instead.

/// File content with the harness's framing taken off, and what was taken off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleaned {
    pub text: String,
    /// What was removed, in words for the tool's answer (empty: nothing).
    pub removed: Vec<&'static str>,
}

impl Cleaned {
    /// The sentence a tool's answer adds when something was removed, or "".
    pub fn note(&self) -> String {
        if self.removed.is_empty() {
            return String::new();
        }
        format!(
            " (left out {}: they are not part of the file — send only the file's own text)",
            self.removed.join(" and ")
        )
    }
}

/// `content` for the file `path` without the framing a model pasted around it: leading
/// `result of <tool>:` lines, a `read_file` header line (`path: lines 1-9 of 9`), and a
/// code fence around the whole content (not in Markdown files, where fences are content).
pub fn clean(path: &str, content: &str) -> Cleaned {
    let markdown = [".md", ".markdown"]
        .iter()
        .any(|e| path.to_ascii_lowercase().ends_with(e));
    let mut lines: Vec<&str> = content.split_inclusive('\n').collect();
    let mut removed = Vec::new();
    let note = |what: &'static str, removed: &mut Vec<&'static str>| {
        if !removed.contains(&what) {
            removed.push(what);
        }
    };
    let mut opened_fence = false;
    while let Some(first) = lines.first().map(|l| l.trim()) {
        if first.is_empty() && !removed.is_empty() {
            lines.remove(0);
        } else if is_result_line(first) {
            lines.remove(0);
            note("the \"result of\" line", &mut removed);
        } else if is_read_header(first) {
            lines.remove(0);
            note("the read_file header line", &mut removed);
        } else if !markdown && !opened_fence && first.starts_with("```") && fences(&lines) <= 2 {
            lines.remove(0);
            opened_fence = true;
            note("the ``` fence lines", &mut removed);
        } else {
            break;
        }
    }
    if opened_fence {
        while lines.last().is_some_and(|l| l.trim().is_empty()) {
            lines.pop();
        }
        if lines.last().is_some_and(|l| l.trim() == "```") {
            lines.pop();
        }
    }
    let mut text: String = lines.concat();
    if opened_fence && !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if removed.is_empty() {
        text = content.to_string();
    }
    Cleaned { text, removed }
}

/// Lines that start with a code fence.
fn fences(lines: &[&str]) -> usize {
    lines
        .iter()
        .filter(|l| l.trim_start().starts_with("```"))
        .count()
}

/// `result of read_file:` — how JSON style introduces a tool's result.
fn is_result_line(line: &str) -> bool {
    line.strip_prefix("result of ")
        .and_then(|r| r.strip_suffix(':'))
        .is_some_and(|name| {
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// `src/a.py: lines 1-20 of 20` or `src/a.py: empty file` — the header of a `read_file`
/// result.
pub fn is_read_header(line: &str) -> bool {
    let Some((path, rest)) = line.rsplit_once(": ") else {
        return false;
    };
    if path.trim().is_empty() || path.contains(' ') {
        return false;
    }
    if rest == "empty file" {
        return true;
    }
    let Some(range) = rest.strip_prefix("lines ") else {
        return false;
    };
    let Some((span, total)) = range.split_once(" of ") else {
        return false;
    };
    let Some((from, to)) = span.split_once('-') else {
        return false;
    };
    [from, to, total]
        .iter()
        .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// The harness's notes, which mark text that is not there.
const NOTES: [(&str, &str); 3] = [
    (
        "characters cut; read a smaller range",
        "the note that marks where an output was cut",
    ),
    (
        "more lines; read_file with offset_line",
        "the note that marks the rest of a file that was not shown",
    ),
    (
        "older steps omitted",
        "a line of the recap of earlier steps",
    ),
];

/// What in `text` is a placeholder rather than real text, in words; `None` when it is
/// real text. `whole` also judges the text as a whole (file content: `...` alone, a lone
/// `<the new content>`); commands are only searched for the harness's own markers.
pub fn placeholder(text: &str, whole: bool) -> Option<String> {
    if let Some(at) = size_marker(text) {
        return Some(format!("the placeholder {at}"));
    }
    if let Some((_, what)) = NOTES.iter().find(|(needle, _)| text.contains(needle)) {
        return Some(what.to_string());
    }
    if !whole {
        return None;
    }
    let t = text.trim();
    if !t.is_empty() && t.chars().all(|c| c == '.' || c == '…') {
        return Some(format!("only {t:?}"));
    }
    let inner = t.strip_prefix('<').and_then(|r| r.strip_suffix('>'));
    if let Some(inner) = inner {
        let words = inner.contains(' ') || inner.contains('_') || inner.contains('-');
        if words
            && inner
                .chars()
                .all(|c| c.is_alphanumeric() || " _-".contains(c))
        {
            return Some(format!("the placeholder {t}"));
        }
    }
    None
}

/// The first `<250 chars>`-like marker in `text` (how recaps once gave the size of a long
/// argument).
fn size_marker(text: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(i) = text[from..].find('<') {
        let start = from + i;
        let rest = &text[start + 1..];
        let digits = rest.chars().take_while(char::is_ascii_digit).count();
        if digits > 0 {
            let after = &rest[digits..];
            for unit in [" chars>", " characters>", " bytes>", " lines>"] {
                if after.starts_with(unit) {
                    return Some(&text[start..start + 1 + digits + unit.len()]);
                }
            }
        }
        from = start + 1;
    }
    None
}

/// A `python -m unittest` command whose test modules are written as file paths without
/// `.py` (`tests/test_primes`), which Python cannot import, with the dotted module names
/// instead (`tests.test_primes`); `None` when there is nothing to change. Small models
/// write the path form, read the hint that says so, and post it as a FAIL instead of
/// running the command again.
pub fn unittest_dotted(command: &str) -> Option<String> {
    if command.contains('\n') {
        return None;
    }
    let words: Vec<&str> = command.split(' ').collect();
    let at = words.windows(2).position(|w| w == ["-m", "unittest"])?;
    let mut changed = false;
    let fixed: Vec<String> = words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let module_like = i > at + 1
                && w.contains('/')
                && !w.starts_with('-')
                && !w.ends_with(".py")
                && !w.ends_with('/')
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '/' | '.'));
            if module_like {
                changed = true;
                w.trim_start_matches("./").replace('/', ".")
            } else {
                w.to_string()
            }
        })
        .collect();
    changed.then(|| fixed.join(" "))
}

#[cfg(test)]
mod tests {
    #[test]
    fn unittest_modules_written_as_paths_get_dots() {
        assert_eq!(
            unittest_dotted("python3 -m unittest tests/test_primes").as_deref(),
            Some("python3 -m unittest tests.test_primes")
        );
        assert_eq!(
            unittest_dotted("cd . && python3 -m unittest -v ./tests/test_a tests/test_b")
                .as_deref(),
            Some("cd . && python3 -m unittest -v tests.test_a tests.test_b")
        );
        for fine in [
            "python3 -m unittest tests.test_primes",
            "python3 -m unittest tests/test_primes.py",
            "python3 -m unittest discover -s tests/",
            "ls tests/test_primes",
        ] {
            assert_eq!(unittest_dotted(fine), None, "{fine}");
        }
    }

    use super::*;

    #[test]
    fn a_pasted_read_header_is_stripped() {
        let c = clean(
            "caesar.py",
            "caesar.py: lines 1-2 of 2\ndef f():\n    pass\n",
        );
        assert_eq!(c.text, "def f():\n    pass\n");
        assert_eq!(c.removed, ["the read_file header line"]);
        assert!(c.note().contains("read_file header line"), "{}", c.note());
        let c = clean(
            "a.py",
            "result of read_file:\na.py: lines 1-1 of 1\nx = 1\n",
        );
        assert_eq!(c.text, "x = 1\n");
        assert_eq!(c.removed.len(), 2);
    }

    #[test]
    fn a_fence_around_the_whole_content_is_stripped_except_in_markdown() {
        let c = clean("a.py", "```python\nx = 1\n```\n");
        assert_eq!(c.text, "x = 1\n");
        assert_eq!(c.removed, ["the ``` fence lines"]);
        let c = clean("a.py", "```\nx = 1");
        assert_eq!(c.text, "x = 1\n");
        let md = "```\ncode\n```\n";
        assert_eq!(clean("README.md", md).text, md);
        // Fences inside the content are the content's own.
        let inner = "```\na\n```\ntext\n```\nb\n```\n";
        assert_eq!(clean("a.py", inner).text, inner);
    }

    #[test]
    fn ordinary_content_is_left_alone() {
        for text in ["x = 1\n", "", "\n\nx\n", "note: lines 1-2 of 2 are fine\n"] {
            let c = clean("a.py", text);
            assert_eq!(c.text, text);
            assert!(c.removed.is_empty() && c.note().is_empty());
        }
    }

    #[test]
    fn read_headers_are_recognised() {
        assert!(is_read_header("src/a.py: lines 1-20 of 20"));
        assert!(is_read_header("a.txt: empty file"));
        assert!(!is_read_header("lines 1-20 of 20"));
        assert!(!is_read_header("my notes: lines 1-2 of 3"));
        assert!(!is_read_header("a.py: lines one-2 of 3"));
    }

    #[test]
    fn placeholders_are_found() {
        assert_eq!(
            placeholder("<250 chars>", true).as_deref(),
            Some("the placeholder <250 chars>")
        );
        assert!(placeholder("x = 1\n<12 chars>\n", true).is_some());
        assert!(placeholder("python3 -c '<40 chars>'", false).is_some());
        assert!(placeholder(
            "a\n[… 300 characters cut; read a smaller range or narrow the command …]\nb",
            true
        )
        .is_some());
        assert!(placeholder("a\n[… 9 more lines; read_file with offset_line=3]", true).is_some());
        assert!(placeholder("...", true).is_some());
        assert!(placeholder("<the whole new content>", true).is_some());
        assert!(placeholder("...", false).is_none());
        for real in [
            "x = 1\n",
            "",
            "if a < 3 and b > 2:",
            "<html>",
            "a<3 chars",
            "...",
        ] {
            assert!(placeholder(real, false).is_none(), "{real}");
        }
        assert!(placeholder("<html>", true).is_none());
    }
}
