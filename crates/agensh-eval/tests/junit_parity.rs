//! Our JUnit reading (`agensh_eval::junit`) against the package's own functions
//! (`programbench` 1.2.5: `parse_test_results`, `_process_branch_xml`,
//! `count_worker_crashes`, `count_testcases`) on hand-picked corner cases and a few
//! hundred generated documents — nested suites, classnames, missing and empty names,
//! results of one kind and of several, results deep down, messages and texts with
//! entities, CDATA, comments and whitespace, times Python's `float()` reads or refuses,
//! worker crashes, broken XML, other roots — checked against expected lists with missing
//! and unknown names, ignored tests and ignored branches. Equal for every case: statuses,
//! names, branches, extras (times to the bit), warnings and the class of each error.
//!
//! Needs a Python with the package installed, named by `AGENSH_PROGRAMBENCH_PYTHON`;
//! `scripts/test` makes that venv and runs this tier with `--ignored`.

use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

use agensh_domain::programbench::TestResult;
use agensh_eval::junit::{self, JunitError};
use serde_json::{json, Map, Value};

/// A small deterministic generator (xorshift), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 1000 < percent * 10
    }

    fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// Classnames and names as written in the XML, and as read.
const CLASSES: [(&str, &str); 5] = [
    ("", ""),
    ("tests.test_mod", "tests.test_mod"),
    ("eval.tests.test_x", "eval.tests.test_x"),
    ("Mod.Class", "Mod.Class"),
    ("a&amp;b", "a&b"),
];
const NAMES: [(&str, &str); 7] = [
    ("test_a", "test_a"),
    ("test_b", "test_b"),
    ("test_c[1-2]", "test_c[1-2]"),
    ("test_d", "test_d"),
    ("t&lt;x&gt;", "t<x>"),
    ("tést", "tést"),
    ("", ""),
];
const TIMES: [&str; 20] = [
    "0.001",
    "1,234.5",
    " 2 ",
    "1_0",
    "1e3",
    "inf",
    "-nan",
    "-0",
    "",
    ".5",
    "0",
    "12345678901234567890",
    "3.14159",
    "1e-7",
    "1,5",
    "0.1",
    "2.675",
    "\u{661}\u{662}",
    "&#9;4&#10;",
    "\u{a0}7",
];
const BAD_TIMES: [&str; 4] = ["x", "1.2.3", "1__0", ","];
const MESSAGES: [&str; 12] = [
    "",
    "m",
    "assert 1 == 2",
    "a&amp;b &lt;c&gt; &quot;q&quot;",
    "tab\there",
    "a&#9;b&#10;c",
    "multi\nline\r\nend",
    "  ",
    "failed on setup with &quot;worker 'gw0' crashed while running 'tests/t.py::test_a'&quot;",
    "worker 'gw3' crashed",
    "é ü 漢",
    "it's",
];
const TEXT_PIECES: [&str; 18] = [
    "plain",
    "  ",
    "\n",
    "\t",
    "a&amp;b",
    "<![CDATA[x<y & z]]>",
    "&#13;",
    "\r\n",
    "é",
    "&lt;tag&gt;",
    "<!-- c -->",
    "worker 'gw0' crashed while running",
    "<x/>",
    "<x>inner</x>",
    "&#x1F600;",
    "<?pi d?>",
    "tail",
    "E   assert False",
];

fn result_element(rng: &mut Rng, x: &mut String, tag: &str) {
    x.push('<');
    x.push_str(tag);
    if rng.chance(70) {
        x.push_str(&format!(" message=\"{}\"", rng.pick(&MESSAGES)));
    }
    if rng.chance(40) {
        x.push_str(" type=\"AssertionError\"");
    }
    if rng.chance(10) {
        x.push_str(" z=\"&quot;'\" xmlns:n=\"urn:n\" n:k=\"v\"");
    }
    if rng.chance(30) {
        x.push_str("/>");
        return;
    }
    x.push('>');
    for _ in 0..rng.below(5) {
        x.push_str(rng.pick(&TEXT_PIECES));
    }
    x.push_str(&format!("</{tag}>"));
}

