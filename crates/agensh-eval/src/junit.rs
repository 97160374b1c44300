//! A test branch's JUnit XML (`eval/results.xml`), read the way ProgramBench's evaluator
//! (`programbench` 1.2.5, with junitparser 5.0.3 over Python's `xml.etree.ElementTree`)
//! reads it — see "JUnit XML parsing", "Completeness check" and "Branch retry logic" in
//! `notes/programbench-SPEC.md`.
//!
//! - [`parse`]: every testcase as a [`TestResult`], in the package's order: the root
//!   `<testsuite>` (or each `<testsuite>` child of a root `<testsuites>`) yields its own
//!   `<testcase>` children first, then those of its nested suites, depth first.
//!   `<testcase>`s straight under `<testsuites>` are not read. A case is named
//!   `classname.name` (`classname.None` when it has a classname but no name) or `name`,
//!   and left out when that is empty. Its results are the `failure`, `error` and `skipped`
//!   elements at any depth under it: none is `passed`; one (or several of one kind, taken
//!   as the first) gives its status with `message` and `text` when not empty; several
//!   kinds give `system_error` with the package's `error_details`. `time` (commas
//!   removed) is read as Python's `float()` reads it, into `extra.time`.
//! - [`rate`]: how the retry logic rates an attempt — worker crashes and testcases.
//! - [`complete`]: the completeness check against the branch's expected names.
//! - [`process`]: [`parse`] then [`complete`], as `_process_branch_xml` does.
//!
//! Names are matched as ElementTree names them: a namespaced `testsuite` is not a suite,
//! a namespaced `name` attribute is not a name (`xmlns=""` is no namespace).
//!
//! Where we knowingly differ from the package (none of it occurs in pytest's output):
//! - XML itself is read by roxmltree instead of expat. Both reject what is not
//!   well-formed; where roxmltree lets through what expat rejects we check it ourselves
//!   (a prefix bound to `""`, a character reference to a surrogate or past U+10FFFF), but
//!   in the XML declaration expat alone rejects a bad `standalone` value, an empty
//!   `encoding` and a `<?XML …?>` instruction.
//! - DTDs are allowed (expat allows them too) and their internal entities expand, but
//!   `<!ATTLIST>` default values are not applied (expat applies them), and an undefined
//!   entity in a document with an external DTD is an error here, while expat drops it
//!   silently inside an attribute value.
//! - Suites nested so deep that junitparser's recursive generators hit Python's
//!   recursion limit (somewhere between 500 and 1000 levels) make the package fail with
//!   `RecursionError`; we read them.
//! - A `time` that is infinite or NaN is stored as JSON `null` — what the package writes
//!   in eval.json (pydantic's default) — as a JSON value cannot hold it.
//! - Python's `float()` reads non-ASCII decimal digits; we know the digits of Unicode 14
//!   (Python 3.11's), so a digit added in later Unicode versions is read only by newer
//!   Pythons.
//! - Error messages are ours; only the error's class ([`JunitError::code`]) is the
//!   package's, which is all it reports for an instance.

use std::collections::{BTreeSet, HashSet};

use agensh_domain::programbench::{Status, TestResult};
use roxmltree::{Document, Node, ParsingOptions};
use serde_json::{Map, Number, Value};

/// Why a branch's XML cannot be read. The package lets these escape the branch, so the
/// whole instance fails with the error's class name as its `error_code`.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum JunitError {
    /// The text is empty or only whitespace (`EmptyTestResultError`, `empty_test_results`).
    #[error("empty test results XML")]
    Empty,
    /// Not well-formed XML (`XmlParseError`, `xml_parse_error`).
    #[error("malformed test results XML: {0}")]
    Xml(String),
    /// The root element is neither `testsuites` nor `testsuite` (junitparser's
    /// `JUnitXmlError("Invalid format.")`).
    #[error("Invalid format.")]
    Format,
    /// A testcase's `time` is not a number to Python's `float()` (`ValueError`); holds the
    /// text after the commas were removed.
    #[error("could not convert string to float: {0:?}")]
    Time(String),
}

impl JunitError {
    /// The class name the package reports as the instance's `error_code`.
    pub fn code(&self) -> &'static str {
        match self {
            JunitError::Empty => "EmptyTestResultError",
            JunitError::Xml(_) => "XmlParseError",
            JunitError::Format => "JUnitXmlError",
            JunitError::Time(_) => "ValueError",
        }
    }
}

/// The `error_code` of a `not_run` result added for an expected test the XML lacks.
pub const MISSING_FROM_JUNIT_XML: &str = "missing_from_junit_xml";

/// Every testcase as a result (its branch set to `branch`), in the package's order.
pub fn parse(xml: &str, branch: &str) -> Result<Vec<TestResult>, JunitError> {
    let doc = document(xml)?;
    let root = doc.root_element();
    // A root <testsuite> is read as the only suite of a <testsuites>.
    let mut stack: Vec<Node> = if is(root, "testsuite") {
        vec![root]
    } else if is(root, "testsuites") {
        children(root, "testsuite").rev().collect()
    } else {
        return Err(JunitError::Format);
    };
    let mut out = Vec::new();
    // Depth first: a suite's own testcases, then each nested suite's, in document order.
    while let Some(suite) = stack.pop() {
        for case in children(suite, "testcase") {
            if let Some(result) = test_case(case, branch)? {
                out.push(result);
            }
        }
        stack.extend(children(suite, "testsuite").rev());
    }
    Ok(out)
}

