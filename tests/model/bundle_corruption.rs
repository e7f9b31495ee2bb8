//! Every way a bundle can be damaged or forged gives its own error, never a panic.
//!
//! The tests edit the documented byte layout directly. Where a test forges a structural field, it
//! re-seals the header, table and footer checksums so that the check under test, not a checksum,
//! is what catches it.

// Helpers outside #[test] functions unwrap too; a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::layout::{ENTRY, HEADER, count, entry_at, get_u64, put_u64, reseal};
use xmc::bundle::{Bundle, BundleWriter, FormatError, OpenOptions};

fn sample() -> Vec<u8> {
    let ids: Vec<u32> = (0..100).collect();
    let weights: Vec<f32> = (0..30).map(|i| i as f32 * 0.5).collect();
    let offsets: Vec<u64> = vec![0, 10, 1 << 40];
    let mut w = BundleWriter::new();
    w.add_u32("ids", &ids).unwrap();
    w.add_f32("weights", &weights).unwrap();
    w.add_u64("offsets", &offsets).unwrap();
    w.add_bytes("raw", b"hello bundle").unwrap();
    w.add_json("meta", &serde_json::json!({"name": "sample", "k": 5}))
        .unwrap();
    w.to_bytes().unwrap()
}

fn open_err(b: &[u8]) -> FormatError {
    Bundle::from_bytes(b).expect_err("corrupt bundle must not open")
}

#[test]
fn sample_opens_and_verifies() {
    let b = sample();
    let bundle = Bundle::from_bytes(&b).unwrap();
    bundle.verify_checksums().unwrap();
    assert_eq!(bundle.sections().len(), 5);
}

#[test]
fn flipped_byte_in_any_section_is_caught_by_verify_checksums() {
    let b = sample();
    let bundle = Bundle::from_bytes(&b).unwrap();
    for info in bundle.sections() {
        for at in [
            info.offset,
            info.offset + info.byte_len / 2,
            info.offset + info.byte_len - 1,
        ] {
            let mut c = b.clone();
            c[at as usize] ^= 0x10;
            let opened = Bundle::from_bytes(&c).expect("section bytes are not read at open");
            match opened.verify_checksums() {
                Err(FormatError::SectionChecksum { name, .. }) => assert_eq!(name, info.name),
                other => panic!("byte {at} of {}: {other:?}", info.name),
            }
        }
    }
}

#[test]
fn flipped_padding_byte_is_caught_by_verify_checksums() {
    let mut b = sample();
    let bundle = Bundle::from_bytes(&b).unwrap();
    let raw = bundle.section("raw").unwrap();
    let pad = (raw.offset + raw.byte_len) as usize;
    b[pad] = 1;
    let err = Bundle::from_bytes(&b)
        .unwrap()
        .verify_checksums()
        .unwrap_err();
    assert!(
        matches!(err, FormatError::PaddingNotZero { offset, value: 1 } if offset == pad as u64)
    );
}

#[test]
fn flipped_byte_in_header_or_table_is_caught_at_open() {
    let b = sample();
    let table_end = HEADER + count(&b) * ENTRY;
    for at in 0..table_end {
        let mut c = b.clone();
        c[at] ^= 0x01;
        let err = open_err(&c);
        assert!(!matches!(err, FormatError::Io { .. }), "byte {at}: {err}");
    }
}

#[test]
fn flipped_byte_in_footer_is_caught_at_open() {
    let b = sample();
    for at in b.len() - 16..b.len() {
        let mut c = b.clone();
        c[at] ^= 0x01;
        open_err(&c);
    }
}

#[test]
fn truncated_file_is_rejected_at_every_length() {
    let b = sample();
    for len in 0..b.len() {
        let err = open_err(&b[..len]);
        assert!(
            matches!(
                err,
                FormatError::TooShort { .. }
                    | FormatError::LengthMismatch { .. }
                    | FormatError::BadMagic { .. }
            ),
            "length {len}: {err}"
        );
    }
    let err = open_err(&b[..b.len() - 1]);
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[test]
fn truncated_file_on_disk_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short.xmcb");
    let b = sample();
    std::fs::write(&path, &b[..b.len() / 2]).unwrap();
    let err = Bundle::open(&path, &OpenOptions::default()).unwrap_err();
    assert!(matches!(err, FormatError::LengthMismatch { .. }), "{err}");
    std::fs::write(&path, b"").unwrap();
    let err = Bundle::open(&path, &OpenOptions::default()).unwrap_err();
    assert!(matches!(err, FormatError::TooShort { len: 0, .. }), "{err}");
}

#[test]
fn wrong_magic_is_rejected() {
    let mut b = sample();
    b[0..4].copy_from_slice(b"PK\x03\x04");
    assert!(matches!(
        open_err(&b),
        FormatError::BadMagic { hint: "", .. }
    ));
}