fn test_case(rng: &mut Rng, x: &mut String) {
    let mut attrs = Vec::new();
    if rng.chance(70) {
        attrs.push(format!("classname=\"{}\"", rng.pick(&CLASSES).0));
    }
    if rng.chance(93) {
        attrs.push(format!("name=\"{}\"", rng.pick(&NAMES).0));
    }
    if rng.chance(70) {
        let time = if rng.chance(1) {
            rng.pick(&BAD_TIMES)
        } else {
            rng.pick(&TIMES)
        };
        attrs.push(format!("time=\"{time}\""));
    }
    if rng.chance(20) {
        attrs.push("file=\"tests/t.py\" line=\"3\"".into());
    }
    if rng.chance(3) {
        attrs.push("xmlns:n=\"urn:n\" n:name=\"zz\" n:classname=\"qq\"".into());
    }
    // Any order: ElementTree's attributes are a dict.
    for i in (1..attrs.len()).rev() {
        attrs.swap(i, rng.below(i + 1));
    }
    x.push_str("<testcase");
    for a in &attrs {
        x.push(' ');
        x.push_str(a);
    }
    if rng.chance(45) {
        x.push_str("/>");
        return;
    }
    x.push('>');
    let kind = rng.below(3);
    for _ in 0..rng.below(4) {
        match rng.below(12) {
            0..=5 => {
                // Mostly one kind per case, sometimes mixed.
                let tags = ["failure", "error", "skipped"];
                let tag = if rng.chance(25) {
                    rng.pick(&tags)
                } else {
                    tags[kind]
                };
                result_element(rng, x, tag);
            }
            6 => x.push_str("<rerunFailure message=\"r\">again</rerunFailure>"),
            7 => x.push_str("<flakyFailure message=\"f\"/>"),
            8 => {
                x.push_str("<system-out>");
                if rng.chance(30) {
                    result_element(rng, x, "skipped");
                } else {
                    x.push_str("out &amp; about");
                }
                x.push_str("</system-out>");
            }
            9 => x.push_str("<system-err>err</system-err>"),
            10 => x.push_str("<properties><property name=\"p\" value=\"v\"/></properties>"),
            _ => x.push_str("<!-- between -->"),
        }
    }
    x.push_str("</testcase>");
}

fn suite(rng: &mut Rng, x: &mut String, depth: usize) {
    x.push_str("<testsuite name=\"pytest\" tests=\"3\"");
    if rng.chance(10) {
        x.push_str(" time=\"not read\"");
    }
    if rng.chance(3) {
        // Its cases, and its nested suites', are in a namespace: not JUnit.
        x.push_str(" xmlns=\"urn:d\"");
    }
    x.push('>');
    if rng.chance(20) {
        x.push_str("<properties><property name=\"p\" value=\"v\"/></properties>");
    }
    for _ in 0..rng.below(6) {
        if depth < 3 && rng.chance(20) {
            suite(rng, x, depth + 1);
        } else {
            test_case(rng, x);
        }
        if rng.chance(10) {
            x.push_str("\n  ");
        }
    }
    x.push_str("</testsuite>");
}

fn document(rng: &mut Rng) -> String {
    let mut x = String::new();
    if rng.chance(5) {
        x.push('\u{feff}');
    }
    if rng.chance(50) {
        x.push_str("<?xml version=\"1.0\" encoding=\"utf-8\"?>");
        if rng.chance(50) {
            x.push('\n');
        }
    }
    if rng.chance(5) {
        x.push_str("<!-- start -->\n");
    }
    match rng.below(100) {
        0..=79 => {
            x.push_str("<testsuites name=\"all\">");
            for _ in 0..rng.below(4) {
                if rng.chance(5) {
                    test_case(rng, &mut x);
                }
                suite(rng, &mut x, 0);
            }
            x.push_str("</testsuites>");
        }
        80..=94 => suite(rng, &mut x, 0),
        95..=97 => {
            x.push_str("<foo>");
            suite(rng, &mut x, 0);
            x.push_str("</foo>");
        }
        _ => {
            x.push_str("<j:testsuites xmlns:j=\"urn:j\">");
            suite(rng, &mut x, 0);
            x.push_str("</j:testsuites>");
        }
    }
    if rng.chance(5) {
        x.push_str("\n<!-- end -->\n");
    }
    match rng.below(100) {
        0..=3 => {
            let cut = rng.below(x.len().max(1));
            let cut = (0..=cut).rev().find(|i| x.is_char_boundary(*i)).unwrap();
            x.truncate(cut);
        }
        4 => x = " \n\t ".into(),
        5 => x.clear(),
        6 => x = x.replacen("<testcase", "<testcase bogus=\"&bogus;\"", 1),
        7 => x.push_str("<x/>"),
        _ => {}
    }
    x
}

