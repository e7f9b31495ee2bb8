//! FIAT in the input space end to end: C^F is trained and stored, the request switch and weight
//! act on it, the bundle's bytes are fixed by data, config and seed, and a bundle whose C^F is
//! damaged, forged or missing is refused at open.
// Helpers outside #[test] functions unwrap too: this is test code.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::train_with;
use xmc::bundle::{Bundle, OpenOptions};
use xmc::data::Dataset;
use xmc::model::{Model, ModelError, PredictOptions, QueryError};
use xmc::train::Trained;

const FIAT: &[&str] = &["max_leaf=40", "fiat.input=true", "fiat.d0=8"];

fn load(split: &str) -> Dataset {
    common::load("Corel5k", split)
}

fn open(t: &Trained) -> Result<Model, ModelError> {
    Model::from_bundle(Bundle::from_bytes(&t.to_bytes().unwrap()).unwrap())
}

#[test]
fn fiat_model_stores_c_f_imputes_by_default_and_obeys_the_request() {
    let (train, test) = (load("train"), load("test"));
    let t = train_with(&train, FIAT);
    let co = t.fiat.as_ref().unwrap();
    assert_eq!(co.n_labels(), train.n_features());
    co.check(train.n_features(), train.n_features()).unwrap();
    // At most d0 − 1 neighbours per feature.
    assert!(co.start.windows(2).all(|w| w[1] - w[0] < 8));
    let model = open(&t).unwrap();
    assert!(model.can_impute() && model.fiat().is_some());
    let (idx, val) = test.feature_row(0);
    let default = model.predict(idx, val, &PredictOptions::default()).unwrap();
    let on = PredictOptions {
        impute: Some(true),
        ..PredictOptions::default()
    };
    assert_eq!(default, model.predict(idx, val, &on).unwrap());
    // Imputation changes some answer's scores, and weight 0 is the query itself.
    let off = PredictOptions {
        impute: Some(false),
        ..PredictOptions::default()
    };
    let zero = PredictOptions {
        impute_weight: Some(0.0),
        ..on
    };
    let mut changed = false;
    for i in 0..test.n_points().min(50) {
        let (idx, val) = test.feature_row(i);
        let (a, b) = (
            model.predict(idx, val, &on).unwrap(),
            model.predict(idx, val, &off).unwrap(),
        );
        changed |= a.scores != b.scores;
        assert_eq!(model.predict(idx, val, &zero).unwrap(), b, "point {i}");
    }
    assert!(changed, "imputation changed no answer");
    let bad = PredictOptions {
        impute_weight: Some(-1.0),
        ..on
    };
    assert!(matches!(
        model.predict(idx, val, &bad),
        Err(QueryError::OutOfRange {
            option: "impute_weight",
            ..
        })
    ));
    // A model without C^F (or FIAT scales) refuses the switch.
    let plain = open(&train_with(&train, &["max_leaf=40"])).unwrap();
    assert!(!plain.can_impute());
    assert!(matches!(
        plain.predict(idx, val, &on),
        Err(QueryError::Unavailable {
            option: "impute",
            ..
        })
    ));
}

#[test]
fn same_data_config_and_seed_give_the_same_c_f_and_content_version() {
    let train = load("train");
    let (a, b) = (train_with(&train, FIAT), train_with(&train, FIAT));
    assert_eq!(a.fiat, b.fiat);
    assert_eq!(a.meta.version, b.meta.version);
    let other = train_with(&train, &[FIAT, &["seed=9"]].concat());
    assert_ne!(a.fiat, other.fiat, "the clustering follows the seed");
}

#[test]
fn a_damaged_forged_or_missing_c_f_is_refused_at_open() {
    let train = load("train");
    let t = train_with(&train, FIAT);
    // A flipped byte in any C^F section: the verified open checks its checksum.
    let bytes = t.to_bytes().unwrap();
    let bundle = Bundle::from_bytes(&bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let verify = OpenOptions {
        verify_checksums: true,
        ..OpenOptions::default()
    };
    for name in ["fiat.start", "fiat.idx", "fiat.val"] {
        let s = bundle.section(name).unwrap();
        let mut c = bytes.clone();
        c[(s.offset + s.byte_len / 2) as usize] ^= 0x10;
        let path = dir.path().join("m.xmcb");
        std::fs::write(&path, &c).unwrap();
        let err = Model::open(&path, &verify).unwrap_err();
        assert!(err.to_string().contains(name), "{name}: {err}");
    }
    // Forged rows that seal correctly: the full validation refuses them.
    let mut forged = train_with(&train, FIAT);
    let co = forged.fiat.as_mut().unwrap();
    assert!(!co.idx.is_empty());
    co.idx[0] = train.n_features() as u32;
    assert!(matches!(open(&forged), Err(ModelError::Fiat(_))));
    // The metadata says fiat.input, the bundle lacks C^F.
    let mut missing = train_with(&train, FIAT);
    missing.fiat = None;
    assert!(matches!(open(&missing), Err(ModelError::FiatMissing(_))));
}
