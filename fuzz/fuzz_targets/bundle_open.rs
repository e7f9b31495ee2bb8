//! Any bytes given to `Bundle::from_bytes` give a bundle or an error, never a panic, and every
//! section of a bundle that opens can be verified and read as its dtype, and only as that.
//!
//! Random mutations almost never keep the header, table and footer CRC32s right, so on their own
//! they would only ever exercise the checksum checks. Each input is therefore tried twice: as it
//! is, and "resealed", with the recorded file length and the three checksums recomputed the way
//! the writer would, so the fuzzer reaches the structural checks behind them.

#![no_main]

use libfuzzer_sys::fuzz_target;

mod reseal;
use reseal::reseal;
use xmc::bundle::{Bundle, Dtype};

fuzz_target!(|data: &[u8]| {
    exercise(data);
    if let Some(resealed) = reseal(data) {
        exercise(&resealed);
    }
});

fn exercise(data: &[u8]) {
    let Ok(bundle) = Bundle::from_bytes(data) else {
        return;
    };
    let _ = bundle.verify_checksums();
    let mut total = 0usize;
    for info in bundle.sections() {
        let name = info.name.as_str();
        let len = match info.dtype {
            Dtype::Bytes => bundle.bytes(name).map(|s| s.len()),
            Dtype::U32 => bundle
                .u32s(name)
                .map(|s| s.iter().fold(0usize, |a, &x| a.wrapping_add(x as usize))),
            Dtype::U8 => bundle.u8s(name).map(|s| s.len()),
            Dtype::U16 => bundle.u16s(name).map(|s| s.len()),
            Dtype::U64 => bundle.u64s(name).map(|s| s.len()),
            Dtype::F32 => bundle.f32s(name).map(|s| s.len()),
            Dtype::Json => bundle.json::<serde_json::Value>(name).map(|_| 0),
        };
        assert!(info.dtype == Dtype::Json || len.is_ok(), "{name}: {len:?}");
        assert_eq!(bundle.u32s(name).is_ok(), info.dtype == Dtype::U32);
        assert!(bundle.section(name).is_some());
        total = total.wrapping_add(len.unwrap_or(0));
    }
    std::hint::black_box(total);
}