/// One generated case: a document and the branch's expectations.
fn case(rng: &mut Rng) -> Value {
    let xml = document(rng);
    let branch = match rng.below(20) {
        0 => String::new(),
        1 => "ab/cd".into(),
        _ => format!("{:012x}", rng.next() & 0xffff_ffff_ffff),
    };
    let mut pool: Vec<String> = Vec::new();
    for (_, class) in CLASSES {
        for (_, name) in NAMES {
            let full = match (class.is_empty(), name.is_empty()) {
                (true, true) => continue,
                (true, false) => name.to_string(),
                (false, _) => format!("{class}.{name}"),
            };
            pool.push(full);
        }
        if !class.is_empty() {
            pool.push(format!("{class}.None"));
        }
    }
    let expected: Option<Vec<String>> = match rng.below(20) {
        0..=1 => None,
        2 => Some(Vec::new()),
        _ => Some(
            (0..rng.below(14))
                .map(|_| {
                    if rng.chance(10) {
                        format!("tests.nowhere.test_{}", rng.below(3))
                    } else {
                        pool[rng.below(pool.len())].clone()
                    }
                })
                .collect(),
        ),
    };
    let mut ignored: Vec<String> = Vec::new();
    for _ in 0..rng.below(5) {
        let name = pool[rng.below(pool.len())].clone();
        ignored.push(match rng.below(4) {
            0 => format!("0123456789ab/{name}"),
            _ => format!("{branch}/{name}"),
        });
    }
    let iid = if rng.chance(30) {
        ""
    } else {
        "owner__repo.abc1234"
    };
    json!({
        "xml": xml, "branch": branch, "expected": expected, "ignored": ignored,
        "branch_ignored": rng.chance(10), "iid": iid,
    })
}

/// A one-case document whose `time` is a random string of what numbers are made of, to
/// try Python's `float()` rules.
fn time_case(rng: &mut Rng) -> Value {
    const BITS: [&str; 22] = [
        "0", "1", "7", "9", ".", "e", "E", "+", "-", "_", ",", " ", "inf", "Infinity", "nan", "x",
        "\u{a0}", "\u{2003}", "\u{661}", "\u{ff19}", "&#9;", "\u{b2}",
    ];
    let mut time = String::new();
    for _ in 0..1 + rng.below(7) {
        time.push_str(rng.pick(&BITS));
    }
    json!({
        "xml": format!("<testsuite><testcase name=\"t\" time=\"{time}\"/></testsuite>"),
        "branch": "0123456789ab", "expected": ["t"], "ignored": [], "branch_ignored": false,
        "iid": "",
    })
}

