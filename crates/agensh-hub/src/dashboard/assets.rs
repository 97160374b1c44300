//! The page's files, compiled into the binary. Each asset is served under a name that
//! carries a hash of its content (`app-1a2b3c4d5e6f.js`), so a browser may keep it for good
//! and a new hub's page never runs an old script.

use std::sync::OnceLock;

use sha2::{Digest, Sha256};

const INDEX: &str = include_str!("assets/index.html");
const LOGIN: &str = include_str!("assets/login.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

struct Built {
    /// (served name, content type, body)
    files: Vec<(String, &'static str, &'static str)>,
    index: String,
    login: String,
    spent: String,
}

fn hashed(stem: &str, ext: &str, body: &str) -> String {
    let digest = Sha256::digest(body.as_bytes());
    let short: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("{stem}-{short}.{ext}")
}

fn built() -> &'static Built {
    static BUILT: OnceLock<Built> = OnceLock::new();
    BUILT.get_or_init(|| {
        let js = hashed("app", "js", APP_JS);
        let css = hashed("app", "css", APP_CSS);
        let fill = |page: &str| {
            page.replace("{{app.js}}", &format!("/assets/{js}"))
                .replace("{{app.css}}", &format!("/assets/{css}"))
                .replace("{{version}}", env!("CARGO_PKG_VERSION"))
        };
        let spent = LOGIN.replace(
            "<!--why-->",
            "<p class=\"why\">That link was used already or has expired: each link logs in once, within ten minutes.</p>",
        );
        Built {
            index: fill(INDEX),
            login: fill(LOGIN),
            spent: fill(&spent),
            files: vec![
                (js, "text/javascript; charset=utf-8", APP_JS),
                (css, "text/css; charset=utf-8", APP_CSS),
            ],
        }
    })
}

/// The dashboard's page.
pub fn index_html() -> String {
    built().index.clone()
}

/// The page for a browser that is not logged in: how to get a link, nothing else.
pub fn login_html() -> String {
    built().login.clone()
}

/// The page for a link that was spent or expired.
pub fn link_spent_html() -> String {
    built().spent.clone()
}

/// An asset by its served name: its content type and body.
pub fn get(name: &str) -> Option<(&'static str, &'static str)> {
    built()
        .files
        .iter()
        .find(|(n, _, _)| n == name)
        .map(|(_, kind, body)| (*kind, *body))
}

/// Bytes the page's first load transfers (the page and every asset), uncompressed.
pub fn first_load_bytes() -> usize {
    let b = built();
    b.index.len() + b.files.iter().map(|(_, _, body)| body.len()).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_its_assets_by_their_hashes() {
        let page = index_html();
        for (name, _, body) in &built().files {
            assert!(page.contains(&format!("/assets/{name}")), "{name}");
            assert!(get(name).is_some_and(|(_, b)| b == *body));
        }
        assert!(!page.contains("{{"), "every placeholder is filled");
        assert!(get("app.js").is_none(), "only hashed names are served");
    }

    #[test]
    fn the_page_has_no_inline_script_the_policy_would_block() {
        for page in [index_html(), login_html(), link_spent_html()] {
            for (i, _) in page.match_indices("<script") {
                let tag = &page[i..page[i..].find('>').map_or(page.len(), |e| i + e)];
                assert!(tag.contains("src="), "inline script: {tag}");
            }
            let handler = page.match_indices(" on").any(|(i, _)| {
                let rest = &page[i + 3..];
                let name: String = rest.chars().take_while(char::is_ascii_lowercase).collect();
                !name.is_empty() && rest[name.len()..].starts_with('=')
            });
            assert!(!handler, "no inline event handler attributes");
        }
    }

    #[test]
    fn the_first_load_is_small() {
        assert!(
            first_load_bytes() < 500 * 1024,
            "{} bytes",
            first_load_bytes()
        );
    }
}
