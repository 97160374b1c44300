//! Logging in to the dashboard: a one-time link exchanged for an HTTP-only cookie.
//!
//! The operator's token never reaches the browser. `agensh run`, `agensh hub` and
//! `agensh dashboard` ask for a link (`/login?code=…`, spent on first use, ten minutes at
//! most); opening it sets the `agensh_session` cookie and redirects to `/`. The cookie is
//! `v1.<expiry ms>.<nonce>.<mac>`, the MAC an HMAC-SHA-256 under a key derived from the admin
//! token: it needs no table, survives a hub restart, and every session ends when the admin
//! token changes.

use std::collections::HashMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

/// The cookie's name.
pub const COOKIE: &str = "agensh_session";
/// How long a one-time link works, in ms.
pub const LINK_TTL_MS: i64 = 10 * 60 * 1000;
/// How long a session lasts, in ms.
pub const SESSION_TTL_MS: i64 = 12 * 60 * 60 * 1000;
/// Most unspent links kept at once (the oldest goes first).
const MOST_LINKS: usize = 64;

/// Links handed out and not yet spent, and the key sessions are signed with.
pub struct Sessions {
    key: [u8; 32],
    links: Mutex<HashMap<String, i64>>,
}

impl Sessions {
    pub fn new(admin_token: &str) -> Self {
        let mut h = Sha256::new();
        h.update(b"agensh dashboard sessions v1\0");
        h.update(admin_token.as_bytes());
        Self {
            key: h.finalize().into(),
            links: Mutex::new(HashMap::new()),
        }
    }

    /// A new one-time code, valid until `now + LINK_TTL_MS`.
    pub fn new_link(&self, now: i64) -> (String, i64) {
        let code = random_hex(32);
        let expires = now + LINK_TTL_MS;
        let mut links = self.links.lock().expect("links lock");
        links.retain(|_, e| *e > now);
        if links.len() >= MOST_LINKS {
            if let Some(oldest) = links
                .iter()
                .min_by_key(|(_, e)| **e)
                .map(|(c, _)| c.clone())
            {
                links.remove(&oldest);
            }
        }
        links.insert(code.clone(), expires);
        (code, expires)
    }

    /// Spends `code`: a session cookie's value when the code was handed out, unspent and
    /// not expired.
    pub fn redeem(&self, code: &str, now: i64) -> Option<String> {
        let expires = self.links.lock().expect("links lock").remove(code)?;
        (expires > now).then(|| self.session(now + SESSION_TTL_MS))
    }

    /// A session cookie's value that lasts until `expires`.
    pub fn session(&self, expires: i64) -> String {
        let nonce = random_hex(16);
        let mac = hex(&self.mac(&format!("v1.{expires}.{nonce}")));
        format!("v1.{expires}.{nonce}.{mac}")
    }

    /// Whether `value` is a session this hub signed that has not expired.
    pub fn valid(&self, value: &str, now: i64) -> bool {
        let Some((signed, mac)) = value.rsplit_once('.') else {
            return false;
        };
        let mut parts = signed.split('.');
        let (Some("v1"), Some(expires), Some(_nonce), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        let Ok(expires) = expires.parse::<i64>() else {
            return false;
        };
        let want = hex(&self.mac(signed));
        expires > now && crate::auth::constant_time_eq(want.as_bytes(), mac.as_bytes())
    }

    fn mac(&self, message: &str) -> [u8; 32] {
        hmac_sha256(&self.key, message.as_bytes())
    }
}

/// HMAC-SHA-256 (RFC 2104) of `message` under `key` (at most one block long).
fn hmac_sha256(key: &[u8; 32], message: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the system's random source");
    hex(&buf)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The values of the session cookie in a request's `Cookie` headers.
pub fn session_cookies(headers: &axum::http::HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(|h| cookie(h, COOKIE))
}

/// The value of the cookie `name` in a `Cookie` header.
pub fn cookie<'a>(header: &'a str, name: &str) -> Option<&'a str> {
    header.split(';').find_map(|pair| {
        let (k, v) = pair.trim().split_once('=')?;
        (k == name).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_case_2_shape() {
        // RFC 4231 test case 2 has a 4-byte key; ours are 32 bytes, zero-padded the same way
        // HMAC pads any short key, so the key "Jefe" padded to 32 bytes gives the same MAC.
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let mac = hmac_sha256(&key, b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_link_is_spent_once_and_only_before_it_expires() {
        let s = Sessions::new("admin-token");
        let (code, expires) = s.new_link(1_000);
        assert_eq!(expires, 1_000 + LINK_TTL_MS);
        let cookie = s.redeem(&code, 2_000).expect("a fresh link logs in");
        assert!(s.valid(&cookie, 2_000));
        assert!(s.redeem(&code, 2_000).is_none(), "spent");
        let (late, _) = s.new_link(1_000);
        assert!(s.redeem(&late, 1_000 + LINK_TTL_MS).is_none(), "expired");
        assert!(s.redeem("made-up", 1_000).is_none());
    }

    #[test]
    fn only_an_unexpired_session_this_key_signed_is_valid() {
        let s = Sessions::new("admin-token");
        let v = s.session(10_000);
        assert!(s.valid(&v, 9_999));
        assert!(!s.valid(&v, 10_000), "expired");
        assert!(!Sessions::new("another").valid(&v, 0), "another key");
        let forged = v.replacen("v1.10000.", "v1.99999.", 1);
        assert!(!s.valid(&forged, 0), "a longer expiry breaks the MAC");
        for bad in ["", "v1", "v1.1.2", "v2.10000.ab.cd", "v1.x.ab.cd"] {
            assert!(!s.valid(bad, 0), "{bad:?}");
        }
    }

    #[test]
    fn links_kept_are_bounded() {
        let s = Sessions::new("t");
        let first = s.new_link(0).0;
        for _ in 0..MOST_LINKS {
            s.new_link(1);
        }
        assert!(s.redeem(&first, 2).is_none(), "the oldest went first");
        assert_eq!(s.links.lock().unwrap().len(), MOST_LINKS);
    }

    #[test]
    fn cookies_are_found_by_name() {
        let h = "a=1; agensh_session=v1.2.3.4;b=2";
        assert_eq!(cookie(h, COOKIE), Some("v1.2.3.4"));
        assert_eq!(cookie(h, "b"), Some("2"));
        assert_eq!(cookie(h, "c"), None);
    }
}