/// Hand-picked corners (each with no expected list unless it says).
const CORNERS: &[&str] = &[
    "",
    "  \n",
    "\u{1c}\u{1f}",
    "\u{a0}",
    "\u{feff}<testsuite><testcase name=\"a\"/></testsuite>",
    "\u{feff}<?xml version=\"1.0\"?><testsuite><testcase name=\"a\"/></testsuite>",
    "\u{feff}",
    "  <?xml version=\"1.0\"?><testsuite/>",
    "<?xml version=\"1.0\" encoding=\"UTF-16\"?><testsuite><testcase name=\"a\"/></testsuite>",
    "<?xml version=\"1.0\" encoding=\"bogus\"?><testsuite><testcase name=\"a\"/></testsuite>",
    "<?xml version=\"1.1\"?><testsuite><testcase name=\"a\"/></testsuite>",
    "<?xml version='1.0' standalone='yes'?><testsuite><testcase name=\"a\"/></testsuite>",
    "<?xml-stylesheet href=\"x\"?><testsuite><testcase name=\"a\"/></testsuite>",
    "<?xml\tversion=\"1.0\"?><testsuite><testcase name=\"a\"/></testsuite>",
    "<?xml version=\"1.0\"?><?xml version=\"1.0\"?><testsuite/>",
    "<?xml-foo?><testsuite/>",
    "<?xml encoding=\"utf-8\"?><testsuite/>",
    "<?xml version=\"1.0\"?>\n<!-- c --><testsuite/><!-- d -->\n<?pi?>",
    "<foo/>",
    "<testcase name=\"a\"/>",
    "<testsuites xmlns=\"x\"><testsuite><testcase name=\"a\"/></testsuite></testsuites>",
    "<a:testsuite xmlns:a=\"u\"><testcase name=\"a\"/></a:testsuite>",
    "<testsuites><testsuite xmlns=\"x\"><testcase name=\"a\"/></testsuite><testsuite><testcase name=\"b\"/></testsuite></testsuites>",
    "<testsuite xmlns:a=\"u\"><testcase a:name=\"x\" name=\"y\"/><testcase a:name=\"z\"/></testsuite>",
    "<testsuite xmlns:a=\"u\" xmlns:b=\"u\"><testcase a:n=\"1\" b:n=\"2\" name=\"q\"/></testsuite>",
    "<testsuite xmlns:a=\"u\"><testcase name=\"q\"><a:failure/></testcase><testcase name=\"r\"><failure a:message=\"m\" xml:lang=\"en\" type=\"t\"/><error/></testcase></testsuite>",
    "<testsuite><testcase name=\"a\" xmlns:a=\"\"/></testsuite>",
    "<testsuite><testcase name=\"\u{fffe}\"/></testsuite>",
    "<testsuite><testcase name=\"&#xFFFE;\"/></testsuite>",
    "<testsuite><testcase name=\"&#x10FFFF;\"/></testsuite>",
    "<testsuite><testcase name=\"&#xD800;\"/></testsuite>",
    "<testsuite><testcase name=\"a\">&#xDFFF;</testcase></testsuite>",
    "<testsuite><testcase name=\"&#1114112;\"/></testsuite>",
    "<testsuite><testcase name=\"&#x0000000041;\"/></testsuite>",
    "<testsuite><testcase name=\"a\"><failure><![CDATA[&#xD800;]]><!-- &#xD800; --><?p &#xD800;?>&#xFFFD;</failure></testcase></testsuite>",
    "<testsuite xmlns:a=\"u\"><testcase name=\"a\" xmlns:a=\"\"/></testsuite>",
    "<testsuite xmlns=\"\"><testcase name=\"a\" xmlns=\"u\"><failure xmlns=\"\"/></testcase></testsuite>",
    "<testsuite><testcase name=\"a\u{85}b\u{2028}c\"/></testsuite>",
    "<testsuite><testcase name=\"a\"><failure>x\u{85}y\r\u{85}z\u{2028}</failure></testcase></testsuite>",
    "<testsuite><testcase name=\"a\"><failure>abc<!-- c -->def<x/>ghi</failure></testcase></testsuite>",
    "<testsuite><testcase name=\"a\"><failure>abc<?pi x?>def</failure></testcase></testsuite>",
    "<testsuite><testcase name=\"a\"><failure><![CDATA[x<y]]>z &amp; &#13;&#x41;\r\n q\r</failure></testcase></testsuite>",
    "<testsuite><testcase name=\"a\" classname=\"c\" time=\" 1,5 \"><failure message=\"a&#9;b\tc\r\nd\"/></testcase></testsuite>",
    "<testsuite><testcase classname=\"c\"/><testcase name=\"\"/><testcase/><testcase classname=\"\" name=\"n\"/></testsuite>",
    "<testsuite><testcase name=\"a\" time=\"\"/><testcase name=\"b\" time=\"1_000\"/><testcase name=\"c\" time=\"inf\"/><testcase name=\"d\" time=\"-nan\"/><testcase name=\"e\" time=\"\u{661}\u{662}\"/></testsuite>",
    "<testsuite><testcase name=\"a\" time=\"x\"/></testsuite>",
    "<testsuite><testcase name=\"a\" time=\"1,5\"/><testcase name=\"b\" time=\",\"/></testsuite>",
    "<testsuite><testcase time=\"x\"/><testcase name=\"\" time=\"x\"/></testsuite>",
    "<testsuite><testcase name=\"a\" time=\"&#9;2&#10;\"/><testcase name=\"b\" time=\"1e99999999999999999999\"/><testcase name=\"c\" time=\"4.9e-324\"/></testsuite>",
    "<!DOCTYPE testsuite [<!ENTITY e \"EE\">]><testsuite><testcase name=\"&e;\"/></testsuite>",
    "<!DOCTYPE testsuite [<!ELEMENT testsuite ANY>]><testsuite><testcase name=\"a\"/></testsuite>",
    "<!DOCTYPE testsuite [<!ENTITY e \"<failure message='m'>t</failure>\">]><testsuite><testcase name=\"a\">&e;</testcase></testsuite>",
    "<!DOCTYPE testsuite [<!ENTITY e SYSTEM \"/etc/passwd\">]><testsuite><testcase name=\"a\">&e;</testcase></testsuite>",
    "<!DOCTYPE testsuite PUBLIC \"-//x//y\" \"http://example.com/x.dtd\"><testsuite><testcase name=\"a\">&e;</testcase></testsuite>",
    "<testsuite><testcase name=\"&nbsp;\"/></testsuite>",
    "<testsuite><testcase name=\"a\"><failure>]]></failure></testcase></testsuite>",
    "<testsuite><testcase name=\"&#0;\"/></testsuite>",
    "<testsuite><testcase name=\"\u{1}\"/></testsuite>",
    "<testsuite/><x/>",
    "<testsuite/>  \n",
    "<testsuite><testcase name=\"a\" name=\"b\"/></testsuite>",
    "<testsuite><testcase name=a/></testsuite>",
    "<testsuite><testcase name=\"a\"></testsuite>",
    "<testsuite><testcase name=\"a<\"/></testsuite>",
    "<testsuite><testcase name=\"a>b\"/></testsuite>",
    "<testsuite><!-- a -- b --></testsuite>",
    "<testsuite><1a/></testsuite>",
    "<testsuite><testcase name=\"a\"><failure message=\"m\" type=\"t\" z=\"q&quot;\"/><error/><skipped message=\"\"/></testcase></testsuite>",
    "<testsuite><testcase name=\"a\"><system-out><skipped message=\"sm\">  </skipped></system-out></testcase></testsuite>",
    "<testsuite><testcase name=\"a\"><failure/><failure message=\"2\"/></testcase></testsuite>",
    "<testsuite><testcase name=\"a\"><rerunFailure/><flakyFailure/></testcase></testsuite>",
    "<testsuites><testcase name=\"top\"/><testsuite name=\"s\"><testsuite><testcase name=\"n1\"/></testsuite><testcase name=\"d1\"/></testsuite></testsuites>",
    "<testsuites><testsuite><testcase name='a' classname='x'><testcase name='inner'><error message='e'/></testcase></testcase></testsuite></testsuites>",
    "<testsuite><testcase name='a'><failure message=\"worker 'gw0' crashed\"/></testcase><testcase name='b'><error>worker 'gw1' crashed while</error><failure>worker 'x' crashed</failure></testcase><testcase name='c'><system-out><failure message=\"worker 'gw0' crashed\"/></system-out></testcase></testsuite>",
    "<foo><testcase name='a'><failure message=\"worker ' crashed\"/></testcase><bar><testcase/></bar></foo>",
    "<a>&amp;worker &apos; crashed<testcase><failure>worker &apos;x crashed</failure></testcase></a>",
];