#[test]
fn text_mode_mangled_magic_gets_a_hint() {
    let mut b = sample();
    b[5] = b'\n';
    let err = open_err(&b);
    assert!(err.to_string().contains("text-mode"), "{err}");
}

#[test]
fn big_endian_mark_is_rejected() {
    let mut b = sample();
    b[8..12].copy_from_slice(&[1, 2, 3, 4]);
    let err = open_err(&b);
    assert!(
        matches!(
            err,
            FormatError::BadEndianMark {
                found: 0x0403_0201,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("big-endian"), "{err}");
}

#[test]
fn future_format_version_says_how_to_fix_it() {
    let mut b = sample();
    b[12..16].copy_from_slice(&7u32.to_le_bytes());
    reseal(&mut b);
    let err = open_err(&b);
    assert!(matches!(
        err,
        FormatError::UnsupportedVersion {
            found: 7,
            min: 1,
            max: 4,
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "this bundle is format version 7; this xmc reads versions 1-4: upgrade xmc or re-train \
         the model"
    );
}

#[test]
fn version_zero_is_rejected() {
    let mut b = sample();
    b[12..16].copy_from_slice(&0u32.to_le_bytes());
    assert!(matches!(
        open_err(&b),
        FormatError::UnsupportedVersion { found: 0, .. }
    ));
}

#[test]
fn nonzero_reserved_header_field_is_rejected() {
    let mut b = sample();
    b[40] = 1;
    reseal(&mut b);
    assert!(matches!(open_err(&b), FormatError::ReservedNotZero { .. }));
}

#[test]
fn appended_bytes_are_rejected() {
    let mut b = sample();
    b.extend_from_slice(&[0; 64]);
    assert!(matches!(open_err(&b), FormatError::LengthMismatch { .. }));
}

#[test]
fn section_count_too_large_for_the_file_is_rejected() {
    let mut b = sample();
    b[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    let header_crc = crc32fast::hash(&b[..60]);
    b[60..64].copy_from_slice(&header_crc.to_le_bytes());
    assert!(matches!(
        open_err(&b),
        FormatError::TableOutOfBounds {
            count: u32::MAX,
            ..
        }
    ));
}

#[test]
fn section_pointing_outside_the_file_is_rejected() {
    let mut b = sample();
    let len = b.len() as u64;
    put_u64(&mut b, entry_at(1) + 40, len + 64);
    reseal(&mut b);
    let err = open_err(&b);
    assert!(matches!(&err, FormatError::SectionOutOfBounds { name, .. } if name == "weights"));
    assert!(err.to_string().contains("\"weights\""), "{err}");
}

#[test]
fn section_length_overflowing_u64_is_rejected() {
    let mut b = sample();
    put_u64(&mut b, entry_at(0) + 48, u64::MAX - 3);
    reseal(&mut b);
    assert!(matches!(
        open_err(&b),
        FormatError::SectionOutOfBounds { end: u64::MAX, .. }
    ));
}

#[test]
fn section_inside_the_table_is_rejected() {
    let mut b = sample();
    put_u64(&mut b, entry_at(0) + 40, 64);
    reseal(&mut b);
    assert!(matches!(
        open_err(&b),
        FormatError::SectionOutOfBounds { .. }
    ));
}

#[test]
fn misaligned_section_is_rejected() {
    let mut b = sample();
    let off = get_u64(&b, entry_at(3) + 40);
    put_u64(&mut b, entry_at(3) + 40, off + 4);
    reseal(&mut b);
    let err = open_err(&b);
    assert!(
        matches!(&err, FormatError::Misaligned { name, offset } if name == "raw" && *offset == off + 4)
    );
}

#[test]
fn overlapping_sections_are_rejected() {
    let mut b = sample();
    let first = get_u64(&b, entry_at(0) + 40);
    put_u64(&mut b, entry_at(1) + 40, first + 64);
    reseal(&mut b);
    let err = open_err(&b);
    assert!(
        matches!(&err, FormatError::Overlap { first, second, .. } if first == "ids" && second == "weights"),
        "{err}"
    );
}

#[test]
fn duplicate_names_are_rejected() {
    let mut b = sample();
    let name = b"ids\0\0\0\0";
    b[entry_at(2)..entry_at(2) + 7].copy_from_slice(name);
    reseal(&mut b);
    let err = open_err(&b);
    assert!(
        matches!(&err, FormatError::DuplicateName { name, first: 0, second: 2 } if name == "ids")
    );
}

#[test]
fn bad_names_are_rejected() {
    for (bytes, why) in [
        (&b"\0"[..], "empty"),
        (b"a b", "printable"),
        (b"a\0b", "NUL"),
    ] {
        let mut b = sample();
        b[entry_at(0)..entry_at(0) + 32].fill(0);
        b[entry_at(0)..entry_at(0) + bytes.len()].copy_from_slice(bytes);
        reseal(&mut b);
        let err = open_err(&b);
        assert!(
            matches!(err, FormatError::BadName { index: 0, .. }),
            "{err}"
        );
        assert!(err.to_string().contains(why), "{err}");
    }
}

#[test]
fn unknown_dtype_is_rejected() {
    let mut b = sample();
    b[entry_at(0) + 32..entry_at(0) + 36].copy_from_slice(&99u32.to_le_bytes());
    reseal(&mut b);
    assert!(matches!(
        open_err(&b),
        FormatError::UnknownDtype { tag: 99, .. }
    ));
}

#[test]
fn a_dtype_newer_than_the_files_version_is_rejected() {
    // Section 3 ("raw", 12 bytes) relabelled `u8` (tag 6, from version 3 on) opens in a
    // version-3 file and is refused in a version-2 one, whose writer could not have written it.
    let mut b = sample();
    b[entry_at(3) + 32..entry_at(3) + 36].copy_from_slice(&6u32.to_le_bytes());
    reseal(&mut b);
    let bundle = Bundle::from_bytes(&b).unwrap();
    assert_eq!(&*bundle.u8s("raw").unwrap(), b"hello bundle");
    b[12..16].copy_from_slice(&2u32.to_le_bytes());
    reseal(&mut b);
    let err = open_err(&b);
    assert!(
        matches!(err, FormatError::UnknownDtype { tag: 6, .. }),
        "{err}"
    );
}

#[test]
fn length_not_a_multiple_of_the_element_is_rejected() {
    // Section 2 (`u64`) cut to 23 bytes, and section 3 relabelled `u16` (tag 7) and cut to 11.
    for (section, tag, len, size) in [(2, None, 23, 8), (3, Some(7u32), 11, 2)] {
        let mut b = sample();
        if let Some(tag) = tag {
            b[entry_at(section) + 32..entry_at(section) + 36].copy_from_slice(&tag.to_le_bytes());
        }
        put_u64(&mut b, entry_at(section) + 48, len);
        reseal(&mut b);
        let err = open_err(&b);
        assert!(
            matches!(err, FormatError::LengthNotMultiple { len: l, size: s, .. } if l == len && s == size),
            "{err}"
        );
    }
}

#[test]
fn wrong_dtype_access_is_an_error() {
    let bundle = Bundle::from_bytes(&sample()).unwrap();
    let err = bundle.f32s("ids").unwrap_err();
    assert!(matches!(err, FormatError::WrongDtype { .. }));
    assert_eq!(
        err.to_string(),
        "section \"ids\" holds u32, but was read as f32"
    );
    assert!(matches!(
        bundle.u32s("weights"),
        Err(FormatError::WrongDtype { .. })
    ));
    assert!(matches!(
        bundle.json::<serde_json::Value>("raw"),
        Err(FormatError::WrongDtype { .. })
    ));
    assert!(matches!(
        bundle.u64s("missing"),
        Err(FormatError::NoSuchSection { .. })
    ));
    assert!(matches!(
        bundle.json::<Vec<u32>>("meta"),
        Err(FormatError::Json { .. })
    ));
}

#[test]
fn open_with_verify_catches_a_flipped_section_byte_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("flipped.xmcb");
    let mut b = sample();
    let at = Bundle::from_bytes(&b)
        .unwrap()
        .section("weights")
        .unwrap()
        .offset as usize
        + 5;
    b[at] ^= 0x80;
    std::fs::write(&path, &b).unwrap();
    Bundle::open(&path, &OpenOptions::default()).expect("structure is intact");
    let verify = OpenOptions {
        verify_checksums: true,
        prefault: false,
        yield_between_steps: false,
    };
    let err = Bundle::open(&path, &verify).unwrap_err();
    assert!(matches!(&err, FormatError::SectionChecksum { name, .. } if name == "weights"));
}

#[test]
fn a_checksum_computed_in_steps_catches_a_flip_past_the_first_step() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("long.xmcb");
    // Three 1 MiB checksum steps and part of a fourth.
    let weights: Vec<f32> = (0..800_000).map(|i| (i % 977) as f32).collect();
    let mut w = BundleWriter::new();
    w.add_f32("weights", &weights).unwrap();
    let mut b = w.to_bytes().unwrap();
    let offset = Bundle::from_bytes(&b)
        .unwrap()
        .section("weights")
        .unwrap()
        .offset as usize;
    let verify = |yield_between_steps| OpenOptions {
        verify_checksums: true,
        prefault: true,
        yield_between_steps,
    };
    std::fs::write(&path, &b).unwrap();
    for yields in [false, true] {
        Bundle::open(&path, &verify(yields)).expect("an intact bundle verifies in steps");
    }
    b[offset + (5 << 19) + 3] ^= 0x01;
    std::fs::write(&path, &b).unwrap();
    for yields in [false, true] {
        let err = Bundle::open(&path, &verify(yields)).unwrap_err();
        assert!(
            matches!(&err, FormatError::SectionChecksum { name, .. } if name == "weights"),
            "{err}"
        );
    }
}