/// `(crashes, testcases)`: how the retry logic rates an attempt's XML — the `<testcase>`s
/// anywhere in it, and those of them with a direct `<error>` or `<failure>` child whose
/// `message` + " " + text tells of a pytest-xdist worker that crashed. (0, 0) when the
/// XML is empty or cannot be read; no crashes when the raw text never says `worker '`.
pub fn rate(xml: &str) -> (usize, usize) {
    let Ok(doc) = document(xml) else {
        return (0, 0);
    };
    let look = xml.contains(WORKER_CRASH);
    let (mut crashes, mut cases) = (0, 0);
    for case in doc
        .root_element()
        .descendants()
        .filter(|n| is(*n, "testcase"))
    {
        cases += 1;
        if look && case.children().any(crashed) {
            crashes += 1;
        }
    }
    (crashes, cases)
}

const WORKER_CRASH: &str = "worker '";

/// Whether a testcase's child is an `<error>` or `<failure>` telling of a worker crash.
fn crashed(child: Node) -> bool {
    if !(is(child, "error") || is(child, "failure")) {
        return false;
    }
    let said = format!(
        "{} {}",
        plain_attr(child, "message").unwrap_or(""),
        leading_text(child)
    );
    said.contains(WORKER_CRASH) && said.contains("crashed")
}

/// The completeness check of one branch, as `_process_branch_xml` does it after parsing:
/// the results to keep and the warnings.
///
/// Every parsed result is kept (duplicates and unknown names too). An ignored branch is
/// not checked. Without an expected list (`None`) there is a warning. Otherwise each
/// expected name that is neither ignored (`ignored_tests` holds `branch/name`) nor parsed
/// is added as `not_run` with `error_code` [`MISSING_FROM_JUNIT_XML`], in the list's
/// order, and parsed names neither expected nor ignored make one warning with their
/// count. `instance_id` (when not empty) goes into the warnings' tag.
pub fn complete(
    parsed: Vec<TestResult>,
    branch: &str,
    expected: Option<&[String]>,
    branch_ignored: bool,
    ignored_tests: &BTreeSet<String>,
    instance_id: Option<&str>,
) -> (Vec<TestResult>, Vec<String>) {
    let mut warnings = Vec::new();
    if branch_ignored {
        return (parsed, warnings);
    }
    let tag = match instance_id {
        Some(iid) if !iid.is_empty() => format!("[{iid}] branch {branch}"),
        _ => format!("Branch {branch}"),
    };
    let Some(expected) = expected else {
        warnings.push(format!(
            "{tag}: no expected test list, cannot verify completeness"
        ));
        return (parsed, warnings);
    };
    let prefix = format!("{branch}/");
    // As the package does: what follows the FIRST '/' (a branch holding a '/' would
    // differ from the prefix; ProgramBench's 12-hex ids never do).
    let ignored_names: HashSet<&str> = ignored_tests
        .iter()
        .filter(|t| t.starts_with(&prefix))
        .filter_map(|t| t.split_once('/').map(|(_, name)| name))
        .collect();
    let (missing, unexpected) = {
        let got: HashSet<&str> = parsed.iter().map(|t| t.name.as_str()).collect();
        let missing: Vec<&String> = expected
            .iter()
            .filter(|n| !ignored_names.contains(n.as_str()) && !got.contains(n.as_str()))
            .collect();
        let listed: HashSet<&str> = expected.iter().map(String::as_str).collect();
        let unexpected = got
            .iter()
            .filter(|n| !listed.contains(*n) && !ignored_names.contains(*n))
            .count();
        (missing, unexpected)
    };
    let mut results = parsed;
    results.extend(missing.into_iter().map(|name| TestResult {
        name: name.clone(),
        branch: branch.to_owned(),
        status: Status::NotRun,
        extra: Map::from_iter([(
            "error_code".to_owned(),
            Value::String(MISSING_FROM_JUNIT_XML.to_owned()),
        )]),
    }));
    if unexpected > 0 {
        warnings.push(format!(
            "{tag}: {unexpected} test(s) in JUnit XML not in tests.json"
        ));
    }
    (results, warnings)
}

/// [`parse`] then [`complete`]: `_process_branch_xml` on one branch's XML.
pub fn process(
    xml: &str,
    branch: &str,
    expected: Option<&[String]>,
    branch_ignored: bool,
    ignored_tests: &BTreeSet<String>,
    instance_id: Option<&str>,
) -> Result<(Vec<TestResult>, Vec<String>), JunitError> {
    let parsed = parse(xml, branch)?;
    Ok(complete(
        parsed,
        branch,
        expected,
        branch_ignored,
        ignored_tests,
        instance_id,
    ))
}

/// The tree of `xml`, or why there is none. DTDs are allowed, as expat allows them.
fn document(xml: &str) -> Result<Document<'_>, JunitError> {
    if xml.chars().all(py_isspace) {
        return Err(JunitError::Empty);
    }
    let options = ParsingOptions {
        allow_dtd: true,
        ..ParsingOptions::default()
    };
    let doc =
        Document::parse_with_options(xml, options).map_err(|e| JunitError::Xml(e.to_string()))?;
    if let Some(why) = expat_also_rejects(xml, &doc) {
        return Err(JunitError::Xml(why.to_owned()));
    }
    Ok(doc)
}