/// Where we knowingly differ (the module's docs say why): each must still differ.
const KNOWN_DIFFERENCES: &[&str] = &[
    // expat applies <!ATTLIST> defaults.
    "<!DOCTYPE testsuite [<!ATTLIST testcase classname CDATA \"dflt\">]><testsuite><testcase name=\"a\"/></testsuite>",
    // expat drops an undefined entity in an attribute when there is an external DTD.
    "<!DOCTYPE testsuite SYSTEM \"foo.dtd\"><testsuite><testcase name=\"a&e;b\"/></testsuite>",
    // expat checks the declaration's standalone and encoding values, and reserves <?XML?>.
    "<?xml version='1.0' standalone='maybe'?><testsuite/>",
    "<?XML version=\"1.0\"?><testsuite/>",
    "<?xml version=\"1.0\" encoding=\"\"?><testsuite/>",
];

fn corner(xml: &str) -> Value {
    json!({
        "xml": xml, "branch": "0123456789ab", "expected": null, "ignored": [],
        "branch_ignored": false, "iid": "",
    })
}

/// The package's functions on the cases, in one Python process (cases on stdin).
const SCRIPT: &str = r#"
import json, logging, math, struct, sys
logging.disable(logging.CRITICAL)
from programbench.eval.eval import (
    parse_test_results, _process_branch_xml, count_worker_crashes, count_testcases)
