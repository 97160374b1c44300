//! The sandbox launcher on its own, for this crate's tests (`agensh __sandbox` is the same
//! for users): `agensh-sandbox SPEC_JSON`.

fn main() {
    let spec = std::env::args().nth(1).unwrap_or_default();
    agensh_eval::sandbox::launch(&spec)
}