/// What expat rejects but roxmltree lets through: a prefix bound to the empty URI
/// (`xmlns:a=""`), and a character reference to a surrogate or beyond U+10FFFF (which
/// roxmltree reads as U+FFFD).
fn expat_also_rejects(xml: &str, doc: &Document) -> Option<&'static str> {
    if xml.contains("xmlns:")
        && doc.descendants().any(|n| {
            n.is_element()
                && n.namespaces()
                    .any(|ns| ns.name().is_some() && ns.uri().is_empty())
        })
    {
        return Some("a namespace prefix bound to the empty URI");
    }
    if xml.contains("&#") && bad_char_reference(xml) {
        return Some("a character reference to a surrogate or beyond U+10FFFF");
    }
    None
}

/// Whether `xml` (well-formed to roxmltree) has a character reference — outside comments,
/// CDATA sections and processing instructions, where `&#` means nothing — to a code point
/// that is a surrogate or beyond U+10FFFF.
fn bad_char_reference(xml: &str) -> bool {
    let b = xml.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let skip_to = |end: &str| xml[i..].find(end).map_or(b.len(), |at| i + at + end.len());
        if rest.starts_with(b"<!--") {
            i = skip_to("-->");
        } else if rest.starts_with(b"<![CDATA[") {
            i = skip_to("]]>");
        } else if rest.starts_with(b"<?") {
            i = skip_to("?>");
        } else if rest.starts_with(b"&#") {
            i += 2;
            let radix = if b.get(i) == Some(&b'x') {
                i += 1;
                16
            } else {
                10
            };
            let mut value: u64 = 0;
            while let Some(d) = b.get(i).and_then(|c| char::from(*c).to_digit(radix)) {
                value = (value * u64::from(radix) + u64::from(d)).min(u64::from(u32::MAX));
                i += 1;
            }
            if (0xD800..=0xDFFF).contains(&value) || value > 0x10_FFFF {
                return true;
            }
        } else {
            i += 1;
        }
    }
    false
}

/// One testcase as a result; `None` when it has no name.
fn test_case(case: Node, branch: &str) -> Result<Option<TestResult>, JunitError> {
    let bare = plain_attr(case, "name");
    let name = match plain_attr(case, "classname") {
        // Python formats a missing name as "None".
        Some(class) if !class.is_empty() => format!("{class}.{}", bare.unwrap_or("None")),
        _ => match bare {
            Some(n) if !n.is_empty() => n.to_owned(),
            _ => return Ok(None),
        },
    };
    let mut extra = Map::new();
    if let Some(time) = plain_attr(case, "time").filter(|t| !t.is_empty()) {
        let time = time.replace(',', "");
        let Some(seconds) = py_float(&time) else {
            return Err(JunitError::Time(time));
        };
        extra.insert("time".to_owned(), json_float(seconds));
    }
    let mut results: Vec<(Node, Status)> = case
        .descendants()
        .filter_map(|n| result_status(n).map(|s| (n, s)))
        .collect();
    if results.len() > 1 && results.iter().all(|(_, s)| *s == results[0].1) {
        results.truncate(1);
    }
    let status = match results.as_slice() {
        [] => Status::Passed,
        [(one, status)] => {
            if let Some(message) = plain_attr(*one, "message").filter(|m| !m.is_empty()) {
                extra.insert("message".to_owned(), Value::String(message.to_owned()));
            }
            let text = leading_text(*one);
            if !text.is_empty() {
                extra.insert("text".to_owned(), Value::String(text));
            }
            *status
        }
        several => {
            let listed: Vec<String> = several.iter().map(|(n, _)| element_repr(*n)).collect();
            extra.insert(
                "error_details".to_owned(),
                Value::String(format!(
                    "Expected 1 result for {name}, got {}: [{}]",
                    several.len(),
                    listed.join(", ")
                )),
            );
            Status::SystemError
        }
    };
    Ok(Some(TestResult {
        name,
        branch: branch.to_owned(),
        status,
        extra,
    }))
}

/// The status a result element gives, `None` for any other node.
fn result_status(node: Node) -> Option<Status> {
    if is(node, "failure") {
        Some(Status::Failure)
    } else if is(node, "error") {
        Some(Status::Error)
    } else if is(node, "skipped") {
        Some(Status::Skipped)
    } else {
        None
    }
}

/// An element named `tag` without a namespace (ElementTree's plain `tag`; `xmlns=""`
/// means no namespace, which roxmltree keeps as an empty one).
fn is(node: Node, tag: &str) -> bool {
    node.is_element()
        && node.tag_name().namespace().is_none_or(str::is_empty)
        && node.tag_name().name() == tag
}

/// The element children of `node` named `tag`.
fn children<'a, 'i>(
    node: Node<'a, 'i>,
    tag: &'static str,
) -> impl DoubleEndedIterator<Item = Node<'a, 'i>> {
    node.children().filter(move |n| is(*n, tag))
}

/// The attribute `name` without a namespace. (roxmltree's own `attribute("name")` would
/// also match `a:name`; ElementTree's `attrib.get("name")` does not.)
fn plain_attr<'a>(node: Node<'a, '_>, name: &str) -> Option<&'a str> {
    node.attributes()
        .find(|a| a.namespace().is_none() && a.name() == name)
        .map(|a| a.value())
}