# Floats go back as their bits: a JSON number is not always read back to the same float.
def bits(x):
    return struct.unpack("<Q", struct.pack("<d", x))[0]
def result(t):
    d = json.loads(t.model_dump_json())
    d["extra"].pop("time", None)
    time = t.extra.get("time")
    d["time"] = None if time is None else {"bits": bits(time), "finite": math.isfinite(time)}
    d["keys"] = sorted(t.extra)
    return d
out = []
for c in json.loads(sys.stdin.buffer.read()):
    o = {}
    try:
        o["parse"] = {"results": [result(t) for t in parse_test_results(c["xml"], branch=c["branch"]).test_results]}
    except Exception as e:
        o["parse"] = {"error": type(e).__name__}
    by_branch = {} if c["expected"] is None else {c["branch"]: c["expected"]}
    try:
        r, w = _process_branch_xml(c["xml"], c["branch"], by_branch, c["iid"],
                                   ignored_tests=set(c["ignored"]), branch_ignored=c["branch_ignored"])
        o["process"] = {"results": [result(t) for t in r], "warnings": w}
    except Exception as e:
        o["process"] = {"error": type(e).__name__}
    o["rate"] = [count_worker_crashes(c["xml"]), count_testcases(c["xml"])]
    out.append(o)
json.dump(out, sys.stdout)
"#;

fn run_package(python: &str, cases: &[Value]) -> Vec<Value> {
    let mut child = Command::new(python)
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the package's Python runs");
    let input = serde_json::to_vec(cases).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// How our results differ from the package's (`theirs` is `{"results"}` or `{"error"}`).
fn compare_results(
    what: &str,
    ours: Result<&[TestResult], &JunitError>,
    theirs: &Value,
    problems: &mut Vec<String>,
) {
    let rows = match (ours, theirs.get("error")) {
        (Err(e), Some(class)) => {
            if class != e.code() {
                problems.push(format!("{what}: error {} vs theirs {class}", e.code()));
            }
            return;
        }
        (Err(e), None) => {
            problems.push(format!("{what}: we failed ({e}), they did not"));
            return;
        }
        (Ok(_), Some(class)) => {
            problems.push(format!("{what}: they failed ({class}), we did not"));
            return;
        }
        (Ok(rows), None) => rows,
    };
    let their_rows = theirs["results"].as_array().unwrap();
    if rows.len() != their_rows.len() {
        problems.push(format!(
            "{what}: {} results vs their {}: ours {:?}, theirs {their_rows:?}",
            rows.len(),
            their_rows.len(),
            rows.iter().map(|r| &r.name).collect::<Vec<_>>()
        ));
        return;
    }
    for (i, (ours, theirs)) in rows.iter().zip(their_rows).enumerate() {
        let mut extra: Map<String, Value> = ours.extra.clone();
        let time = extra.remove("time");
        let keys: Vec<&String> = ours.extra.keys().collect();
        let mut keys: Vec<String> = keys.into_iter().cloned().collect();
        keys.sort();
        let mine = json!({
            "name": ours.name, "branch": ours.branch, "status": ours.status,
            "extra": extra, "keys": keys,
        });
        let theirs_cmp = json!({
            "name": theirs["name"], "branch": theirs["branch"], "status": theirs["status"],
            "extra": theirs["extra"], "keys": theirs["keys"],
        });
        if mine != theirs_cmp {
            problems.push(format!("{what}[{i}]: ours {mine} vs theirs {theirs_cmp}"));
        }
        let time_ok = match (&time, &theirs["time"]) {
            (None, Value::Null) => true,
            (Some(Value::Null), t) if t.is_object() => t["finite"] == false,
            (Some(v @ Value::Number(_)), t) if t.is_object() => {
                v.is_f64()
                    && t["finite"] == true
                    && Some(v.as_f64().unwrap().to_bits()) == t["bits"].as_u64()
            }
            _ => false,
        };
        if !time_ok {
            problems.push(format!(
                "{what}[{i}]: time ours {time:?} vs theirs {}",
                theirs["time"]
            ));
        }
    }
}

/// Every way ours differs from theirs on one case.
fn differences(case: &Value, theirs: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let xml = case["xml"].as_str().unwrap();
    let branch = case["branch"].as_str().unwrap();
    let parsed = junit::parse(xml, branch);
    compare_results("parse", parsed.as_deref(), &theirs["parse"], &mut problems);
    let expected: Option<Vec<String>> = serde_json::from_value(case["expected"].clone()).unwrap();
    let ignored: BTreeSet<String> = serde_json::from_value(case["ignored"].clone()).unwrap();
    let processed = junit::process(
        xml,
        branch,
        expected.as_deref(),
        case["branch_ignored"].as_bool().unwrap(),
        &ignored,
        Some(case["iid"].as_str().unwrap()),
    );
    compare_results(
        "process",
        processed.as_ref().map(|(r, _)| r.as_slice()),
        &theirs["process"],
        &mut problems,
    );
    if let Ok((_, warnings)) = &processed {
        if theirs["process"].get("warnings") != Some(&json!(warnings)) {
            problems.push(format!(
                "warnings: ours {warnings:?} vs theirs {}",
                theirs["process"]["warnings"]
            ));
        }
    }
    let (crashes, cases) = junit::rate(xml);
    if json!([crashes, cases]) != theirs["rate"] {
        problems.push(format!(
            "rate: ours ({crashes}, {cases}) vs theirs {}",
            theirs["rate"]
        ));
    }
    problems
}

#[test]
#[ignore = "needs the programbench package: scripts/test installs it in a venv and runs this tier with --ignored"]
fn our_junit_reading_is_the_package_s() {
    let python = std::env::var("AGENSH_PROGRAMBENCH_PYTHON")
        .expect("AGENSH_PROGRAMBENCH_PYTHON names a Python with programbench 1.2.5 installed");
    let mut rng = Rng(0x6a75_6e69_745f_786d);
    let mut cases: Vec<Value> = CORNERS.iter().map(|x| corner(x)).collect();
    let n_corners = cases.len();
    cases.extend((0..1000).map(|_| case(&mut rng)));
    cases.extend((0..2000).map(|_| time_case(&mut rng)));
    cases.extend(KNOWN_DIFFERENCES.iter().map(|x| corner(x)));
    let theirs = run_package(&python, &cases);
    assert_eq!(theirs.len(), cases.len());

    let generated = n_corners..cases.len() - KNOWN_DIFFERENCES.len();
    let mut failures = Vec::new();
    // What the generated cases reach, on the package's side.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for (i, (case, theirs)) in cases.iter().zip(&theirs).enumerate() {
        let problems = differences(case, theirs);
        if i >= generated.end {
            assert!(
                !problems.is_empty(),
                "case {i} is listed as a known difference but agrees now (update the docs \
                 of agensh_eval::junit): {}",
                case["xml"]
            );
            continue;
        }
        if generated.contains(&i) {
            let process = &theirs["process"];
            if let Some(class) = process["error"].as_str() {
                seen.insert(format!("error {class}"));
            }
            for row in process["results"].as_array().into_iter().flatten() {
                seen.insert(format!("status {}", row["status"].as_str().unwrap()));
                for key in row["keys"].as_array().unwrap() {
                    seen.insert(format!("extra {}", key.as_str().unwrap()));
                }
            }
            for w in process["warnings"].as_array().into_iter().flatten() {
                let w = w.as_str().unwrap();
                // What it says, without its tag and count.
                let says = &w[w.find(": ").unwrap() + 2..];
                seen.insert(format!(
                    "warning {}",
                    says.trim_start_matches(|c: char| c.is_ascii_digit())
                ));
            }
            if theirs["rate"][0].as_u64() > Some(0) {
                seen.insert("crashes".into());
            }
        }
        if !problems.is_empty() {
            failures.push(format!("case {i}: {}\n  {}", case, problems.join("\n  ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures[..failures.len().min(15)].join("\n")
    );
    let want = [
        "crashes",
        "error EmptyTestResultError",
        "error JUnitXmlError",
        "error ValueError",
        "error XmlParseError",
        "extra error_code",
        "extra error_details",
        "extra message",
        "extra text",
        "extra time",
        "status error",
        "status failure",
        "status not_run",
        "status passed",
        "status skipped",
        "status system_error",
        "warning  test(s) in JUnit XML not in tests.json",
        "warning no expected test list, cannot verify completeness",
    ];
    let missing: Vec<&str> = want.into_iter().filter(|w| !seen.contains(*w)).collect();
    assert!(
        missing.is_empty(),
        "the generator never reaches {missing:?}"
    );
}