/// ElementTree's `.text`: the character data before the first child element (comments
/// and processing instructions are dropped, so the text around them joins up).
fn leading_text(node: Node) -> String {
    let mut text = String::new();
    for child in node.children() {
        if child.is_element() {
            break;
        }
        if child.is_text() {
            text.push_str(child.text().unwrap_or(""));
        }
    }
    text
}

/// junitparser's `repr` of a result element: `<Element 'tag' k="v" …>`, the attributes
/// sorted by ElementTree's key (`{uri}name` for a namespaced one), values as they are.
fn element_repr(node: Node) -> String {
    let mut attrs: Vec<(String, &str)> = node
        .attributes()
        .map(|a| {
            let key = match a.namespace() {
                Some(uri) => format!("{{{uri}}}{}", a.name()),
                None => a.name().to_owned(),
            };
            (key, a.value())
        })
        .collect();
    attrs.sort();
    let mut out = format!("<Element '{}'", node.tag_name().name());
    for (key, value) in attrs {
        out.push_str(&format!(" {key}=\"{value}\""));
    }
    out.push('>');
    out
}

/// A float as eval.json holds it: a number, or `null` for infinities and NaN.
fn json_float(x: f64) -> Value {
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// Python's `str.isspace()` for one character (what `str.strip()` removes).
pub fn py_isspace(c: char) -> bool {
    matches!(
        c,
        '\t'..='\r'
            | '\x1c'..='\x1f'
            | ' '
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
    )
}

/// Python's `float(s)` for a string: `None` where it raises `ValueError`.
///
/// Its steps: each non-ASCII character becomes a space if it is whitespace, or its ASCII
/// digit if it is a decimal digit, else the text is not a number; `_` is allowed only
/// between two digits, and dropped; ASCII whitespace around is stripped; what remains
/// must be `[+-]` and then `inf`, `infinity`, `nan` (any case) or a decimal number with
/// an optional exponent; it is rounded correctly, overflowing to infinity.
pub fn py_float(s: &str) -> Option<f64> {
    let mut ascii = String::with_capacity(s.len());
    for c in s.chars() {
        if (c as u32) < 127 {
            ascii.push(c);
        } else if py_isspace(c) {
            ascii.push(' ');
        } else {
            ascii.push(char::from(b'0' + unicode_decimal(c)?));
        }
    }
    let mut clean = String::with_capacity(ascii.len());
    let mut prev = '\0';
    for c in ascii.chars() {
        if c == '_' {
            if !prev.is_ascii_digit() {
                return None;
            }
        } else {
            if prev == '_' && !c.is_ascii_digit() {
                return None;
            }
            clean.push(c);
        }
        prev = c;
    }
    if prev == '_' {
        return None;
    }
    let number = clean.trim_matches(|c| matches!(c, ' ' | '\t'..='\r'));
    if !float_syntax(number) {
        return None;
    }
    number.parse().ok()
}

/// `[+-]?(inf|infinity|nan|(D+\.?D*|\.D+)([eE][+-]?D+)?)`, letters in any case.
fn float_syntax(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = usize::from(matches!(b.first(), Some(b'+' | b'-')));
    let word = &s[i..];
    if ["inf", "infinity", "nan"]
        .iter()
        .any(|w| word.eq_ignore_ascii_case(w))
    {
        return true;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    let mut n = digits(&mut i);
    if b.get(i) == Some(&b'.') {
        i += 1;
        n += digits(&mut i);
    }
    if n == 0 {
        return false;
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// The first code point (the zero) of each run of ten decimal digits in Unicode 14.0
/// (Python 3.11's `unicodedata.decimal`), ASCII's included.
const DIGIT_ZEROS: [u32; 66] = [
    0x30, 0x660, 0x6F0, 0x7C0, 0x966, 0x9E6, 0xA66, 0xAE6, 0xB66, 0xBE6, 0xC66, 0xCE6, 0xD66,
    0xDE6, 0xE50, 0xED0, 0xF20, 0x1040, 0x1090, 0x17E0, 0x1810, 0x1946, 0x19D0, 0x1A80, 0x1A90,
    0x1B50, 0x1BB0, 0x1C40, 0x1C50, 0xA620, 0xA8D0, 0xA900, 0xA9D0, 0xA9F0, 0xAA50, 0xABF0, 0xFF10,
    0x104A0, 0x10D30, 0x11066, 0x110F0, 0x11136, 0x111D0, 0x112F0, 0x11450, 0x114D0, 0x11650,
    0x116C0, 0x11730, 0x118E0, 0x11950, 0x11C50, 0x11D50, 0x11DA0, 0x16A60, 0x16AC0, 0x16B50,
    0x1D7CE, 0x1D7D8, 0x1D7E2, 0x1D7EC, 0x1D7F6, 0x1E140, 0x1E2F0, 0x1E950, 0x1FBF0,
];

/// The value of a decimal digit of any script.
fn unicode_decimal(c: char) -> Option<u8> {
    let c = c as u32;
    let zero = DIGIT_ZEROS[DIGIT_ZEROS.partition_point(|&z| z <= c).checked_sub(1)?];
    u8::try_from(c - zero).ok().filter(|d| *d < 10)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn one(xml: &str) -> TestResult {
        let mut all = parse(xml, "b").unwrap();
        assert_eq!(all.len(), 1, "{all:?}");
        all.remove(0)
    }

    fn case(body: &str) -> TestResult {
        one(&format!("<testsuite>{body}</testsuite>"))
    }

    fn names(xml: &str) -> Vec<String> {
        parse(xml, "")
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect()
    }

    fn extra(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn empty_or_whitespace_text_is_empty() {
        for xml in ["", " \n\t", "\u{a0}\u{3000}", "\x1c\x1f"] {
            assert_eq!(parse(xml, "b"), Err(JunitError::Empty), "{xml:?}");
        }
        assert_eq!(JunitError::Empty.code(), "EmptyTestResultError");
    }

    #[test]
    fn malformed_xml_is_an_xml_error() {
        for xml in [
            "<testsuite>",
            "<testsuite/><x/>",
            "\u{feff}",
            "  <?xml version=\"1.0\"?><testsuite/>",
            "<testsuite><testcase name=\"&nbsp;\"/></testsuite>",
            "<testsuite><testcase name=\"a\" name=\"b\"/></testsuite>",
            "<testsuite><testcase name=\"&#0;\"/></testsuite>",
        ] {
            let err = parse(xml, "b").unwrap_err();
            assert!(matches!(err, JunitError::Xml(_)), "{xml:?}: {err:?}");
            assert_eq!(err.code(), "XmlParseError");
        }
    }

    #[test]
    fn another_root_is_invalid_format() {
        for xml in [
            "<foo/>",
            "<testcase name=\"a\"/>",
            "<testsuites xmlns=\"urn:x\"><testsuite/></testsuites>",
            "<a:testsuite xmlns:a=\"urn:x\"/>",
        ] {
            assert_eq!(parse(xml, "b"), Err(JunitError::Format), "{xml:?}");
        }
        assert_eq!(JunitError::Format.code(), "JUnitXmlError");
    }

    #[test]
    fn a_bad_time_is_a_value_error() {
        let err = parse(
            "<testsuite><testcase name=\"a\" time=\"1,x\"/></testsuite>",
            "b",
        )
        .unwrap_err();
        assert_eq!(err, JunitError::Time("1x".into()));
        assert_eq!(err.code(), "ValueError");
        // Only the commas: nothing left for float().
        assert!(parse(
            "<testsuite><testcase name=\"a\" time=\",\"/></testsuite>",
            "b"
        )
        .is_err());
    }

    #[test]
    fn a_nameless_case_does_not_check_its_time() {
        assert_eq!(
            names("<testsuite><testcase time=\"x\"/><testcase name=\"\" time=\"x\"/></testsuite>"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn bom_declaration_and_comments_are_read_through() {
        let xml = "\u{feff}<?xml version=\"1.0\" encoding=\"UTF-16\"?>\n<!-- c --><testsuite>\
                   <testcase name=\"a\"/></testsuite><!-- d -->\n<?pi x?>\n";
        assert_eq!(names(xml), ["a"]);
    }

    #[test]
    fn suites_yield_their_own_cases_before_nested_suites() {
        let xml = "<testsuites><testcase name=\"top\"/>\
            <testsuite><testsuite><testcase name=\"n1\"/><testsuite><testcase name=\"nn\"/></testsuite></testsuite>\
            <testcase name=\"d1\"/><testsuite><testcase name=\"n2\"/></testsuite><testcase name=\"d2\"/></testsuite>\
            <testsuite><testcase name=\"s2\"/></testsuite></testsuites>";
        assert_eq!(names(xml), ["d1", "d2", "n1", "nn", "n2", "s2"]);
    }

    #[test]
    fn a_root_testsuite_is_the_only_suite() {
        let xml = "<testsuite><testsuite><testcase name=\"n\"/></testsuite><testcase name=\"d\"/></testsuite>";
        assert_eq!(names(xml), ["d", "n"]);
    }

    #[test]
    fn namespaced_suites_cases_and_attributes_are_not_junit() {
        let xml = "<testsuites xmlns:a=\"urn:a\"><a:testsuite><testcase name=\"x\"/></a:testsuite>\
            <testsuite xmlns=\"urn:d\"><testcase name=\"y\"/></testsuite>\
            <testsuite><a:testcase name=\"z\"/><testcase a:name=\"q\" name=\"w\"/><testcase a:name=\"v\"/></testsuite></testsuites>";
        assert_eq!(names(xml), ["w"]);
    }

    #[test]
    fn deep_nesting_does_not_overflow() {
        let depth = 20_000;
        let xml = format!(
            "{}<testcase name=\"a\"/>{}",
            "<testsuite>".repeat(depth),
            "</testsuite>".repeat(depth)
        );
        assert_eq!(names(&xml), ["a"]);
    }

    #[test]
    fn name_is_classname_dot_name() {
        assert_eq!(
            case("<testcase classname=\"m.C\" name=\"t\"/>").name,
            "m.C.t"
        );
        assert_eq!(case("<testcase classname=\"\" name=\"t\"/>").name, "t");
        assert_eq!(case("<testcase classname=\"m\" name=\"\"/>").name, "m.");
    }

    #[test]
    fn a_classname_without_name_is_classname_dot_none() {
        assert_eq!(case("<testcase classname=\"m\"/>").name, "m.None");
    }

    #[test]
    fn cases_without_a_name_are_skipped() {
        assert_eq!(
            names(
                "<testsuite><testcase/><testcase name=\"\"/><testcase classname=\"\"/></testsuite>"
            ),
            Vec::<String>::new()
        );
    }

    #[test]
    fn branch_is_set_and_no_results_is_passed() {
        let t = case("<testcase name=\"t\"><system-out>x</system-out><properties/></testcase>");
        assert_eq!((t.branch.as_str(), t.status), ("b", Status::Passed));
        assert!(t.extra.is_empty());
    }

    #[test]
    fn entities_cdata_and_line_ends_in_names_and_texts() {
        let t = case(
            "<testcase name=\"a&amp;b&#x41;&lt;\"><failure message=\"a&#9;b\tc\r\nd\">\
             <![CDATA[x<y]]>z &amp; &#13;\r\n q\r</failure></testcase>",
        );
        assert_eq!(t.name, "a&bA<");
        assert_eq!(
            t.extra,
            extra(json!({"message": "a\tb c d", "text": "x<yz & \r\n q\n"}))
        );
    }

    #[test]
    fn internal_dtd_entities_expand() {
        let xml = "<!DOCTYPE testsuite [<!ENTITY e \"EE\"><!ENTITY f \"<failure message='m'/>\">]>\
                   <testsuite><testcase name=\"&e;\">&f;</testcase></testsuite>";
        let t = one(xml);
        assert_eq!((t.name.as_str(), t.status), ("EE", Status::Failure));
    }

    #[test]
    fn time_is_a_float_without_commas() {
        let t = case("<testcase name=\"a\" time=\" 1,234.5 \"/>");
        assert_eq!(t.extra, extra(json!({"time": 1234.5})));
        assert!(t.extra["time"].is_f64());
        let t = case("<testcase name=\"a\" time=\"0\"/>");
        assert!(t.extra["time"].is_f64(), "0 is the float 0.0");
    }

    #[test]
    fn an_empty_time_is_no_time() {
        assert!(case("<testcase name=\"a\" time=\"\"/>").extra.is_empty());
    }

    #[test]
    fn an_infinite_time_is_null() {
        let t = case("<testcase name=\"a\" time=\"inf\"/>");
        assert_eq!(t.extra, extra(json!({"time": null})));
    }

    #[test]
    fn py_float_reads_what_python_reads() {
        let cases: &[(&str, f64)] = &[
            ("1e1_0", 1e10),
            (" -.5E-3 ", -0.0005),
            ("+.5", 0.5),
            ("5.", 5.0),
            ("1_0", 10.0),
            ("1.5_0", 1.5),
            ("\u{a0}1.5\u{2003}", 1.5),
            ("\x0b1\x0c", 1.0),
            ("1\u{85}", 1.0),
            ("0001.000", 1.0),
            ("\u{661}.\u{662}e\u{663}", 1200.0),
            ("\u{661}_\u{662}", 12.0),
            ("\u{ff11}", 1.0),
            ("\u{1d7ce}", 0.0),
            ("1e400", f64::INFINITY),
            ("1e99999999999999999999", f64::INFINITY),
            ("-1e-400", -0.0),
            ("2.4703282292062328e-324", 5e-324),
            ("Infinity", f64::INFINITY),
            ("-iNf", f64::NEG_INFINITY),
            ("0.1", 0.1),
        ];
        for (s, want) in cases {
            let got = py_float(s).unwrap_or_else(|| panic!("{s:?}"));
            assert_eq!(got.to_bits(), want.to_bits(), "{s:?}");
        }
        assert!(py_float("-nan").unwrap().is_nan());
        assert_eq!(py_float(&"9".repeat(400)), Some(f64::INFINITY));
    }

    #[test]
    fn py_float_rejects_what_python_rejects() {
        for s in [
            "",
            " ",
            "x",
            "1_e5",
            "0x10",
            "1.5f",
            "nan(1)",
            "infinit",
            "infinityx",
            "\x1c1.5",
            "1.5\x1f",
            "_1",
            "1_",
            "1__0",
            "1_.5",
            "1._5",
            "1e_5",
            "1e5_",
            ".",
            "e5",
            "1e",
            "1e+",
            "++1",
            "1 2",
            "in_f",
            "\u{200b}1",
            "1\u{7f}",
            "\u{b2}",
        ] {
            assert_eq!(py_float(s), None, "{s:?}");
        }
    }

    #[test]
    fn unicode_decimal_knows_each_run_and_nothing_else() {
        assert_eq!(unicode_decimal('\u{0e59}'), Some(9));
        assert_eq!(unicode_decimal('\u{1d7ff}'), Some(9));
        assert_eq!(unicode_decimal('\u{1fbf9}'), Some(9));
        assert_eq!(unicode_decimal('\u{1fbfa}'), None);
        assert_eq!(unicode_decimal('\u{65f}'), None);
        assert_eq!(unicode_decimal('\u{2f}'), None);
    }

    #[test]
    fn py_isspace_matches_python() {
        let python: Vec<u32> = (0..=0x10ffff_u32)
            .filter_map(char::from_u32)
            .filter(|c| py_isspace(*c))
            .map(|c| c as u32)
            .collect();
        let want: Vec<u32> = [
            9, 10, 11, 12, 13, 0x1c, 0x1d, 0x1e, 0x1f, 0x20, 0x85, 0xa0, 0x1680,
        ]
        .into_iter()
        .chain(0x2000..=0x200a)
        .chain([0x2028, 0x2029, 0x202f, 0x205f, 0x3000])
        .collect();
        assert_eq!(python, want);
    }

    #[test]
    fn one_result_gives_its_status_message_and_text() {
        for (tag, status) in [
            ("failure", Status::Failure),
            ("error", Status::Error),
            ("skipped", Status::Skipped),
        ] {
            let t = case(&format!(
                "<testcase name=\"a\"><{tag} message=\"m\" type=\"T\">body</{tag}></testcase>"
            ));
            assert_eq!(t.status, status);
            assert_eq!(t.extra, extra(json!({"message": "m", "text": "body"})));
        }
    }

    #[test]
    fn empty_message_and_text_are_left_out_but_whitespace_text_is_kept() {
        let t = case("<testcase name=\"a\"><failure message=\"\"></failure></testcase>");
        assert!(t.extra.is_empty());
        let t = case("<testcase name=\"a\"><skipped>  \n </skipped></testcase>");
        assert_eq!(t.extra, extra(json!({"text": "  \n "})));
    }

    #[test]
    fn text_is_what_comes_before_the_first_child_element() {
        let t = case(
            "<testcase name=\"a\"><failure>ab<!-- c -->cd<?pi x?>e<x/>tail</failure></testcase>",
        );
        assert_eq!(t.extra, extra(json!({"text": "abcde"})));
        let t = case("<testcase name=\"a\"><failure><x/>tail</failure></testcase>");
        assert!(t.extra.is_empty());
    }

    #[test]
    fn results_are_found_at_any_depth() {
        let t = case(
            "<testcase name=\"a\"><system-out><skipped message=\"sm\"/></system-out></testcase>",
        );
        assert_eq!(t.status, Status::Skipped);
        assert_eq!(t.extra, extra(json!({"message": "sm"})));
    }

    #[test]
    fn rerun_and_flaky_failures_are_not_results() {
        let t =
            case("<testcase name=\"a\"><rerunFailure message=\"r\"/><flakyFailure/></testcase>");
        assert_eq!(t.status, Status::Passed);
    }

    #[test]
    fn results_of_one_kind_collapse_to_the_first() {
        let t = case(
            "<testcase name=\"a\" time=\"2\"><error message=\"1\">t1</error><error message=\"2\"/></testcase>",
        );
        assert_eq!(t.status, Status::Error);
        assert_eq!(
            t.extra,
            extra(json!({"time": 2.0, "message": "1", "text": "t1"}))
        );
    }

    #[test]
    fn mixed_results_are_a_system_error_with_the_package_s_details() {
        let t = case(
            "<testcase classname=\"c\" name=\"a\" xmlns:n=\"urn:n\"><failure z=\"q&quot;\" message=\"m\" type=\"t\">x</failure>\
             <error/><skipped n:k=\"v\" xml:lang=\"en\" message=\"\"/></testcase>",
        );
        assert_eq!(t.status, Status::SystemError);
        assert_eq!(
            t.extra,
            extra(json!({"error_details": "Expected 1 result for c.a, got 3: \
                [<Element 'failure' message=\"m\" type=\"t\" z=\"q\"\">, <Element 'error'>, \
                <Element 'skipped' message=\"\" {http://www.w3.org/XML/1998/namespace}lang=\"en\" {urn:n}k=\"v\">]"}))
        );
    }

    #[test]
    fn namespaced_result_elements_are_not_results() {
        let t = case("<testcase name=\"a\" xmlns:n=\"urn:n\"><n:failure/></testcase>");
        assert_eq!(t.status, Status::Passed);
    }

    #[test]
    fn an_empty_default_namespace_is_no_namespace() {
        let xml = "<testsuite xmlns=\"\"><testcase name=\"a\" xmlns=\"u\"><failure xmlns=\"\"/></testcase>\
                   <testcase name=\"b\"/></testsuite>";
        let all = parse(xml, "b").unwrap();
        assert_eq!(all.len(), 1);
        assert_eq!((all[0].name.as_str(), all[0].status), ("b", Status::Passed));
    }

    #[test]
    fn what_expat_rejects_and_roxmltree_would_not_is_an_xml_error() {
        for xml in [
            "<testsuite><testcase name=\"a\" xmlns:a=\"\"/></testsuite>",
            "<testsuite><testcase name=\"&#xD800;\"/></testsuite>",
            "<testsuite><testcase name=\"a\">&#57343;</testcase></testsuite>",
            "<testsuite><testcase name=\"&#x110000;\"/></testsuite>",
        ] {
            assert!(
                matches!(parse(xml, "b"), Err(JunitError::Xml(_))),
                "{xml:?}"
            );
        }
        // Where `&#` is no reference at all.
        let t = case("<testcase name=\"a\"><failure><![CDATA[&#xD800;]]><!-- &#xD800; --><?p &#xD800;?></failure></testcase>");
        assert_eq!(t.extra, extra(json!({"text": "&#xD800;"})));
    }

    #[test]
    fn rate_counts_testcases_anywhere() {
        let xml = "<foo><testcase/><bar><testcase><testcase/></testcase></bar></foo>";
        assert_eq!(rate(xml), (0, 3));
        assert_eq!(rate("<testcase/>"), (0, 1));
    }

    #[test]
    fn rate_is_zero_for_empty_or_broken_xml() {
        assert_eq!(rate(" \n"), (0, 0));
        assert_eq!(rate("<testsuite><testcase/>"), (0, 0));
    }

    #[test]
    fn rate_counts_worker_crashes_once_per_case() {
        let xml = "<testsuite>\
            <testcase name=\"a\"><error message=\"failed on setup with &quot;worker 'gw0' crashed while running\"/></testcase>\
            <testcase name=\"b\"><failure>worker 'gw1' crashed</failure><error>worker 'gw1' crashed</error></testcase>\
            <testcase name=\"c\"><skipped message=\"worker 'gw0' crashed\"/></testcase>\
            <testcase name=\"d\"><system-out><error message=\"worker 'gw0' crashed\"/></system-out></testcase>\
            <testcase name=\"e\"><error message=\"worker 'gw0'\">crashed</error></testcase>\
            <testcase name=\"f\"><error message=\"worker 'gw0' died\"/></testcase>\
            </testsuite>";
        assert_eq!(rate(xml), (3, 6));
    }

    #[test]
    fn rate_needs_the_phrase_in_the_raw_text() {
        // Only an entity says "worker '": the package looks at the raw text first.
        let xml = "<testsuite><testcase><error>worker &apos;gw0&apos; crashed</error></testcase></testsuite>";
        assert_eq!(rate(xml), (0, 1));
    }

    fn result(name: &str) -> TestResult {
        TestResult {
            name: name.into(),
            branch: "b".into(),
            status: Status::Passed,
            extra: Map::new(),
        }
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_ignored_branch_is_not_checked() {
        let (results, warnings) = complete(
            vec![result("x")],
            "b",
            Some(&strings(&["a"])),
            true,
            &BTreeSet::new(),
            Some("i"),
        );
        assert_eq!((results, warnings), (vec![result("x")], vec![]));
    }

    #[test]
    fn no_expected_list_is_a_warning() {
        let (results, warnings) = complete(
            vec![result("x")],
            "b",
            None,
            false,
            &BTreeSet::new(),
            Some("own__repo.1"),
        );
        assert_eq!(results, vec![result("x")]);
        assert_eq!(
            warnings,
            ["[own__repo.1] branch b: no expected test list, cannot verify completeness"]
        );
    }

    #[test]
    fn missing_names_are_not_run_in_list_order() {
        let expected = strings(&["z", "a", "y", "ig", "z"]);
        let ignored = BTreeSet::from(["b/ig".to_string(), "other/y".to_string()]);
        let (results, warnings) = complete(
            vec![result("a")],
            "b",
            Some(&expected),
            false,
            &ignored,
            None,
        );
        let missing: Vec<(&str, Status, &Map<String, Value>)> = results[1..]
            .iter()
            .map(|t| (t.name.as_str(), t.status, &t.extra))
            .collect();
        let code = extra(json!({"error_code": "missing_from_junit_xml"}));
        assert_eq!(
            missing,
            [
                ("z", Status::NotRun, &code),
                ("y", Status::NotRun, &code),
                ("z", Status::NotRun, &code)
            ]
        );
        assert!(results[1..].iter().all(|t| t.branch == "b"));
        assert!(warnings.is_empty());
    }

    #[test]
    fn unexpected_names_are_kept_and_counted_once_each() {
        let ignored = BTreeSet::from(["b/ig".to_string()]);
        let parsed = vec![
            result("u1"),
            result("u1"),
            result("u2"),
            result("ig"),
            result("a"),
        ];
        let (results, warnings) = complete(
            parsed.clone(),
            "b",
            Some(&strings(&["a"])),
            false,
            &ignored,
            Some(""),
        );
        assert_eq!(results, parsed);
        assert_eq!(
            warnings,
            ["Branch b: 2 test(s) in JUnit XML not in tests.json"]
        );
    }

    #[test]
    fn an_empty_expected_list_makes_every_test_unexpected() {
        let (results, warnings) = complete(
            vec![result("a")],
            "b",
            Some(&[]),
            false,
            &BTreeSet::new(),
            None,
        );
        assert_eq!(results.len(), 1);
        assert_eq!(
            warnings,
            ["Branch b: 1 test(s) in JUnit XML not in tests.json"]
        );
    }

    #[test]
    fn ignored_names_are_what_follows_the_first_slash() {
        // The package's quirk for a branch with a '/': "x/y/t" names "y/t", not "t".
        let ignored = BTreeSet::from(["x/y/t".to_string()]);
        let (results, _) = complete(
            vec![],
            "x/y",
            Some(&strings(&["t", "y/t"])),
            false,
            &ignored,
            None,
        );
        let names: Vec<&str> = results.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["t"]);
    }

    #[test]
    fn process_parses_then_completes() {
        let xml = "<testsuite><testcase name=\"a\"/></testsuite>";
        let (results, warnings) = process(
            xml,
            "b",
            Some(&strings(&["a", "c"])),
            false,
            &BTreeSet::new(),
            None,
        )
        .unwrap();
        assert_eq!(results.len(), 2);
        assert_eq!(results[1].status, Status::NotRun);
        assert!(warnings.is_empty());
        assert_eq!(
            process("", "b", None, false, &BTreeSet::new(), None),
            Err(JunitError::Empty)
        );
    }
}
